"""``matmul(x, w)``: x @ W.T for a repacked weight, choosing the cheaper way per call.

Few rows (decode, a speculative verify, a short prompt) are bound by reading the weight:
the quantized kernels read it once for all rows. Many rows (a long prompt, a diffusion
canvas) are bound by arithmetic, where OpenBLAS's sgemm is several times faster than any
loop here: the weight is dequantized, a slice of output columns at a time, into a reused
float32 scratch buffer, and multiplied there. ``DENSE_ROWS`` is where the second way
starts to win, measured with ``python -m llmnb.perf.bench_quant`` (``crossover`` rows).
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

from llmnb.kernels.dense import (
    KIND_BF16, KIND_BYTES, KIND_F16, KIND_NIBBLES, dequantize_columns, dequantize_rows,
)
from llmnb.kernels.layout import TILE, PackedMatrix
from llmnb.kernels.matvec import (
    bytes_matvec, bytes_rows, halves_rows, nibbles_matvec, nibbles_rows,
)
from llmnb.gguf.constants import GGMLType

F32 = npt.NDArray[np.float32]

DENSE_ROWS = 48             # from this many rows on, dequantize + sgemm (bench_quant cost_curve)
SCRATCH_BYTES = 16 << 20    # the float32 scratch: at most this many bytes of W.T at a time


def kind_code(w: PackedMatrix) -> int:
    if w.kind == "nibbles":
        return KIND_NIBBLES
    if w.kind == "bytes":
        return KIND_BYTES
    return KIND_BF16 if w.ggml_type == GGMLType.BF16 else KIND_F16


def quantized_matmul(x: F32, w: PackedMatrix) -> F32:
    """x (T, in) @ W.T with the quantized kernels, any T: (T, n_out)."""
    t = x.shape[0]
    padded = w.n_tiles * TILE
    out: F32 = np.empty((t, padded), dtype=np.float32)                 # (T, tiles * 64)
    if w.kind == "halves":
        halves_rows(w.qs, w.ggml_type == GGMLType.BF16, x, out)
    elif t == 1:
        (nibbles_matvec if w.kind == "nibbles" else bytes_matvec)(w.qs, w.d, w.m, x[0], out[0])
    else:
        (nibbles_rows if w.kind == "nibbles" else bytes_rows)(w.qs, w.d, w.m, x, out)
    return out if padded == w.n_out else out[:, :w.n_out]


class Scratch:
    """One float32 buffer, grown as needed and reused by every dense product."""

    def __init__(self) -> None:
        self.buffer: F32 = np.empty(0, dtype=np.float32)

    def get(self, rows: int, cols: int) -> F32:
        if self.buffer.size < rows * cols:
            self.buffer = np.empty(rows * cols, dtype=np.float32)
        return self.buffer[:rows * cols].reshape(rows, cols)


SCRATCH = Scratch()


def dense_matmul(x: F32, w: PackedMatrix) -> F32:
    """x (T, in) @ W.T through float32 slices of W.T and BLAS: (T, n_out)."""
    if w.w_t is not None:
        return x @ w.w_t
    out: F32 = np.empty((x.shape[0], w.n_tiles * TILE), dtype=np.float32)
    step = max(1, SCRATCH_BYTES // (4 * w.n_in * TILE))               # tiles per slice
    kind = kind_code(w)
    for t0 in range(0, w.n_tiles, step):
        t1 = min(w.n_tiles, t0 + step)
        cols = SCRATCH.get(w.n_in, (t1 - t0) * TILE)                   # (in, slice)
        dequantize_columns(kind, w.qs, w.d, w.m, w.group, t0, t1, cols)
        np.matmul(x, cols, out=out[:, t0 * TILE:t1 * TILE])
    return out if out.shape[1] == w.n_out else out[:, :w.n_out]


def matmul(x: F32, w: PackedMatrix) -> F32:
    """x (T, in) float32 @ W.T for a PackedMatrix W (n_out, n_in): (T, n_out) float32."""
    if w.w_t is not None:
        return x @ w.w_t
    xc = np.ascontiguousarray(x, dtype=np.float32)
    if xc.shape[0] >= DENSE_ROWS:
        return dense_matmul(xc, w)
    return quantized_matmul(xc, w)


def rows(w: PackedMatrix, ids: npt.NDArray[np.int64]) -> F32:
    """Rows `ids` of W, float32 (len(ids), n_in), bit-identical to dequantizing them."""
    if w.w_t is not None:
        return np.ascontiguousarray(w.w_t[:, ids].T)
    out: F32 = np.empty((len(ids), w.n_in), dtype=np.float32)
    dequantize_rows(kind_code(w), w.qs, w.d, w.m, w.group, np.asarray(ids, dtype=np.int64), out)
    return out


def to_dense(w: PackedMatrix) -> F32:
    """The whole W.T as float32 (n_in, n_out), bit-identical to dequantize(...).T."""
    if w.w_t is not None:
        return w.w_t
    out: F32 = np.empty((w.n_in, w.n_tiles * TILE), dtype=np.float32)
    dequantize_columns(kind_code(w), w.qs, w.d, w.m, w.group, 0, w.n_tiles, out)
    return np.ascontiguousarray(out[:, :w.n_out])
