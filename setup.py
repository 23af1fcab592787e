"""Build llmnb, compiling with mypyc the modules where compiling was measured to gain.

``pip install .`` compiles the modules ``compiled_modules()`` lists and ships every other one
as plain Python. ``LLMNB_COMPILE=all`` compiles every module that can be compiled, to measure
again what compiling buys (``llmnb bench compiled``); ``LLMNB_PURE_PYTHON=1`` compiles nothing
(editable development: a stale ``.so`` would otherwise shadow edited sources). The ``.py``
files are shipped either way, so notebooks can show the code.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup

# What compiling buys, measured by `llmnb bench compiled` (the compiled build against the same
# source interpreted, alternating, 1 thread) on a build with every module compiled
# (LLMNB_COMPILE=all): `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE llmnb bench compiled
# --repeats 15`, pure / compiled time, on a 2-core Intel Xeon (AVX-512).
# Compiled, for the Python-level loops it shortens:
# - gguf/: opening a GGUF (header, metadata, tensor infos), 1.12-1.39x;
# - tokenizer/: building a tokenizer from a vocabulary (the merges and the byte tables),
#   1.21-1.32x, and decoding tokens to text, 1.35-1.37x (encoding is the Rust side's, 0.94-1.03x);
# - ar/lookup.py: the lookup and n-gram drafters' matching over a long context, 1.70-1.75x and
#   2.38-2.46x (with ar/speculative_draft.py, whose Drafter they extend);
# - the decode step: model/ (the forward's per-layer loop), scratch.py (its buffers) and
#   ar/engine.py, kv_cache.py, sampling.py, text_stream.py, 1.05-1.07x per token on tiny-ar
#   and 1.03-1.05x for the forward alone: small, but in every run;
# - errors.py and each compiled layer's errors.py, whose exceptions the layers raise.
COMPILED_DIRS = ("llmnb/gguf/", "llmnb/tokenizer/", "llmnb/model/")
COMPILED = {"llmnb/ar/lookup.py", "llmnb/ar/speculative_draft.py", "llmnb/ar/engine.py",
            "llmnb/ar/kv_cache.py", "llmnb/ar/sampling.py", "llmnb/ar/text_stream.py",
            "llmnb/ar/errors.py", "llmnb/errors.py", "llmnb/scratch.py"}
# Interpreted, because compiling showed no gain: the diffusion loop (1.00-1.04x) and its
# bookkeeping (0.98-1.00x) in diffusion/, and quant/'s whole-array numpy calls (dequantize
# 0.93-1.07x, quantize Q4_K 0.83-0.87x: slower compiled). Interpreted too, until a workload
# shows a gain: the modules none of them times (the speculative controller, kv_eviction,
# perplexity, hub, softmax, perf/).
# The ranges are three runs of that command (the first at the default --repeats 5).
# Never compiled: writer.py, gguf_file.py and model/convert.py import gguf-py, which the
# isolated build environment does not have; perf/heldout.py serves only the benches;
# llmnb/kernels/ is numba's, which compiles those functions itself (it cannot compile
# mypyc's), and a notebook prints their source.
NEVER = {"llmnb/source.py", "llmnb/gguf/writer.py", "llmnb/quant/gguf_file.py",
         "llmnb/model/convert.py", "llmnb/perf/heldout.py"}
NEVER_DIRS = ("llmnb/cli/", "llmnb/widgets/", "llmnb/perf/bench", "llmnb/kernels/")


def compiled_modules(every: bool = False) -> list[str]:
    """The modules to compile: those measured to gain, or with `every` all that can be."""
    paths = sorted(p.as_posix() for p in Path("llmnb").rglob("*.py"))
    can = [p for p in paths if p not in NEVER and not p.startswith(NEVER_DIRS)
           and not p.endswith("__init__.py")]
    return can if every else [p for p in can if p in COMPILED or p.startswith(COMPILED_DIRS)]


def metadata_only() -> bool:
    """Whether this run only writes metadata. pip's build runs this file three times: for the
    build's requirements (``egg_info``), for the metadata (``dist_info``) and for the wheel. Only
    the wheel needs the extensions, and ``mypycify`` type-checks the modules and writes their C
    each time it is called (about a minute on a 2-core AMD Zen 1)."""
    command = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
    return command in ("egg_info", "dist_info")


COMPILE = os.environ.get("LLMNB_COMPILE", "")
if COMPILE not in ("", "all"):
    raise SystemExit(f"setup.py: LLMNB_COMPILE: expected 'all' or unset, got {COMPILE!r}")
if os.environ.get("LLMNB_PURE_PYTHON", "") in ("", "0") and not metadata_only():
    from mypyc.build import mypycify

    setup(ext_modules=mypycify(compiled_modules(COMPILE == "all"), opt_level="3"))
else:
    setup()
