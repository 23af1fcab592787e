"""The draft-length controller and its cost model (llmnb.ar.speculative_control): the verify
cost curve from measurements, the bubble rule, draft trimming, the batch built draft by draft,
the gate, and rounds without a worthwhile draft run as plain decode steps."""
from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

import llmnb
from llmnb.ar import generate
from llmnb.ar.drafters import Draft, Drafter
from llmnb.ar.sampling import Sampler
from llmnb.ar.speculative import generate_speculative
from llmnb.ar.speculative_rates import DEPTHS, expected_tokens, geometric
from llmnb.ar.speculative_bubble import bubble_rule
from llmnb.ar.speculative_control import BubbleController
from llmnb.ar.speculative_costs import KNOTS, PRIOR_STEPS, VerifyCosts, costs_for
from llmnb.errors import UsageError
from llmnb.model import Model

TINY = Path(__file__).resolve().parent.parent / "data" / "models" / "tiny-ar.gguf"


@pytest.fixture(scope="module")
def tiny() -> Model:
    return llmnb.load(TINY)


def linear_costs(a: float, b: float) -> VerifyCosts:
    """Costs measured on a machine where a batch of T > 1 rows takes a + b T plain steps."""
    v = VerifyCosts()
    v.calibrate(lambda t: 1.0 if t == 1 else a + b * t)
    return v


# --- the cost curve -------------------------------------------------------------------------

def test_verify_costs_interpolate_the_knots_and_learn_from_batches() -> None:
    v = VerifyCosts()
    assert v.predict(5) == 0.0                                   # nothing known yet
    v.time_step(2.0)
    assert v.predict(1) == 2.0 and v.steps_at(KNOTS[3]) == PRIOR_STEPS[3]
    half = (PRIOR_STEPS[4] + PRIOR_STEPS[5]) / 2                 # T = 7 lies half-way 6 .. 8
    assert abs(v.steps_at(7) - half) < 1e-12
    v.time_verify(16, 2.0 * 2 * PRIOR_STEPS[KNOTS.index(16)])   # twice the prior: all of it x2
    assert abs(v.steps_at(4) - 2 * PRIOR_STEPS[3]) < 1e-9 and v.steps_at(1) == 1.0
    for _ in range(60):                                          # then T = 10 measured at 5 steps
        v.time_verify(10, 2.0 * 5.0)
    assert abs(v.steps_at(10) - 5.0) < 1e-3
    with pytest.raises(UsageError, match="knot"):
        VerifyCosts([1.0, 2.0])


