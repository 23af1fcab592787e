"""The peaks a roofline is drawn from, measured at the current thread setting: float32 sgemm
GFLOP/s (the operation a diffusion step repeats), the read-bandwidth curve (a read-only sum over
working sets from inside L1 to far past every cache: decoding reads weights and writes almost
nothing) and its plateau, the memory roof; STREAM's copy and triad (McCalpin 1995), and the
bytes/s of a float32 matrix @ vector (the GEMV an f32 decode repeats: one engine on one layout,
not the machine's limit). ``machine.probe`` runs them at each thread count and keeps the
results; each figure is a median after a warm-up.

Why a curve and not one array: a single "large" array may still fit a cache (a VM may report,
or really have, hundreds of MiB of L3), and then its bandwidth is a cache figure, not the
memory's. Read bandwidth against working-set size falls in steps as the set outgrows L1, L2
and L3, and is flat once every pass comes from DRAM: that flat tail (``plateau``) is the
memory roof, found from the measured curve itself rather than from the cache sizes the OS
reports.
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

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




# --- the read-bandwidth curve ----------------------------------------------------------

SMALLEST: Final = 16 << 10          # inside any L1d (32-48 KiB on today's cores)
PER_OCTAVE: Final = 2               # sizes per doubling: 16, 23, 32, 45, 64 KiB ...
SAMPLE_BYTES: Final = 128 << 20     # bytes read per timed sample at least: a small set is
                                    # read many passes over, so a sample lasts about a ms
TOLERANCE: Final = 0.25             # the plateau: within 25% of the largest sizes' median.
# On a shared machine the DRAM figure drifts by 10-20% over one probe (a neighbour's burst
# slows a few rounds); each step of the cache hierarchy is a factor (an L3 reads 1.5x to 3x
# faster than DRAM for one core), so 25% tells drift from a step.
TAIL: Final = 3                     # the largest sizes whose median the plateau is judged by


@dataclass(frozen=True)
class CurvePoint:
    """One working-set size of the read-bandwidth curve: the median GB/s of `samples` timed
    samples (each `passes` passes over the set), with the quartiles as its spread."""

    nbytes: int
    gbs: float
    low: float                      # first quartile of the samples' GB/s
    high: float                     # third quartile
    passes: int
    samples: int


@dataclass(frozen=True)
class Plateau:
    """What the rule finds on one curve (``plateau``)."""

    gbs: float                      # the memory roof: the median of the plateau's points
    start: int                      # the smallest size on the plateau (bytes)
    points: int                     # how many sizes it spans
    edge: int | None                # the cache edge: the largest size whose bandwidth is
                                    # clearly above the plateau (None: none is)
    flat: bool                      # at least TAIL points on it: the curve did flatten

    def holds(self, nbytes: int) -> str:
        """'cache' where a working set of `nbytes` reads faster than the plateau (at most
        the cache edge), else 'memory'."""
        return "cache" if self.edge is not None and nbytes <= self.edge else "memory"


def curve_sizes(largest: int, smallest: int = SMALLEST, per_octave: int = PER_OCTAVE) -> list[int]:
    """Log-spaced working-set sizes from `smallest` to `largest` bytes (both included),
    `per_octave` per doubling, each a whole number of 4 KiB pages."""
    if smallest < 4096 or largest < smallest or per_octave < 1:
        raise UsageError(f"curve_sizes: expected 4096 <= smallest <= largest and per_octave >= 1, "
                         f"got {smallest}, {largest}, {per_octave}")
    steps = math.floor(per_octave * math.log2(largest / smallest) + 1e-9)
    sizes = [int(smallest * 2 ** (i / per_octave)) // 4096 * 4096 for i in range(steps + 1)]
    if sizes[-1] != largest // 4096 * 4096:
        sizes.append(largest // 4096 * 4096)
    return sorted(set(sizes))


def read_curve(sizes: Sequence[int], threads: int, repeats: int = 5,
               sample_bytes: int = SAMPLE_BYTES, array: F32 | None = None) -> list[CurvePoint]:
    """Read bandwidth at each working-set size in `sizes` (bytes), on `threads` parts (run it
    at numba's setting of as many threads: ``llmnb.threads``). One float32 array of the largest
    size is allocated once; a size reads its first `n` bytes, split into `threads` contiguous
    parts, `passes` times per sample (enough passes to read `sample_bytes`), so a set that fits
    a cache is read from it (``llmnb.kernels.read.read_passes``). The samples are taken in
    `repeats` rounds over all sizes, smallest to largest, so that a neighbour's burst on a
    shared machine slows one sample of many sizes rather than every sample of a few; before
    each sample a set no larger than `sample_bytes` is read once untimed (back into the caches
    the previous size evicted it from). Each point is the median of its samples, with the
    quartiles as its spread. `array` (float32, at least the largest size) is read instead of a
    fresh one, to allocate once for many curves."""
    from llmnb.kernels.read import read_passes

    if not sizes or repeats < 1 or threads < 1:
        raise UsageError(f"read_curve: expected sizes, repeats >= 1 and threads >= 1, got "
                         f"{len(sizes)} sizes, repeats {repeats}, threads {threads}")
    a: F32 = np.ones(max(sizes) // 4, dtype=np.float32) if array is None else array
    if a.size * 4 < max(sizes):
        raise UsageError(f"read_curve: the array holds {a.size * 4} bytes, the curve reaches "
                         f"{max(sizes)}")
    counts = [max(threads, nbytes // 4) for nbytes in sorted(sizes)]
    passes = [max(1, -(-sample_bytes // (4 * n))) for n in counts]
    seconds: list[list[float]] = [[] for _ in counts]
    for _ in range(repeats):
        for i, n in enumerate(counts):
            if 4 * n <= sample_bytes:
                read_passes(a, n, 1, threads)               # warm-up: into the caches it fits
            t0 = time.perf_counter()
            read_passes(a, n, passes[i], threads)
            seconds[i].append(time.perf_counter() - t0)
    out = []
    for n, k, times in zip(counts, passes, seconds):
        gbs = sorted(4.0 * n * k / t / 1e9 for t in times)
        q1, q3 = _quartiles(gbs)
        out.append(CurvePoint(4 * n, statistics.median(gbs), q1, q3, k, repeats))
    return out


def _quartiles(values: Sequence[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def plateau(curve: Sequence[CurvePoint], tolerance: float = TOLERANCE) -> Plateau:
    """The memory roof of a read-bandwidth curve, from the curve alone.

    The reference is the median bandwidth of the TAIL largest sizes. From the largest size
    downward, each point is judged by its spread against the reference: clearly above it (its
    low quartile more than `tolerance` above) ends the plateau, a cache serves it; clearly
    below it (its high quartile more than `tolerance` below) is a slow point, a neighbour's
    burst (a larger set never reads faster from memory), skipped; any other point is on the
    plateau. The largest size is never skipped: clearly below the reference, it says the curve
    is still falling where it ends, and then it alone is the roof (``flat`` is False: the
    curve should reach further). The roof is the median of the plateau's points. The cache
    edge is the largest size below the plateau that is clearly above the roof (low quartile
    more than `tolerance` above it)."""
    if not curve:
        raise UsageError("plateau: the curve has no points")
    pts = sorted(curve, key=lambda p: p.nbytes)
    reference = statistics.median(p.gbs for p in pts[-TAIL:])
    on: list[CurvePoint] = [pts[-1]]
    if pts[-1].high >= reference * (1 - tolerance):
        for p in reversed(pts[:-1]):
            if p.low > reference * (1 + tolerance):
                break
            if p.high >= reference * (1 - tolerance):
                on.append(p)
    roof = statistics.median(p.gbs for p in on)
    start = min(p.nbytes for p in on)
    above = [p.nbytes for p in pts if p.nbytes < start and p.low > roof * (1 + tolerance)]
    return Plateau(gbs=roof, start=start, points=len(on),
                   edge=max(above) if above else None, flat=len(on) >= TAIL)
