"""numba, set up once for every kernel: where compiled code is cached, which threads run it,
how wide its vectors are. Imported before anything else in ``llmnb.kernels``.

- Cache: ``cache=True`` kernels are compiled once per machine and stored under the llmnb
  home (``$LLMNB_HOME`` or ``~/.cache/llmnb``)/numba, so later processes load machine code
  instead of compiling (``NUMBA_CACHE_DIR`` set by the user wins).
- Threads: the ``workqueue`` layer, which numba builds in, so a fresh machine needs no
  OpenMP or TBB library; ``llmnb.threads(n)`` sets its thread count with BLAS's and
  numexpr's. A kernel never calls BLAS, so the two pools never run at once.
- Vector width: LLVM tunes most Intel AVX-512 CPUs to prefer 256-bit vectors. The kernels
  are bound by arithmetic (integer -> float32 conversions and multiply-adds), which 512-bit
  vectors do in half the instructions: on an AVX-512 machine here the Q4 kernel ran at
  1.3-1.5x numpy's float32 GEMV with the host's tuning and 2.2x with 512-bit vectors. So
  where the CPU has AVX-512, numba compiles with the tuning of a CPU that prefers them
  (``znver4``) and the host's own full feature list (no instruction the host lacks). The
  ``-prefer-256-bit`` feature alone does not reach numba's parallel loops.
"""
from __future__ import annotations

import os

from llmnb.hub import cache_dir
from llmnb.kernels.threads import wanted

os.environ.setdefault("NUMBA_CACHE_DIR", str(cache_dir() / "numba"))
os.environ.setdefault("NUMBA_THREADING_LAYER", "workqueue")
if "NUMBA_CPU_NAME" not in os.environ and "NUMBA_CPU_FEATURES" not in os.environ:
    import llvmlite.binding as llvm

    features = llvm.get_host_cpu_features().flatten()
    if "+avx512f" in features.split(","):
        os.environ["NUMBA_CPU_NAME"] = "znver4"
        os.environ["NUMBA_CPU_FEATURES"] = features

import numba  # noqa: E402  (configured by the environment above)

# numba imported earlier (by a notebook, say) read the environment before us: set it directly
if not numba.config.CACHE_DIR:
    numba.config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]
if numba.config.THREADING_LAYER == "default":
    numba.config.THREADING_LAYER = os.environ["NUMBA_THREADING_LAYER"]
THREADING_LAYER = str(numba.config.THREADING_LAYER)


def apply_threads(n: int | None) -> None:
    """Run numba's parallel loops on `n` threads (None: all of numba's pool)."""
    size = int(numba.config.NUMBA_NUM_THREADS)
    numba.set_num_threads(size if n is None else max(1, min(int(n), size)))


apply_threads(wanted())
