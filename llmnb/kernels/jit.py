"""numba, set up once for every kernel: where compiled code is cached, which threads run it,
how wide its vectors are. Imported before anything else in ``llmnb.kernels``.

- Cache: ``cache=True`` kernels are compiled once per machine and stored under the llmnb
  home (``$LLMNB_HOME`` or ``~/.cache/llmnb``)/numba, so later processes load machine code
  instead of compiling (``NUMBA_CACHE_DIR`` set by the user wins).
- Threads: the ``workqueue`` layer, which numba builds in, so a fresh machine needs no
  OpenMP or TBB library; ``llmnb.threads(n)`` sets its thread count with BLAS's and
  numexpr's. A kernel never calls BLAS, so the two pools never run at once.
- Vector width: LLVM's tuning for many AVX-512 CPUs prefers 256-bit vectors; the kernels
  convert small integers to float32 and are bound by that arithmetic, which 512-bit vectors
  do in half the instructions (``llmnb bench quant`` measures it), so the preference is
  turned off on CPUs that have AVX-512.
"""
from __future__ import annotations

import os

from llmnb.hub import cache_dir

os.environ.setdefault("NUMBA_CACHE_DIR", str(cache_dir() / "numba"))
os.environ.setdefault("NUMBA_THREADING_LAYER", "workqueue")
if "NUMBA_CPU_FEATURES" not in os.environ:
    import llvmlite.binding as llvm

    features = llvm.get_host_cpu_features().flatten()
    if "+avx512f" in features.split(","):
        os.environ["NUMBA_CPU_FEATURES"] = features + ",-prefer-256-bit"

import numba  # noqa: E402  (configured by the environment above)

# numba imported earlier (by a notebook, say) read the environment before us: set it directly
if not numba.config.CACHE_DIR:
    numba.config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]
if numba.config.THREADING_LAYER == "default":
    numba.config.THREADING_LAYER = os.environ["NUMBA_THREADING_LAYER"]
THREADING_LAYER = str(numba.config.THREADING_LAYER)


def set_threads(n: int) -> int:
    """Use `n` numba threads (at most numba's pool size); return the previous count."""
    previous = int(numba.get_num_threads())
    numba.set_num_threads(max(1, min(int(n), int(numba.config.NUMBA_NUM_THREADS))))
    return previous


def get_threads() -> int:
    return int(numba.get_num_threads())
