"""Attention for a few rows whose every row is the same bits however many rows come with it.

A speculative verify batch must give each of its rows exactly the logits that decoding that
token alone gives, or its greedy choice can part from plain decoding's. With 8-bit activations
(``integer.py``) this is not a matter of rounding: a last-bit difference in one activation can
round it to the other side of a quantization step, and the model turns that into logit changes
of tenths. BLAS's matrix products are not row-exact across shapes: a row's dot products and sums
are ordered by how many rows and keys the call holds, and a verify row sees masked keys (its
tree's other branches, the batch's later tokens) that a decode step does not. So here every
(row, head) is computed on its own, with every sum in an order fixed by the key's index alone:

    s_j = (q . k_j) / sqrt(hd)   per key: lanes of fused multiply-adds over the head dimension,
                                 then the lanes by halving (``simd.key_scores`` does a block of
                                 keys at once, ``simd.key_score`` one: the same bits)
    p_j = exp(s_j - max s)       a key the row may not see: weight exactly 0
    out = sum_j p_j v_j / sum_j p_j
                                 the values in key order; the total lane by lane (``lane_sum``)

A zero weight leaves every partial sum as it was, so a verify row, which sees a few masked keys
more than its decode step, gets the decode step's bits.

The numbers are those of ``llmnb.model.blocks.attention`` to float32 rounding; only the order is
pinned. ``exact_attention`` takes q, k and v as arrays; ``cached_attention`` is a decode step's
(or a verify batch's, or a prompt's) whole attention in one call: RoPE on the projection's output,
the new keys and values written into the KV cache's arrays, then the same rows over the cache.
A prompt's rows go by in chunks (CHUNK pairs a part at a time, their scratch in the caches) and
its causal pairs are split between threads by their keys, not their count. The forward pass
takes every causal or tree-masked pass here up to ``llmnb.model.blocks.EXACT_ROWS`` rows (it
beats BLAS's score matrix there); a bidirectional diffusion canvas keeps BLAS.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

import llmnb.kernels.jit  # noqa: F401  (numba configured before the first compile)
from llmnb.kernels import simd
from llmnb.kernels.isa import integer_isa
from llmnb.kernels.rowwise import exp_two, rotate_head
from llmnb.kernels.simd import (
    fadd, fma, fmax, fsplat_rows, fzero, key_score, key_scores, lanes, load_floats, load_rows,
    rows, store_floats, store_rows,
)


@njit(inline="always")
def row_max(isa, x, n, part):  # type: ignore[no-untyped-def]
    """max(x[:n]) (exact in any order): a register of lanes' maxima, then the lanes and the
    last n % lanes; part (lanes,) is scratch."""
    m = lanes(isa)
    full = n - n % m
    top = np.float32(-np.inf)
    if full > 0:
        acc = load_floats(isa, x, 0)
        for j in range(m, full, m):
            acc = fmax(acc, load_floats(isa, x, j))
        store_floats(isa, part, 0, acc)
        for lane in range(m):
            top = max(top, part[lane])
    for j in range(full, n):
        top = max(top, x[j])
    return top


@njit(inline="always")
def lane_sum(isa, x, n, part):  # type: ignore[no-untyped-def]
    """sum(x[:n]) in an order fixed by each element's index: lane l sums the x[j] with j = l
    mod lanes in order (a register of them), then the lanes are summed by halving in `part`
    (lanes,). Zeros anywhere leave every partial sum as it was, so a row's masked keys (weight
    0) and the keys a shorter row does not have give the same bits."""
    m = lanes(isa)
    full = n - n % m
    acc = fzero(isa)
    for j in range(0, full, m):
        acc = fadd(acc, load_floats(isa, x, j))
    store_floats(isa, part, 0, acc)
    for j in range(full, n):
        part[j - full] += x[j]
    w = m
    while w > 1:
        w //= 2
        for lane in range(w):
            part[lane] = part[lane] + part[lane + w]
    return part[0]


TILE = 64          # keys per tile: 16 KB of float32 keys of 64 dimensions


@njit(inline="always")
def keys_seen(allowed, base, t):  # type: ignore[no-untyped-def]
    """How many keys row t spans: the mask's width, or with `allowed` None (causal) base + t + 1."""
    return allowed.shape[1] if allowed is not None else base + t + 1


