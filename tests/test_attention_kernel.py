"""The exact attention of a few rows (``llmnb.kernels.attention``): right to float32 rounding,
and each row the same bits however many rows and keys come with it."""
from __future__ import annotations

import numpy as np
import pytest

from llmnb.kernels.attention import exact_attention, isas, vectors

ISAS = sorted({"avx2", vectors()[0].name})     # this CPU's vectors, and AVX2's 8 lanes


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Softmax attention in float64, (T, nh * hd)."""
    nh, t, hd = q.shape
    group = nh // k.shape[0]
    out = np.zeros((t, nh * hd))
    for h in range(nh):
        s = q[h].astype(np.float64) @ k[h // group].T.astype(np.float64) / np.sqrt(hd)
        s = np.where(allowed, s, -np.inf)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        out[:, h * hd:(h + 1) * hd] = p @ v[h // group].astype(np.float64)
    return out


def run(isa: str, q: np.ndarray, k: np.ndarray, v: np.ndarray,
        allowed: np.ndarray, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    nh, t, hd = q.shape
    out = np.empty((t, nh * hd), np.float32)
    probs = np.empty((nh, t, allowed.shape[1]), np.float32)
    exact_attention(*isas(isa), q, k, v, allowed, np.float32(1 / np.sqrt(hd)), out, probs, threads)
    return out, probs


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("hd", [64, 20, 8])
def test_exact_attention_matches_float64_and_gives_masked_keys_no_weight(isa: str,
                                                                          hd: int) -> None:
    rng = np.random.default_rng(hd)
    nh, n_kv, t, s = 4, 2, 12, 23
    q = rng.standard_normal((nh, t, hd)).astype(np.float32)
    k = rng.standard_normal((n_kv, s, hd)).astype(np.float32)
    v = rng.standard_normal((n_kv, s, hd)).astype(np.float32)
    allowed = np.arange(s)[None, :] <= (s - t + np.arange(t))[:, None]     # causal
    allowed[5, 3] = allowed[9, 17] = False                                # and a tree's holes
    out, probs = run(isa, q, k, v, allowed)
    np.testing.assert_allclose(out, reference(q, k, v, allowed), rtol=2e-5, atol=2e-6)
    assert np.all(probs[:, ~allowed] == 0)
    np.testing.assert_allclose(probs.sum(axis=2), 1.0, rtol=1e-5)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("hd", [64, 20])
def test_each_row_is_the_same_bits_as_that_row_alone_over_its_own_keys(isa: str,
                                                                         hd: int) -> None:
    """Row t of a 12-row causal batch over 23 keys sees s - 12 + t + 1 of them (12 .. 23, on
    both sides of a block of 8 and of 16 keys); alone, with only those keys, it must give the
    same bits (a verify row against its decode step), and so must the batch split over three
    threads' parts."""
    rng = np.random.default_rng(7)
    nh, n_kv, t, s = 6, 2, 12, 23
    q = rng.standard_normal((nh, t, hd)).astype(np.float32)
    k = rng.standard_normal((n_kv, s, hd)).astype(np.float32)
    v = rng.standard_normal((n_kv, s, hd)).astype(np.float32)
    allowed = np.arange(s)[None, :] <= (s - t + np.arange(t))[:, None]
    batch, _ = run(isa, q, k, v, allowed)
    np.testing.assert_array_equal(run(isa, q, k, v, allowed, threads=3)[0], batch)
    for row in range(t):
        seen = s - t + row + 1
        alone, _ = run(isa, np.ascontiguousarray(q[:, row:row + 1]),
                       np.ascontiguousarray(k[:, :seen]), np.ascontiguousarray(v[:, :seen]),
                       np.ones((1, seen), dtype=bool))
        np.testing.assert_array_equal(batch[row], alone[0])


@pytest.mark.parametrize("isa", ISAS)
def test_a_prompts_causal_rows_in_chunks_and_parts_are_each_the_bits_of_that_row_alone(
        isa: str) -> None:
    """A 70-row causal prompt through ``cached_attention`` (210 pairs per key/value head: more
    than a part computes at a time, ``attention.CHUNK``, and split between threads by work,
    ``attention.part_start``): the same bits at one and three threads, each row the bits of
    that row alone over its own keys, and right to float32 rounding."""
    from llmnb.kernels import attention

    rng = np.random.default_rng(11)
    nh, n_kv, t, hd = 6, 2, 70, 64
    assert nh // n_kv * t > attention.CHUNK
    qkv = rng.standard_normal((t, (nh + 2 * n_kv) * hd)).astype(np.float32)
    cos = np.ones((t, hd // 2), np.float32)             # RoPE by angle 0: the rows as they are
    sin = np.zeros((t, hd // 2), np.float32)
    outs = []
    for threads in (1, 3):
        keys = np.zeros((n_kv, t, hd), np.float32)
        values = np.zeros((n_kv, t, hd), np.float32)
        out = np.empty((t, nh * hd), np.float32)
        attention.cached_attention(*isas(isa), qkv.copy(), nh, cos, sin, keys, values, 0, None,
                                   np.float32(1 / np.sqrt(hd)), out, threads)
        outs.append(out)
    np.testing.assert_array_equal(outs[1], outs[0])
    q = np.ascontiguousarray(qkv[:, :nh * hd].reshape(t, nh, hd).transpose(1, 0, 2))
    k = np.ascontiguousarray(qkv[:, nh * hd:(nh + n_kv) * hd].reshape(t, n_kv, hd)
                             .transpose(1, 0, 2))
    v = np.ascontiguousarray(qkv[:, (nh + n_kv) * hd:].reshape(t, n_kv, hd).transpose(1, 0, 2))
    causal = np.arange(t)[None, :] <= np.arange(t)[:, None]
    np.testing.assert_allclose(outs[0], reference(q, k, v, causal), rtol=2e-5, atol=2e-6)
    for row in (0, 1, 15, 16, 47, 69):
        alone, _ = run(isa, np.ascontiguousarray(q[:, row:row + 1]),
                       np.ascontiguousarray(k[:, :row + 1]), np.ascontiguousarray(v[:, :row + 1]),
                       np.ones((1, row + 1), dtype=bool))
        np.testing.assert_array_equal(outs[0][row], alone[0])
