"""Repacked blocks back to float32: a slice of output columns into a scratch buffer (for
BLAS, when a product has so many rows that it is compute-bound), or a few rows (the
embedding lookup of a tied output head).

Both compute ``d * q + m`` with a separate multiply and add, no fused multiply-add (no
``fastmath``), so every value is bit-identical to ``llmnb.quant.dequantize`` of the file's
blocks (``layout.py`` says why the scales allow it).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from llmnb.kernels.tile import TILE
from llmnb.kernels.matvec import (
    SIXTEEN, SIXTEENTH, bytes_to_f32, halves_to_f32, nibbles_to_f32,
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


@njit(nogil=True, cache=True)
def dequantize_columns(kind, qs, d, m, group, t0, t1, out, col=0):  # type: ignore[no-untyped-def]
    """Tiles t0..t1 -> out[:, col:col + (t1 - t0) * 64] float32: W.T's columns t0*64 .. t1*64
    (several matrices' columns can so sit side by side in one buffer).

    One thread, written for the vector units: for each input, its 64 quants, scales and
    offsets and the 64 values written are contiguous slices, and the loop over them reads
    and writes through those slices only, so it vectorizes, where a parallel loop through a
    small local row does not. One thread is on purpose: the caller multiplies the slice with
    BLAS at once, and numba's parallel threads, still spinning after their loop, would take
    the cores BLAS runs on."""
    bits = np.empty(group * TILE, np.uint32)
    wf = bits.view(np.float32)
    for t in range(t0, t1):
        c = col + (t - t0) * TILE
        for b in range(qs.shape[1]):
            if kind == KIND_NIBBLES:                # inputs j (low nibble) and j + 16 (high)
                if m is not None:                   # (always: every nibble format has one)
                    dt, mt = d[t, b], m[t, b]
                    for j in range(16):
                        q = qs[t, b, j]
                        lo = out[b * 32 + j, c:c + TILE]
                        hi = out[b * 32 + j + 16, c:c + TILE]
                        for o in range(TILE):
                            v = np.float32(q[o])
                            h = np.floor(v * SIXTEENTH)
                            lo[o] = dt[o] * (v - SIXTEEN * h) + mt[o]
                            hi[o] = dt[o] * h + mt[o]
            elif kind == KIND_BYTES:
                dt = d[t, b]
                for j in range(group):
                    q = qs[t, b, j]
                    row = out[b * group + j, c:c + TILE]
                    if m is None:
                        for o in range(TILE):
                            row[o] = dt[o] * np.float32(q[o])
                    else:
                        mt = m[t, b]
                        for o in range(TILE):
                            row[o] = dt[o] * np.float32(q[o]) + mt[o]
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
