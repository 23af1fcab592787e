"""Quantize float32 to ggml's 32-element blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.

The rules are ggml's reference quantizers (``quantize_row_q4_0_ref`` ... in
ggml-quants.c), which gguf-py's ``gguf.quants.quantize`` reproduces bit for bit; these
kernels give the same bytes (tests check) in fewer passes over memory. Layouts: see
``legacy_dequant``.

    Q4_0/Q5_0  symmetric: d = (the signed value of largest magnitude) / -8 (or -16),
               q = trunc(x/d + 8.5) (or 16.5) clipped to 15 (31)
    Q4_1/Q5_1  affine: d = (max - min) / 15 (31), m = min, q = trunc((x - m)/d + 0.5)
    Q8_0       d = max|x| / 127, q = x/d rounded half away from zero

"x/d" is x times the float32 reciprocal 1/d (0 when d is 0), as in ggml.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

from llmnb.quant.block_fields import put_f16_column, where32

U8 = npt.NDArray[np.uint8]
F32 = npt.NDArray[np.float32]


def reciprocal_or_zero(d: F32) -> F32:
    """1/d in float32, 0 where d == 0 (ggml's ``id = d ? 1.0f/d : 0.0f``)."""
    safe = where32(d == 0, np.float32(1), d)
    return where32(d == 0, np.float32(0), np.float32(1) / safe)


# The kernels work on the chunk transposed, xt (32, n): one row per position in the
# block. Per-block max/min then become element-wise maxima over 32 long rows, which
# numpy vectorizes; reducing along a 32-element axis costs ~3x more per element.

def signed_absmax(xt: F32) -> F32:
    """xt (32, n) -> (n,): each block's value of largest magnitude, keeping its sign.

    ggml scans left to right and keeps the first maximum, so when +a and -a are both
    present the earlier one wins; only those (rare) blocks pay for an argmax."""
    hi = xt.max(axis=0)                                        # (n,)
    lo = xt.min(axis=0)                                        # (n,)
    out = where32(-lo > hi, lo, hi)                            # (n,)
    tie = np.flatnonzero((-lo == hi) & (hi != 0))
    if tie.size:
        cols = xt[:, tie]                                      # (32, t)
        first = np.abs(cols).argmax(axis=0)                    # (t,)
        out[tie] = cols[first, np.arange(tie.size)]
    return out


def put_f16(out: U8, offset: int, values: F32) -> None:
    """Store (n,) float32 `values` as float16 (round to nearest even) at byte `offset`."""
    put_f16_column(out, offset, values.reshape(-1, 1))


def pack_nibbles(q: U8, out: U8) -> None:
    """q (32, n) values < 16 -> out (n, 16): element j low nibble, element j+16 high."""
    packed = q[16:] << 4                                       # (16, n)
    packed |= q[:16]
    out[:] = packed.T


def symmetric_levels(xt: F32, d: F32, offset: float, top: int) -> U8:
    """q = min(trunc(x * (1/d) + offset), top) for xt (32, n), d (n,) -> (32, n) uint8.

    x * (1/d) >= -8 (-16) by construction, so the sum is >= 0 (up to one rounding) and
    the float -> uint8 cast truncates exactly like ggml's ``(int8_t)`` cast."""
    v = xt * reciprocal_or_zero(d)                             # (32, n)
    v += np.float32(offset)
    q = v.astype(np.uint8)                                     # (32, n)
    np.minimum(q, np.uint8(top), out=q)
    return q


def affine_levels(xt: F32, lo: F32, d: F32, top: int) -> U8:
    """q = min(trunc((x - min) * (1/d) + 0.5), top) for xt (32, n) -> (32, n) uint8."""
    v = xt - lo                                                # (32, n), >= 0
    v *= reciprocal_or_zero(d)
    v += np.float32(0.5)
    q = v.astype(np.uint8)                                     # (32, n)
    np.minimum(q, np.uint8(top), out=q)
    return q


def q4_0_kernel(x: F32, out: U8) -> None:
    """x (n, 32) -> Q4_0 blocks out (n, 18)."""
    xt = np.ascontiguousarray(x.T)                             # (32, n)
    d = signed_absmax(xt) / np.float32(-8)                     # (n,)
    q = symmetric_levels(xt, d, 8.5, 15)                       # (32, n)
    put_f16(out, 0, d)
    pack_nibbles(q, out[:, 2:18])


def q4_1_kernel(x: F32, out: U8) -> None:
    """x (n, 32) -> Q4_1 blocks out (n, 20)."""
    xt = np.ascontiguousarray(x.T)                             # (32, n)
    lo = xt.min(axis=0)                                        # (n,)
    d = (xt.max(axis=0) - lo) / np.float32(15)                 # (n,)
    q = affine_levels(xt, lo, d, 15)                           # (32, n)
    put_f16(out, 0, d)
    put_f16(out, 2, lo)
    pack_nibbles(q, out[:, 4:20])


def pack_fifth_bits(q: U8, out: U8) -> None:
    """q (32, n) values < 32 -> out (n, 4): bit j of the little-endian uint32 = bit 4 of q[j]."""
    high = (q >> 4).reshape(4, 8, -1)                          # (byte, bit, n)
    packed = high[:, 0].copy()                                 # (4, n)
    for bit in range(1, 8):
        packed |= high[:, bit] << bit
    out[:] = packed.T                                          # (n, 4)


def q5_0_kernel(x: F32, out: U8) -> None:
    """x (n, 32) -> Q5_0 blocks out (n, 22)."""
    xt = np.ascontiguousarray(x.T)                             # (32, n)
    d = signed_absmax(xt) / np.float32(-16)                    # (n,)
    q = symmetric_levels(xt, d, 16.5, 31)                      # (32, n)
    put_f16(out, 0, d)
    pack_fifth_bits(q, out[:, 2:6])
    q &= 0x0F
    pack_nibbles(q, out[:, 6:22])


def q5_1_kernel(x: F32, out: U8) -> None:
    """x (n, 32) -> Q5_1 blocks out (n, 24)."""
    xt = np.ascontiguousarray(x.T)                             # (32, n)
    lo = xt.min(axis=0)                                        # (n,)
    d = (xt.max(axis=0) - lo) / np.float32(31)                 # (n,)
    q = affine_levels(xt, lo, d, 31)                           # (32, n)
    put_f16(out, 0, d)
    put_f16(out, 2, lo)
    pack_fifth_bits(q, out[:, 4:8])
    q &= 0x0F
    pack_nibbles(q, out[:, 8:24])


def round_half_away(v: F32) -> F32:
    """C's roundf in place: t + trunc(2 * (v - t)) with t = trunc(v) is exact in float32."""
    t = np.trunc(v)
    v -= t
    v *= np.float32(2)
    np.trunc(v, out=v)
    v += t
    return v


def q8_0_kernel(x: F32, out: U8) -> None:
    """x (n, 32) -> Q8_0 blocks out (n, 34)."""
    xt = np.ascontiguousarray(x.T)                             # (32, n)
    d = np.abs(xt).max(axis=0) / np.float32(127)               # (n,)
    v = round_half_away(xt * reciprocal_or_zero(d))            # (32, n), in -127..127
    put_f16(out, 0, d)
    out[:, 2:34] = v.astype(np.int8).view(np.uint8).T
