"""Each format's integer dot product, written plainly: the reference every integer kernel is
tested against, one block at a time as llama2.c's ``runq.c`` writes it.

The activations x are quantized as llama.cpp quantizes them for the weight's format
(``integer.quantize``): int8 values qx in blocks of 32 with a scale dx (Q8_0; Q8_1 adds
s = fp16(dx * sum qx)), or in blocks of 256 (Q8_K). A weight block's integer quants q and
scale d meet one activation block as

    out += d * dx * sum_j q[j] * qx[j]            (+ m * s for a block with a minimum m)

The sum is over integers, exact in any order; only the float scaling differs from the
kernels' (float64 here, so this is the value their float32 arithmetic rounds). k-quants add
integer sub-block scales inside the sum and take dmin * (their minimums) off once per 256.
Each ``dot_*`` reads one output's blocks straight from the file's bytes (ggml-common.h's
layouts, every scalar little-endian) and returns one number; ``matmul`` runs them all.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from llmnb.gguf.constants import GGML_BLOCK_SIZES, GGMLType
from llmnb.kernels.integer import ACTIVATIONS, Activations, quantize

U8 = npt.NDArray[np.uint8]
I32 = npt.NDArray[np.int32]
F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
T = GGMLType


def f16(block: U8, at: int) -> float:
    """The float16 at byte `at` of a block."""
    return float(block[at:at + 2].view(np.float16)[0])


def nibbles(qs: U8) -> I32:
    """16 packed bytes -> 32 quants 0..15: byte j holds element j (low) and j + 16 (high)."""
    q = qs.astype(np.int32)
    return np.concatenate([q & 15, q >> 4])


def fifth_bits(qh: U8) -> I32:
    """4 bytes, a little-endian uint32 whose bit j is element j's fifth bit -> 32 values 0/16."""
    bits = int.from_bytes(qh.tobytes(), "little")
    return np.array([(bits >> j & 1) << 4 for j in range(32)], np.int32)


# --- the legacy formats: blocks of 32, activations Q8_0 or Q8_1 ----------------------------

def dot_q4_0(w: U8, qx: I32, dx: F32, s: F32) -> float:
    """Q4_0, 18 bytes = d | qs[16]: weight = d * (q - 8)."""
    out = 0.0
    for b in range(len(dx)):
        block = w[18 * b:18 * b + 18]
        q = nibbles(block[2:18]) - 8
        out += f16(block, 0) * float(dx[b]) * int(q @ qx[32 * b:32 * b + 32])
    return out


def dot_q4_1(w: U8, qx: I32, dx: F32, s: F32) -> float:
    """Q4_1, 20 bytes = d | m | qs[16]: weight = d * q + m; the m's share is m * s."""
    out = 0.0
    for b in range(len(dx)):
        block = w[20 * b:20 * b + 20]
        q = nibbles(block[4:20])
        out += f16(block, 0) * float(dx[b]) * int(q @ qx[32 * b:32 * b + 32])
        out += f16(block, 2) * float(s[b])
    return out


def dot_q5_0(w: U8, qx: I32, dx: F32, s: F32) -> float:
    """Q5_0, 22 bytes = d | qh[4] | qs[16]: weight = d * (q - 16), q = nibble + fifth bit."""
    out = 0.0
    for b in range(len(dx)):
        block = w[22 * b:22 * b + 22]
        q = nibbles(block[6:22]) + fifth_bits(block[2:6]) - 16
        out += f16(block, 0) * float(dx[b]) * int(q @ qx[32 * b:32 * b + 32])
    return out


def dot_q5_1(w: U8, qx: I32, dx: F32, s: F32) -> float:
    """Q5_1, 24 bytes = d | m | qh[4] | qs[16]: weight = d * q + m."""
    out = 0.0
    for b in range(len(dx)):
        block = w[24 * b:24 * b + 24]
        q = nibbles(block[8:24]) + fifth_bits(block[4:8])
        out += f16(block, 0) * float(dx[b]) * int(q @ qx[32 * b:32 * b + 32])
        out += f16(block, 2) * float(s[b])
    return out


def dot_q8_0(w: U8, qx: I32, dx: F32, s: F32) -> float:
    """Q8_0, 34 bytes = d | qs[32] (int8): weight = d * q."""
    out = 0.0
    for b in range(len(dx)):
        block = w[34 * b:34 * b + 34]
        q = block[2:34].view(np.int8).astype(np.int32)
        out += f16(block, 0) * float(dx[b]) * int(q @ qx[32 * b:32 * b + 32])
    return out


# --- the k-quants: 256 inputs, integer sub-block scales, activations Q8_K -------------------

def scales_mins_k4(block: U8) -> tuple[list[int], list[int]]:
    """Q4_K/Q5_K's 12 scale bytes (at 4) -> eight 6-bit scales and eight 6-bit minimums
    (ggml's ``get_scale_min_k4``): sub-blocks 0..3 in the low 6 bits of bytes 0..3 and 4..7,
    sub-blocks 4..7 from a nibble of bytes 8..11 and the spare top 2 bits of bytes 0..7."""
    s = [int(v) for v in block[4:16]]
    sc = [s[j] & 63 if j < 4 else (s[j + 4] & 15) | (s[j - 4] >> 6) << 4 for j in range(8)]
    mn = [s[j + 4] & 63 if j < 4 else (s[j + 4] >> 4) | (s[j] >> 6) << 4 for j in range(8)]
    return sc, mn


