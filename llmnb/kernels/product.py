"""``matmul(x, w)``: x @ W.T for a repacked weight, choosing the cheaper way per call.

Few rows (decode, a speculative verify, a short prompt) are bound by reading the weight:
the quantized kernels read it once for all rows. Many rows (a long prompt, a diffusion
canvas) are bound by arithmetic, where OpenBLAS's sgemm is several times faster than any
loop here: the weight is dequantized a panel of output columns at a time (PANEL_BYTES,
so the panel stays in the core's L2) into a reused float32 scratch, and each panel is
multiplied by BLAS at once. With SmolLM2's Q4_1 matrices, at 1 thread, this is 1.0-1.1x the
float32 product's speed at 128 rows and 0.85x at 512: the dequantized panel is read from
cache where float32 weights stream from memory. At 2 threads it is 0.7x: BLAS's threads
wake for every panel's product (running the panels on our own threads, BLAS held to one,
reached 1.0x, but changing BLAS's thread count mid-run left later decode steps slow).

``DENSE_ROWS`` is where the dense way starts to win: c(T) of both ways, measured with
``bench_quant.cost_curve`` (``llmnb bench quant``'s rows with "rows"; run here at 1 and at
2 threads under ``llmnb.threads``), crossed between 20 and 24 rows at both thread counts.
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

DENSE_ROWS = 24             # from this many rows on, dequantize + sgemm (see the module docstring)
PANEL_BYTES = 512 << 10     # a scratch panel: this many bytes of W.T at a time (in L2) ...
PANEL_TILES = 4             # ... but at least 4 tiles: each BLAS call wakes BLAS's threads


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


def dense_matmul(x: F32, w: PackedMatrix, panel_bytes: int | None = None) -> F32:
    """x (T, in) @ W.T through float32 panels of W.T and BLAS: (T, n_out).

    Each panel (a few tiles of output columns, about `panel_bytes`) is dequantized into
    a scratch and multiplied at once, while it is still in the core's cache."""
    if w.w_t is not None:
        return x @ w.w_t
    out: F32 = np.empty((x.shape[0], w.n_tiles * TILE), dtype=np.float32)
    step = max(PANEL_TILES, (panel_bytes or PANEL_BYTES) // (4 * w.n_in * TILE))   # tiles per panel
    kind = kind_code(w)

    for a in range(0, w.n_tiles, step):
        b = min(w.n_tiles, a + step)
        cols = SCRATCH.get(w.n_in, (b - a) * TILE)                     # (in, panel)
        dequantize_columns(kind, w.qs, w.d, w.m, w.group, a, b, cols)
        np.matmul(x, cols, out=out[:, a * TILE:b * TILE])
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
