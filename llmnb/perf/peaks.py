"""The peaks a roofline is drawn from, measured at the current thread setting: float32 sgemm
GFLOP/s (the operation a diffusion step repeats), the read bandwidth (the best of numpy's sum
and a numba parallel read loop: decoding reads weights and writes almost nothing), STREAM's
copy and triad (McCalpin 1995), and the bytes/s of a float32 matrix @ vector (the GEMV an f32
decode repeats: one engine on one layout, not the machine's limit). ``machine.probe`` runs
them at each thread count and keeps the results; each figure is a median after a warm-up.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

from llmnb.errors import UsageError
from llmnb.perf.timing import median_time

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


def sgemm_gflops(n: int = 2048, repeats: int = 5) -> float:
    """float32 (n, n) @ (n, n) in GFLOP/s (2 n^3 FLOPs), at the current BLAS thread setting."""
    a: F32 = np.ones((n, n), dtype=np.float32)
    b: F32 = np.ones((n, n), dtype=np.float32)
    return 2.0 * n ** 3 / median_time(lambda: a @ b, repeats) / 1e9


def gemv_bandwidth(n_bytes: int = 256 << 20, repeats: int = 5) -> float:
    """Bytes/s streamed by float32 matrix @ vector over a matrix of `n_bytes` (decode's own
    operation; beyond the caches when `n_bytes` is), at the current BLAS thread setting."""
    cols = 4096
    rows = max(1, n_bytes // 4 // cols)
    w: F32 = np.ones((rows, cols), dtype=np.float32)
    x: F32 = np.ones(cols, dtype=np.float32)
    return float(w.nbytes) / median_time(lambda: w @ x, repeats)


def read_bandwidth(n_bytes: int = 256 << 20, repeats: int = 5,
                   threads: int = 1) -> tuple[float, dict[str, float]]:
    """Bytes/s read from a float32 array of `n_bytes` (beyond the caches): the best of
    numpy's sum (split over `threads` workers; numpy releases the GIL) and a numba parallel
    sum (``llmnb.kernels.read``, at numba's thread setting), with each figure by name."""
    from llmnb.kernels.read import read_sum

    a: F32 = np.ones(max(threads, n_bytes // 4), dtype=np.float32)
    parts = _slices(a.size, threads)
    if threads == 1:
        numpy_s = median_time(lambda: a.sum(), repeats)
    else:
        with ThreadPoolExecutor(threads) as pool:
            def run() -> None:
                futures: list[Future[float]] = []
                for lo, hi in parts:                 # a loop, not a comprehension: mypyc
                    futures.append(pool.submit(_sum_slice, a, lo, hi))  # cannot close over one
                for f in futures:
                    f.result()
            numpy_s = median_time(run, repeats)
    numba_s = median_time(lambda: read_sum(a), repeats)
    figures = {"numpy_sum": a.nbytes / numpy_s, "numba_sum": a.nbytes / numba_s}
    return max(figures.values()), figures


def _sum_slice(a: F32, lo: int, hi: int) -> float:
    return float(a[lo:hi].sum())


def _slices(n: int, parts: int) -> list[tuple[int, int]]:
    edges = [n * i // parts for i in range(parts + 1)]
    return [(edges[i], edges[i + 1]) for i in range(parts)]


def stream_bandwidth(kind: str, n_bytes: int = 128 << 20, threads: int = 1,
                     repeats: int = 5) -> float:
    """STREAM's copy (a = b) or triad (a = b + s*c) in bytes/s over float64 arrays of
    `n_bytes` each, split across `threads` workers (numpy releases the GIL in its loops).
    Bytes counted as STREAM counts them: 2 arrays per copy, 3 per triad."""
    if kind not in ("copy", "triad"):
        raise UsageError(f"stream_bandwidth: kind must be 'copy' or 'triad', got {kind!r}")
    n = max(threads, n_bytes // 8)
    a: F64 = np.zeros(n)
    b: F64 = np.ones(n)
    c: F64 = np.full(n, 2.0)
    block = 1 << 14        # the triad's temporary stays in L1/L2, so memory sees 3 arrays

    def copy_part(lo: int, hi: int) -> None:
        np.copyto(a[lo:hi], b[lo:hi])

    def triad_part(lo: int, hi: int) -> None:
        tmp: F64 = np.empty(block)
        for s in range(lo, hi, block):
            e = min(s + block, hi)
            t = tmp[: e - s]
            np.multiply(c[s:e], 3.0, out=t)
            np.add(t, b[s:e], out=a[s:e])

    part = copy_part if kind == "copy" else triad_part
    parts = _slices(n, threads)
    arrays = 2 if kind == "copy" else 3
    if threads == 1:
        seconds = median_time(lambda: part(0, n), repeats)
    else:
        with ThreadPoolExecutor(threads) as pool:
            def run() -> None:
                for f in [pool.submit(part, lo, hi) for lo, hi in parts]:
                    f.result()
            seconds = median_time(run, repeats)
    return arrays * 8.0 * n / seconds


def read_roof(n_bytes: int, stream_bytes: int, repeats: int, threads: int) -> float:
    """The memory roof at `threads` in bytes/s: the best of the read kernels and STREAM's copy
    (the probe's table and `bench ar`'s roofline both use this one figure)."""
    read = read_bandwidth(n_bytes, repeats, threads)[0]
    return max(read, stream_bandwidth("copy", stream_bytes, threads, repeats))
