"""Samplers: each filter by definition, the chain order, seeded reproducibility, frequencies."""
from __future__ import annotations

import numpy as np
import pytest

from llmnb.ar.sampling import Greedy, Sampler, softmax
from llmnb.errors import UsageError

LOGITS = np.log(np.array([0.40, 0.25, 0.15, 0.10, 0.05, 0.03, 0.02], dtype=np.float32))


def kept(s: Sampler, logits: np.ndarray = LOGITS) -> list[int]:
    return [int(i) for i in np.flatnonzero(s.keep_mask(logits))]


def test_greedy_is_the_argmax_with_ties_to_the_lower_id() -> None:
    assert Greedy().sample(LOGITS) == 0
    assert Greedy().sample(np.array([1.0, 3.0, 3.0], dtype=np.float32)) == 1
    np.testing.assert_array_equal(Greedy().probs(LOGITS), np.eye(7)[0])


def test_top_k_keeps_the_k_largest() -> None:
    assert kept(Sampler(top_k=3)) == [0, 1, 2]
    assert kept(Sampler(top_k=100)) == list(range(7))


def test_top_p_keeps_the_smallest_prefix_reaching_p() -> None:
    assert kept(Sampler(top_p=0.40)) == [0]          # 0.40 reaches 0.40
    assert kept(Sampler(top_p=0.41)) == [0, 1]
    assert kept(Sampler(top_p=0.80)) == [0, 1, 2]    # 0.40+0.25+0.15 = 0.80
    assert kept(Sampler(top_p=0.81)) == [0, 1, 2, 3]


def test_min_p_keeps_tokens_above_a_fraction_of_the_best() -> None:
    assert kept(Sampler(min_p=0.5)) == [0, 1]        # >= 0.20
    assert kept(Sampler(min_p=0.24)) == [0, 1, 2, 3]  # >= 0.096


def test_chain_order_top_k_then_top_p_on_the_renormalised_survivors() -> None:
    # top-k=2 leaves 0.40/0.65 and 0.25/0.65 = 0.615, 0.385; top-p=0.6 then keeps only the first
    assert kept(Sampler(top_k=2, top_p=0.6)) == [0]
    # top-p=0.9 alone keeps 5 tokens; min-p=0.3 after it cuts to p >= 0.3 * 0.4 = 0.12
    assert kept(Sampler(top_p=0.9, min_p=0.3)) == [0, 1, 2]


def test_temperature_reshapes_the_survivors_only() -> None:
    p = Sampler(temperature=2.0, top_k=3).probs(LOGITS)
    want = softmax(LOGITS[:3].astype(np.float64), 2.0)
    np.testing.assert_allclose(p[:3], want, rtol=1e-12)
    assert p[3:].sum() == 0.0


def test_same_seed_same_draws_different_seed_different_draws() -> None:
    a = Sampler(temperature=1.0, seed=7)
    b = Sampler(temperature=1.0, seed=7)
    c = Sampler(temperature=1.0, seed=8)
    sa = [a.sample(LOGITS) for _ in range(200)]
    assert sa == [b.sample(LOGITS) for _ in range(200)]
    assert sa != [c.sample(LOGITS) for _ in range(200)]


def test_sample_frequencies_match_probs() -> None:
    s = Sampler(temperature=0.8, top_k=5, min_p=0.05, seed=3)
    p = s.probs(LOGITS)
    counts = np.bincount([s.sample(LOGITS) for _ in range(20000)], minlength=7) / 20000
    assert 0.5 * np.abs(counts - p).sum() < 0.02
    assert counts[p == 0].sum() == 0


@pytest.mark.parametrize("kwargs", [dict(temperature=-1.0), dict(top_k=-1), dict(top_p=0.0),
                                    dict(top_p=1.5), dict(min_p=2.0),
                                    dict(temperature=float("nan"))])
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(UsageError):
        Sampler(**kwargs)  # type: ignore[arg-type]


def full_sort_keep(logits: np.ndarray, top_p: float, min_p: float) -> np.ndarray:
    """top-p then min-p by definition: the whole vocabulary sorted (ties to the lower id)."""
    order = np.argsort(-logits, kind="stable")
    p = softmax(logits[order])
    n = int(np.searchsorted(np.cumsum(p), top_p)) + 1 if top_p < 1.0 else len(order)
    p = p[:n] / p[:n].sum()
    if min_p > 0.0:
        n = max(1, int(np.count_nonzero(p >= min_p * p[0])))
    keep = np.zeros(len(logits), dtype=np.bool_)
    keep[order[:n]] = True
    return keep


@pytest.mark.parametrize("scale", [0.5, 3.0, 12.0])      # flat (the whole vocabulary) .. sharp
@pytest.mark.parametrize("top_p,min_p", [(0.5, 0.0), (0.9, 0.0), (0.99, 0.0), (0.95, 0.05),
                                         (1.0, 0.05), (1.0, 0.5)])
def test_top_p_and_min_p_without_sorting_the_vocabulary_keep_what_a_full_sort_keeps(
        scale: float, top_p: float, min_p: float) -> None:
    rng = np.random.default_rng(int(scale * 10))
    logits = (rng.standard_normal(49_152) * scale).astype(np.float32)
    logits[rng.integers(0, 49_152, 300)] = logits.max()           # ties at the top
    logits[:200] = np.round(logits[:200])                         # and ties further down
    got = Sampler(top_p=top_p, min_p=min_p).keep_mask(logits)
    want = full_sort_keep(logits, top_p, min_p)
    assert np.array_equal(got, want), (int(got.sum()), int(want.sum()))


def test_top_p_sorts_only_the_head_of_a_sharp_distribution() -> None:
    logits = np.full(151_936, -20.0, dtype=np.float32)
    logits[[7, 3, 11]] = [5.0, 4.0, 4.0]
    order, p = Sampler(top_p=0.9).ranked_prefix(logits)
    assert list(order[:3]) == [7, 3, 11] and len(order) == 64     # the first candidate set
    assert np.isclose(p.sum() + (151_936 - 64) * p[-1], 1.0)
