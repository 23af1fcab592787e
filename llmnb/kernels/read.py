"""A read-only memory kernel: the sum of a large float32 array, in parallel, compiled by numba.

It moves bytes one way, as decoding does (weights are read, almost nothing is written), so
it measures the read bandwidth that bounds a decode step (``llmnb.perf.machine``). Summing
in any order is fine here (``fastmath``): only the time counts.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, prange

import llmnb.kernels.jit  # noqa: F401  (numba configured before the first compile)

CHUNKS = 64


@njit(parallel=True, fastmath=True, cache=True)
def _sum_chunks(a, partial):  # type: ignore[no-untyped-def]
    n = a.shape[0]
    step = (n + CHUNKS - 1) // CHUNKS
    for c in prange(CHUNKS):
        s = np.float32(0)
        for i in range(c * step, min(n, (c + 1) * step)):
            s += a[i]
        partial[c] = s


def read_sum(a: npt.NDArray[np.float32]) -> float:
    """sum(a) read by numba's threads (``llmnb.threads``); a is 1-D float32."""
    partial = np.empty(CHUNKS, dtype=np.float32)
    _sum_chunks(a, partial)
    return float(partial.sum())
