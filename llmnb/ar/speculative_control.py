"""The draft-length controller: how many tokens each drafter drafts, and which to verify.

SuperSpec's bubble rule (``speculative_bubble``) needs no measurement. On a CPU a verify batch
of T rows costs c(T), well above a plain step's t_1 even for two rows (``python -m
llmnb.perf.bench_spec --paths`` measures it), so llmnb adds a gate built on the measured costs
(``speculative_costs``: c(T), t_1, a model drafter's d per drafted and b per catch-up token)
and acceptance (``speculative_rates``: survival S(i), yield E(K)). No decision changes a
token, only the speed.

Decisions (``gate=True``), once t_1 is known (before, every round is a plain step):

    rate(K) = E(K) / (c(1 + K) + K d + (E(K) - 1) b)        tokens per second of a round
    best(S) = argmax_K rate(K), or 0 if none beats a plain step's 1 / t_1
    pays(share, probe):  (behind - E(K)) b + probe d  <=  share * left * (t_1 - 1 / rate(K))
    batch:  add drafts best rate first while (1 + sum_i P(a draft keeps i)) / c(tree rows) rises

A free drafter (d = b = 0) is trimmed to best(S) of its draft. A model drafter drafts
best(S_j) tokens while pays(1, 0) and no free draft promises more; one sitting out is probed
with one token after 16, 32, 64 ... rounds if pays(PROBE_SHARE, 1) at acceptance
max(ALPHA_CEILING, its own). `behind`: tokens it must catch up; `left`: tokens still to
generate. Without costs (``gate=False``) every draft is verified and K follows the bubble
rule.
"""
from __future__ import annotations

from collections.abc import Sequence

from llmnb.ar.speculative_draft import Draft
from llmnb.ar.speculative_rates import DEPTHS, EVIDENCE, AcceptanceModel, geometric
from llmnb.ar.speculative_bubble import bubble_rule
from llmnb.ar.speculative_costs import (
    KNOTS, PRIOR_STEPS, PRIOR_STEPS_QUANTIZED, PRIOR_STEPS_QUANTIZED_WIDE, PRIOR_STEPS_WIDE,
    DrafterCosts, VerifyCosts, costs_for,
)
from llmnb.ar.speculative_verify import TokenTree

# the cost model's names, for the callers that import them from here
__all__ = ["ALPHA_CEILING", "K_LIMIT", "KNOTS", "PRIOR_STEPS", "PRIOR_STEPS_QUANTIZED",
           "PRIOR_STEPS_QUANTIZED_WIDE", "PRIOR_STEPS_WIDE", "PROBE_SHARE", "BubbleController",
           "DrafterCosts", "VerifyCosts", "costs_for"]

K_LIMIT = KNOTS[-1]   # 64: the longest draft the measured cost curve covers
# "could it ever pay?" is asked at 9 tokens in 10 accepted, E(K) up to 1 / (1 - 0.9) = 10
# tokens a round: a drafter that cannot pay then is not worth a probe
ALPHA_CEILING = 0.9
# a probe may risk a quarter of what the drafter would save: it breaks even if one probe in
# four finds a drafter that pays
PROBE_SHARE = 0.25


