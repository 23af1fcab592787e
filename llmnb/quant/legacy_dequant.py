"""Dequantize ggml's first-generation 32-element blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.

Block layouts (ggml-common.h, ``block_q4_0`` ...; every scalar little-endian):

    Q4_0  18 B = d:f16 | qs[16]              x = d * (q - 8)       q = 4-bit
    Q4_1  20 B = d:f16 | m:f16 | qs[16]      x = d * q + m         q = 4-bit
    Q5_0  22 B = d:f16 | qh[4] | qs[16]      x = d * (q - 16)      q = 4 low bits | 1 high bit
    Q5_1  24 B = d:f16 | m:f16 | qh[4] | qs[16]   x = d * q + m
    Q8_0  34 B = d:f16 | qs[32] (int8)       x = d * q

Nibble order: byte j of ``qs`` holds element j in its low nibble and element j + 16 in its
high nibble. ``qh`` is a little-endian uint32 whose bit j is the fifth bit of element j.
Each kernel does the float arithmetic in the same order as ggml and gguf-py (product
first, then the offset), so results are bit-identical, NaN/Inf scales included (IEEE
arithmetic propagates them).
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

from llmnb.quant.chunked import f16_column

U8 = npt.NDArray[np.uint8]
F32 = npt.NDArray[np.float32]


def q4_0_kernel(blocks: U8, out: F32) -> None:
    """Q4_0 blocks (n, 18) -> out (n, 32)."""
    d = f16_column(blocks, 0)                                  # (n, 1)
    qs = blocks[:, 2:18]                                       # (n, 16)
    np.subtract(qs & 0x0F, np.float32(8), out=out[:, :16])     # low nibbles: elements 0..15
    np.subtract(qs >> 4, np.float32(8), out=out[:, 16:])       # high nibbles: elements 16..31
    out *= d


def q4_1_kernel(blocks: U8, out: F32) -> None:
    """Q4_1 blocks (n, 20) -> out (n, 32)."""
    d = f16_column(blocks, 0)                                  # (n, 1)
    m = f16_column(blocks, 2)                                  # (n, 1)
    qs = blocks[:, 4:20]                                       # (n, 16)
    np.multiply(qs & 0x0F, d, out=out[:, :16])
    np.multiply(qs >> 4, d, out=out[:, 16:])
    out += m


def fifth_bits(qh: U8) -> U8:
    """qh (n, 4) little-endian bit masks -> (n, 32) with 16 where element j has bit 4 set."""
    bits = np.unpackbits(qh, axis=1, bitorder="little")       # (n, 32), 0/1, element order
    bits <<= 4
    return bits


def q5_0_kernel(blocks: U8, out: F32) -> None:
    """Q5_0 blocks (n, 22) -> out (n, 32)."""
    d = f16_column(blocks, 0)                                  # (n, 1)
    high = fifth_bits(blocks[:, 2:6])                          # (n, 32)
    qs = blocks[:, 6:22]                                       # (n, 16)
    high[:, :16] |= qs & 0x0F
    high[:, 16:] |= qs >> 4
    np.subtract(high, np.float32(16), out=out)
    out *= d


def q5_1_kernel(blocks: U8, out: F32) -> None:
    """Q5_1 blocks (n, 24) -> out (n, 32)."""
    d = f16_column(blocks, 0)                                  # (n, 1)
    m = f16_column(blocks, 2)                                  # (n, 1)
    high = fifth_bits(blocks[:, 4:8])                          # (n, 32)
    qs = blocks[:, 8:24]                                       # (n, 16)
    high[:, :16] |= qs & 0x0F
    high[:, 16:] |= qs >> 4
    np.multiply(high, d, out=out)
    out += m


def q8_0_kernel(blocks: U8, out: F32) -> None:
    """Q8_0 blocks (n, 34) -> out (n, 32)."""
    d = f16_column(blocks, 0)                                  # (n, 1)
    np.multiply(blocks[:, 2:34].view(np.int8), d, out=out)
