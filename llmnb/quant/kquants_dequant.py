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
bytes are read in runs of 32, one bit-plane (shift) at a time; the array views below
spell that out as (n, groups, planes, 32). Float arithmetic is done in ggml's order
(``d*sc`` first, then times q, then minus ``dmin*m``), so results are bit-identical to
gguf-py, NaN/Inf scales included.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

from llmnb.quant.chunked import f16_column

U8 = npt.NDArray[np.uint8]
F32 = npt.NDArray[np.float32]

SHIFTS_2BIT = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
SHIFTS_1BIT = np.array(range(8), dtype=np.uint8).reshape(1, 1, 8, 1)


def q2_k_kernel(blocks: U8, out: F32) -> None:
    """Q2_K blocks (n, 84) -> out (n, 256)."""
    n = blocks.shape[0]
    scales = blocks[:, 0:16]                                         # (n, 16)
    qs = blocks[:, 16:80].reshape(n, 2, 1, 32)                       # (n, half, 1, 32)
    d = f16_column(blocks, 80)                                       # (n, 1)
    dmin = f16_column(blocks, 82)                                    # (n, 1)
    dl = (d * (scales & 0x0F)).reshape(n, 16, 1)                     # (n, 16, 1)
    ml = (dmin * (scales >> 4)).reshape(n, 16, 1)                    # (n, 16, 1)
    q = (qs >> SHIFTS_2BIT) & 3                                      # (n, half, plane, 32)
    o = out.reshape(n, 16, 16)
    np.multiply(q.reshape(n, 16, 16), dl, out=o)
    o -= ml


def q3_k_scales(packed: U8) -> U8:
    """Q3_K's 12 scale bytes (n, 12) -> 16 unsigned 6-bit scales (n, 16), before the -32.

    Bytes 0..7 hold the low 4 bits (scale j in byte j % 8, nibble j // 8); bytes 8..11 the
    high 2 bits (scale j in byte 8 + j % 4, bits 2 * (j // 4))."""
    n = packed.shape[0]
    low = packed[:, 0:8].reshape(n, 1, 8) >> np.array([0, 4], dtype=np.uint8).reshape(1, 2, 1)
    high = packed[:, 8:12].reshape(n, 1, 4) >> SHIFTS_2BIT.reshape(1, 4, 1)
    out: U8 = (low.reshape(n, 16) & np.uint8(0x0F)) | ((high.reshape(n, 16) & np.uint8(0x03)) << np.uint8(4))
    return out                                                       # (n, 16)


def q3_k_kernel(blocks: U8, out: F32) -> None:
    """Q3_K blocks (n, 110) -> out (n, 256)."""
    n = blocks.shape[0]
    hmask = blocks[:, 0:32].reshape(n, 1, 1, 32)                     # (n, 1, 1, 32)
    qs = blocks[:, 32:96].reshape(n, 2, 1, 32)                       # (n, half, 1, 32)
    sc = q3_k_scales(blocks[:, 96:108]).view(np.int8) - np.int8(32)  # (n, 16) int8
    d = f16_column(blocks, 108)                                      # (n, 1)
    dl = (d * sc).reshape(n, 16, 1)                                  # (n, 16, 1)
    low = (qs >> SHIFTS_2BIT) & 3                                    # (n, 2, 4, 32)
    high = (hmask >> SHIFTS_1BIT) & 1                                # (n, 1, 8, 32) -> 2 x 4 planes
    q = (low | (high.reshape(n, 2, 4, 32) << 2)).view(np.int8)      # (n, 2, 4, 32): 0..7
    q -= np.int8(4)                                                  # hmask clear -> minus 4
    o = out.reshape(n, 16, 16)
    np.multiply(q.reshape(n, 16, 16), dl, out=o)


