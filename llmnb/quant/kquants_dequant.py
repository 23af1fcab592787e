"""Dequantize ggml's k-quant super-blocks of 256 elements: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.

Block layouts (ggml-common.h, ``block_q2_K`` ...; QK_K = 256, scalars little-endian):

    Q2_K   84 B = scales[16] | qs[64] | d:f16 | dmin:f16
                  16 sub-blocks of 16; scales byte = scale (low 4 bits) | min (high 4 bits)
                  x = d*sc * q - dmin*m,  q = 2-bit
    Q3_K  110 B = hmask[32] | qs[64] | scales[12] | d:f16
                  16 sub-blocks of 16, 6-bit signed scales (minus 32)
                  x = d*sc * (q - 4 if the hmask bit is clear else q),  q = 2-bit
    Q4_K  144 B = d:f16 | dmin:f16 | scales[12] | qs[128]
                  8 sub-blocks of 32, 6-bit scale and 6-bit min each, packed in 12 bytes
                  x = d*sc * q - dmin*m,  q = 4-bit
    Q5_K  176 B = d:f16 | dmin:f16 | scales[12] | qh[32] | qs[128]
                  as Q4_K with a fifth bit per element from qh
    Q6_K  210 B = ql[128] | qh[64] | scales[16] (int8) | d:f16
                  16 sub-blocks of 16;  x = d*sc * (q - 32),  q = 4 low bits | 2 high bits

Element order inside a super-block follows ggml's ``dequantize_row_q*_K``: the packed
bytes are read in runs of 32, one bit-plane (shift) at a time, which is exactly what
``bit_planes`` returns, (n * groups, planes, 32). Float arithmetic is done in ggml's order
(``d*sc`` first, then times q, then minus ``dmin*m``), so results are bit-identical to
gguf-py, NaN/Inf scales included. Quants are assembled in contiguous uint8/int8 arrays;
the per-sub-block scales are repeated over their elements so the float passes are
contiguous too (``block_fields.per_element``).
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

from llmnb.quant.block_fields import bit_planes, byte_columns, f16_column, per_element

U8 = npt.NDArray[np.uint8]
I8 = npt.NDArray[np.int8]
F32 = npt.NDArray[np.float32]

LOW_NIBBLE = np.array([0, 4], dtype=np.uint32).reshape(2, 1, 1)
SHIFTS_2BIT = np.array([0, 2, 4, 6], dtype=np.uint32).reshape(4, 1)


def planes_of(blocks: U8, start: int, stop: int, bits: int, planes: int, to_bit: int = 0) -> U8:
    """The packed field blocks[:, start:stop], read in runs of 32 bytes, -> its bit planes
    (n * runs, planes, 32) — ggml's element order for every k-quant."""
    return bit_planes(byte_columns(blocks, start, stop).reshape(-1, 32), bits, planes, to_bit)


def q2_k_kernel(blocks: U8, out: F32) -> None:
    """Q2_K blocks (n, 84) -> out (n, 256)."""
    scales = blocks[:, 0:16]                                         # (n, 16)
    d = f16_column(blocks, 80)                                       # (n, 1)
    dmin = f16_column(blocks, 82)                                    # (n, 1)
    dl = d * (scales & 0x0F)                                         # (n, 16)
    ml = dmin * (scales >> 4)                                        # (n, 16)
    q = planes_of(blocks, 16, 80, 2, 4)                              # (n * 2 halves, 4, 32)
    np.copyto(out, q.reshape(out.shape), casting="unsafe")           # (n, 256): 0..3
    out *= per_element(dl, 16)
    out -= per_element(ml, 16)


def scale_words(blocks: U8, start: int) -> npt.NDArray[np.uint32]:
    """The 12 packed scale bytes at `start` as three little-endian uint32 words per block,
    word-major (3, n) so every bit operation on them is one long loop."""
    return byte_columns(blocks, start, start + 12).view(np.uint32).T.copy()   # (3, n)


def q3_k_scales(blocks: U8) -> U8:
    """Q3_K's 12 scale bytes (at 96) -> 16 unsigned 6-bit scales (n, 16), before the -32.

    Bytes 0..7 hold the low 4 bits (scale j in byte j % 8, nibble j // 8); bytes 8..11 the
    high 2 bits (scale j in byte 8 + j % 4, bits 2 * (j // 4)). As words w0, w1, w2, scales
    4k..4k+3 are one word each (the masks keep every byte to itself)."""
    w = scale_words(blocks, 96)                                      # (3, n)
    low = (w[None, 0:2] >> LOW_NIBBLE) & np.uint32(0x0F0F0F0F)       # (2, 2, n): w0, w1, >> 4
    high = (w[2] >> SHIFTS_2BIT) & np.uint32(0x03030303)             # (4, n): w2 >> 0, 2, 4, 6
    high <<= np.uint32(4)
    high |= low.reshape(high.shape)                                  # (4 words, n)
    scales: U8 = high.T.copy().view(np.uint8)                        # (n, 16)
    return scales


