"""Benchmark llmnb.quant against gguf-py's ``gguf.quants`` on the same data, in one run.

For each type: random blocks (finite f16 scales) of ``n_elements``, one warm-up call, then
the median of `repeats` timed calls of each implementation, alternating so that machine
noise hits both. Both are single-threaded numpy (no BLAS in these kernels). Rows:
{type, op, n_elements, llmnb_s, gguf_s, ratio} with ratio = gguf_s / llmnb_s (> 1: llmnb
is faster); for k-quant quantize gguf-py has no quantizer and gguf_s/ratio are None.
"""
from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from llmnb.gguf.constants import GGML_BLOCK_SIZES, GGMLType, type_name
from llmnb.quant import dequantize, quantize

T = GGMLType
DEQUANT_TYPES = [T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1,
                 T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]
QUANT_TYPES = [T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q4_K, T.Q5_K, T.Q6_K]
GGUF_QUANTIZES = {T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1}
# byte offsets of the f16 scales, made finite so both sides do the same arithmetic
F16_OFFSETS = {T.Q8_0: [0], T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2],
               T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}
ROW = 4096


def random_raw(ggml_type: int, n_elements: int, rng: np.random.Generator) -> npt.NDArray[np.uint8]:
    """(rows, row bytes) of random blocks of `ggml_type`, ROW elements per row."""
    block, size = GGML_BLOCK_SIZES[ggml_type]
    rows = n_elements // ROW
    if block == 1:
        x = rng.standard_normal((rows, ROW)).astype(np.float32)
        return quantize(x, ggml_type)
    raw = rng.integers(0, 256, (rows * ROW // block, size), dtype=np.uint8)
    for off in F16_OFFSETS[ggml_type]:
        raw[:, off + 1] &= 0x3B
    return raw.reshape(rows, -1)


def median_pair(a: Callable[[], object], b: Callable[[], object] | None,
                repeats: int) -> tuple[float, float | None]:
    a()
    if b is not None:
        b()
    ta: list[float] = []
    tb: list[float] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a()
        ta.append(time.perf_counter() - t0)
        if b is not None:
            t0 = time.perf_counter()
            b()
            tb.append(time.perf_counter() - t0)
    return statistics.median(ta), (statistics.median(tb) if tb else None)


def row(ggml_type: int, op: str, n: int, ours: float, theirs: float | None) -> dict[str, object]:
    return {"type": type_name(ggml_type), "op": op, "n_elements": n, "llmnb_s": ours,
            "gguf_s": theirs, "ratio": (theirs / ours) if theirs is not None else None}


def bench_quant(repeats: int = 5, n_elements: int = 1 << 21) -> list[dict[str, object]]:
    """Time dequantize (every type) and quantize (where possible) against gguf.quants."""
    import gguf  # gguf-py: the oracle, imported only when benchmarking
    from gguf import quants

    rng = np.random.default_rng(0)
    rows: list[dict[str, object]] = []
    warnings.simplefilter("ignore", RuntimeWarning)
    for t in DEQUANT_TYPES:
        raw = random_raw(t, n_elements, rng)
        shape = (raw.shape[0], ROW)
        qt = gguf.GGMLQuantizationType(t)
        ours, theirs = median_pair(lambda: dequantize(raw, t, shape),
                                   lambda: quants.dequantize(raw, qt), repeats)
        rows.append(row(t, "dequantize", n_elements, ours, theirs))
    x = rng.standard_normal((n_elements // ROW, ROW)).astype(np.float32) * np.float32(0.02)
    for t in QUANT_TYPES:
        qt = gguf.GGMLQuantizationType(t)
        other: Callable[[], object] | None = (lambda: quants.quantize(x, qt)) if t in GGUF_QUANTIZES else None
        ours, theirs = median_pair(lambda: quantize(x, t), other, repeats)
        rows.append(row(t, "quantize", n_elements, ours, theirs))
    return rows


def format_rows(rows: list[dict[str, object]]) -> str:
    """A plain-text table of `bench_quant` rows (ms and Melem/s)."""
    lines = [f"{'type':6} {'op':10} {'llmnb ms':>9} {'gguf ms':>9} {'ratio':>6} {'llmnb Melem/s':>14}"]
    for r in rows:
        ours = float(r["llmnb_s"])  # type: ignore[arg-type]
        theirs = r["gguf_s"]
        n = int(r["n_elements"])  # type: ignore[call-overload]
        g = f"{1e3 * float(theirs):9.2f}" if isinstance(theirs, float) else f"{'-':>9}"
        ratio = f"{float(r['ratio']):6.2f}" if isinstance(r["ratio"], float) else f"{'-':>6}"
        lines.append(f"{r['type']!s:6} {r['op']!s:10} {1e3 * ours:9.2f} {g} {ratio} {n / ours / 1e6:14.0f}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(format_rows(bench_quant()))
