"""Attention for a few rows whose every row is the same bits however many rows come with it.

A speculative verify batch must give each of its rows exactly the logits that decoding that
token alone gives, or its greedy choice can part from plain decoding's. With 8-bit activations
(``integer.py``) this is not a matter of rounding: a last-bit difference in one activation can
round it to the other side of a quantization step, and the model turns that into logit changes
of tenths. BLAS's matrix products are not row-exact across shapes: a row's dot products and sums
are ordered by how many rows and keys the call holds, and a verify row sees masked keys (its
tree's other branches, the batch's later tokens) that a decode step does not. So here every
(row, head) is computed on its own, in one fixed order over the keys it may see and skipping the
ones it may not:

    s_j = (q . k_j) / sqrt(hd)   for each key j, summed over the head dimension in one order
    p_j = exp(s_j - max s) / sum_j exp(s_j - max s)
    out = sum_j p_j v_j          in key order

The numbers are those of ``llmnb.model.blocks.attention`` to float32 rounding; only the order is
pinned. For many rows (a long prompt, a diffusion canvas) BLAS is much faster and no verify
compares against it, so the forward pass uses this only for a few rows
(``llmnb.model.blocks.EXACT_ROWS``).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

import llmnb.kernels.jit  # noqa: F401  (numba configured before the first compile)


@njit(fastmath={"reassoc"}, cache=True)
def dot(a, b):  # type: ignore[no-untyped-def]
    """sum_i a_i b_i over two contiguous float32 vectors, in the one order this compiled loop
    sums them (vector lanes, then the lanes together): an order that depends on nothing but
    the length, so every key's score is the same bits in every call."""
    total = np.float32(0)
    for i in range(a.shape[0]):
        total += a[i] * b[i]
    return total


@njit(parallel=True, cache=True)
def exact_attention(q, k, v, allowed, scale, out, probs):  # type: ignore[no-untyped-def]
    """q (nh, T, hd), k and v (nkv, S, hd), all contiguous, allowed (T, S) bool -> out
    (T, nh * hd); `scale` multiplies the scores (1/sqrt(hd), float32); the weights into probs
    (nh, T, S) unless it is None (a cache that watches attention, ``llmnb.ar.kv_eviction``).

    A key a row may not see is skipped, not computed and masked: a verify row pays only for
    the keys its own decode step would see."""
    nh, t_rows, hd = q.shape
    s_keys = k.shape[1]
    group = nh // k.shape[0]
    for ht in prange(nh * t_rows):
        h = ht // t_rows
        t = ht % t_rows
        g = h // group
        row = q[h, t]
        scores = np.empty(s_keys, np.float32)
        top = np.float32(-np.inf)
        for j in range(s_keys):
            if allowed[t, j]:
                sj = dot(row, k[g, j]) * scale
                scores[j] = sj
                if sj > top:
                    top = sj
        total = np.float32(0)
        acc = np.zeros(hd, np.float32)
        for j in range(s_keys):
            if allowed[t, j]:
                e = np.float32(np.exp(scores[j] - top))
                scores[j] = e
                total += e
                vj = v[g, j]
                for i in range(hd):
                    acc[i] += e * vj[i]
        for i in range(hd):
            out[t, h * hd + i] = acc[i] / total
        if probs is not None:
            for j in range(s_keys):
                probs[h, t, j] = scores[j] / total if allowed[t, j] else np.float32(0)
