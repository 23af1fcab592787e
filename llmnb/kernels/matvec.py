"""Products that read repacked quantized blocks directly: out = x @ W.T, x float32 (T, in).

The layout (``layout.py``) keeps, for a tile of 64 outputs and a group of G inputs, the
quant of every output for one input side by side. So the kernel walks the inputs and,
for each, does one multiply-add into 64 output accumulators at once (an "axpy"), which
LLVM turns into 512-bit (or 256-bit) vector instructions:

    for each tile of 64 outputs (in parallel: one thread per tile, so results do not
    depend on the thread count):
        for each group b of G inputs:
            acc[0:64] = sum over j of  q[b, j, 0:64] * x[b*G + j]      # integer quants
            out[0:64] += d[b, 0:64] * acc + m[b, 0:64] * sum(x[b*G : b*G + G])

Scales apply once per group, not per weight: that is the whole trick of block
quantization at run time. The arithmetic is float32 throughout (the activations are
never quantized, unlike llama.cpp's Q8 activations), with fused multiply-adds
(``fastmath={"contract"}`` allows only that: no reassociation, so each output's sum runs
in one fixed order on every machine and at every thread count).

A 4-bit quant v in a byte (two per byte) is split without integer instructions, which
numba would widen to 64 bits: h = floor(v / 16) and l = v - 16 h are exact in float32.

One token (T = 1) uses the fused kernels; more rows (a speculative verify, a short
prompt) first convert each group's quants to a float32 scratch of G x 64 once, then run
every row's multiply-adds over it, so the weights are read and converted once for all rows.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from llmnb.kernels import jit  # noqa: F401  (numba configured before the first compile)

TILE = 64
SIXTEENTH = np.float32(0.0625)
SIXTEEN = np.float32(16.0)


# --- one row: fused kernels -----------------------------------------------------------------

@njit(parallel=True, fastmath={"contract"}, cache=True)
def nibbles_matvec(qs, d, m, x, out):  # type: ignore[no-untyped-def]
    """qs (tiles, groups, 16, 64) uint8, d and m (tiles, groups, 64), x (in,) -> out (tiles*64,)."""
    n_tiles, n_groups = qs.shape[0], qs.shape[1]
    for t in prange(n_tiles):
        res = np.zeros(TILE, np.float32)
        acc = np.empty(TILE, np.float32)
        for b in range(n_groups):
            acc[:] = 0
            sx = np.float32(0)
            for j in range(0, 16, 2):                  # bytes j, j+1: inputs j, j+1, j+16, j+17
                x0 = x[b * 32 + j]
                x1 = x[b * 32 + j + 1]
                x16 = x[b * 32 + j + 16]
                x17 = x[b * 32 + j + 17]
                sx += (x0 + x1) + (x16 + x17)
                for o in range(TILE):
                    v = np.float32(qs[t, b, j, o])
                    h = np.floor(v * SIXTEENTH)
                    acc[o] += (v - SIXTEEN * h) * x0
                    acc[o] += h * x16
                    v = np.float32(qs[t, b, j + 1, o])
                    h = np.floor(v * SIXTEENTH)
                    acc[o] += (v - SIXTEEN * h) * x1
                    acc[o] += h * x17
            for o in range(TILE):
                res[o] += d[t, b, o] * acc[o] + m[t, b, o] * sx
        out[t * TILE:(t + 1) * TILE] = res


@njit(parallel=True, fastmath={"contract"}, cache=True)
def bytes_matvec(qs, d, m, x, out):  # type: ignore[no-untyped-def]
    """qs (tiles, groups, G, 64) int8, d (tiles, groups, 64), m the same or None, x (in,)."""
    n_tiles, n_groups, g = qs.shape[0], qs.shape[1], qs.shape[2]
    for t in prange(n_tiles):
        res = np.zeros(TILE, np.float32)
        acc = np.empty(TILE, np.float32)
        for b in range(n_groups):
            acc[:] = 0
            for j in range(0, g, 4):
                x0 = x[b * g + j]
                x1 = x[b * g + j + 1]
                x2 = x[b * g + j + 2]
                x3 = x[b * g + j + 3]
                for o in range(TILE):
                    acc[o] += np.float32(qs[t, b, j, o]) * x0
                    acc[o] += np.float32(qs[t, b, j + 1, o]) * x1
                    acc[o] += np.float32(qs[t, b, j + 2, o]) * x2
                    acc[o] += np.float32(qs[t, b, j + 3, o]) * x3
            if m is None:
                for o in range(TILE):
                    res[o] += d[t, b, o] * acc[o]
            else:
                sx = np.float32(0)
                for j in range(g):
                    sx += x[b * g + j]
                for o in range(TILE):
                    res[o] += d[t, b, o] * acc[o] + m[t, b, o] * sx
        out[t * TILE:(t + 1) * TILE] = res


# --- a group's quants as float32 (the small-batch kernels and the dense copy share them) ---

@njit(inline="always")
def nibbles_to_f32(qs, t, b, wf):  # type: ignore[no-untyped-def]
    """Tile t, group b of nibble quants -> wf (32 * 64,) float32, input-major."""
    for j in range(16):
        for o in range(TILE):
            v = np.float32(qs[t, b, j, o])
            h = np.floor(v * SIXTEENTH)
            wf[j * TILE + o] = v - SIXTEEN * h
            wf[(j + 16) * TILE + o] = h


@njit(inline="always")
def bytes_to_f32(qs, t, b, wf):  # type: ignore[no-untyped-def]
    """Tile t, group b of int8 quants -> wf (G * 64,) float32, input-major."""
    for j in range(qs.shape[2]):
        for o in range(TILE):
            wf[j * TILE + o] = np.float32(qs[t, b, j, o])


@njit(inline="always")
def halves_to_f32(qs, t, b, bits, bf16):  # type: ignore[no-untyped-def]
    """Tile t, group b of F16/BF16 values -> bits (32 * 64,) uint32 holding their exact
    float32 bit patterns (read them through a float32 view).

    BF16 is the top half of a float32. F16 (IEEE binary16): shift exponent and mantissa
    into place (13 bits up) and multiply by 2^112 to rebias the exponent, which is exact
    for normal and subnormal values alike; Inf/NaN get the all-ones exponent; then the sign."""
    wf = bits.view(np.float32)
    for j in range(32):
        for o in range(TILE):
            h = np.uint32(qs[t, b, j, o])
            if bf16:
                bits[j * TILE + o] = h << np.uint32(16)
            else:
                bits[j * TILE + o] = (h & np.uint32(0x7FFF)) << np.uint32(13)
        if not bf16:
            for o in range(TILE):
                wf[j * TILE + o] *= np.float32(5.192296858534828e33)        # 2 ** 112
            for o in range(TILE):
                h = np.uint32(qs[t, b, j, o])
                k = j * TILE + o
                if (h & np.uint32(0x7C00)) == np.uint32(0x7C00):
                    bits[k] = np.uint32(0x7F800000) | ((h & np.uint32(0x3FF)) << np.uint32(13))
                bits[k] |= (h & np.uint32(0x8000)) << np.uint32(16)


# --- several rows: convert once per group, multiply-add every row ------------------------

@njit(inline="always")
def rows_update(wf, g, x, b, acc, res, d, m, t):  # type: ignore[no-untyped-def]
    """res[r] += d * (wf . x[r, group b]) (+ m * sum) for every row r (wf: (g, 64) flat)."""
    rows = x.shape[0]
    for r in range(rows):
        acc[:] = 0
        base = b * g
        for j in range(0, g, 4):
            x0 = x[r, base + j]
            x1 = x[r, base + j + 1]
            x2 = x[r, base + j + 2]
            x3 = x[r, base + j + 3]
            for o in range(TILE):
                acc[o] += wf[j * TILE + o] * x0
                acc[o] += wf[(j + 1) * TILE + o] * x1
                acc[o] += wf[(j + 2) * TILE + o] * x2
                acc[o] += wf[(j + 3) * TILE + o] * x3
        if d.shape[0] == 0:                                  # halves: no scales
            for o in range(TILE):
                res[r, o] += acc[o]
        elif m is None:
            for o in range(TILE):
                res[r, o] += d[t, b, o] * acc[o]
        else:
            sx = np.float32(0)
            for j in range(g):
                sx += x[r, base + j]
            for o in range(TILE):
                res[r, o] += d[t, b, o] * acc[o] + m[t, b, o] * sx


@njit(parallel=True, fastmath={"contract"}, cache=True)
def nibbles_rows(qs, d, m, x, out):  # type: ignore[no-untyped-def]
    """x (T, in) -> out (T, tiles*64), nibble quants (see nibbles_matvec)."""
    for t in prange(qs.shape[0]):
        wf = np.empty(32 * TILE, np.float32)
        acc = np.empty(TILE, np.float32)
        res = np.zeros((x.shape[0], TILE), np.float32)
        for b in range(qs.shape[1]):
            nibbles_to_f32(qs, t, b, wf)
            rows_update(wf, 32, x, b, acc, res, d, m, t)
        out[:, t * TILE:(t + 1) * TILE] = res


@njit(parallel=True, fastmath={"contract"}, cache=True)
def bytes_rows(qs, d, m, x, out):  # type: ignore[no-untyped-def]
    """x (T, in) -> out (T, tiles*64), int8 quants (see bytes_matvec)."""
    g = qs.shape[2]
    for t in prange(qs.shape[0]):
        wf = np.empty(g * TILE, np.float32)
        acc = np.empty(TILE, np.float32)
        res = np.zeros((x.shape[0], TILE), np.float32)
        for b in range(qs.shape[1]):
            bytes_to_f32(qs, t, b, wf)
            rows_update(wf, g, x, b, acc, res, d, m, t)
        out[:, t * TILE:(t + 1) * TILE] = res


@njit(parallel=True, fastmath={"contract"}, cache=True)
def halves_rows(qs, bf16, x, out):  # type: ignore[no-untyped-def]
    """x (T, in) -> out (T, tiles*64), F16 (bf16=False) or BF16 weights, for any T."""
    no_scales = np.zeros((0, 0, 0), np.float32)
    for t in prange(qs.shape[0]):
        bits = np.empty(32 * TILE, np.uint32)
        acc = np.empty(TILE, np.float32)
        res = np.zeros((x.shape[0], TILE), np.float32)
        for b in range(qs.shape[1]):
            halves_to_f32(qs, t, b, bits, bf16)
            rows_update(bits.view(np.float32), 32, x, b, acc, res, no_scales, None, t)
        out[:, t * TILE:(t + 1) * TILE] = res
