"""Build llmnb, compiling its numeric core with mypyc.

``pip install .`` compiles the modules listed by ``compiled_modules()``; the CLI, the
benchmark runner and the widgets stay interpreted. ``LLMNB_PURE_PYTHON=1`` skips
compilation (editable development: a stale ``.so`` would otherwise shadow edited sources).
The ``.py`` files are shipped either way, so notebooks can show the code.
"""
from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup

# What compiling buys, measured by `llmnb bench compiled` (the installed build against the same
# source interpreted, alternating, 1 thread): speed-ups pure / compiled over three runs of
# `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE llmnb bench compiled` (--repeats 5, 5, 15) on
# a shared 2-core machine, where rows under about 1 ms move by 30% from run to run.
# - Gains, compiled for it: gguf/ (opening SmolLM2-135M's file 1.29-1.35x), tokenizer/
#   (building a tokenizer from the tiny vocabulary 1.2-1.4x, from SmolLM2's 1.1-1.3x with the
#   Rust side doing most; decoding 12k tokens to text 1.3-1.4x) and ar/lookup.py (the lookup
#   drafter over a 20k-token context 1.4-1.7x, the n-gram drafter 2.0-2.85x).
# - No consistent gain (inside the noise): a decode step on tiny-ar 0.84-1.05x and its forward
#   alone 0.85-1.02x (model/, ar/engine.py, kv_cache.py, sampling.py, text_stream.py), the
#   diffusion loop 0.92-1.06x and its bookkeeping 0.90-1.27x (diffusion/), and quant/ (the
#   whole-array numpy controls, dequantize and quantize, 0.56-1.13x). Their time is numpy
#   calls, which mypyc does not shorten. They stay compiled for now (the build the tests and
#   notebooks check, and the declared types checked at run time); leaving them interpreted
#   would save build time only, and needs a rebuild and the full suite to confirm.
# Interpreted on purpose: user-facing glue, where compile time buys nothing.
# writer.py and gguf_file.py (file I/O glue) import gguf-py, which the isolated build
# environment does not have. llmnb/kernels/ is numba's: numba compiles those functions itself
# (it cannot compile mypyc's), and a notebook prints their source. perf/heldout.py serves
# only the benches, which are interpreted (perf/bench*), and its time is the diffusion loop's.
INTERPRETED = {"llmnb/cli.py", "llmnb/source.py", "llmnb/gguf/writer.py",
               "llmnb/quant/gguf_file.py", "llmnb/model/convert.py", "llmnb/perf/heldout.py"}
INTERPRETED_DIRS = ("llmnb/widgets/", "llmnb/perf/bench", "llmnb/kernels/")


def compiled_modules() -> list[str]:
    paths = sorted(p.as_posix() for p in Path("llmnb").rglob("*.py"))
    return [p for p in paths if p not in INTERPRETED and not p.startswith(INTERPRETED_DIRS)
            and not p.endswith("__init__.py")]


if os.environ.get("LLMNB_PURE_PYTHON", "") in ("", "0"):
    from mypyc.build import mypycify

    setup(ext_modules=mypycify(compiled_modules(), opt_level="3"))
else:
    setup()