def test_the_process_record_passes_over_its_first_step_and_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A process's first plain step and first batch may load or compile numba's code (seconds
    on a cold cache): the record ``costs_for`` keeps learns from neither, so a batch measured at
    1000 steps does not stop every later generation from verifying."""
    v = VerifyCosts(skip_first=True)
    v.time_step(5.0)                                             # the first step: passed over
    assert v.t_step == 0.0
    v.time_step(1.0)
    v.time_verify(8, 1000.0)                                     # the first batch: passed over
    assert v.batches == 0 and v.steps_at(8) == PRIOR_STEPS[KNOTS.index(8)]
    v.time_verify(8, 3.0)
    assert v.batches == 1 and abs(v.steps_at(8) - 3.0) < 1e-9
    from llmnb.ar import speculative_costs

    monkeypatch.setattr(speculative_costs, "_COSTS", {})
    assert costs_for(llmnb.load(TINY)).unseen == {"step", "batch"}


def test_a_knot_no_longer_measured_follows_the_level_of_the_ones_that_are() -> None:
    # the machine gets quieter while the controller verifies 4 rows only: the 16-row knot,
    # not measured since, must come down with it, or 16 rows would keep looking dearer than
    # they are and never be verified (and measured) again
    v = VerifyCosts()
    v.time_step(1.0)
    v.time_verify(16, PRIOR_STEPS[KNOTS.index(16)])              # the level: the prior's
    for _ in range(100):
        v.time_verify(4, 0.5 * PRIOR_STEPS[KNOTS.index(4)])     # 4 rows at half their cost
    assert abs(v.steps_at(4) - 0.5 * PRIOR_STEPS[KNOTS.index(4)]) < 1e-3
    assert v.steps_at(16) < 0.75 * PRIOR_STEPS[KNOTS.index(16)]  # followed the level
    assert v.steps_at(16) > v.steps_at(4)                        # and kept its shape


def test_a_batch_cheaper_than_a_step_is_learnt_as_measured() -> None:
    # two threads: a batch of 2 rows in the tiles beats the plain step's path. Predictions
    # stay at one step at least, but the curve learns the measured 0.5, not ever less
    v = VerifyCosts()
    v.time_step(1.0)
    for _ in range(60):
        v.time_verify(2, 0.5)
    assert abs(v.steps[1] - 0.5) < 1e-3 and v.steps_at(2) == 1.0
    assert all(s > 0.0 for s in v.steps)


def test_calibrated_costs_are_the_measured_curve_and_never_below_a_step() -> None:
    v = linear_costs(0.5, 0.1)
    assert v.t_step == 1.0
    assert abs(v.steps_at(32) - 3.7) < 1e-12 and v.steps_at(2) == 1.0   # 0.7 steps: clipped
    assert abs(v.steps_at(96) - (0.5 + 0.1 * 96)) < 1e-9         # beyond the last knot: its line


# --- decisions ------------------------------------------------------------------------------

def test_expected_tokens_is_the_geometric_sum() -> None:
    assert expected_tokens(0.5, 3) == 1 + 0.5 + 0.25 + 0.125
    assert expected_tokens(0.0, 9) == 1.0
    assert 1 + sum(geometric(0.5, 3)) == expected_tokens(0.5, 3)


def test_bubble_rule_grows_on_full_acceptance_and_gives_back_half_the_bubble() -> None:
    assert [bubble_rule(4, 4, 4, 16), bubble_rule(6, 6, 1, 16), bubble_rule(1, 1, 0, 16)] == [
        6, 3, 1]                                                 # K + ceil(K/2); K - ceil(b/2)
    assert bubble_rule(12, 12, 12, 16) == 16 and bubble_rule(4, 3, 3, 16) == 4   # k_max; n < K
    c = BubbleController([True], 4, 16, gate=False)
    c.after_round([Draft([1, 2, 3, 4])], [4], [4], [0])
    assert c.k == [6]
    c.after_round([Draft([1, 2, 3, 4, 5, 6])], [6], [1], [0])   # bubble 5: give back 3
    assert c.k == [3]
    c.after_round([Draft([1])], [1], [0], [0])
    assert c.k == [2]
    assert c.verify_lengths([Draft([1, 2])]) == [2]              # no gate: verify every draft


def raw(c: BubbleController, tag: int, b: int) -> float:
    """Bucket b's weighted hits over tries (the rate before the evidence rule)."""
    return c.hits[0, tag, b] / c.tries[0, tag, b]


def test_every_draft_is_scored_depth_by_depth_by_the_run_it_would_have_had() -> None:
    c = BubbleController([True], 4, 16, costs=VerifyCosts())
    d = Draft([1, 2, 3, 9], tag=2, prior=0.5)
    c.after_round([d], [0], [0], [1])                 # a plain step: depth 0 right, still open
    h0 = (0.8 * 1.0 + 1) / (0.8 * 2.0 + 1)            # the prior: 2 * 0.5 hits in 2 tries
    assert raw(c, 2, 0) == h0 and c.shadow[0] == [(d, 1)]
    assert c.rates(0, 2) == [0.5] * DEPTHS            # one draft: no rate above its prior yet
    c.after_round([Draft([7], tag=3)], [0], [0], [2, 3])   # d: depths 1 and 2 right; 7 != 2
    h12 = (0.8 * 2 * 0.5 + 1) / (0.8 * 2.0 + 1)       # their prior: depth 0's (capped) rate
    assert [raw(c, 2, b) for b in (0, 1, 2)] == [h0, h12, h12] and c.shadow[0] == [(d, 3)]
    assert c.alpha(0, 3) == 0.8 * 1.0 / (0.8 * 2.0 + 1)   # the new draft missed at once
    c.after_round([Draft([])], [0], [0], [4])         # 9 != 4: d missed at depth 3, done
    assert abs(raw(c, 2, 3) - 0.8 * 2 * 0.5 / (0.8 * 2.0 + 1)) < 1e-12 and c.shadow[0] == []
    assert c.seen[0, 2, 3] == 1                       # d counted once in each bucket it reached
    c.after_round([Draft([5, 6], tag=2)], [2], [2], [5, 6, 8])   # verified: all of it right
    assert c.shadow[0] == [] and c.rates(0, 2)[0] > h0  # two drafts: the rate is its counts'


