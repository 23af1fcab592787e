"""Quantize float32 to k-quant super-blocks: Q4_K, Q5_K, Q6_K.

Follows ggml's reference quantizers (``quantize_row_q4_K_ref``, ``quantize_row_q5_K_ref``,
``quantize_row_q6_K_ref`` in ggml-quants.c; the path ``llama-quantize`` takes without an
importance matrix), re-implemented with numpy over all sub-blocks at once:

1. per sub-block, search a float scale (and min) — ``kquants_search``;
2. quantize those to 6-bit (Q4_K/Q5_K, against the largest, stored as f16 d and dmin)
   or 8-bit (Q6_K, against the scale of largest magnitude, f16 d);
3. re-quantize every element against its *stored* sub-block scale, so the levels are
   the best for the scales a reader will actually see (sub-blocks whose stored scale is
   0 keep the search's levels, as in ggml);
4. pack the bits into the layouts described in ``kquants_dequant``.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

from llmnb.quant.block_fields import put_f16_column, where32
from llmnb.quant.kquants_search import (
    GROUP_MAX_EPS, make_qkx2_quants, make_qx_quants_rmse, running_sum,
)

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]


def f16_round_trip(v: F32) -> F32:
    """v rounded to float16 and back: what a reader of the stored scale gets."""
    return v.astype(np.float16).astype(np.float32)


def six_bit(values: F32, top: F32) -> F32:
    """ggml's ``MIN(63, (uint8_t)nearest_int(63/top * v))`` per sub-block; values (b, 8),
    top (b, 1)."""
    inv = where32(top > 0, np.float32(63) / where32(top > 0, top, np.float32(1)), np.float32(0))
    q = np.rint(values * inv).astype(np.int64) & 0xFF                # the C code stores to uint8
    out: F32 = np.minimum(q, 63).astype(np.float32)                  # (b, 8)
    return out


def pack_k4_scales(ls: F32, lm: F32) -> U8:
    """6-bit scales and mins (b, 8) -> the 12 packed bytes (b, 12) of Q4_K/Q5_K."""
    s = ls.astype(np.uint8)
    m = lm.astype(np.uint8)
    out = np.empty((s.shape[0], 12), dtype=np.uint8)                 # (b, 12)
    out[:, 0:4] = s[:, 0:4] | ((s[:, 4:8] >> 4) << 6)                # low 6 | top bits of 4..7
    out[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (s[:, 4:8] & 0x0F) | ((m[:, 4:8] & 0x0F) << 4)
    return out


def affine_k_levels(x: F32, nmax: int, rmin: float, rdelta: float, nstep: int,
                    out: U8) -> F32:
    """Steps 1-3 for Q4_K/Q5_K: x (b, 256) -> levels (b, 256) in 0..nmax; writes d, dmin, scales."""
    b = x.shape[0]
    xs = np.ascontiguousarray(x.reshape(b * 8, 32).T)                # (32, 8b): sub-block columns
    av_x = np.sqrt(running_sum(xs * xs) / np.float32(32))            # (8b,) rms of the sub-block
    ws = np.abs(xs) + av_x                                           # (32, 8b) importance
    scale, the_min, levels = make_qkx2_quants(xs, ws, nmax, rmin, rdelta, nstep)
    scales = scale.reshape(b, 8)
    mins = the_min.reshape(b, 8)
    max_scale = np.maximum(scales.max(axis=1, keepdims=True), np.float32(0))   # (b, 1)
    max_min = np.maximum(mins.max(axis=1, keepdims=True), np.float32(0))
    ls = six_bit(scales, max_scale)                                  # (b, 8)
    lm = six_bit(mins, max_min)
    d = max_scale / np.float32(63)
    dmin = max_min / np.float32(63)
    put_f16_column(out, 0, d)
    put_f16_column(out, 2, dmin)
    out[:, 4:16] = pack_k4_scales(ls, lm)

    # step 3: re-quantize against the stored scales
    dl = (f16_round_trip(d) * ls).reshape(b * 8)                     # (8b,)
    ml = (f16_round_trip(dmin) * lm).reshape(b * 8)
    live = dl != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        v = (xs + ml) / np.where(live, dl, np.float32(1))            # (32, 8b)
    np.rint(v, out=v)
    np.clip(v, np.float32(0), np.float32(nmax), out=v)
    levels = np.where(live, v, levels)
    return np.ascontiguousarray(levels.T).reshape(b, 256)            # (b, 256)


def q4_k_kernel(x: F32, out: U8) -> None:
    """x (b, 256) -> Q4_K blocks out (b, 144)."""
    b = x.shape[0]
    q = affine_k_levels(x, 15, -1.0, 0.1, 20, out).astype(np.uint8).reshape(b, 4, 2, 32)
    packed = q[:, :, 0] | (q[:, :, 1] << 4)                          # (b, run, 32)
    out[:, 16:144] = packed.reshape(b, 128)


def q5_k_kernel(x: F32, out: U8) -> None:
    """x (b, 256) -> Q5_K blocks out (b, 176)."""
    b = x.shape[0]
    q = affine_k_levels(x, 31, -0.5, 0.1, 15, out).astype(np.uint8).reshape(b, 4, 2, 32)
    high = (q >> 4).reshape(b, 8, 32)                                # (b, bit 2*run+nibble, 32)
    qh = high[:, 0].copy()                                           # (b, 32)
    for bit in range(1, 8):
        qh |= high[:, bit] << bit
    out[:, 16:48] = qh
    q &= 0x0F
    out[:, 48:176] = (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(b, 128)


def q6_k_kernel(x: F32, out: U8) -> None:
    """x (b, 256) -> Q6_K blocks out (b, 210)."""
    b = x.shape[0]
    xs = np.ascontiguousarray(x.reshape(b * 16, 16).T)               # (16, 16b)
    scale, levels = make_qx_quants_rmse(xs, 32)                      # (16b,), (16, 16b)
    scales = scale.reshape(b, 16)
    first = np.abs(scales).argmax(axis=1)                            # (b,) first largest |scale|
    peak = scales[np.arange(b), first].reshape(b, 1)                 # (b, 1) signed
    zero = np.abs(peak) < np.float32(GROUP_MAX_EPS)                  # (b, 1) an all-zero block
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = np.float32(-128) / np.where(zero, np.float32(1), peak)
        d = np.where(zero, np.float32(0), np.float32(1) / iscale)    # (b, 1)
        sc = np.minimum(np.rint(iscale * scales), np.float32(127))   # (b, 16), -128..127
    sc = np.where(zero, np.float32(0), sc)
    put_f16_column(out, 208, d)
    out[:, 192:208] = sc.astype(np.int8).view(np.uint8)

    dl = (f16_round_trip(d) * sc).reshape(b * 16)                    # (16b,)
    live = dl != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        v = xs / np.where(live, dl, np.float32(1))                   # (16, 16b)
    np.rint(v, out=v)
    np.clip(v, np.float32(-32), np.float32(31), out=v)
    v += np.float32(32)
    levels = np.where(live, v, levels)
    q = np.ascontiguousarray(levels.T).astype(np.uint8).reshape(b, 2, 4, 32)  # (b, half, plane, 32)
    ql = (q[:, :, 0:2] & 0x0F) | ((q[:, :, 2:4] & 0x0F) << 4)        # (b, half, 2 runs, 32)
    out[:, 0:128] = ql.reshape(b, 128)
    high = q >> 4                                                    # (b, half, plane, 32), 0..3
    qh = high[:, :, 0] | (high[:, :, 1] << 2) | (high[:, :, 2] << 4) | (high[:, :, 3] << 6)
    out[:, 128:192] = qh.reshape(b, 64)
    out[zero[:, 0]] = 0                                              # ggml zeroes such blocks whole
