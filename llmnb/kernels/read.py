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


@njit(fastmath=True, cache=True)
def _sum_range(a, lo, hi, passes):  # type: ignore[no-untyped-def]
    part = a[lo:hi]                     # a slice and a sum per pass: LLVM vectorises this form
    total = np.float32(0)               # (a loop over a[lo:hi] into one running sum it does not)
    for _ in range(passes):             # the same part again: it stays in this core's caches
        s = np.float32(0)               # when it fits them, and streams from memory when not
        for i in range(part.shape[0]):
            s += part[i]
        total += s
    return total


@njit(parallel=True, cache=True)
def _sum_passes(a, n, passes, parts, partial):  # type: ignore[no-untyped-def]
    for p in prange(parts):             # the serial loop is its own function: compiled inside
        partial[p] = _sum_range(a, n * p // parts, n * (p + 1) // parts, passes)  # a parallel
                                        # loop, it would not be vectorised


def read_passes(a: npt.NDArray[np.float32], n: int, passes: int, parts: int) -> float:
    """sum(a[:n]) `passes` times over, in one parallel region: a[:n] split into `parts`
    contiguous parts (one per thread: numba's thread setting), each part summed `passes`
    times by its thread. A working set that fits a core's caches is read from them on every
    pass after the first; the read-bandwidth curve (``llmnb.perf.peaks.read_curve``) times
    many passes over a small set, so the region's start-up is spread over many bytes."""
    partial = np.empty(parts, dtype=np.float32)
    _sum_passes(a, n, passes, parts, partial)
    return float(partial.sum())
