"""Build llmnb, compiling with mypyc the modules where compiling was measured to gain.

``pip install .`` compiles the modules ``compiled_modules()`` lists and ships every other one
as plain Python. ``LLMNB_COMPILE=all`` compiles every module that can be compiled, to measure
again what compiling buys (``llmnb bench compiled``); ``LLMNB_PURE_PYTHON=1`` compiles nothing
(editable development: a stale ``.so`` would otherwise shadow edited sources). The ``.py``
files are shipped either way, so notebooks can show the code.
"""
from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup

# What compiling buys, measured by `llmnb bench compiled` (the compiled build against the same
# source interpreted, alternating, 1 thread) on a build with every module compiled
# (LLMNB_COMPILE=all): `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE llmnb bench compiled`.
# Compiled, for the Python-level loops it shortens:
# - gguf/: opening a GGUF (header, metadata, tensor infos);
# - tokenizer/: building a tokenizer from a vocabulary (the merges and the byte tables),
#   decoding tokens to text;
# - ar/lookup.py: the lookup and n-gram drafters' per-round matching over a long context
#   (with ar/draft.py, whose Drafter they extend, and llmnb/errors.py, which the errors of
#   these layers extend: a compiled class extends compiled classes).
COMPILED_DIRS = ("llmnb/gguf/", "llmnb/tokenizer/")
COMPILED = {"llmnb/ar/lookup.py", "llmnb/ar/draft.py", "llmnb/errors.py"}
# Interpreted, because compiling showed no gain: the decode step (model/, ar/engine.py,
# kv_cache.py, sampling.py, text_stream.py), the diffusion loop and its bookkeeping
# (diffusion/), quantize and dequantize (quant/) spend their time in numpy calls, which mypyc
# does not shorten, and the rest (the speculative controller, hub, softmax, perf/) is glue
# around them. The user-facing glue (cli, source, widgets, the benches) gains nothing either.
# Never compiled: writer.py, gguf_file.py and model/convert.py import gguf-py, which the
# isolated build environment does not have; perf/heldout.py serves only the benches;
# llmnb/kernels/ is numba's, which compiles those functions itself (it cannot compile
# mypyc's), and a notebook prints their source.
NEVER = {"llmnb/cli.py", "llmnb/source.py", "llmnb/gguf/writer.py", "llmnb/quant/gguf_file.py",
         "llmnb/model/convert.py", "llmnb/perf/heldout.py"}
NEVER_DIRS = ("llmnb/widgets/", "llmnb/perf/bench", "llmnb/kernels/")


def compiled_modules(every: bool = False) -> list[str]:
    """The modules to compile: those measured to gain, or with `every` all that can be."""
    paths = sorted(p.as_posix() for p in Path("llmnb").rglob("*.py"))
    can = [p for p in paths if p not in NEVER and not p.startswith(NEVER_DIRS)
           and not p.endswith("__init__.py")]
    return can if every else [p for p in can if p in COMPILED or p.startswith(COMPILED_DIRS)]


if os.environ.get("LLMNB_PURE_PYTHON", "") in ("", "0"):
    from mypyc.build import mypycify

    every = os.environ.get("LLMNB_COMPILE", "") == "all"
    setup(ext_modules=mypycify(compiled_modules(every), opt_level="3"))
else:
    setup()