def test_one_lucky_run_of_a_short_match_buys_no_batch() -> None:
    c = BubbleController([True], 4, 64, costs=linear_costs(1.2, 0.2))
    text = list(range(100, 120))
    d = Draft(text, tag=3, prior=0.5)
    c.after_round([d], [0], [0], text)                 # right all the way, once
    assert c.verify_lengths([d]) == [0]                # at its prior of 0.5: a plain step
    c.after_round([d], [0], [0], text)                 # twice: evidence
    assert c.verify_lengths([d])[0] > 4


def test_a_kind_not_seen_yet_starts_from_the_drafters_record_in_this_text() -> None:
    # a copy re-joined after an edit comes back as a lookup match of 1 token, a kind not seen
    # yet: after three right copies of another kind it is trusted at once; after three wrong
    # guesses it gets no more than its own prior
    new = Draft(list(range(100, 120)), tag=1, prior=0.5)
    c = BubbleController([True], 4, 64, costs=linear_costs(1.2, 0.2))
    assert c.verify_lengths([new]) == [0]                # no record: its prior, a plain step
    for _ in range(3):
        c.after_round([Draft(list(range(100, 120)), tag=4)], [0], [0], list(range(100, 120)))
    assert c.alpha(0, 1) > 0.8 and c.verify_lengths([new])[0] > 4
    wrong = BubbleController([True], 4, 64, costs=linear_costs(1.2, 0.2))
    for _ in range(3):
        wrong.after_round([Draft([7] * 20, tag=4)], [0], [0], list(range(100, 120)))
    assert wrong.alpha(0, 1) == 0.5 and wrong.verify_lengths([new]) == [0]


def test_acceptance_is_conditioned_on_the_run_so_far() -> None:
    # every other draft is wrong at its first token, the others right for all 40: a copy
    # either re-joined at the right place or not. A per-token rate says a draft of 40 survives
    # with alpha ** 40; the conditional rates say with about alpha
    c = BubbleController([True], 4, 64, costs=linear_costs(2.0, 0.1))
    text = list(range(100, 140))
    d = Draft(text, tag=2, prior=0.5)
    for i in range(20):
        c.after_round([d], [0], [0], [0] if i % 2 else text)
    h = c.rates(0, 2)
    assert 0.3 < h[0] < 0.7 and all(x > 0.95 for x in h[1:])
    s = c.survival(0, 2, 0.5, 40)
    assert s[39] > 0.8 * s[0]                          # alpha ** 40: about 1e-14
    assert c.verify_lengths([d]) == [40]               # worth the 41 rows of c = 2 + 0.1 T
    assert c.best_k(geometric(h[0], 40), 0.0) == 0     # a per-token rate would not verify it


def test_cost_gate_trims_drafts_and_verifies_only_those_worth_their_batch() -> None:
    c = BubbleController([True, False], 4, 64, costs=VerifyCosts())
    assert c.verify_lengths([Draft([1, 2]), Draft([3])]) == [0, 0]  # first a plain step, to time it
    assert c.draft_length(1) == 0                                # (the model drafter is not asked)
    c.costs = linear_costs(2.0, 0.1)                             # c(T) = 2 + 0.1 T steps
    assert c.draft_length(0) == 64                               # a free drafter: all it has
    good, bad, model = (Draft(list(range(40)), tag=3), Draft(list(range(50, 90)), tag=1),
                        Draft(list(range(60, 100))))
    c.time_draft(1, 16, 8.0)                            # the model drafts at 0.5 steps a token
    # lookup: 3-gram matches always right, 1-gram never; model: never
    for _ in range(10):
        c.after_round([good, model], [40, 40], [40, 0], list(range(40)) + [99])
        c.after_round([bad, model], [40, 40], [0, 0], [0])
    assert c.alpha(0, 3) > 0.95 and c.alpha(0, 1) < 0.1 and c.alpha(1) < 0.1
    s = c.survival(0, 3, 0.5, 40)
    want = c.best_k(s, 0.0)
    assert 20 < want <= 40 and c.verify_lengths([good, Draft([])]) == [want, 0]
    rate = (1 + sum(s[:want])) / c.verify_cost(1 + want)
    assert all(rate >= (1 + sum(s[:n])) / c.verify_cost(1 + n) for n in range(1, 41))
    assert c.verify_lengths([bad, Draft([])]) == [0, 0]          # E ~ 1 token: a plain step
    assert c.verify_lengths([Draft([]), Draft([])]) == [0, 0]    # nothing drafted: a plain step
    assert c.k[1] == 0                                           # the costly drafter sits out