@njit(cache=True)
def values_block(isa, flat, width, v, acc, r, j0, j1):  # type: ignore[no-untyped-def]
    """acc[r + i] += sum_j weights[r + i, j] v[j] over keys j0 <= j < j1, for the R rows i of
    `isa`, weights as `flat` (pairs * width) holds them: four registers of each row's outputs
    held across the keys, each value register loaded once for all R rows."""
    n = lanes(isa)
    hd = v.shape[1]
    full = hd - hd % (4 * n)
    for c in range(0, full, 4 * n):
        a0 = load_rows(isa, acc, r, c)
        a1 = load_rows(isa, acc, r, c + n)
        a2 = load_rows(isa, acc, r, c + 2 * n)
        a3 = load_rows(isa, acc, r, c + 3 * n)
        for j in range(j0, j1):
            e = fsplat_rows(isa, flat, r * width + j, width)
            vj = v[j]
            a0 = fma(e, load_floats(isa, vj, c), a0)
            a1 = fma(e, load_floats(isa, vj, c + n), a1)
            a2 = fma(e, load_floats(isa, vj, c + 2 * n), a2)
            a3 = fma(e, load_floats(isa, vj, c + 3 * n), a3)
        store_rows(isa, acc, r, c, a0)
        store_rows(isa, acc, r, c + n, a1)
        store_rows(isa, acc, r, c + 2 * n, a2)
        store_rows(isa, acc, r, c + 3 * n, a3)
    for i in range(rows(isa)):                    # the outputs past the last four registers
        for d in range(full, hd):
            a = acc[r + i, d]
            for j in range(j0, j1):
                a = np.float32(flat[(r + i) * width + j] * v[j, d] + a)
            acc[r + i, d] = a


