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
pinned. ``exact_attention`` takes q, k and v as arrays; ``cached_attention`` is a decode step's
(or a verify batch's) whole attention in one call: RoPE on the projection's output, the new keys
and values written into the KV cache's arrays, then the same rows over the cache. For many
rows (a long prompt, a diffusion canvas) BLAS is much faster and no verify compares against it,
so the forward pass uses this only for a few rows (``llmnb.model.blocks.EXACT_ROWS``).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

import llmnb.kernels.jit  # noqa: F401  (numba configured before the first compile)
from llmnb.kernels import simd
from llmnb.kernels.isa import integer_isa
from llmnb.kernels.rowwise import exp_parts, rotate_head, scale_by_bits
from llmnb.kernels.simd import fadd, fmul, fsplat_rows, fzero, lanes, load_floats, store_rows


@njit(fastmath={"reassoc"}, cache=True)
def dot(a, b):  # type: ignore[no-untyped-def]
    """sum_i a_i b_i over two contiguous float32 vectors, in the one order this compiled loop
    sums them (vector lanes, then the lanes together): an order that depends on nothing but
    the length, so every key's score is the same bits in every call."""
    total = np.float32(0)
    for i in range(a.shape[0]):
        total += a[i] * b[i]
    return total


@njit(inline="always")
def seen(allowed, t, j):  # type: ignore[no-untyped-def]
    """Whether row t sees key j: as `allowed` says, or (None) every key up to the row's limit."""
    return allowed[t, j] if allowed is not None else True


@njit(cache=True)
def attend_row(isa, row, k, v, g, t, allowed, limit, scale, out, col, probs, h):  # type: ignore[no-untyped-def]
    """One query row (hd,) of head h against key/value head g: the keys j < allowed.shape[1]
    that allowed[t, j] names, or with `allowed` None the keys 0..limit (a causal row over a
    cache), each scored in one fixed order; the result into out[t, col:col + hd], the weights
    into probs[h, t] unless it is None. `isa`: the vectors of the weighted sum of values."""
    hd = row.shape[0]
    s_keys = allowed.shape[1] if allowed is not None else limit + 1
    scores = np.empty(s_keys, np.float32)
    weights = np.empty(s_keys, np.float32)
    bits = np.empty(s_keys, np.int32)
    top = np.float32(-np.inf)
    for j in range(s_keys):
        sj = dot(row, k[g, j]) * scale if seen(allowed, t, j) else np.float32(-np.inf)
        scores[j] = sj
        if sj > top:
            top = sj
    for j in range(s_keys):
        scores[j] -= top
    exp_parts(scores, np.float32(1.0), weights, bits)
    scale_by_bits(weights, bits)
    total = np.float32(0)
    for j in range(s_keys):
        if seen(allowed, t, j):
            total += weights[j]
    # sum_j e_j v_j, each element in key order (a multiply, then an add, as the scalar loop
    # does): four registers of outputs held across all the keys, not read and written per key
    acc = np.zeros((1, hd), np.float32)
    n = lanes(isa)
    full = hd - hd % (4 * n)
    for c in range(0, full, 4 * n):
        a0 = fzero(isa)
        a1 = fzero(isa)
        a2 = fzero(isa)
        a3 = fzero(isa)
        for j in range(s_keys):
            if seen(allowed, t, j):
                e = fsplat_rows(isa, weights, j, 0)
                vj = v[g, j]
                a0 = fadd(a0, fmul(e, load_floats(isa, vj, c)))
                a1 = fadd(a1, fmul(e, load_floats(isa, vj, c + n)))
                a2 = fadd(a2, fmul(e, load_floats(isa, vj, c + 2 * n)))
                a3 = fadd(a3, fmul(e, load_floats(isa, vj, c + 3 * n)))
        store_rows(isa, acc, 0, c, a0)
        store_rows(isa, acc, 0, c + n, a1)
        store_rows(isa, acc, 0, c + 2 * n, a2)
        store_rows(isa, acc, 0, c + 3 * n, a3)
    for j in range(s_keys):                    # the outputs past the last four registers
        if seen(allowed, t, j):
            e = weights[j]
            for i in range(full, hd):
                acc[0, i] += e * v[g, j, i]
    for i in range(hd):
        out[t, col + i] = acc[0, i] / total
    if probs is not None:
        for j in range(s_keys):
            probs[h, t, j] = weights[j] / total if seen(allowed, t, j) else np.float32(0)


@njit(parallel=True, cache=True)
def exact_attention(isa, q, k, v, allowed, scale, out, probs):  # type: ignore[no-untyped-def]
    """q (nh, T, hd), k and v (nkv, >= S, hd), all contiguous, allowed (T, S) bool -> out
    (T, nh * hd); `scale` multiplies the scores (1/sqrt(hd), float32); the weights into probs
    (nh, T, S) unless it is None (a cache that watches attention, ``llmnb.ar.kv_eviction``).

    A key a row may not see is skipped, not computed and masked: a verify row pays only for
    the keys its own decode step would see."""
    nh, t_rows, hd = q.shape
    group = nh // k.shape[0]
    for ht in prange(nh * t_rows):
        h = ht // t_rows
        t = ht % t_rows
        attend_row(isa, q[h, t], k, v, h // group, t, allowed, 0, scale, out, h * hd, probs, h)


@njit(parallel=True, cache=True)
def cached_attention(isa, qkv, n_head, cos, sin, keys, values, length, allowed, scale,  # type: ignore[no-untyped-def]
                     out):
    """A causal step's attention over a KV cache it writes itself, in one call: qkv (T, (nh
    + 2 nkv) hd) as the projection wrote it; its q and k heads rotated in place as
    ``rowwise.rope_rows`` rotates them (cos, sin (T, r/2)); its k and v rows written into
    keys and values (nkv, capacity, hd) at positions length..length+T-1; then each (row, head)
    as ``exact_attention`` computes it, over keys 0..length+t, or those allowed (T, length+T)
    names -> out (T, nh * hd). The same bits as rotating, caching and ``exact_attention``
    done apart."""
    t_rows = qkv.shape[0]
    n_kv, _, hd = keys.shape
    nq, nk = n_head * hd, n_kv * hd
    for t in range(t_rows):
        for head in range(n_head + n_kv):
            rotate_head(qkv[t, head * hd:(head + 1) * hd], cos[t], sin[t])
        for g in range(n_kv):
            for i in range(hd):
                keys[g, length + t, i] = qkv[t, nq + g * hd + i]
                values[g, length + t, i] = qkv[t, nq + nk + g * hd + i]
    group = n_head // n_kv
    for ht in prange(n_head * t_rows):
        h = ht // t_rows
        t = ht % t_rows
        attend_row(isa, qkv[t, h * hd:(h + 1) * hd], keys, values, h // group, t, allowed,
                   length + t, scale, out, h * hd, None, h)


_ISA: list[simd.Isa] = []


def vectors() -> simd.Isa:
    """The float vectors of this CPU, the kernels' first argument: the integer kernels' build
    (``simd``: AVX-512's 16 lanes, else 8). Each lane's arithmetic is the same at any width."""
    if not _ISA:
        _ISA.append(simd.Isa(integer_isa() or "avx2"))
    return _ISA[0]