def k4_scales_mins(packed: U8) -> tuple[U8, U8]:
    """Q4_K/Q5_K's 12 scale bytes (n, 12) -> 6-bit scales (n, 8) and mins (n, 8).

    Sub-blocks 0..3: scale = byte j & 63, min = byte j+4 & 63. Sub-blocks 4..7: the low
    4 bits come from byte j+4 (scale low nibble, min high nibble) and the top 2 bits from
    the spare top bits of bytes j-4 (scale) and j (min) — ggml's ``get_scale_min_k4``."""
    n = packed.shape[0]
    s = packed.reshape(n, 3, 4)                                      # (n, 3, 4)
    a, b, c = s[:, 0], s[:, 1], s[:, 2]                              # each (n, 4)
    sc = np.concatenate([a & 0x3F, (c & 0x0F) | ((a >> 2) & 0x30)], axis=1)   # (n, 8)
    mn = np.concatenate([b & 0x3F, (c >> 4) | ((b >> 2) & 0x30)], axis=1)     # (n, 8)
    return sc, mn


def q4_k_kernel(blocks: U8, out: F32) -> None:
    """Q4_K blocks (n, 144) -> out (n, 256)."""
    n = blocks.shape[0]
    d = f16_column(blocks, 0)                                        # (n, 1)
    dmin = f16_column(blocks, 2)                                     # (n, 1)
    sc, mn = k4_scales_mins(blocks[:, 4:16])                         # (n, 8) each
    dl = (d * sc).reshape(n, 4, 2, 1)                                # (n, 4 runs, 2 nibbles, 1)
    ml = (dmin * mn).reshape(n, 4, 2, 1)
    qs = blocks[:, 16:144].reshape(n, 4, 32)                         # (n, run, 32)
    o = out.reshape(n, 4, 2, 32)
    np.multiply(qs & 0x0F, dl[:, :, 0], out=o[:, :, 0])
    np.multiply(qs >> 4, dl[:, :, 1], out=o[:, :, 1])
    o -= ml


def q5_k_kernel(blocks: U8, out: F32) -> None:
    """Q5_K blocks (n, 176) -> out (n, 256)."""
    n = blocks.shape[0]
    d = f16_column(blocks, 0)                                        # (n, 1)
    dmin = f16_column(blocks, 2)                                     # (n, 1)
    sc, mn = k4_scales_mins(blocks[:, 4:16])                         # (n, 8) each
    dl = (d * sc).reshape(n, 4, 2, 1)                                # (n, 4, 2, 1)
    ml = (dmin * mn).reshape(n, 4, 2, 1)
    qh = blocks[:, 16:48].reshape(n, 1, 1, 32)                       # (n, 1, 1, 32)
    qs = blocks[:, 48:176].reshape(n, 4, 1, 32)                      # (n, run, 1, 32)
    high = ((qh >> SHIFTS_1BIT) & 1) << 4                            # (n, 1, 8, 32): bit 2*run+nibble
    q = high.reshape(n, 4, 2, 32)                                    # (n, run, nibble, 32)
    q[:, :, 0:1] |= qs & 0x0F
    q[:, :, 1:2] |= qs >> 4
    o = out.reshape(n, 4, 2, 32)
    np.multiply(q, dl, out=o)
    o -= ml


def q6_k_kernel(blocks: U8, out: F32) -> None:
    """Q6_K blocks (n, 210) -> out (n, 256)."""
    n = blocks.shape[0]
    ql = blocks[:, 0:128].reshape(n, 2, 2, 32)                       # (n, half, byte run, 32)
    qh = blocks[:, 128:192].reshape(n, 2, 1, 32)                     # (n, half, 1, 32)
    sc = blocks[:, 192:208].view(np.int8)                            # (n, 16)
    d = f16_column(blocks, 208)                                      # (n, 1)
    dl = (d * sc).reshape(n, 16, 1)                                  # (n, 16, 1)
    q = ((qh >> SHIFTS_2BIT) & 3) << 4                               # (n, half, 4 planes, 32)
    q[:, :, 0:2] |= ql & 0x0F                                        # planes 0,1: low nibbles
    q[:, :, 2:4] |= ql >> 4                                          # planes 2,3: high nibbles
    qi = q.view(np.int8)
    qi -= np.int8(32)
    o = out.reshape(n, 16, 16)
    np.multiply(qi.reshape(n, 16, 16), dl, out=o)
