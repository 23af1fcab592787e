"""``matmul(x, w)``: x @ W.T for a repacked weight (the float kernels), choosing the cheaper way
per call.

Few rows (decode, a speculative verify, a short prompt) are bound by reading the weight:
the quantized kernels read it once for all rows. Many rows (a long prompt, a diffusion
canvas) are bound by arithmetic, where OpenBLAS's sgemm is several times faster than any
loop here: the weight is dequantized whole into a reused float32 scratch (at most
``layout.SCRATCH_BYTES``, 40 MB: every matrix of Qwen2.5-0.5B fits, the fused Q/K/V parts of
different types side by side; a larger one goes in panels of that size) and multiplied by
ONE sgemm per matrix, so BLAS's threads wake once per matrix. What is left of its cost is the
dequantization, on one thread while BLAS's others wait (``llmnb bench ar --weights
quantized-float f32`` compares its prefill with float32 weights').

``DENSE_ROWS`` is where the dense way starts to win: ``llmnb bench quant``'s cost-curve rows
(``bench_quant.cost_curve``) give c(T) of both ways, in one-row products, at 1 and 2 threads.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

from llmnb.kernels.dense import (
    KIND_BF16, KIND_BYTES, KIND_F16, KIND_NIBBLES, dequantize_columns, dequantize_rows,
)
from llmnb.kernels.layout import SCRATCH_BYTES, TILE, PackedMatrix
from llmnb.kernels.matvec import (
    bytes_matvec, bytes_rows, halves_rows, nibbles_matvec, nibbles_rows,
)
from llmnb.gguf.constants import GGMLType
from llmnb.scratch import Scratch

F32 = npt.NDArray[np.float32]

DENSE_ROWS = 48             # from this many rows on, dequantize + sgemm (see the module docstring)


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


SCRATCH = Scratch()        # the dense products' W.T panels (at most SCRATCH_BYTES)


def panel_tiles(n_in: int, scratch_bytes: int | None = None) -> int:
    """Tiles of 64 output columns a panel of W.T (n_in rows) holds in the scratch."""
    return max(1, (scratch_bytes or SCRATCH_BYTES) // (4 * n_in * TILE))


def dense_matmul(x: F32, w: PackedMatrix, scratch_bytes: int | None = None) -> F32:
    """x (T, in) @ W.T through float32 panels of W.T and BLAS: (T, n_out).

    W.T is dequantized into the scratch, whole when it fits in `scratch_bytes`
    (SCRATCH_BYTES), else a panel of output columns of that size at a time, and each
    panel is multiplied by one sgemm: BLAS's threads wake once per panel."""
    if w.w_t is not None:
        return x @ w.w_t
    out: F32 = np.empty((x.shape[0], w.n_tiles * TILE), dtype=np.float32)
    step = panel_tiles(w.n_in, scratch_bytes)
    kind = kind_code(w)
    for a in range(0, w.n_tiles, step):
        b = min(w.n_tiles, a + step)
        cols = SCRATCH.take("panel", w.n_in, (b - a) * TILE, exact=True)   # (in, panel)
        dequantize_columns(kind, w.qs, w.d, w.m, w.group, a, b, cols)
        np.matmul(x, cols, out=out[:, a * TILE:b * TILE])
    return out if out.shape[1] == w.n_out else out[:, :w.n_out]


def dense_parts_matmul(x: F32, parts: tuple[PackedMatrix, ...]) -> F32:
    """x (T, in) @ [W1; W2; ...].T for quantized parts side by side (Q, K, V of different
    types): every part dequantized into one scratch panel and multiplied by one sgemm, when
    they fit in SCRATCH_BYTES together; else one dense product per part."""
    n_in = parts[0].n_in
    tiles = [p.n_tiles for p in parts]
    if any(p.w_t is not None for p in parts) or sum(tiles) > panel_tiles(n_in):
        return np.concatenate([dense_matmul(x, p) for p in parts], axis=1)
    cols = SCRATCH.take("panel", n_in, sum(tiles) * TILE, exact=True)     # (in, all parts)
    c = 0
    for p, n in zip(parts, tiles):
        dequantize_columns(kind_code(p), p.qs, p.d, p.m, p.group, 0, n, cols, c)
        c += n * TILE
    out: F32 = x @ cols                                                # (T, sum padded)
    if all(p.n_out == n * TILE for p, n in zip(parts, tiles)):
        return out
    starts = np.cumsum([0] + tiles[:-1]) * TILE                        # each part's first column
    kept: F32 = np.concatenate([out[:, s:s + p.n_out] for s, p in zip(starts, parts)], axis=1)
    return kept


def matmul(x: F32, w: PackedMatrix) -> F32:
    """x (T, in) float32 @ W.T for a PackedMatrix W (n_out, n_in): (T, n_out) float32."""
    if w.w_t is not None:
        return x @ w.w_t
    xc = np.ascontiguousarray(x, dtype=np.float32)
    if xc.shape[0] >= DENSE_ROWS:
        return dense_matmul(xc, w)
    return quantized_matmul(xc, w)


def parts_matmul(x: F32, parts: tuple[PackedMatrix, ...]) -> F32:
    """x (T, in) @ W.T for weights side by side along the outputs: (T, sum n_out)."""
    xc = np.ascontiguousarray(x, dtype=np.float32)
    if xc.shape[0] >= DENSE_ROWS:
        return dense_parts_matmul(xc, parts)
    out: F32 = np.concatenate([matmul(xc, p) for p in parts], axis=1)
    return out


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
