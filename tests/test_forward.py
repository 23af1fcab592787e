"""The forward pass against reference logits from stock transformers (reference/oracle.md)."""
from __future__ import annotations

import numpy as np
import pytest

from llmnb.kernels import f32_tiles
from llmnb.model.blocks import (
    COL_BLOCK, FEW_ROWS, TILED_MAX, COPY_ROWS, Linear, apply_rope, attention, rms_norm,
    rope_inv_freq, rope_tables,
)
from llmnb.scratch import Scratch
from llmnb.model.weights import permute_qk, unpermute_qk
from oracle import MANIFEST, PROMPT, TOL, forward_case, reference, transformer

LLAMA_CPP = [k for k, v in MANIFEST["fixtures"].items() if v["convention"] == "llama.cpp"]
CASES = [(name, case) for name in LLAMA_CPP for case in MANIFEST["fixtures"][name]["cases"]]


def run_case(name: str, case: str, residency: str = "resident") -> np.ndarray:
    return forward_case(transformer(name, residency), name, case)


@pytest.mark.parametrize("name,case", CASES)
def test_forward_matches_reference_logits(name: str, case: str) -> None:
    np.testing.assert_allclose(run_case(name, case), reference(name)[case], **TOL)


@pytest.mark.parametrize("name", ["llada_f32", "dream_f32"])
def test_bidirectional_files_are_not_causal(name: str) -> None:
    t = transformer(name)
    assert not t.config.causal
    got = t.forward(PROMPT)  # the config's own attention
    assert np.abs(got - reference(name)["causal_negative_control"]).max() > 0.1


def test_streaming_residency_gives_the_same_logits() -> None:
    np.testing.assert_array_equal(run_case("qwen2_tied_f32", "causal", "streaming"),
                                  run_case("qwen2_tied_f32", "causal", "resident"))


@pytest.mark.parametrize("rows", [1, 2, 3, COPY_ROWS, FEW_ROWS, FEW_ROWS + 1, 17, TILED_MAX])
@pytest.mark.parametrize("layout", ["", "out-in", "tiles"])
def test_a_linear_is_x_times_w_transposed_on_every_path(rows: int, layout: str) -> None:
    rng = np.random.default_rng(rows)
    n_out = 2 * COL_BLOCK + 37                    # column blocks with a ragged last one
    x = rng.standard_normal((rows, 96)).astype(np.float32)
    w = rng.standard_normal((n_out, 96)).astype(np.float32)
    w_t = np.ascontiguousarray(w.T)
    copy = {"": None, "out-in": w, "tiles": f32_tiles(w_t)}[layout]
    got = Linear(w_t, copy).matmul(x)
    assert got.shape == (rows, n_out) and got.dtype == np.float32
    np.testing.assert_allclose(got, x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-4,
                               atol=1e-4)
    one = Linear(np.ascontiguousarray(w.T)).matmul(x[-1:])[0]   # the same row alone: a decode step
    np.testing.assert_allclose(got[-1], one, rtol=1e-5, atol=1e-5)
    if layout == "tiles" and rows >= TILED_MAX:     # a prefill's many rows: sgemm, loaded layout
        np.testing.assert_array_equal(got, Linear(w_t).matmul(x))
    buffer = np.full((rows, n_out), np.nan, dtype=np.float32)     # the forward's scratch buffer
    into = Linear(w_t, copy).matmul(x, out=buffer)
    np.testing.assert_array_equal(into, got)                      # the same bits, written or not
    if copy is None:                                              # the loaded layout writes it
        assert into is buffer


def test_scratch_reuses_its_buffers_and_grows_them() -> None:
    s = Scratch()
    a = s.take("x", 3, 4)
    assert a.shape == (3, 4) and a.dtype == np.float32 and a.flags.c_contiguous
    b = s.take("x", 2, 5)                         # fewer elements: the same memory
    assert np.shares_memory(a, b) and b.shape == (2, 5) and b.flags.c_contiguous
    assert not np.shares_memory(a, s.take("y", 3, 4))             # one buffer per name
    c = s.take("x", 5, 5)                         # more: a new buffer, twice the old at least
    assert not np.shares_memory(a, c) and s.nbytes == 4 * (25 + 12)
    assert np.shares_memory(c, s.take("x", 1, 24))


