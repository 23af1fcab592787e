"""Float32 weights in 64-output tiles, and their few-row product: out = x @ W.T, x (T, in).

The same idea as the quantized kernels (``matvec.py``), without the conversion: a float32
weight W (out, in) is kept, for each tile of TILE = 64 outputs, input-major,

    tiles[tile, j, o] = W[tile*64 + o, j]          (tiles, in, 64), outputs zero-padded

so the kernel walks the inputs and does, for each, one multiply-add into 64 accumulators
per row (an axpy: four 512-bit FMAs). Rows go in blocks of 4, 2 and 1 (``rows4``, ``rows2``,
``rows1``): for a chunk of CHUNK inputs, a block keeps its rows' accumulators in registers
(4 rows x 64 outputs: 16 of the 32 vector registers), loads each weight vector once and
feeds it to one FMA per row, then stores the accumulators. The chunk loop is outside the
row blocks, so a chunk's weights (1 KB) come from memory once and serve every block from
L1: the weight is streamed once per product whatever T. Blocks of 8 rows, as the quantized
kernels use to share a conversion, would need 32 accumulator registers here and gain
nothing: a float32 weight needs no conversion, only its load.

Why not OpenBLAS: for a few rows, ``x @ W.T`` packs W before multiplying, and ``W @ X.T``
(``llmnb.model.batch_copy``) still pays, per call, for a kernel shaped for many rows; a product over
T rows is bound by reading W (4 bytes per weight) until T * 2 flops per weight catch up with
the FMA units. Each output's sum runs over the inputs in order, one FMA per input
(``fastmath={"contract"}`` allows only that), so a row's result is bit-identical whatever T
and whichever block it falls in, and at every thread count (one thread per tile).
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, prange

import llmnb.kernels.jit  # noqa: F401  (numba configured before the first compile)
from llmnb.kernels.tile import TILE

F32 = npt.NDArray[np.float32]
CHUNK = 4       # inputs per pass of a block over its 64 outputs: the loop LLVM unrolls
# rows4, rows2 and rows1 write their accumulators out one per row, each a named local, not a
# loop over a small array: numba keeps named scalars in registers across the input loop, where
# an array of accumulators would be read from and written to memory at every multiply-add.


@njit(inline="always")
def rows4(w, x, t, j0, r, res):  # type: ignore[no-untyped-def]
    """res[r:r+4] += rows r..r+3 of x times inputs j0..j0+CHUNK-1 of tile t: 4 x 64 accumulators
    in registers over the inputs, one weight vector load feeding 4 multiply-adds."""
    for o in range(TILE):
        a0 = res[r, o]
        a1 = res[r + 1, o]
        a2 = res[r + 2, o]
        a3 = res[r + 3, o]
        for jj in range(CHUNK):
            j = j0 + jj
            wj = w[t, j, o]
            a0 += wj * x[r, j]
            a1 += wj * x[r + 1, j]
            a2 += wj * x[r + 2, j]
            a3 += wj * x[r + 3, j]
        res[r, o] = a0
        res[r + 1, o] = a1
        res[r + 2, o] = a2
        res[r + 3, o] = a3


@njit(inline="always")
def rows2(w, x, t, j0, r, res):  # type: ignore[no-untyped-def]
    """res[r:r+2] += rows r, r+1 of x times inputs j0..j0+CHUNK-1 of tile t (rows4's order)."""
    for o in range(TILE):
        a0 = res[r, o]
        a1 = res[r + 1, o]
        for jj in range(CHUNK):
            j = j0 + jj
            wj = w[t, j, o]
            a0 += wj * x[r, j]
            a1 += wj * x[r + 1, j]
        res[r, o] = a0
        res[r + 1, o] = a1


@njit(inline="always")
def rows1(w, x, t, j0, r, res):  # type: ignore[no-untyped-def]
    """res[r] += row r of x times inputs j0..j0+CHUNK-1 of tile t (rows4's order)."""
    for o in range(TILE):
        a0 = res[r, o]
        for jj in range(CHUNK):
            j = j0 + jj
            a0 += w[t, j, o] * x[r, j]
        res[r, o] = a0


@njit(inline="always")
def row_tail(w, x, t, j0, r, res):  # type: ignore[no-untyped-def]
    """res[r] += row r of x times inputs j0.. of tile t: the last n_in % CHUNK inputs."""
    for o in range(TILE):
        a0 = res[r, o]
        for j in range(j0, x.shape[1]):
            a0 += w[t, j, o] * x[r, j]
        res[r, o] = a0


@njit(parallel=True, fastmath={"contract"}, cache=True)
def f32_rows(w, x, out):  # type: ignore[no-untyped-def]
    """w (tiles, in, 64) float32, x (T, in) -> out (T, tiles*64), rows in blocks of 4, 2, 1."""
    rows, n_in = x.shape
    whole = n_in - n_in % CHUNK
    for t in prange(w.shape[0]):
        res = np.zeros((rows, TILE), np.float32)
        for j0 in range(0, whole, CHUNK):
            r = 0
            while rows - r >= 4:
                rows4(w, x, t, j0, r, res)
                r += 4
            if rows - r >= 2:
                rows2(w, x, t, j0, r, res)
                r += 2
            if rows - r == 1:
                rows1(w, x, t, j0, r, res)
        if whole < n_in:
            for r in range(rows):
                row_tail(w, x, t, whole, r, res)
        out[:, t * TILE:(t + 1) * TILE] = res


def tiled_matmul(x: F32, tiles: F32, n_out: int) -> F32:
    """x (T, in) float32 @ W.T for W held in tiles (``layout.F32Tiles``): (T, n_out)."""
    xc = np.ascontiguousarray(x, dtype=np.float32)
    padded = tiles.shape[0] * TILE
    out: F32 = np.empty((xc.shape[0], padded), dtype=np.float32)       # (T, tiles * 64)
    f32_rows(tiles, xc, out)
    return out if padded == n_out else out[:, :n_out]