def test_a_second_draft_joins_the_batch_only_if_the_rate_goes_up() -> None:
    c = BubbleController([True, True], 4, 64, costs=linear_costs(0.6, 0.2))   # 0.2 steps a row
    a, b = Draft([1, 2, 3, 4], tag=1, prior=0.6), Draft([1, 9, 8, 7], tag=1, prior=0.6)
    other = Draft([5, 6, 7, 8], tag=1, prior=0.6)
    assert c.verify_lengths([a, Draft([])]) == [2, 0]            # E = 1.96 tokens for 1.2 steps
    assert c.verify_lengths([a, b]) == [2, 2]                    # b shares a's first row: 1 more
    assert c.verify_lengths([a, other]) == [2, 0]                # a disjoint one costs 2 rows


def test_a_costly_drafter_is_not_asked_when_a_free_draft_promises_more() -> None:
    c = BubbleController([True, False], 4, 64, costs=linear_costs(1.5, 0.05))
    assert c.needs_timing(1) and c.draft_length(1, [Draft([]), Draft([])]) == 0   # time it first
    c.time_feed(1, 1, 0.05)                                      # 0.05 steps a drafted token
    assert not c.needs_timing(1)
    assert c.draft_length(1, [Draft([]), Draft([])]) == 1        # its first draft: a probe
    c.after_round([Draft([]), Draft([7])], [0, 1], [0, 1], [7, 8])   # ... verified and right
    copy = Draft(list(range(40)), tag=16, prior=0.97)
    assert c.draft_length(1, [Draft([]), Draft([])]) == c.k[1] > 0   # nothing free: its K
    assert c.draft_length(1, [copy, Draft([])]) == 0             # a long copy: it is not needed


def probe_rounds(c: BubbleController, rounds: int, behind: int, remaining: int) -> list[int]:
    """The rounds in which drafter 0 of `c` drafts, each of its drafts wrong."""
    probes = []
    for i in range(1, rounds + 1):
        n = c.draft_length(0, [Draft([])], behind, remaining)
        if n > 0:
            probes.append(i)
        c.after_round([Draft([5] * n)], [0], [0], [0])
    return probes


def timed(d: float, b: float) -> BubbleController:
    """A model drafter at d steps per drafted token and b per catch-up token, with verify
    batches of 1 + 0.45 T steps (c(2) = 1.9)."""
    c = BubbleController([False], 1, 8, costs=linear_costs(1.0, 0.45))
    c.time_feed(0, 1, d)
    c.time_feed(0, 101, d + 100 * b)
    return c


def test_a_drafter_that_could_pay_is_probed_after_16_then_32_rounds_if_its_catch_up_pays() -> None:
    c = timed(0.05, 0.02)
    assert c.drafter[0].feed_s == pytest.approx(0.02)
    assert probe_rounds(c, 60, behind=2, remaining=1000) == [1, 17, 49]   # all of them wrong
    # at 90% acceptance it would save 0.14 steps a token, 14 over 100 tokens to go: a quarter
    # of that pays for a probe's catch-up of 60 tokens (1.2 steps), not of 2,000 (40 steps)
    assert probe_rounds(timed(0.05, 0.02), 1, behind=60, remaining=100) == [1]
    assert probe_rounds(timed(0.05, 0.02), 60, behind=2000, remaining=100) == []


def test_a_drafter_that_cannot_pay_at_any_acceptance_is_never_asked() -> None:
    c = BubbleController([False], 1, 8, costs=VerifyCosts())
    c.time_step(1.0)
    c.time_prefill(100, 10.0)                                    # the target's prompt pass
    c.time_feed(0, 1, 5.0)                                       # 5 steps per drafted token
    assert c.per_fed(0) == pytest.approx(5.0 * 0.1)              # b's prior: d x 0.1 steps
    assert probe_rounds(c, 200, behind=1, remaining=10_000) == []


