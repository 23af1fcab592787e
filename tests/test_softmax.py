"""llmnb.softmax: the one softmax, log-softmax and entropy that ar and diffusion share."""
from __future__ import annotations

import numpy as np
import pytest

from llmnb.errors import UsageError
from llmnb.softmax import entropy, log_softmax, softmax

RNG = np.random.default_rng(7)
LOGITS = (RNG.standard_normal((5, 300)) * 4).astype(np.float32)       # (n, V)


def by_hand(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_softmax_is_float64_per_row_and_a_row_alone_gives_the_same_bits() -> None:
    p = softmax(LOGITS)
    assert p.dtype == np.float64 and p.shape == LOGITS.shape
    np.testing.assert_allclose(p, by_hand(LOGITS.astype(np.float64)), rtol=1e-12)
    for i in range(len(LOGITS)):                       # a sampler's (V,) row, a rule's (m, V) batch
        assert np.array_equal(softmax(LOGITS[i]), p[i])
        assert np.array_equal(softmax(LOGITS[i], 0.7), softmax(LOGITS, 0.7)[i])
    np.testing.assert_allclose(softmax(LOGITS.T, axis=0), p.T, rtol=1e-12)
    np.testing.assert_allclose(softmax(LOGITS, 2.0), by_hand(LOGITS.astype(np.float64) / 2.0),
                               rtol=1e-12)
    big = np.array([1e4, 1e4 - 1.0, -1e4], dtype=np.float32)         # exp(1e4) would overflow
    np.testing.assert_allclose(softmax(big), [1 / (1 + np.e ** -1), 1 / (1 + np.e), 0.0],
                               rtol=1e-12)


def test_log_softmax_is_the_log_of_softmax_and_leaves_minus_inf() -> None:
    lp = log_softmax(LOGITS)
    assert lp.dtype == np.float64
    np.testing.assert_allclose(lp, np.log(softmax(LOGITS)), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.exp(lp).sum(axis=1), 1.0, rtol=1e-12)
    masked = np.array([0.0, -np.inf, 1.0])
    assert log_softmax(masked)[1] == -np.inf
    np.testing.assert_allclose(log_softmax(masked)[[0, 2]], [-np.log1p(np.e), 1 - np.log1p(np.e)],
                               rtol=1e-12)


def test_entropy_in_nats_uniform_is_log_v_and_temperature_divides_first() -> None:
    p = by_hand(LOGITS.astype(np.float64))
    want = -(p * np.log(p)).sum(axis=1)
    h = entropy(LOGITS)
    assert h.dtype == np.float64 and h.shape == (5,)
    np.testing.assert_allclose(h, want, rtol=1e-5)                     # float32 arithmetic
    np.testing.assert_allclose(entropy(np.zeros((2, 64), dtype=np.float32)), np.log(64), rtol=1e-6)
    np.testing.assert_allclose(entropy(LOGITS, 3.0), entropy(LOGITS / np.float32(3.0)), rtol=1e-6)
    assert entropy(np.array([[0.0, 100.0]], dtype=np.float32))[0] == 0.0   # p <= 1e-10 skipped
    assert entropy(LOGITS[2]).shape == ()                              # one (V,) row


@pytest.mark.parametrize("t", [0.0, -1.0, float("nan")])
def test_temperature_must_be_positive(t: float) -> None:
    with pytest.raises(UsageError, match="temperature > 0"):
        softmax(LOGITS, t)
    with pytest.raises(UsageError, match="temperature > 0"):
        entropy(LOGITS, t)
