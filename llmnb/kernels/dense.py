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

from llmnb.kernels.matvec import (
    SIXTEEN, SIXTEENTH, TILE, bytes_to_f32, halves_to_f32, nibbles_to_f32,
)

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
    """Tiles t0..t1 -> out (n_in, (t1 - t0) * 64) float32: W.T's columns t0*64 .. t1*64.

    In parallel over groups of inputs (each thread writes its own rows of `out`, so any
    thread count balances). Each input's 64 values are converted and scaled in one pass
    into a small local row, then copied into `out` as one slice (written straight into
    `out`, the loop would not vectorize: `out` might overlap the scales)."""
    for b in prange(qs.shape[1]):
        lo = np.empty(TILE, np.float32)
        hi = np.empty(TILE, np.float32)
        bits = np.empty(group * TILE, np.uint32)
        wf = bits.view(np.float32)
        for t in range(t0, t1):
            c = (t - t0) * TILE
            if kind == KIND_NIBBLES:                # inputs j (low nibble) and j + 16 (high)
                for j in range(16):
                    for o in range(TILE):
                        v = np.float32(qs[t, b, j, o])
                        h = np.floor(v * SIXTEENTH)
                        if m is None:
                            lo[o] = d[t, b, o] * (v - SIXTEEN * h)
                            hi[o] = d[t, b, o] * h
                        else:
                            lo[o] = d[t, b, o] * (v - SIXTEEN * h) + m[t, b, o]
                            hi[o] = d[t, b, o] * h + m[t, b, o]
                    out[b * 32 + j, c:c + TILE] = lo
                    out[b * 32 + j + 16, c:c + TILE] = hi
            elif kind == KIND_BYTES:
                for j in range(group):
                    for o in range(TILE):
                        if m is None:
                            lo[o] = d[t, b, o] * np.float32(qs[t, b, j, o])
                        else:
                            lo[o] = d[t, b, o] * np.float32(qs[t, b, j, o]) + m[t, b, o]
                    out[b * group + j, c:c + TILE] = lo
            else:
                halves_to_f32(qs, t, b, bits, kind == KIND_BF16)
                for j in range(group):
                    out[b * group + j, c:c + TILE] = wf[j * TILE:(j + 1) * TILE]


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