@njit(cache=True, error_model="numpy")
def attend_part(isas, q, k, v, g, group, t_rows, allowed, base, scale, r0, r1, out, probs,  # type: ignore[no-untyped-def]
                scores, weights, bits, part, acc, totals):
    """The (row, head) pairs r0 <= r < r1 of key/value head g: r // group is the row t,
    r % group the head within the group, its query q[t, h*hd:(h+1)*hd]. Row t sees the keys j <
    allowed.shape[1] that allowed[t, j] names, or with `allowed` None the keys 0..base + t.
    The keys go by in tiles of TILE, each scored for every pair (then summed into the values for
    every pair) while it sits in the first-level cache; each pair's sums keep their key order.
    scores, weights, bits, part, acc and totals: the pairs' scratch rows, pair r in row r - r0."""
    isa = isas[0]
    hd = k.shape[2]
    n = lanes(isa)
    body = hd - hd % n
    kg = k[g]
    vg = v[g]
    powers = bits.view(np.float32)                 # 2^k of each weight's e^(s - top)
    s_top = keys_seen(allowed, base, (r1 - 1) // group)          # the last pair's keys
    for j0 in range(0, s_top, TILE):             # the scores, a tile of keys for every pair
        for r in range(r0, r1):
            t = r // group
            h = g * group + r % group
            s_keys = keys_seen(allowed, base, t)
            j1 = min(j0 + TILE, s_keys)
            if j1 <= j0:
                continue
            row = q[t, h * hd:(h + 1) * hd]
            sr = scores[r - r0]
            end = j1 - (j1 - j0) % n               # blocks of lanes keys, then one by one
            for j in range(j0, end, n):
                key_scores(isa, row, kg, j, sr)
            for j in range(end, j1):
                sr[j] = key_score(isa, row, kg, j)
    for r in range(r0, r1):                       # each pair's weights and their total
        t = r // group
        h = g * group + r % group
        s_keys = keys_seen(allowed, base, t)
        sr = scores[r - r0]
        wr = weights[r - r0]
        if body < hd:                             # a head size past the last full vector
            row = q[t, h * hd:(h + 1) * hd]
            for j in range(s_keys):
                for i in range(body, hd):
                    sr[j] = np.float32(row[i] * kg[j, i] + sr[j])
        if allowed is not None:                   # selects, not branches: they vectorize
            seen = allowed[t]
            for j in range(s_keys):
                sr[j] = sr[j] * scale if seen[j] else np.float32(-np.inf)
        else:
            for j in range(s_keys):
                sr[j] *= scale
        top = row_max(isa, sr, s_keys, part[r - r0])
        br = bits[r - r0]
        for j in range(s_keys):                   # e^(s - top) in two parts (``exp_two``)
            wr[j], br[j] = exp_two(sr[j] - top)
        two_k = powers[r - r0]
        if allowed is not None:
            seen = allowed[t]
            for j in range(s_keys):
                wr[j] = wr[j] * two_k[j] if seen[j] else np.float32(0)
        else:
            for j in range(s_keys):
                wr[j] *= two_k[j]
        for j in range(s_keys, s_top):            # keys a later row of the block sees
            wr[j] = 0
        totals[r - r0] = lane_sum(isa, wr, s_keys, part[r - r0])
        for i in range(hd):
            acc[r - r0, i] = 0
    # sum_j e_j v_j, a tile of values for blocks of four pairs (then two, one) side by side,
    # each value register loaded once for them all: each output a chain of fused
    # multiply-adds in key order. A block's keys run to its last pair's; the others' weights
    # past their own keys are 0, which leaves their sums as they were.
    width = weights.shape[1]
    flat = weights.reshape(-1)
    for j0 in range(0, s_top, TILE):
        r = r0
        while r < r1:
            size = 4 if r + 4 <= r1 else 2 if r + 2 <= r1 else 1
            t = (r + size - 1) // group
            j1 = min(j0 + TILE, keys_seen(allowed, base, t))
            if size == 4:
                values_block(isas[2], flat, width, vg, acc, r - r0, j0, j1)
            elif size == 2:
                values_block(isas[1], flat, width, vg, acc, r - r0, j0, j1)
            else:
                values_block(isas[0], flat, width, vg, acc, r - r0, j0, j1)
            r += size
    for r in range(r0, r1):
        t = r // group
        h = g * group + r % group
        o = out[t, h * hd:(h + 1) * hd]
        total = totals[r - r0]
        for i in range(hd):
            o[i] = acc[r - r0, i] / total
        if probs is not None:
            s_keys = keys_seen(allowed, base, t)
            for j in range(s_keys):
                probs[h, t, j] = weights[r - r0, j] / total


@njit(cache=True)
def attend_all(isas, q, k, v, n_head, t_rows, allowed, base, scale, out, probs, threads):  # type: ignore[no-untyped-def]
    """Every (row, head) of q (T, >= n_head hd) against k and v (nkv, >= S, hd) -> out (T,
    n_head hd), and the weights into probs (nh, T, S) unless it is None: each key/value head's
    pairs split into `threads` parts (``part_start``), each part's pairs CHUNK at a time (each
    chunk reads its head's keys once, a tile at a time)."""
    n_kv, _, hd = k.shape
    group = n_head // n_kv
    per = group * t_rows
    n = lanes(isas[0])
    width = keys_seen(allowed, base, t_rows - 1) + n
    parts = max(1, min(per, threads))
    most = 0                                     # the most pairs a part has
    for p in range(parts):
        most = max(most, part_start(per, parts, p + 1, group, allowed, base)
                   - part_start(per, parts, p, group, allowed, base))
    each = min(CHUNK, most)                      # scratch rows per part
    rh = n_kv * parts * each
    scores = np.empty((rh, width), np.float32)
    weights = np.empty((rh, width), np.float32)
    bits = np.empty((rh, width), np.int32)
    part = np.empty((rh, n), np.float32)
    acc = np.empty((rh, hd), np.float32)
    totals = np.empty(rh, np.float32)
    scratch = (scores, weights, bits, part, acc, totals)
    if parts == 1:               # on one thread: no parallel region to start (2 us a call)
        for g in range(n_kv):
            attend_piece(isas, q, k, v, group, t_rows, allowed, base, scale, out, probs, per, 1,
                         each, g, scratch)
        return
    _run(isas, q, k, v, group, t_rows, allowed, base, scale, out, probs, per, parts, each, n_kv,
         scratch)


@njit(parallel=True, cache=True)
def _run(isas, q, k, v, group, t_rows, allowed, base, scale, out, probs, per, parts, each,  # type: ignore[no-untyped-def]
         n_kv, scratch):
    """``attend_piece`` over every part, a part per thread."""
    for gp in prange(n_kv * parts):
        attend_piece(isas, q, k, v, group, t_rows, allowed, base, scale, out, probs, per, parts,
                     each, gp, scratch)


@njit(inline="always")
def attend_piece(isas, q, k, v, group, t_rows, allowed, base, scale, out, probs, per, parts,  # type: ignore[no-untyped-def]
                 each, gp, scratch):
    """Part gp % parts of key/value head gp // parts: ``attend_part`` on its pairs, `each`
    at a time in the part's own `each` rows of the scratch arrays."""
    g, p, a = gp // parts, gp % parts, gp * each
    scores, weights, bits, part, acc, totals = scratch
    r = part_start(per, parts, p, group, allowed, base)
    end = part_start(per, parts, p + 1, group, allowed, base)
    while r < end:
        r1 = min(r + each, end)
        attend_part(isas, q, k, v, g, group, t_rows, allowed, base, scale, r, r1, out, probs,
                    scores[a:a + each], weights[a:a + each], bits[a:a + each],
                    part[a:a + each], acc[a:a + each], totals[a:a + each])
        r = r1


# pairs a part computes at a time: a prompt's hundreds of pairs would take megabytes of scores,
# weights and sums, past the second-level cache (a 128-row prompt then took longer than BLAS)
CHUNK = 48
PAIR_KEYS = 16     # what a (row, head) pair costs beside its keys, in keys' worth of work


@njit(inline="always")
def part_start(per, parts, p, group, allowed, base):  # type: ignore[no-untyped-def]
    """The first pair of part p of a key/value head's `per` pairs split into `parts`: equal
    counts of pairs where every row sees as many keys (a mask), else equal work, a pair's
    being its keys and PAIR_KEYS (a causal row t sees base + t + 1 keys: split by count, the
    last part of a prompt's rows would have three times the first one's keys)."""
    if allowed is not None or p == 0 or p == parts:
        return per * p // parts
    total = 0
    for r in range(per):
        total += base + r // group + 1 + PAIR_KEYS
    want = total * p // parts
    done = 0
    r = 0
    while r < per and done < want:
        done += base + r // group + 1 + PAIR_KEYS
        r += 1
    return r


@njit(cache=True)
def exact_attention(isa, two, four, q, k, v, allowed, scale, out, probs,  # type: ignore[no-untyped-def]
                    threads):
    """q (nh, T, hd), k and v (nkv, >= S, hd), all contiguous, allowed (T, S) bool -> out
    (T, nh * hd); isa, two and four: ``vectors()``, one, two and four rows (as three
    arguments: numba's dispatcher takes 20 us to type a tuple of them); `scale` multiplies
    the scores (1/sqrt(hd), float32); the weights into probs (nh, T, S) unless it is None (a
    cache that watches attention, ``llmnb.ar.kv_eviction``);
    `threads`: numba's threads (``numba.get_num_threads()``: read in compiled code, it would
    keep the function from numba's cache)."""
    nh, t_rows, hd = q.shape
    heads = np.empty((t_rows, nh * hd), np.float32)      # side by side, as qkv has them
    for h in range(nh):
        for t in range(t_rows):
            heads[t, h * hd:(h + 1) * hd] = q[h, t]
    attend_all((isa, two, four), heads, k, v, nh, t_rows, allowed, 0, scale, out, probs, threads)


@njit(cache=True)
def cached_attention(isa, two, four, qkv, n_head, cos, sin, keys, values, length, allowed,  # type: ignore[no-untyped-def]
                     scale, out, threads):
    """A causal step's attention over a KV cache it writes itself, in one call: qkv (T, (nh
    + 2 nkv) hd) as the projection wrote it; its q and k heads rotated in place as
    ``rowwise.rope_rows`` rotates them (cos, sin (T, r/2)); its k and v rows written into
    keys and values (nkv, capacity, hd) at positions length..length+T-1; then each (row, head)
    as ``exact_attention`` computes it, over keys 0..length+t, or those allowed (T, length+T)
    names -> out (T, nh * hd). The same bits as rotating, caching and ``exact_attention``
    done apart (at any `threads`)."""
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
    attend_all((isa, two, four), qkv, keys, values, n_head, t_rows, allowed, length, scale, out,
               None, threads)


Isas = tuple[simd.Isa, simd.Isa, simd.Isa]
_ISAS: list[Isas] = []


def isas(name: str) -> Isas:
    """The kernels' first argument: instruction set `name`'s float vectors of one, two and four
    rows (``simd.Isa``)."""
    return simd.Isa(name, 1), simd.Isa(name, 2), simd.Isa(name, 4)


def vectors() -> Isas:
    """``isas`` of this CPU: the integer kernels' build (``simd``: AVX-512's 16 lanes, else 8).
    Each lane's arithmetic is the same at any width."""
    if not _ISAS:
        _ISAS.append(isas(integer_isa() or "avx2"))
    return _ISAS[0]
