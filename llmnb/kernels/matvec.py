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
prompt) go through the same loop in blocks of up to 8 rows: each group's quants are read
and converted once per block, into vector registers, and each converted vector feeds one
multiply-add per row of the block (a register-blocked product: 8 rows x 4 inputs of x
values stay in registers across the 64 outputs). The order of every output's sum is the
one-row kernel's, so each row's result is bit-identical to multiplying it alone.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

import llmnb.kernels.jit  # noqa: F401  (numba configured before the first compile)
from llmnb.kernels.tile import TILE

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


# --- a group's quants as float32 (the dense copy, and the halves kernel's scratch) -------

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


# --- several rows: convert once per block of rows, in registers --------------------------
#
# A block of nr rows (nr = 8, 4, 3, 2 or 1, a constant where each block is called, so LLVM
# unrolls the row loop and keeps the converted quants and every row's x values in vector
# registers): each group's quants are converted once per block, and each converted vector
# feeds one multiply-add per row. Every output's sum runs in the one-row kernel's order, so
# a row's result is bit-identical to ``nibbles_matvec`` / ``bytes_matvec`` on that row alone,
# whatever T and whichever block it falls in.

@njit(inline="always")
def nibbles_block(qs, d, m, x, t, b, r, nr, acc, sx, res):  # type: ignore[no-untyped-def]
    """res[r:r+nr] += rows r..r+nr-1 of x times group b of tile t (nibbles_matvec's order)."""
    base = b * 32
    acc[:] = 0
    for i in range(nr):
        sx[i] = 0
    for j in range(0, 16, 2):                          # bytes j, j+1: inputs j, j+1, j+16, j+17
        for i in range(nr):
            sx[i] += ((x[r + i, base + j] + x[r + i, base + j + 1])
                      + (x[r + i, base + j + 16] + x[r + i, base + j + 17]))
        for o in range(TILE):
            v = np.float32(qs[t, b, j, o])
            h0 = np.floor(v * SIXTEENTH)
            l0 = v - SIXTEEN * h0
            v = np.float32(qs[t, b, j + 1, o])
            h1 = np.floor(v * SIXTEENTH)
            l1 = v - SIXTEEN * h1
            for i in range(nr):                        # each converted vector: nr multiply-adds
                a = acc[i * TILE + o]
                a += l0 * x[r + i, base + j]
                a += h0 * x[r + i, base + j + 16]
                a += l1 * x[r + i, base + j + 1]
                a += h1 * x[r + i, base + j + 17]
                acc[i * TILE + o] = a
    for i in range(nr):
        for o in range(TILE):
            res[r + i, o] += d[t, b, o] * acc[i * TILE + o] + m[t, b, o] * sx[i]


@njit(inline="always")
def bytes_block(qs, d, m, x, t, b, r, nr, acc, sx, res):  # type: ignore[no-untyped-def]
    """res[r:r+nr] += rows r..r+nr-1 of x times group b of tile t (bytes_matvec's order)."""
    g = qs.shape[2]
    base = b * g
    acc[:] = 0
    for j in range(0, g, 4):
        for o in range(TILE):
            q0 = np.float32(qs[t, b, j, o])
            q1 = np.float32(qs[t, b, j + 1, o])
            q2 = np.float32(qs[t, b, j + 2, o])
            q3 = np.float32(qs[t, b, j + 3, o])
            for i in range(nr):
                a = acc[i * TILE + o]
                a += q0 * x[r + i, base + j]
                a += q1 * x[r + i, base + j + 1]
                a += q2 * x[r + i, base + j + 2]
                a += q3 * x[r + i, base + j + 3]
                acc[i * TILE + o] = a
    for i in range(nr):
        if m is None:
            for o in range(TILE):
                res[r + i, o] += d[t, b, o] * acc[i * TILE + o]
        else:
            s = np.float32(0)
            for j in range(g):
                s += x[r + i, base + j]
            for o in range(TILE):
                res[r + i, o] += d[t, b, o] * acc[i * TILE + o] + m[t, b, o] * s


@njit(inline="always")
def halves_block(wf, x, b, r, nr, acc, res):  # type: ignore[no-untyped-def]
    """res[r:r+nr] += rows r..r+nr-1 of x times group b, already float32 in wf (32 * 64,)."""
    base = b * 32
    acc[:] = 0
    for j in range(0, 32, 4):
        for o in range(TILE):
            w0 = wf[j * TILE + o]
            w1 = wf[(j + 1) * TILE + o]
            w2 = wf[(j + 2) * TILE + o]
            w3 = wf[(j + 3) * TILE + o]
            for i in range(nr):
                a = acc[i * TILE + o]
                a += w0 * x[r + i, base + j]
                a += w1 * x[r + i, base + j + 1]
                a += w2 * x[r + i, base + j + 2]
                a += w3 * x[r + i, base + j + 3]
                acc[i * TILE + o] = a
    for i in range(nr):
        for o in range(TILE):
            res[r + i, o] += acc[i * TILE + o]


