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

# Interpreted on purpose: user-facing glue, where compile time buys nothing.
# writer.py and gguf_file.py (file I/O glue) import gguf-py, which the isolated build
# environment does not have. llmnb/kernels/ is numba's: numba compiles those functions itself
# (it cannot compile mypyc's), and a notebook prints their source. perf/heldout.py serves
# only the benches (it imports perf.bench, and through it gguf-py).
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