def q3_k_kernel(blocks: U8, out: F32) -> None:
    """Q3_K blocks (n, 110) -> out (n, 256)."""
    sc = q3_k_scales(blocks).view(np.int8) - np.int8(32)             # (n, 16) int8
    d = f16_column(blocks, 108)                                      # (n, 1)
    dl = d * sc                                                      # (n, 16)
    high = planes_of(blocks, 0, 32, 1, 8, to_bit=2)                  # (n, 8, 32): hmask bit p -> 4
    q = planes_of(blocks, 32, 96, 2, 4)                              # (n * 2, 4, 32): 0..3
    q |= high.reshape(q.shape)                                       # 0..7
    qi: I8 = q.view(np.int8)
    qi -= np.int8(4)                                                 # hmask clear -> minus 4
    np.copyto(out, qi.reshape(out.shape), casting="unsafe")
    out *= per_element(dl, 16)


def k4_scales_mins(blocks: U8) -> tuple[U8, U8]:
    """Q4_K/Q5_K's 12 scale bytes (at 4) -> 6-bit scales (n, 8) and mins (n, 8).

    Sub-blocks 0..3: scale = byte j & 63, min = byte j+4 & 63. Sub-blocks 4..7: the low
    4 bits come from byte j+4 (scale low nibble, min high nibble) and the top 2 bits from
    the spare top bits of bytes j-4 (scale) and j (min) — ggml's ``get_scale_min_k4``.
    As words a, b, c = bytes 0..3, 4..7, 8..11 that is four sub-blocks per operation."""
    w = scale_words(blocks, 4)                                       # (3, n): a, b, c
    both = np.empty((2, 2, w.shape[1]), dtype=np.uint32)             # (0-3|4-7, scale|min, n)
    np.bitwise_and(w[0:2], np.uint32(0x3F3F3F3F), out=both[0])       # a & 63, b & 63
    top = (w[0:2] >> np.uint32(2)) & np.uint32(0x30303030)           # (2, n): bits 6,7 -> 4,5
    low = (w[2] >> LOW_NIBBLE.reshape(2, 1)) & np.uint32(0x0F0F0F0F)   # (2, n): c, c >> 4
    np.bitwise_or(top, low, out=both[1])
    per_block = both.transpose(2, 1, 0).copy().view(np.uint8)        # (n, scale|min, 8)
    return per_block[:, 0], per_block[:, 1]


def q4_k_kernel(blocks: U8, out: F32) -> None:
    """Q4_K blocks (n, 144) -> out (n, 256)."""
    d = f16_column(blocks, 0)                                        # (n, 1)
    dmin = f16_column(blocks, 2)                                     # (n, 1)
    sc, mn = k4_scales_mins(blocks)                                  # (n, 8) each
    q = planes_of(blocks, 16, 144, 4, 2)                             # (n * 4 runs, 2 nibbles, 32)
    np.copyto(out, q.reshape(out.shape), casting="unsafe")           # (n, 256): 0..15
    out *= per_element(d * sc, 32)
    out -= per_element(dmin * mn, 32)


def q5_k_kernel(blocks: U8, out: F32) -> None:
    """Q5_K blocks (n, 176) -> out (n, 256)."""
    d = f16_column(blocks, 0)                                        # (n, 1)
    dmin = f16_column(blocks, 2)                                     # (n, 1)
    sc, mn = k4_scales_mins(blocks)                                  # (n, 8) each
    high = planes_of(blocks, 16, 48, 1, 8, to_bit=4)                 # (n, 8, 32): bit 2*run+nibble
    q = planes_of(blocks, 48, 176, 4, 2)                             # (n * 4 runs, 2 nibbles, 32)
    q |= high.reshape(q.shape)                                       # 0..31
    np.copyto(out, q.reshape(out.shape), casting="unsafe")
    out *= per_element(d * sc, 32)
    out -= per_element(dmin * mn, 32)


def q6_k_kernel(blocks: U8, out: F32) -> None:
    """Q6_K blocks (n, 210) -> out (n, 256)."""
    sc = blocks[:, 192:208].view(np.int8)                            # (n, 16)
    d = f16_column(blocks, 208)                                      # (n, 1)
    dl = d * sc                                                      # (n, 16)
    # ql: per half, two 32-byte runs; planes 0,1 = low nibbles of runs 0,1, planes 2,3 = high
    low = bit_planes(byte_columns(blocks, 0, 128).reshape(-1, 64), 4, 2)   # (n * 2, 2, 64)
    high = planes_of(blocks, 128, 192, 2, 4, to_bit=4)               # (n * 2, 4, 32): 0..3 << 4
    high |= low.reshape(high.shape)                                  # 0..63
    q: I8 = high.view(np.int8)
    q -= np.int8(32)
    np.copyto(out, q.reshape(out.shape), casting="unsafe")
    out *= per_element(dl, 16)