class BubbleController(AcceptanceModel):
    """Per-drafter K, draft trimming and the verify-or-step gate (module docstring), on the
    acceptance model of each drafter's drafts. ``gate=False``: the bubble rule alone, every
    draft verified."""

    def __init__(self, free: Sequence[bool], k: int, k_max: int, adaptive: bool = True,
                 gate: bool = True, decay: float = 0.8, probe_every: int = 16,
                 costs: VerifyCosts | None = None, keys: Sequence[str] = ()) -> None:
        super().__init__(free, decay)
        n = len(free)
        self.costs = costs if costs is not None else VerifyCosts()
        # a model drafter's measured costs and standing decision, kept by the target's costs
        # for later generations under its ``Drafter.cost_key`` (`keys`; none: this one only)
        self.drafter = [self.costs.drafter(keys[j] if j < len(keys) and not free[j] else "")
                        for j in range(n)]
        self.k = [k] * n
        self.k_max = k_max
        self.adaptive = adaptive
        self.gate = gate
        self.probe_every = probe_every
        for j, rec in enumerate(self.drafter):   # a model drafter seen before starts where its
            if free[j] or not (gate and adaptive):   # last generation left it
                continue
            if rec.k >= 0:
                self.k[j] = rec.k
            for b in range(min(DEPTHS, len(rec.tries))):
                if rec.tries[b] > 0.0:
                    self.hits[j, 0, b], self.tries[j, 0, b] = rec.hits[b], rec.tries[b]
                    self.seen[j, 0, b] = EVIDENCE
            if not rec.ran and not rec.timed:
                rec.paused = rec.probe_gap = probe_every
        self.prefill_token_s = 0.0        # the target's prompt pass, seconds per token
        self.k_used = list(self.k)        # K per drafter in the last round (a free drafter's trim)

    # -- what was measured --------------------------------------------------------------
    def time_draft(self, j: int, tokens: int, seconds: float) -> None:
        """Drafter j's `tokens` draft steps (forward passes of one token) took `seconds`."""
        self.drafter[j].time_draft(tokens, seconds)

    def time_feed(self, j: int, tokens: int, seconds: float) -> None:
        """Drafter j's catch-up fed `tokens` in one batch in `seconds`
        (``DrafterCosts.time_feed``)."""
        self.drafter[j].time_feed(tokens, seconds)

    def draft_s(self, j: int) -> float:
        """d: drafter j's measured seconds per drafted token (0: not timed yet)."""
        return self.drafter[j].draft_s

    def time_prefill(self, tokens: int, seconds: float) -> None:
        """The target's prompt pass: the prior of a drafter's catch-up cost (``per_fed``)."""
        self.prefill_token_s = seconds / max(1, tokens)

    def needs_timing(self, j: int) -> bool:
        """Should the loop time one step of costly drafter j (``Drafter.catch_up`` of the
        context's first token, the start of the catch-up its first draft needs anyway) before
        the controller decides about it? Once per generation, with the gate on."""
        return not self.free[j] and self.costed and not self.drafter[j].timed

    def per_fed(self, j: int) -> float:
        """b: seconds per catch-up token after the first, measured, else d times the ratio of
        the target's prompt pass per token to its decode step (a batch of n tokens costs a
        model about what its prompt pass of n tokens costs)."""
        rec = self.drafter[j]
        if rec.feed_s > 0.0 or self.free[j]:
            return rec.feed_s
        if self.prefill_token_s > 0.0 and self.t_step > 0.0:
            return rec.draft_s * min(1.0, self.prefill_token_s / self.t_step)
        return rec.draft_s

    def time_step(self, seconds: float) -> None:
        self.costs.time_step(seconds)

    def time_verify(self, rows: int, seconds: float) -> None:
        self.costs.time_verify(rows, seconds)

    @property
    def t_step(self) -> float:
        return self.costs.t_step

    def verify_cost(self, rows: int) -> float:
        """Predicted seconds of a verify batch of `rows` rows (``VerifyCosts.predict``)."""
        return self.costs.predict(rows)

    @property
    def costed(self) -> bool:
        """Gate on, and a plain step's time known?"""
        return self.gate and self.costs.t_step > 0.0

    # -- decisions ----------------------------------------------------------------------
    def rate(self, surv: Sequence[float], k: int, per_draft: float, per_fed: float = 0.0) -> float:
        """Tokens per second of a round verifying the first k tokens of a draft whose
        survival is `surv` (S(1), S(2), ...), drafting at `per_draft` seconds a token after
        catching up the round before's E - 1 tokens beyond its first at `per_fed` each
        (k = 0: a plain step)."""
        e = 1.0 + sum(surv[:k])
        return e / (self.costs.predict(1 + k) + k * per_draft + (e - 1.0) * per_fed)

    def best_k(self, surv: Sequence[float], per_draft: float, per_fed: float = 0.0) -> int:
        """argmax_K of ``rate`` over 1..len(surv), or 0 when no K beats plain decode steps."""
        best, best_rate, e = 0, 1.0 / self.t_step, 1.0
        for kk in range(1, len(surv) + 1):
            e += surv[kk - 1]
            cost = self.costs.predict(1 + kk) + kk * per_draft + (e - 1.0) * per_fed
            rate = e / cost
            if rate > best_rate:
                best, best_rate = kk, rate
        return best

    def worth(self, j: int, surv: Sequence[float], k: int, behind: int, remaining: int,
              share: float, probe: int = 0) -> bool:
        """Does drafter j's catch-up pay: do the `behind` tokens it has to feed, beyond what a
        round drafting k at survival `surv` feeds anyway, and a `probe` of that many tokens,
        cost at most `share` of the seconds that round's rate saves over the `remaining`
        tokens?"""
        if k <= 0:
            return False
        d, b = self.draft_s(j), self.per_fed(j)
        steady = self.rate(surv, k, d, b)
        gain = remaining * (self.t_step - 1.0 / steady) if steady > 0.0 else 0.0
        price = max(0.0, behind - 1.0 - sum(surv[:k])) * b + probe * d
        return gain > 0.0 and price <= share * gain

    def draft_length(self, j: int, drafts: Sequence[Draft] = (), behind: int = 1,
                     remaining: int = K_LIMIT) -> int:
        """How many tokens to ask drafter j for, given the `drafts` of this round so far (the free
        drafters ask first), the tokens it is `behind` (``Drafter.behind``) and the tokens
        `remaining` to generate: a free drafter k_max once costs are known (``verify_lengths`` trims
        it), else its K. A costly drafter: none while the gate still has to time a plain step or its
        own step (``needs_timing``); its K while that pays, unless a free draft promises a higher
        rate or its catch-up costs more than the rest of the generation saves; after sitting out
        (K = 0), a probe of one token when one is due, it could pay at ALPHA_CEILING and the
        probe's catch-up costs at most PROBE_SHARE of that gain."""
        if self.free[j]:
            return self.k_max if self.costed else self.k[j]
        if not self.gate:
            return self.k[j]
        rec = self.drafter[j]
        if not self.costed or not rec.timed:
            return 0
        if rec.draft_s == 0.0:                    # its step could not be timed: one token
            return 1
        d, b = rec.draft_s, self.per_fed(j)
        if self.k[j] == 0 or not rec.ran:         # sitting out, or not tried yet: a probe?
            if self.resting(j):
                return 0
            rec.paused = 0
            ceiling = geometric(max(ALPHA_CEILING, self.alpha(j)), self.k_max)
            kk = self.best_k(ceiling, d, b)
            if not self.worth(j, ceiling, kk, behind, remaining, PROBE_SHARE, probe=1):
                rec.probe_gap *= 2                # it cannot pay: look again twice as late
                return 0
            if rec.ran:                           # twice as long a rest if it fails again
                rec.probe_gap *= 2
            return 1
        own_surv = self.survival(j, 0, 0.5, self.k[j])
        if not self.worth(j, own_surv, self.k[j], behind, remaining, 1.0):
            return 0
        own = self.rate(own_surv, self.k[j], d, b)
        for i, dr in enumerate(drafts):
            if self.free[i] and len(dr) > 0:
                s = self.survival(i, dr.tag, dr.prior, len(dr))
                if self.rate(s, self.best_k(s, 0.0), 0.0) >= own:
                    return 0
        return self.k[j]

    def resting(self, j: int) -> bool:
        """Is costly drafter j sitting out (K = 0, or not asked yet) with no look at it due:
        fewer rounds since its last probe, or since it was last found unable to pay, than its
        rest? Then ``draft_length`` is 0 and the loop asks it nothing (not even ``behind``)."""
        rec = self.drafter[j]
        return (not self.free[j] and self.gate and (self.k[j] == 0 or not rec.ran)
                and rec.paused < rec.probe_gap)

    def verify_lengths(self, drafts: Sequence[Draft]) -> list[int]:
        """How many of each draft's tokens to verify; all zero = a plain decode step."""
        lengths = [len(d) for d in drafts]
        self.k_used = [self.k[j] if not self.free[j] or not self.costed else 0
                       for j in range(len(drafts))]
        if not self.gate or sum(lengths) == 0:
            return lengths
        if not self.costed:                       # time a plain step first
            return [0] * len(drafts)
        # each draft trimmed to its own best length (drafting is paid for already) ...
        survs = [self.survival(j, d.tag, d.prior, len(d)) for j, d in enumerate(drafts)]
        trim = [self.best_k(s, 0.0) if len(s) > 0 else 0 for s in survs]
        for j, n in enumerate(trim):
            if self.free[j]:
                self.k_used[j] = n
        # ... then the batch built greedily, best draft first, while its rate goes up
        order = sorted((j for j in range(len(drafts)) if trim[j] > 0),
                       key=lambda j: -self.rate(survs[j], trim[j], 0.0))
        lengths = [0] * len(drafts)
        tree = TokenTree()
        best = 1.0 / self.t_step                  # a plain step
        for j in order:
            rows = len(tree) + trim[j] - tree.shared(drafts[j].tokens[:trim[j]])
            lengths[j] = trim[j]
            rate = self._yield(survs, lengths) / self.costs.predict(rows)
            if rate > best:
                best = rate
                tree.add(drafts[j].tokens[:trim[j]])
            else:
                lengths[j] = 0
        return lengths

    @staticmethod
    def _yield(survs: Sequence[Sequence[float]], lengths: Sequence[int]) -> float:
        """Expected tokens of a round verifying lengths[j] tokens of each draft: 1 + sum over i
        of P(some draft keeps at least i tokens), the drafts taken as independent."""
        total, i = 1.0, 1
        while i <= max(lengths):
            miss = 1.0
            for s, n in zip(survs, lengths):
                if n >= i:
                    miss *= 1.0 - s[i - 1]
            total += 1.0 - miss
            i += 1
        return total

    def after_round(self, drafts: Sequence[Draft], lengths: Sequence[int],
                    accepted: Sequence[int], committed: Sequence[int]) -> None:
        """Score the drafts (each by the run it has among the `committed` tokens of this and
        the next rounds: all its tokens, verified or not), then set every drafter's next K
        (without costs: the bubble rule)."""
        for j, d in enumerate(drafts):
            if len(d) > 0:
                self.drafter[j].ran = True
        self.score_round(drafts, committed)
        if self.adaptive and not self.costed:
            for j, n in enumerate(lengths):
                if n > 0:
                    self.k[j] = bubble_rule(self.k[j], n, accepted[j], self.k_max)
        if not (self.adaptive and self.costed):
            return
        for j in range(len(self.k)):
            rec = self.drafter[j]
            if self.free[j] or rec.draft_s == 0.0:        # k_max, trimmed by verify_lengths; or
                continue                                  # its step not timed yet
            if not rec.ran:                               # not asked yet: rounds to its next look
                rec.paused += 1
                continue
            kk = self.best_k(self.survival(j, 0, 0.5, self.k_max), rec.draft_s,
                             self.per_fed(j))
            if kk > 0:
                rec.paused, rec.probe_gap = 0, self.probe_every
            else:                                         # cannot pay: sit out (a probe is
                rec.paused += 1                           # ``draft_length``'s to decide)
            self.k[j] = rec.k = kk
            rec.hits = [self.hits.get((j, 0, b), 0.0) for b in range(DEPTHS)]
            rec.tries = [self.tries.get((j, 0, b), 0.0) for b in range(DEPTHS)]