BLOCK = 8       # rows per block at most (8 rows x 4 converted vectors: 32 x values in registers)
# Each kernel below writes the block schedule out (blocks of 8, then one of 4, then 3, 2 or 1)
# with constant sizes: numba inlines each call and unrolls its row loop for that size, which a
# size chosen at run time, or a block function passed in, would not get.


@njit(parallel=True, fastmath={"contract"}, cache=True)
def nibbles_rows(qs, d, m, x, out):  # type: ignore[no-untyped-def]
    """x (T, in) -> out (T, tiles*64), nibble quants, rows in blocks (8, 4, 3, 2, 1)."""
    rows = x.shape[0]
    for t in prange(qs.shape[0]):
        acc = np.empty(BLOCK * TILE, np.float32)
        sx = np.empty(BLOCK, np.float32)
        res = np.zeros((rows, TILE), np.float32)
        for b in range(qs.shape[1]):
            r = 0
            while rows - r >= 8:
                nibbles_block(qs, d, m, x, t, b, r, 8, acc, sx, res)
                r += 8
            if rows - r >= 4:
                nibbles_block(qs, d, m, x, t, b, r, 4, acc, sx, res)
                r += 4
            if rows - r == 3:
                nibbles_block(qs, d, m, x, t, b, r, 3, acc, sx, res)
            elif rows - r == 2:
                nibbles_block(qs, d, m, x, t, b, r, 2, acc, sx, res)
            elif rows - r == 1:
                nibbles_block(qs, d, m, x, t, b, r, 1, acc, sx, res)
        out[:, t * TILE:(t + 1) * TILE] = res


@njit(parallel=True, fastmath={"contract"}, cache=True)
def bytes_rows(qs, d, m, x, out):  # type: ignore[no-untyped-def]
    """x (T, in) -> out (T, tiles*64), int8 quants, rows in blocks (8, 4, 3, 2, 1)."""
    rows = x.shape[0]
    for t in prange(qs.shape[0]):
        acc = np.empty(BLOCK * TILE, np.float32)
        sx = np.empty(BLOCK, np.float32)
        res = np.zeros((rows, TILE), np.float32)
        for b in range(qs.shape[1]):
            r = 0
            while rows - r >= 8:
                bytes_block(qs, d, m, x, t, b, r, 8, acc, sx, res)
                r += 8
            if rows - r >= 4:
                bytes_block(qs, d, m, x, t, b, r, 4, acc, sx, res)
                r += 4
            if rows - r == 3:
                bytes_block(qs, d, m, x, t, b, r, 3, acc, sx, res)
            elif rows - r == 2:
                bytes_block(qs, d, m, x, t, b, r, 2, acc, sx, res)
            elif rows - r == 1:
                bytes_block(qs, d, m, x, t, b, r, 1, acc, sx, res)
        out[:, t * TILE:(t + 1) * TILE] = res


@njit(parallel=True, fastmath={"contract"}, cache=True)
def halves_rows(qs, bf16, x, out):  # type: ignore[no-untyped-def]
    """x (T, in) -> out (T, tiles*64), F16 (bf16=False) or BF16 weights, for any T: each
    group converted once into a float32 scratch (halves_to_f32), then blocks of rows."""
    rows = x.shape[0]
    for t in prange(qs.shape[0]):
        bits = np.empty(32 * TILE, np.uint32)
        wf = bits.view(np.float32)
        acc = np.empty(BLOCK * TILE, np.float32)
        res = np.zeros((rows, TILE), np.float32)
        for b in range(qs.shape[1]):
            halves_to_f32(qs, t, b, bits, bf16)
            r = 0
            while rows - r >= 8:
                halves_block(wf, x, b, r, 8, acc, res)
                r += 8
            if rows - r >= 4:
                halves_block(wf, x, b, r, 4, acc, res)
                r += 4
            if rows - r == 3:
                halves_block(wf, x, b, r, 3, acc, res)
            elif rows - r == 2:
                halves_block(wf, x, b, r, 2, acc, res)
            elif rows - r == 1:
                halves_block(wf, x, b, r, 1, acc, res)
        out[:, t * TILE:(t + 1) * TILE] = res
