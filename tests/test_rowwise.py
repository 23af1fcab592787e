"""The compiled per-row steps' exp and SwiGLU (``llmnb.kernels.rowwise``) against float64."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmnb.kernels.rowwise import EXP_CEIL, EXP_FLOOR, exp_parts, scale_by_bits, softmax_rows
from llmnb.model.blocks import swiglu, swiglu_halves


def exp32(x: np.ndarray, sign: float = 1.0) -> np.ndarray:
    out = np.empty_like(x)
    bits = np.empty(len(x), np.int32)
    exp_parts(x, np.float32(sign), out, bits)
    scale_by_bits(out, bits)
    return out


def test_exp_is_within_two_units_in_the_last_place_over_its_whole_range() -> None:
    x = np.linspace(EXP_FLOOR, EXP_CEIL, 2_000_001, dtype=np.float32)
    got = exp32(x)
    want = np.exp(x.astype(np.float64))
    ulp = np.spacing(want.astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got - want) / ulp) <= 2.0
    np.testing.assert_array_equal(exp32(-x, -1.0), got)        # the sign flips the argument


def test_exp_clamps_outside_the_float32_range() -> None:
    x = np.array([-1e30, -200.0, 200.0, 1e30], np.float32)
    got = exp32(x)
    assert np.all(np.isfinite(got)) and got[0] == got[1] == exp32(np.array([EXP_FLOOR]))[0]
    assert got[2] == got[3] == exp32(np.array([EXP_CEIL]))[0]


@pytest.mark.parametrize("rows", [1, 3, 70])
def test_swiglu_is_silu_gate_times_up_and_each_row_the_bits_of_that_row_alone(rows: int) -> None:
    rng = np.random.default_rng(rows)
    gu = (rng.standard_normal((rows, 2 * 200)) * 6).astype(np.float32)      # (T, 2 ff)
    gu[0, :4] = [-100.0, 100.0, 0.0, -0.0]                     # far tails and both zeros
    got = swiglu_halves(gu)
    g, u = gu[:, :200].astype(np.float64), gu[:, 200:].astype(np.float64)
    want = g / (1.0 + np.exp(-g)) * u
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-30)
    for t in range(rows):
        np.testing.assert_array_equal(swiglu_halves(gu[t:t + 1])[0], got[t])
    np.testing.assert_array_equal(swiglu(gu[:, :200], gu[:, 200:]), got)
    strided = np.asfortranarray(gu)                             # any layout: the same bits
    out = np.full((rows, 200), np.nan, np.float32)
    assert swiglu_halves(strided, out) is out
    np.testing.assert_array_equal(out, got)


@pytest.mark.parametrize("first", [-1, 0, 5])
def test_softmax_rows_is_the_float64_softmax_with_masked_and_causal_keys_exactly_zero(
        first: int) -> None:
    rng = np.random.default_rng(first + 1)
    t_rows, s = 7, 13
    scores = (rng.standard_normal((2 * t_rows, s)) * 8).astype(np.float32)    # 2 heads x T rows
    scores[3, [1, 4]] = -np.inf                                              # masked keys
    want = scores.astype(np.float64)
    if first >= 0:                                     # query t sees keys 0..first + t
        limit = first + np.arange(2 * t_rows) % t_rows
        want[np.arange(s)[None, :] > limit[:, None]] = -np.inf
    want = np.exp(want - want.max(axis=1, keepdims=True))
    want /= want.sum(axis=1, keepdims=True)
    got = scores.copy()
    softmax_rows(got, t_rows, first)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(got == 0, want == 0)                  # hidden keys exactly 0


def test_the_residual_add_and_norm_in_one_call_are_the_bits_of_the_two_apart() -> None:
    from llmnb.kernels.rowwise import add_rms_norm, rms_norm

    rng = np.random.default_rng(3)
    h = rng.standard_normal((5, 576)).astype(np.float32)
    delta = rng.standard_normal((5, 576)).astype(np.float32)
    w = rng.standard_normal(576).astype(np.float32)
    apart = h + delta
    want = rms_norm(apart, w, 1e-5)
    got = add_rms_norm(h, delta, w, 1e-5, np.empty_like(h))
    np.testing.assert_array_equal(h, apart)              # h is added to in place
    np.testing.assert_array_equal(got, want)


def test_rows_split_between_threads_are_the_bits_of_the_rows_on_one_thread() -> None:
    """Each step's `_parts` kernel (a prompt's or a canvas's rows split between threads, here
    into 3 parts of uneven size) gives the bits of its one-thread kernel, and ``split`` splits
    from PARALLEL_ROWS rows on, when numba has more than one thread."""
    from numba import config

    import llmnb
    from llmnb.kernels import rowwise as rw

    rng = np.random.default_rng(5)
    t, d, ff, heads, hd = 41, 96, 160, 5, 16
    x = rng.standard_normal((t, d)).astype(np.float32)
    w = rng.standard_normal(d).astype(np.float32)
    eps = np.float32(1e-5)
    one, three = np.empty_like(x), np.empty_like(x)
    rw.rms_norm_rows(x, w, eps, one)
    rw.rms_norm_parts(x, w, eps, three, 3)
    np.testing.assert_array_equal(three, one)
    delta = rng.standard_normal((t, d)).astype(np.float32)
    h1, h3 = x.copy(), x.copy()
    rw.add_rms_norm_rows(h1, delta, w, eps, one)
    rw.add_rms_norm_parts(h3, delta, w, eps, three, 3)
    np.testing.assert_array_equal(h3, h1)
    np.testing.assert_array_equal(three, one)
    q = rng.standard_normal((t, heads, hd)).astype(np.float32)
    cos = rng.standard_normal((t, hd // 2)).astype(np.float32)
    sin = rng.standard_normal((t, hd // 2)).astype(np.float32)
    q1, q3 = q.copy(), q.copy()
    rw.rope_rows(q1, cos, sin)
    rw.rope_parts(q3, cos, sin, 3)
    np.testing.assert_array_equal(q3, q1)
    assert not np.array_equal(q1, q)
    gu = (rng.standard_normal((t, 2 * ff)) * 4).astype(np.float32)
    y1, y3 = np.empty((t, ff), np.float32), np.empty((t, ff), np.float32)
    rw.swiglu_rows(gu, y1)
    rw.swiglu_parts(gu, y3, 3)
    np.testing.assert_array_equal(y3, y1)
    scores = rng.standard_normal((2 * t, t + 4)).astype(np.float32)
    s1, s3 = scores.copy(), scores.copy()
    rw.softmax_rows(s1, t, 4)                    # causal: query r % t sees keys 0..4 + r % t
    rw.softmax_parts(s3, t, 4, 3)
    np.testing.assert_array_equal(s3, s1)
    assert s1[0, 5] == 0.0 and s1[0, 4] > 0.0
    with llmnb.threads(1):
        assert rw.split(rw.PARALLEL_ROWS) == 1
    if config.NUMBA_NUM_THREADS >= 2:
        with llmnb.threads(2):
            assert rw.split(rw.PARALLEL_ROWS) == 2 and rw.split(rw.PARALLEL_ROWS - 1) == 1


def test_swiglu_hands_back_an_array_of_its_own_that_later_calls_leave_alone() -> None:
    """After a model and the held-out set are loaded (the state in which the compiled build once
    freed the array it returned), each result keeps its own memory and its values."""
    import llmnb
    from llmnb.perf.heldout import read_heldout

    root = Path(__file__).resolve().parents[1]
    llmnb.load(root / "data" / "models" / "tiny-llada.gguf")
    read_heldout(root / "data" / "eval" / "tiny_heldout.jsonl")
    x = np.random.default_rng(2).standard_normal((68, 160)).astype(np.float32)
    results = [swiglu(x * k, x) for k in range(1, 9)]
    for k, y in enumerate(results, 1):
        np.testing.assert_array_equal(y, swiglu_halves(np.concatenate([x * k, x], axis=1)))
    assert not any(np.shares_memory(a, b) for i, a in enumerate(results) for b in results[i + 1:])
