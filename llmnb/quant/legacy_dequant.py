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
arithmetic propagates them). The integer work (nibbles, fifth bits, the -8/-16 offsets)
is done on contiguous uint8/int8 copies; only the last two or three passes touch floats.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

from llmnb.quant.block_fields import bit_planes, byte_columns, f16_column, per_element

U8 = npt.NDArray[np.uint8]
I8 = npt.NDArray[np.int8]
F32 = npt.NDArray[np.float32]


def nibbles(blocks: U8, start: int) -> U8:
    """The 16 packed bytes at `start` of each block -> (n, 32) quants 0..15, element order."""
    return bit_planes(byte_columns(blocks, start, start + 16), 4, 2).reshape(-1, 32)


def q4_0_kernel(blocks: U8, out: F32) -> None:
    """Q4_0 blocks (n, 18) -> out (n, 32)."""
    d = f16_column(blocks, 0)                                  # (n, 1)
    q: I8 = nibbles(blocks, 2).view(np.int8)                   # (n, 32): 0..15
    q -= np.int8(8)                                            # -8..7
    np.copyto(out, q, casting="unsafe")                        # exact int8 -> float32
    out *= per_element(d, 32)


def q4_1_kernel(blocks: U8, out: F32) -> None:
    """Q4_1 blocks (n, 20) -> out (n, 32)."""
    d = f16_column(blocks, 0)                                  # (n, 1)
    m = f16_column(blocks, 2)                                  # (n, 1)
    np.copyto(out, nibbles(blocks, 4), casting="unsafe")       # (n, 32): 0..15
    out *= per_element(d, 32)
    out += per_element(m, 32)


def quants_5bit(blocks: U8, qh_start: int) -> U8:
    """qh (4 bytes at `qh_start`) and the 16 nibble bytes after it -> (n, 32) quants 0..31.

    qh is a little-endian bit mask, so unpacking its bytes little-bit-first yields the
    fifth bit of elements 0..31 in order."""
    high = np.unpackbits(byte_columns(blocks, qh_start, qh_start + 4), axis=1,
                         bitorder="little")                    # (n, 32): 0/1
    wide = high.view(np.uint64)                                # (n, 4): bytes 0/1, no carries
    wide <<= np.uint64(4)                                      # (numpy shifts uint8 slowly)
    high |= nibbles(blocks, qh_start + 4)
    return high


def q5_0_kernel(blocks: U8, out: F32) -> None:
    """Q5_0 blocks (n, 22) -> out (n, 32)."""
    d = f16_column(blocks, 0)                                  # (n, 1)
    q: I8 = quants_5bit(blocks, 2).view(np.int8)               # (n, 32): 0..31
    q -= np.int8(16)                                           # -16..15
    np.copyto(out, q, casting="unsafe")
    out *= per_element(d, 32)


def q5_1_kernel(blocks: U8, out: F32) -> None:
    """Q5_1 blocks (n, 24) -> out (n, 32)."""
    d = f16_column(blocks, 0)                                  # (n, 1)
    m = f16_column(blocks, 2)                                  # (n, 1)
    np.copyto(out, quants_5bit(blocks, 4), casting="unsafe")   # (n, 32): 0..31
    out *= per_element(d, 32)
    out += per_element(m, 32)


def q8_0_kernel(blocks: U8, out: F32) -> None:
    """Q8_0 blocks (n, 34) -> out (n, 32)."""
    d = f16_column(blocks, 0)                                  # (n, 1)
    np.copyto(out, blocks[:, 2:34].view(np.int8), casting="unsafe")   # exact int8 -> float32
    out *= per_element(d, 32)
