"""The compiled per-row steps' exp and SwiGLU (``llmnb.kernels.rowwise``) against float64."""
from __future__ import annotations

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
