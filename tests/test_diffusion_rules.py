"""The denoising rules by value on hand-made logits: each remasking rule's confidence and order
of commitment, entropy against its definition, and the commit rules of the schedulers."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

import llmnb
from llmnb.diffusion.remasking import entropy, order, propose
from llmnb.diffusion.schedulers import factor_pick, make_scheduler

ROOT = Path(__file__).parent.parent

F32 = npt.NDArray[np.float32]


def softmax(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    out: npt.NDArray[np.float64] = e / e.sum(axis=1, keepdims=True)
    return out


# Five masked positions, six tokens. Written so that every rule ranks them differently.
LOGITS: F32 = np.array([
    [6.0, 5.9, 0.0, 0.0, 0.0, 0.0],       # highest raw logit, but a near tie: tiny margin
    [2.0, -4.0, -4.0, -4.0, -4.0, -4.0],  # low logit, nearly certain: best probability
    [4.0, 1.0, 1.0, 1.0, 1.0, 1.0],       # middling everything
    [3.0, 0.0, 0.0, 0.0, 0.0, -30.0],     # the -30 entry has p < 1e-10
    [1.0, 1.0, 1.0, 1.0, 1.0, 0.5],       # flat: the least certain by every measure
], dtype=np.float32)
POSITIONS = np.array([10, 11, 12, 13, 14], dtype=np.int64)


def test_confidence_at_temperature_comes_from_the_tempered_distribution() -> None:
    # diffuse-cpp (low_confidence) and Dream (maskgit_plus) take p(sampled) from
    # softmax(logits / T), the distribution the token was drawn from; LLaDA's probability
    # rule keeps the untempered softmax (as LLaDA and Fast-dLLM compute it)
    t = 0.5
    for rule, scale in (("low_confidence", t), ("maskgit_plus", t), ("probability", 1.0)):
        c = propose(LOGITS, POSITIONS, rule, t, np.random.default_rng(3))
        p = softmax(LOGITS.astype(np.float64) / scale)
        np.testing.assert_allclose(c.confidence, p[np.arange(5), c.tokens], rtol=1e-12)
    # Dream's entropy rule: minus the entropy of the tempered distribution
    c = propose(LOGITS, POSITIONS, "entropy", t, np.random.default_rng(3))
    p = softmax(LOGITS.astype(np.float64) / t)
    h = -(p * np.log(np.where(p > 1e-10, p, 1.0))).sum(axis=1)
    np.testing.assert_allclose(c.confidence, -h, rtol=1e-5, atol=1e-6)     # float32 softmax


# --- each remasking rule's order of commitment at T = 0 -------------------------------------
# by hand from LOGITS: raw top logits 6, 2, 4, 3, 1; probabilities .52, .99, .80, .83, .18;
# margins 0.1, 6, 3, 3, 0 (rows 2 and 3 tie: position decides); entropies .73, .09, .82, .68, 1.78

@pytest.mark.parametrize("rule,want", [
    ("low_confidence", [0, 2, 3, 1, 4]),     # diffuse-cpp: the raw logit, normalisers ignored
    ("probability", [1, 3, 2, 0, 4]),
    ("maskgit_plus", [1, 3, 2, 0, 4]),       # = probability at T = 0
    ("topk_margin", [1, 2, 3, 0, 4]),
    ("entropy", [1, 3, 0, 2, 4]),
])
def test_each_remasking_rule_orders_the_positions_as_worked_out_by_hand(rule: str,
                                                                        want: list[int]) -> None:
    c = propose(LOGITS, POSITIONS, rule, 0.0, np.random.default_rng(7))
    assert order(c).tolist() == want
    assert c.tokens.tolist() == [0] * 5                     # argmax, ties to the lowest id


def test_random_rule_orders_by_the_seeded_generators_noise() -> None:
    c = propose(LOGITS, POSITIONS, "random", 0.0, np.random.default_rng(7))
    noise = np.random.default_rng(7).random(5)              # 0.63 0.90 0.78 0.23 0.30
    assert order(c).tolist() == np.argsort(-noise).tolist() == [1, 2, 0, 4, 3]


def test_entropy_equals_its_definition() -> None:
    p = softmax(LOGITS.astype(np.float64))
    keep = p > 1e-10                                        # row 3's e^-33 term is dropped
    assert not keep[3, 5]
    want = -(np.where(keep, p * np.log(np.where(keep, p, 1.0)), 0.0)).sum(axis=1)
    np.testing.assert_allclose(entropy(LOGITS), want, rtol=1e-5)
    np.testing.assert_allclose(entropy(LOGITS)[[1, 4]], [0.0858, 1.7780], atol=5e-5)
    uniform = np.zeros((1, 64), dtype=np.float32)
    np.testing.assert_allclose(entropy(uniform), [np.log(64)], rtol=1e-6)


def test_candidates_carry_the_softmax_probability_and_their_entropy_bit_for_bit() -> None:
    from llmnb.softmax import softmax as llmnb_softmax
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal((40, 300)) * 4).astype(np.float32)
    positions = np.arange(40, dtype=np.int64)
    for rule, temperature in (("probability", 0.0), ("low_confidence", 0.7), ("entropy", 0.0)):
        c = propose(logits, positions, rule, temperature, np.random.default_rng(1))
        assert np.array_equal(c.probability, llmnb_softmax(logits)[np.arange(40), c.tokens])
        assert (c.known_entropy is None) == (rule != "entropy")   # computed only when asked for
        assert np.array_equal(c.entropy, entropy(logits))
        assert c.known_entropy is not None


# --- the schedulers' choices on the same logits ----------------------------------------------

def test_scheduler_choices_on_hand_made_logits() -> None:
    def pick(scheduler: str, rule: str, n_sched: int = 1, **kw: float) -> list[int]:
        c = propose(LOGITS, POSITIONS, rule, 0.0, np.random.default_rng(7))
        return c.positions[make_scheduler(scheduler, **kw).select(c, LOGITS, n_sched, 0.0)].tolist()

    assert pick("low_confidence", "low_confidence", 2) == [10, 12]
    assert pick("entropy_exit", "entropy", 1, entropy_threshold=0.7) == [11, 13]   # two easy
    assert pick("entropy_exit", "entropy", 3, entropy_threshold=0.7) == [11, 13, 10]
    assert pick("threshold", "probability", threshold=0.8) == [11, 13, 12]
    assert pick("threshold", "probability", threshold=0.99) == [11]     # the first always
    assert pick("threshold", "topk_margin", threshold=0.8) == [11, 12, 13]  # margin orders
    # factor: sorted .99 .83 .80 .52 against 1 - f/(n+1): f = 1 -> .67 .75 .80; f = 0.5 -> .83 .88
    assert pick("factor", "probability", factor=1.0) == [11, 13, 12]
    assert pick("factor", "probability", factor=0.5) == [11, 13]


def fast_dllm_factor_count(sorted_conf: list[float], factor: float) -> int:
    """Fast-dLLM's get_transfer_index_dynamic, its loop restated: thresholds 1 - f/(n+1),
    the first -1; break at the first confidence under its threshold; then top_i += 1 if
    top_i is 0 or the last index."""
    thresh = [-1.0] + [1 - factor / (n + 1) for n in range(2, len(sorted_conf) + 1)]
    top_i = 0
    for top_i in range(len(thresh)):
        if sorted_conf[top_i] < thresh[top_i]:
            break
    if top_i == 0 or top_i == len(thresh) - 1:
        top_i += 1
    return top_i


def test_factor_rule_stops_at_the_first_failure_even_the_last_where_fast_dllm_takes_it() -> None:
    p = np.array([0.99, 0.98, 0.5])
    ranked = np.arange(3, dtype=np.int64)
    assert len(factor_pick(ranked, p, 1.0)) == 2            # 0.5 < 1 - 1/4: not committed
    assert fast_dllm_factor_count([0.99, 0.98, 0.5], 1.0) == 3
    assert len(factor_pick(ranked, np.array([0.99, 0.98, 0.9]), 1.0)) == 3   # all pass: equal
    assert fast_dllm_factor_count([0.99, 0.98, 0.9], 1.0) == 3


def real_step_zero(m: llmnb.Model) -> tuple[F32, npt.NDArray[np.int64]]:
    """A held-out prompt whose first step (48 masks) leaves some of its 48 probabilities
    under 0.9 and some above (multi-answer prompts tried first): its logits and positions."""
    mask = int(m.config.mask_token_id)  # type: ignore[arg-type]
    rows = [json.loads(line) for line in (ROOT / "data" / "eval" / "tiny_heldout.jsonl").open()]
    for r in sorted(rows[::3], key=lambda r: -int(r.get("modes", 1))):
        ids = m.prompt_ids(r["prompt"], True, None)
        logits = m.forward(np.array(ids + [mask] * 48, dtype=np.int64))[len(ids):]
        n_sure = int((softmax(logits.astype(np.float64)).max(axis=1) >= 0.9).sum())
        if 1 < n_sure < 48:
            return logits, np.arange(48, dtype=np.int64) + len(ids)
    raise AssertionError("no held-out prompt with an uncertain first step")


def test_fast_dllm_rules_choose_as_the_reference_on_a_real_confidence_vector() -> None:
    logits, positions = real_step_zero(llmnb.load(ROOT / "data" / "models" / "tiny-llada.gguf"))
    c = propose(logits, positions, "probability", 0.0, np.random.default_rng(0))
    conf = softmax(logits.astype(np.float64)).max(axis=1)   # Fast-dLLM: float64 softmax
    np.testing.assert_allclose(c.probability, conf, rtol=1e-12)
    ranked = np.argsort(-conf, kind="stable")                # torch.topk's order, ties aside
    # threshold: top-1, then every other at or above 0.9
    want = {int(ranked[0])} | {int(i) for i in ranked[1:] if conf[i] >= 0.9}
    got = make_scheduler("threshold", threshold=0.9).select(c, logits, 0, 0.0)
    assert set(got.tolist()) == want
    # factor: the reference's count on the sorted vector
    for f in (0.5, 1.0, 2.0):
        got = make_scheduler("factor", factor=f).select(c, logits, 0, 0.0)
        n = fast_dllm_factor_count(conf[ranked].tolist(), f)
        assert got.tolist() == ranked[:n].tolist() and n < 48
