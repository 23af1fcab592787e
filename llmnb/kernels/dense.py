"""Repacked blocks back to float32: a slice of output columns into a scratch buffer (for
BLAS, when a product has so many rows that it is compute-bound), or a few rows (the
embedding lookup of a tied output head).

Both compute ``d * q + m`` with a separate multiply and add, no fused multiply-add (no
``fastmath``), so every value is bit-identical to ``llmnb.quant.dequantize`` of the file's
blocks (``layout.py`` says why the scales allow it).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from llmnb.kernels.matvec import TILE, bytes_to_f32, halves_to_f32, nibbles_to_f32

KIND_NIBBLES, KIND_BYTES, KIND_F16, KIND_BF16 = 0, 1, 2, 3


@njit(inline="always")
def group_to_f32(kind, qs, t, b, wf, bits):  # type: ignore[no-untyped-def]
    """Tile t, group b -> wf (G * 64,) unscaled float32 (halves: the values themselves)."""
    if kind == KIND_NIBBLES:
        nibbles_to_f32(qs, t, b, wf)
    elif kind == KIND_BYTES:
        bytes_to_f32(qs, t, b, wf)
    else:
        halves_to_f32(qs, t, b, bits, kind == KIND_BF16)
        wf[:] = bits.view(np.float32)


@njit(parallel=True, cache=True)
def dequantize_columns(kind, qs, d, m, group, t0, t1, out):  # type: ignore[no-untyped-def]
    """Tiles t0..t1 -> out (n_in, (t1 - t0) * 64) float32: W.T's columns t0*64 .. t1*64."""
    for t in prange(t0, t1):
        wf = np.empty(group * TILE, np.float32)
        bits = np.empty(group * TILE, np.uint32)
        c = (t - t0) * TILE
        for b in range(qs.shape[1]):
            group_to_f32(kind, qs, t, b, wf, bits)
            for j in range(group):
                r = b * group + j                    # (indexing, not a row view: no refcounts)
                if d.shape[0] == 0:
                    for o in range(TILE):
                        out[r, c + o] = wf[j * TILE + o]
                elif m is None:
                    for o in range(TILE):
                        out[r, c + o] = d[t, b, o] * wf[j * TILE + o]
                else:
                    for o in range(TILE):
                        out[r, c + o] = d[t, b, o] * wf[j * TILE + o] + m[t, b, o]


@njit(cache=True)
def dequantize_rows(kind, qs, d, m, group, ids, out):  # type: ignore[no-untyped-def]
    """Rows `ids` of W (outputs) -> out (len(ids), n_in) float32."""
    wf = np.empty(group * TILE, np.float32)
    bits = np.empty(group * TILE, np.uint32)
    for i in range(ids.shape[0]):
        t, o = ids[i] // TILE, ids[i] % TILE
        for b in range(qs.shape[1]):
            group_to_f32(kind, qs, t, b, wf, bits)
            for j in range(group):
                v = wf[j * TILE + o]
                if d.shape[0] != 0:
                    v = d[t, b, o] * v if m is None else d[t, b, o] * v + m[t, b, o]
                out[i, b * group + j] = v