def test_what_a_pass_returns_outlives_the_next_pass() -> None:
    t = transformer("qwen2_tied_f32")
    ids = np.asarray(PROMPT)
    first = t.hidden(ids, causal=True)
    kept, logits = first.copy(), t.forward(ids[:3])
    kept_logits = logits.copy()
    t.forward(ids[::-1])                          # the same buffers, other values
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_array_equal(logits, kept_logits)
    assert t.scratch.nbytes > 0 and not np.shares_memory(first, logits)


def test_rms_norm_by_definition() -> None:
    x = np.array([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 2.0]], dtype=np.float32)
    w = np.array([1.0, 0.5, 2.0, 1.0], dtype=np.float32)
    want = x / np.sqrt((x ** 2).mean(axis=1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(rms_norm(x, w, 1e-5), want, rtol=1e-6)


def test_rope_rotates_pairs_and_preserves_norm_and_relative_angle() -> None:
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 1, 8)).astype(np.float32)
    k = rng.standard_normal((1, 1, 8)).astype(np.float32)
    inv = rope_inv_freq(8, 10000.0)
    def at(x: np.ndarray, pos: int) -> np.ndarray:
        cos, sin = rope_tables(np.array([pos]), inv)
        return apply_rope(x, cos, sin)
    assert np.linalg.norm(at(q, 7)) == pytest.approx(np.linalg.norm(q), rel=1e-6)
    # the score depends only on the distance between positions
    s1 = float((at(q, 3) * at(k, 1)).sum())
    s2 = float((at(q, 12) * at(k, 10)).sum())
    assert s1 == pytest.approx(s2, rel=1e-5)
    np.testing.assert_array_equal(at(q, 0), q)


def test_unpermute_inverts_llama_cpp_permutation_and_permute_is_it() -> None:
    w = np.arange(2 * 8 * 3, dtype=np.float32).reshape(16, 3)       # 2 heads of dim 8
    perm = w.reshape(2, 2, 4, 3).swapaxes(1, 2).reshape(16, 3)       # llama.cpp's converter
    np.testing.assert_array_equal(unpermute_qk(perm, 2), w)
    np.testing.assert_array_equal(permute_qk(w, 2), perm)           # llmnb convert's, the same


def test_causal_attention_ignores_the_future_and_gqa_shares_heads() -> None:
    rng = np.random.default_rng(1)
    q = rng.standard_normal((4, 5, 8)).astype(np.float32)
    k = rng.standard_normal((2, 5, 8)).astype(np.float32)
    v = rng.standard_normal((2, 5, 8)).astype(np.float32)
    out = attention(q, k, v, causal=True)
    k2, v2 = k.copy(), v.copy()
    k2[:, 3:] += 100.0
    v2[:, 3:] -= 50.0
    np.testing.assert_allclose(attention(q, k2, v2, causal=True)[:3], out[:3], rtol=1e-6)
    # query heads 0,1 use kv head 0; heads 2,3 use kv head 1
    full = attention(q, np.repeat(k, 2, axis=0), np.repeat(v, 2, axis=0), causal=True)
    np.testing.assert_allclose(out, full, rtol=1e-6)


def test_llama3_rope_scaling_through_rope_freqs_factors() -> None:
    """Llama-3 files carry `rope_freqs.weight` (llama.cpp's converter turns HF's llama3
    rope_scaling into per-frequency divisors); dividing by them must give HF's frequencies."""
    dim, base = 64, 500000.0
    factor, low, high, orig_ctx = 8.0, 1.0, 4.0, 8192
    inv = 1.0 / base ** (np.arange(0, dim, 2) / dim)
    wavelen = 2 * np.pi / inv
    low_wl, high_wl = orig_ctx / low, orig_ctx / high
    # HF transformers' _compute_llama3_parameters, written out
    smooth = (orig_ctx / wavelen - low) / (high - low)
    hf = np.where(wavelen > low_wl, inv / factor, inv)
    mid = (wavelen >= high_wl) & (wavelen <= low_wl)
    hf = np.where(mid, (1 - smooth) * inv / factor + smooth * inv, hf)
    # llama.cpp's converter: the divisor per frequency
    factors = np.where(wavelen < high_wl, 1.0,
                       np.where(wavelen > low_wl, factor, 1 / ((1 - smooth) / factor + smooth)))
    got = rope_inv_freq(dim, base, factors.astype(np.float32))
    np.testing.assert_allclose(got, hf, rtol=1e-6)
    assert (got < inv).sum() > 0 and got[0] == inv[0]   # low frequencies slowed, high kept