def k4_sums(d: float, dmin: float, sc: list[int], mn: list[int], q: I32, qx: I32,
            dx: float) -> float:
    """One super-block of Q4_K/Q5_K: eight sub-blocks of 32, each sum times its integer scale,
    the minimums against the sums of qx: d dx sum_s sc_s isum_s - dmin dx sum_s m_s sum qx_s."""
    isum = sum(sc[k] * int(q[32 * k:32 * k + 32] @ qx[32 * k:32 * k + 32]) for k in range(8))
    msum = sum(mn[k] * int(qx[32 * k:32 * k + 32].sum()) for k in range(8))
    return d * dx * isum - dmin * dx * msum


def dot_q4_k(w: U8, qx: I32, dx: F32, s: F32) -> float:
    """Q4_K, 144 bytes = d | dmin | scales[12] | qs[128]: each 32 bytes of qs hold two
    sub-blocks, the first in the low nibbles, the second in the high ones."""
    out = 0.0
    for b in range(len(dx)):
        block = w[144 * b:144 * b + 144]
        qs = block[16:144].astype(np.int32).reshape(4, 32)
        q = np.concatenate([part for c in range(4) for part in (qs[c] & 15, qs[c] >> 4)])
        sc, mn = scales_mins_k4(block)
        out += k4_sums(f16(block, 0), f16(block, 2), sc, mn, q, qx[256 * b:256 * b + 256],
                       float(dx[b]))
    return out


def dot_q5_k(w: U8, qx: I32, dx: F32, s: F32) -> float:
    """Q5_K, 176 bytes = d | dmin | scales[12] | qh[32] | qs[128]: Q4_K's nibbles, and the fifth
    bit of sub-block k's element l in bit k of qh[l]."""
    out = 0.0
    for b in range(len(dx)):
        block = w[176 * b:176 * b + 176]
        qs = block[48:176].astype(np.int32).reshape(4, 32)
        qh = block[16:48].astype(np.int32)
        q = np.concatenate([part for c in range(4) for part in (qs[c] & 15, qs[c] >> 4)])
        q += np.concatenate([(qh >> k & 1) << 4 for k in range(8)])
        sc, mn = scales_mins_k4(block)
        out += k4_sums(f16(block, 0), f16(block, 2), sc, mn, q, qx[256 * b:256 * b + 256],
                       float(dx[b]))
    return out


def q6_k_quants(block: U8) -> I32:
    """Q6_K's 256 quants -32..31 in element order: per half of 128, element l + 32 i takes its
    low 4 bits from ql (bytes l and l + 32, low then high nibble) and its top 2 bits from bits
    2i..2i+1 of qh[l] (ggml's ``dequantize_row_q6_K``)."""
    q = np.empty(256, np.int32)
    for half in range(2):
        ql = block[64 * half:64 * half + 64].astype(np.int32)
        qh = block[128 + 32 * half:128 + 32 * half + 32].astype(np.int32)
        low = (ql[:32] & 15, ql[32:] & 15, ql[:32] >> 4, ql[32:] >> 4)
        for i in range(4):
            q[128 * half + 32 * i:128 * half + 32 * i + 32] = low[i] | (qh >> 2 * i & 3) << 4
    return q - 32


def dot_q6_k(w: U8, qx: I32, dx: F32, s: F32) -> float:
    """Q6_K, 210 bytes = ql[128] | qh[64] | scales[16] (int8) | d: sixteen sub-blocks of 16."""
    out = 0.0
    for b in range(len(dx)):
        block = w[210 * b:210 * b + 210]
        q, x = q6_k_quants(block), qx[256 * b:256 * b + 256]
        sc = block[192:208].view(np.int8)
        isum = sum(int(sc[k]) * int(q[16 * k:16 * k + 16] @ x[16 * k:16 * k + 16])
                   for k in range(16))
        out += f16(block, 208) * float(dx[b]) * isum
    return out


DOTS: dict[int, Callable[[U8, I32, F32, F32], float]] = {
    T.Q4_0: dot_q4_0, T.Q4_1: dot_q4_1, T.Q5_0: dot_q5_0, T.Q5_1: dot_q5_1, T.Q8_0: dot_q8_0,
    T.Q4_K: dot_q4_k, T.Q5_K: dot_q5_k, T.Q6_K: dot_q6_k,
}


def matmul(x: F32, raw: U8, ggml_type: int, n_out: int) -> F64:
    """x (T, n_in) @ W.T -> (T, n_out) float64, W's rows as the file's `raw` blocks (n_out rows
    of bytes, or flat), x quantized as the integer kernels quantize it for this format."""
    t = int(ggml_type)
    rows, n_in = x.shape
    block, size = GGML_BLOCK_SIZES[t]
    w = np.ascontiguousarray(raw, np.uint8).reshape(n_out, n_in // block * size)
    kind = ACTIVATIONS[t]
    a: Activations = quantize(x, kind, 16 if kind == "q8_k" else 32)
    per = n_in // (256 if kind == "q8_k" else 32)            # activation blocks in a row
    qx = a.q.astype(np.int32).reshape(rows, n_in)
    dx = a.d.reshape(rows, per)
    s = a.s.reshape(rows, per) if len(a.s) else np.zeros((rows, per), np.float32)
    out = np.empty((rows, n_out), np.float64)
    for r in range(rows):
        for o in range(n_out):
            out[r, o] = DOTS[t](w[o], qx[r], dx[r], s[r])   # one output: runq.c's inner loop
    return out