def test_a_drafter_always_wrong_is_probed_ever_more_rarely_across_generations() -> None:
    # five generations of 60 rounds against one target's costs: the rests between its probes
    # (16, 32, 64, 128 rounds) run on from one generation into the next, so it drafts 5 tokens
    # in 300 rounds, where starting afresh each generation would probe 3 times in each
    costs = linear_costs(1.0, 0.45)
    probes = []
    for g in range(5):
        c = BubbleController([False], 1, 8, costs=costs, keys=["wrong"])
        if g == 0:
            c.time_feed(0, 1, 0.05)
            c.time_feed(0, 101, 0.05 + 100 * 0.02)
        assert not c.needs_timing(0)                             # timed once, kept
        probes += [60 * g + i for i in probe_rounds(c, 60, behind=2, remaining=1000)]
    assert probes == [1, 17, 49, 113, 241]
    fresh = BubbleController([False], 1, 8, costs=costs, keys=["another"])
    assert fresh.needs_timing(0)                                 # another drafter: its own record


class Slow(Drafter):
    """A model drafter whose every forward pass takes `step` seconds."""

    free = False

    def __init__(self, step: float) -> None:
        self.step, self.name, self.fed, self.asked = step, "slow", 0, 0

    def cost_key(self) -> str:
        return "slow"

    def catch_up(self, context: Sequence[int]) -> int:
        self.fed += 1
        time.sleep(self.step)
        return 1

    def propose(self, context: Sequence[int], k: int, sampler: Sampler,
                rng: np.random.Generator) -> Draft:
        self.asked += 1
        time.sleep(self.step * k)
        return Draft([0] * k)


def test_a_slow_drafter_is_timed_once_and_never_asked_in_later_generations(tiny: Model) -> None:
    slow = Slow(0.05)                                 # far slower than a step of tiny-ar
    costs = VerifyCosts()                             # a step of 1 ms, batches 1 + 0.45 T steps
    costs.calibrate(lambda t: 0.001 * (1.0 if t == 1 else 1.0 + 0.45 * t))
    ref = generate(tiny, "Please name the planets.", max_new_tokens=12, chat=True)
    for _ in range(3):
        r = generate_speculative(tiny, "Please name the planets.", [slow], max_new_tokens=12,
                                 chat=True, costs=costs)
        assert r.tokens == ref.tokens
    assert slow.fed == 1 and slow.asked == 0          # starting afresh: timed 3 times
    assert costs.drafter("slow").draft_s >= 0.05


# --- in the loop ----------------------------------------------------------------------------

def test_rounds_without_a_worthwhile_draft_are_plain_steps(tiny: Model) -> None:
    prompt = "Please name the planets in our solar system."
    ref = generate(tiny, prompt, max_new_tokens=40, chat=True)
    costly = linear_costs(50.0, 1.0)                             # no batch can ever pay
    r = generate_speculative(tiny, prompt, ["lookup", "ngram", "self:2"], max_new_tokens=40,
                             chat=True, costs=costly)
    assert r.tokens == ref.tokens
    assert all(x.rows == 1 and x.committed == 1 for x in r.rounds)
    assert r.acceptance() == {"lookup": None, "ngram": None, "self:2": None}   # never verified
    assert sum(x.drafted[2] for x in r.rounds) == 0              # timed once, never asked
    free = generate_speculative(tiny, [5, 6, 7, 8], ["lookup"], max_new_tokens=8,
                                costs=linear_costs(1.0, 0.0))    # verifying would be free ...
    assert free.rounds[0].drafted == [0]                         # ... but nothing recurs yet
    assert all(x.rows == 1 for x in free.rounds if sum(x.drafted) == 0)


def test_a_model_drafter_that_pays_is_asked_in_the_gated_loop(tiny: Model) -> None:
    prompt = "Please name the planets in our solar system."
    ref = generate(tiny, prompt, max_new_tokens=40, chat=True)
    cheap = linear_costs(1.0, 0.0)              # a batch costs one step of 1 s, drafting ~1 ms
    r = generate_speculative(tiny, prompt, [f"self:{tiny.config.n_layer}"], max_new_tokens=40,
                             chat=True, costs=cheap)
    assert r.tokens == ref.tokens
    assert sum(x.drafted[0] for x in r.rounds) > 1 and r.tokens_per_forward > 1.5


def test_costs_are_kept_per_model_and_thread_count(tiny: Model) -> None:
    with llmnb.threads(1):
        generate_speculative(tiny, [1, 5, 9, 5, 9, 5, 9], ["lookup"], max_new_tokens=8)
        v = costs_for(tiny)
        assert v.t_step > 0.0 and costs_for(tiny) is v
    with llmnb.threads(2):
        assert costs_for(tiny) is not v
