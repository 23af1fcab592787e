"""Repack GGUF blocks, once at load, into the tiled layout the kernels stream.

A GGUF weight (out, in) is stored row by row, each row a run of blocks of 32 (or 256)
inputs. A matrix-vector product over it, one output at a time, is a chain of short dot
products that cannot use the vector units well. The kernels instead walk the inputs
and update many outputs at once (an axpy per input), so the repacked layout puts, for each
tile of TILE = 64 outputs and each group of inputs, the quants of all 64 outputs of one
input side by side:

    qs[tile, group, j, o]    the quant of input group*G + j for output tile*64 + o
    d[tile, group, o]        its scale, float32         x = d * q (+ m)
    m[tile, group, o]        its offset, float32 (formats with a minimum; None otherwise)

Four kinds of quants, by what the kernel has to do to turn one into a float32:

    nibbles  uint8, two 4-bit quants per byte: byte j holds input j (low nibble) and
             input j + 16 (high nibble) of a group of G = 32, as Q4_0's own blocks do
             (Q4_0, Q4_1, Q4_K; 0.5 byte per weight + 8 bytes of scales per 32)
    bytes    int8, one quant per byte (Q8_0, Q5_0, Q5_1, Q5_K with G = 32; Q6_K with
             G = 16); the 5- and 6-bit formats are unpacked to a byte each, which costs
             their file's 0.69-0.82 bytes per weight 1.0 + scales, and saves the kernel a
             bit-gather per weight
    halves   uint16 F16 or BF16 values, no scales (2 bytes per weight)
    dense    float32 (in, out), for F32 tensors and types without a kernel (Q2_K, Q3_K)

Scales are float32, computed exactly as the dequantizer computes them (k-quants: d * sc
and -(dmin * m) per sub-block), so ``d * q + m`` here is bit-identical to
``llmnb.quant.dequantize``. Q4_0's "q - 8" becomes m = -8 d (exact: d is a float16).
Outputs are padded with zero scales to a whole tile.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from llmnb.gguf.constants import GGML_BLOCK_SIZES, GGMLType, type_name
from llmnb.kernels.tile import TILE as TILE   # outputs per tile, the unit of every layout here
from llmnb.quant import dequantize
from llmnb.quant.block_fields import bit_planes, byte_columns, f16_column
from llmnb.quant.kquants_dequant import k4_scales_mins, planes_of
from llmnb.quant.legacy_dequant import quants_5bit

U8 = npt.NDArray[np.uint8]
I8 = npt.NDArray[np.int8]
F32 = npt.NDArray[np.float32]
# The dense way's float32 scratch (``product.py``), at most: W.T whole for every matrix of
# Qwen2.5-0.5B (its largest, the fused gate/up, 896 x 9728 floats, is 35 MB); a larger one
# (an output head over many rows, a bigger model's FFN) goes through it in panels of this size.
SCRATCH_BYTES = 40 << 20

T = GGMLType
NIBBLE_TYPES = (T.Q4_0, T.Q4_1, T.Q4_K)
BYTE_TYPES = (T.Q8_0, T.Q5_0, T.Q5_1, T.Q5_K, T.Q6_K)
HALF_TYPES = (T.F16, T.BF16)
KERNEL_TYPES = NIBBLE_TYPES + BYTE_TYPES + HALF_TYPES


@dataclass
class PackedMatrix:
    """A weight (n_out, n_in) in the kernels' layout (module docstring); ``w_t`` for dense."""

    kind: str                      # "nibbles" | "bytes" | "halves" | "dense"
    ggml_type: int
    n_out: int
    n_in: int
    group: int                     # inputs per scale (32, Q6_K 16; halves 32)
    qs: npt.NDArray[np.generic]    # (tiles, groups, G or G/2, TILE)
    d: F32                         # (tiles, groups, TILE); empty for halves and dense
    m: F32 | None                  # (tiles, groups, TILE) offsets, or None
    w_t: F32 | None = None         # dense only: (n_in, n_out)

    @property
    def n_tiles(self) -> int:
        return int(self.qs.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes a product over this matrix reads (quants, scales, offsets)."""
        if self.w_t is not None:
            return int(self.w_t.nbytes)
        return int(self.qs.nbytes + self.d.nbytes + (self.m.nbytes if self.m is not None else 0))

    @property
    def bytes_per_weight(self) -> float:
        return self.nbytes / (self.n_out * self.n_in)

    @property
    def type_name(self) -> str:
        return type_name(self.ggml_type)

    def matmul(self, x: F32, out: F32 | None = None) -> F32:
        """x (T, n_in) @ W.T -> (T, n_out) (``llmnb.kernels.matmul``; numba loads on first use)."""
        from llmnb.kernels.product import matmul

        return matmul(x, self)


@dataclass
class PackedParts:
    """Weights side by side along the outputs that cannot share one layout (Q, K and V of
    different types, as in Q4_K_M files): each part multiplies, the outputs are joined."""

    parts: tuple[PackedMatrix, ...]

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    def matmul(self, x: F32, out: F32 | None = None) -> F32:
        """x (T, n_in) @ W.T -> (T, sum n_out): the parts' products, or from
        ``product.DENSE_ROWS`` rows on one dequantized panel of every part and one sgemm."""
        from llmnb.kernels.product import parts_matmul

        return parts_matmul(x, self.parts)


@dataclass
class F32Tiles:
    """A float32 weight W (n_out, n_in) in 64-output tiles, input-major, for the few-row
    product of ``floats.py``: tiles[tile, j, o] = W[tile*64 + o, j], outputs zero-padded."""

    tiles: F32                     # (tiles, n_in, TILE)
    n_out: int

    @property
    def nbytes(self) -> int:
        return int(self.tiles.nbytes)

    def matmul(self, x: F32, out: F32 | None = None) -> F32:
        """x (T, n_in) @ W.T -> (T, n_out) (``floats.tiled_matmul``; numba loads on first use)."""
        from llmnb.kernels.floats import tiled_matmul

        return tiled_matmul(x, self.tiles, self.n_out)


def f32_tiles(w_t: F32) -> F32Tiles:
    """W.T (in, out) float32 -> W in tiles (tiles, in, 64), the outputs zero-padded to a tile."""
    n_in, n_out = w_t.shape
    padded = np.zeros((n_in, n_out + (-n_out % TILE)), dtype=np.float32)   # (in, tiles * 64)
    padded[:, :n_out] = w_t
    tiles: F32 = np.ascontiguousarray(padded.reshape(n_in, -1, TILE).transpose(1, 0, 2))
    return F32Tiles(tiles, int(n_out))


def packed_bytes_per_weight(ggml_type: int) -> float:
    """Bytes per weight of the repacked layout (for the memory preflight, before packing)."""
    if ggml_type in NIBBLE_TYPES:
        return 0.5 + 8 / 32
    if ggml_type in BYTE_TYPES:
        group = 16 if ggml_type == T.Q6_K else 32
        with_m = ggml_type in (T.Q5_1, T.Q5_K)
        return 1.0 + (8 if with_m else 4) / group
    if ggml_type in HALF_TYPES:
        return 2.0
    return 4.0


# --- integer quants and scales, per format ------------------------------------------------

Quants = tuple[npt.NDArray[np.generic], F32, F32 | None, int]   # q (n, block), d, m, group


# Q4_0, Q4_1 and Q8_0 blocks already hold their quants as the layout does (Q4's byte j:
# input j low, j + 16 high): (byte offset, bytes) of the quants in a block, copied as they are
AS_STORED = {T.Q4_0: (2, 16), T.Q4_1: (4, 16), T.Q8_0: (2, 32)}


def legacy_quants(blocks: U8, ggml_type: int) -> Quants:
    """Q5_0 / Q5_1 blocks (n, type_size) -> quants (n, 32) int8, d (n, 1), m (n, 1) or None."""
    d = f16_column(blocks, 0)                                        # (n, 1)
    if ggml_type == T.Q5_0:
        q50: I8 = quants_5bit(blocks, 2).view(np.int8)               # 0..31
        q50 -= np.int8(16)
        return q50, d, None, 32
    q51: I8 = quants_5bit(blocks, 4).view(np.int8)
    return q51, d, f16_column(blocks, 2), 32


def kquant_quants(blocks: U8, ggml_type: int) -> Quants:
    """Q4_K, Q5_K, Q6_K super-blocks (n, type_size) -> quants (n, 256) and per-group scales
    (n, 8) or (n, 16), computed in the dequantizer's order (kquants_dequant)."""
    if ggml_type == T.Q6_K:
        sc6 = blocks[:, 192:208].view(np.int8)                        # (n, 16)
        dl = f16_column(blocks, 208) * sc6                           # (n, 16)
        low = bit_planes(byte_columns(blocks, 0, 128).reshape(-1, 64), 4, 2)
        high = planes_of(blocks, 128, 192, 2, 4, to_bit=4)           # (n * 2, 4, 32)
        high |= low.reshape(high.shape)                              # 0..63
        q6: I8 = high.view(np.int8)
        q6 -= np.int8(32)
        return q6.reshape(-1, 256), dl, None, 16
    d = f16_column(blocks, 0)                                        # (n, 1)
    dmin = f16_column(blocks, 2)
    sc, mn = k4_scales_mins(blocks)                                  # (n, 8) each
    if ggml_type == T.Q4_K:
        qk: U8 = planes_of(blocks, 16, 144, 4, 2)                    # (n * 4, 2, 32): 0..15
    else:
        qk = planes_of(blocks, 48, 176, 4, 2)
        qk |= planes_of(blocks, 16, 48, 1, 8, to_bit=4).reshape(qk.shape)   # 0..31
    minus = -(dmin * mn)                                             # (n, 8)
    q5: npt.NDArray[np.generic] = qk.reshape(-1, 256) if ggml_type == T.Q4_K else \
        qk.reshape(-1, 256).view(np.int8)
    return q5, d * sc, minus, 32


# --- tiling -------------------------------------------------------------------------------

def tiles(a: npt.NDArray[np.generic], n_out: int) -> npt.NDArray[np.generic]:
    """Per-output rows (n_out, groups, *rest) -> (tiles, groups, *rest, TILE), zero-padded."""
    pad = -n_out % TILE
    if pad:
        a = np.concatenate([a, np.zeros((pad, *a.shape[1:]), dtype=a.dtype)])
    n_tiles = a.shape[0] // TILE
    t = a.reshape(n_tiles, TILE, *a.shape[1:])
    order = (0, *range(2, t.ndim), 1)                                # the output axis last
    return np.ascontiguousarray(t.transpose(order))


def pack(raw: npt.NDArray[np.uint8], ggml_type: int, n_out: int, n_in: int) -> PackedMatrix:
    """A weight's GGUF bytes, (n_out, row bytes) or flat, -> its PackedMatrix.

    A type without a kernel (and F32) becomes a dense float32 (in, out) copy."""
    if ggml_type not in KERNEL_TYPES:
        w = dequantize(raw.reshape(-1), ggml_type, (n_out, n_in))
        empty = np.zeros((0, 0, 0), dtype=np.float32)
        return PackedMatrix("dense", ggml_type, n_out, n_in, n_in, empty.astype(np.uint8),
                            empty, None, np.ascontiguousarray(w.T))
    if ggml_type in HALF_TYPES:
        halves = (np.ascontiguousarray(raw).reshape(-1).view(np.uint16)
                  .reshape(n_out, n_in // 32, 32))
        return PackedMatrix("halves", ggml_type, n_out, n_in, 32, tiles(halves, n_out),
                            np.zeros((0, 0, 0), dtype=np.float32), None)
    block, size = GGML_BLOCK_SIZES[ggml_type]
    blocks = np.ascontiguousarray(raw).reshape(-1, size)              # (n_out * in / block, size)
    groups = n_in // 32
    if ggml_type in AS_STORED:          # quants already as the kernel wants them: one copy
        start, width = AS_STORED[ggml_type]
        d = f16_column(blocks, 0).reshape(n_out, groups)
        m = (d * np.float32(-8) if ggml_type == T.Q4_0 else
             f16_column(blocks, 2).reshape(n_out, groups) if ggml_type == T.Q4_1 else None)
        field = blocks[:, start:start + width].reshape(n_out, groups, width)   # strided view
        kind = "bytes" if ggml_type == T.Q8_0 else "nibbles"
        return PackedMatrix(kind, ggml_type, n_out, n_in, 32,
                            tiles(field.view(np.int8) if kind == "bytes" else field, n_out),
                            np.asarray(tiles(d, n_out), dtype=np.float32),
                            None if m is None else np.asarray(tiles(m, n_out), dtype=np.float32))
    with np.errstate(invalid="ignore", over="ignore"):   # a NaN/Inf scale: IEEE, as dequantize
        q, d, m, group = (legacy_quants(blocks, ggml_type) if block == 32
                          else kquant_quants(blocks, ggml_type))
    groups = n_in // group
    q = q.reshape(n_out, groups, group)                              # (out, groups, G)
    d_rows = np.ascontiguousarray(d, dtype=np.float32).reshape(n_out, groups)
    m_rows = None if m is None else np.ascontiguousarray(m, dtype=np.float32).reshape(n_out, groups)
    if ggml_type in NIBBLE_TYPES:
        q4 = q.view(np.uint8)
        lo, hi = q4[:, :, :16], q4[:, :, 16:]                        # inputs j and j + 16
        qs: npt.NDArray[np.generic] = tiles(lo | (hi << np.uint8(4)), n_out)
        kind = "nibbles"
    else:
        qs = tiles(np.ascontiguousarray(q).view(np.int8), n_out)
        kind = "bytes"
    return PackedMatrix(kind, ggml_type, n_out, n_in, group, qs,
                        np.asarray(tiles(d_rows, n_out), dtype=np.float32),
                        None if m_rows is None
                        else np.asarray(tiles(m_rows, n_out), dtype=np.float32))
