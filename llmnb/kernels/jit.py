"""numba, set up once for every kernel: where compiled code is cached, which threads run it,
how wide its vectors are. Imported before anything else in ``llmnb.kernels``.

- Cache: ``cache=True`` kernels are compiled once per machine and stored under the llmnb
  home (``$LLMNB_HOME`` or ``~/.cache/llmnb``)/numba, so later processes load machine code
  instead of compiling (``NUMBA_CACHE_DIR`` set by the user wins).
- Threads: numba's ``omp`` layer where GNU OpenMP (libgomp) loads, else its built-in
  ``workqueue`` (numba's own order would try TBB first, which llmnb does not install).
  libgomp comes with gcc, which building llmnb (mypyc) needs anyway. The choice matters at
  decode's scale: one parallel call (a few hundred per token) costs several times more to
  launch with workqueue than with omp (time a small product under
  ``NUMBA_THREADING_LAYER=workqueue`` and ``=omp``).
  ``llmnb.threads(n)`` sets numba's thread count with BLAS's and numexpr's; a kernel never
  calls BLAS, so the pools never run at once.
- Vector width: LLVM tunes most Intel AVX-512 CPUs to prefer 256-bit vectors. The kernels
  are bound by arithmetic (integer -> float32 conversions and multiply-adds), which 512-bit
  vectors do in half the instructions. So where the CPU has AVX-512, numba compiles with the
  tuning of a CPU that prefers them (``znver4``) and the host's own full feature list (no
  instruction the host lacks). The ``-prefer-256-bit`` feature alone does not reach numba's
  parallel loops.
"""
from __future__ import annotations

import os
from typing import Any

from llmnb.hub import cache_dir
from llmnb.kernels.threads import on_load

os.environ.setdefault("NUMBA_CACHE_DIR", str(cache_dir() / "numba"))
os.environ.setdefault("NUMBA_THREADING_LAYER_PRIORITY", "omp workqueue tbb")
if "NUMBA_CPU_NAME" not in os.environ and "NUMBA_CPU_FEATURES" not in os.environ:
    import llvmlite.binding as llvm

    features = llvm.get_host_cpu_features().flatten()
    if "+avx512f" in features.split(","):
        os.environ["NUMBA_CPU_NAME"] = "znver4"
        os.environ["NUMBA_CPU_FEATURES"] = features

import numba  # noqa: E402  (configured by the environment above)

config: Any = numba.config
# numba imported earlier (by a notebook, say) read the environment before us: set it directly
if not config.CACHE_DIR:
    config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]
if config.THREADING_LAYER == "default":
    config.THREADING_LAYER_PRIORITY = os.environ["NUMBA_THREADING_LAYER_PRIORITY"].split()


def threading_layer() -> str:
    """The layer numba runs parallel loops on ('omp' or 'workqueue'; known after the first)."""
    try:
        return str(getattr(numba, "threading_layer")())
    except ValueError:                # nothing has run in parallel yet
        return "not started"


def apply_threads(n: int | None) -> None:
    """Run numba's parallel loops on `n` threads (None: all of numba's pool)."""
    size = int(config.NUMBA_NUM_THREADS)
    numba.set_num_threads(size if n is None else max(1, min(int(n), size)))


on_load(apply_threads)
