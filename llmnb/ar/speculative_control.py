"""The draft-length controller and its cost model: how many tokens to draft and to verify.

(Longer than the other modules: the cost model and the rules that read it are one decision,
kept in one file, read top to bottom.)

A round that verifies T rows costs c(T) seconds and commits its accepted tokens plus one; a
plain decode step costs t_1 and commits one. On a CPU c(T) is well above t_1 even for two
rows (``python -m llmnb.perf.bench_spec --paths`` measures the curve, notebook 10 draws it),
so the controller has to decide, every round, whether a batch pays and how long each draft
should be. It rests on two models, both measured:

**Costs** (``llmnb.ar.speculative_costs``): c(T), the measured seconds of a verify batch of T
rows, t_1 of a plain step, and each model drafter's measured seconds per drafted and per
caught-up token, kept per (model, threads) across generations.

**Acceptance** (SuperSpec's *bubble controller*: a bubble is a drafted row the target computed
and threw away). A copying drafter is not wrong at random: a copy is right for a long stretch,
then wrong where the text was edited, so the chance that its token i + 1 is accepted once its
first i were is higher than the chance for its first token. The controller therefore keeps,
per drafter, per kind of draft (``Draft.tag``: a lookup's match length) and per depth i (the
buckets 0, 1, 2, 3, 4-7, 8-15, 16-31, 32+), the conditional acceptance h(i) = P(token i accepted
| tokens 0..i-1 were): exponentially weighted counts (factor 0.8) of the drafts that reached
depth i and of those whose token i was right. A depth not seen yet takes the rate of the one
before it as its prior, worth two tries (depth 0: ``Draft.prior``), so with no evidence the
model is geometric; and a free drafter's rate rises above its prior only once two drafts were
scored at its depth (``EVIDENCE``: in prose, one lucky run of a short match would otherwise
buy a batch). A free drafter's kinds share what they show at depth 0: a kind not seen yet
starts from the higher of its own prior and the first-token rate of all the drafter's drafts in
this generation, once EVIDENCE of them were scored. A lookup's tag is the length of its match,
and a copy re-joined after an edit comes back with a match of 1, 2, 3 ... tokens, one kind a
round: without this, each kind would need two copies of its own before it could be trusted,
and a text with a few edits has no more than a few copies. Every draft, verified or not, is
judged by the run it would have had: its tokens, all it proposed and not only the ones
verified, are checked against the tokens committed in this round and the next ones, up to
``SHADOW`` tokens or its first miss, each round adding the hits and the miss it shows. A
draft of K tokens then yields E(K) = 1 + S(1) + ... + S(K) tokens, with S(i) = h(0) h(1) ...
h(i - 1) the chance that its first i tokens are all accepted (its accepted prefix and the
target's own token).

Decisions (``gate=True``, the default), once t_1 is known (until then every round is a plain
step, and a costly drafter is not asked):

- a free drafter (lookup, n-gram) is asked for as many tokens as its match supports, up to
  k_max, and its draft is trimmed to K = argmax E(K) / c(1 + K), c the measured curve;
- a costly drafter (a model) pays twice: d_j seconds per drafted token, and its catch-up,
  the tokens committed since it last ran, fed through its model in one batch at b_j seconds
  each after the first (the whole prompt before its first draft). Before anything else the
  loop times one step of it by feeding the context's first token (the start of that catch-up,
  nothing wasted): d_j; b_j starts at d_j times the target's prompt pass per token over its
  decode step, and both follow what the rounds measure. It drafts K_j = argmax E(K) /
  (c(1 + K) + K d_j + (E(K) - 1) b_j) tokens, but not in a round whose free drafts already
  promise more tokens per second, nor when catching up costs more than its rate would save
  over the tokens still to generate. When no K beats plain steps it sits out (K_j = 0). Its
  first draft, and the first after each rest (16 rounds, then 32, 64, ...), is a *probe* of
  one token, made only if at acceptance ALPHA_CEILING (or its own, if higher) it would beat
  plain steps and the probe -- its catch-up and one draft step -- costs at most PROBE_SHARE
  of what it would then save over the tokens still to generate. So a drafter whose step
  costs too much at any acceptance is never asked for a token, and the prompt pass of a
  first draft is paid only where it can pay back;
- the drafts to verify are chosen greedily by their own rate E / c: a draft joins the batch if
  the batch's expected yield 1 + sum_i P(some draft keeps i tokens) (drafts independent),
  divided by c(rows of the token tree), goes up; no draft at all, or none that beats 1 / t_1,
  makes the round a plain decode step, as fast as ``llmnb.generate``'s.

Without costs (``gate=False``) every draft is verified, and each drafter's K follows the
bubble rule after each round it was verified in, with b = n - a its bubble:

    b == 0 and n >= K_j:  K_j <- min(k_max, K_j + ceil(K_j / 2))      (grow by half)
    b > 0:                K_j <- max(1, K_j - ceil(b / 2))            (give back half the bubble)

None of this changes a token: any K and any gate decision give exactly greedy decoding, and
each round samples exactly from the target. It changes only the speed.
"""
from __future__ import annotations

from collections.abc import Sequence

from llmnb.ar.draft import Draft
from llmnb.ar.speculative_costs import (
    KNOTS, PRIOR_STEPS, PRIOR_STEPS_QUANTIZED, PRIOR_STEPS_QUANTIZED_WIDE, PRIOR_STEPS_WIDE,
    DrafterCosts, VerifyCosts, costs_for,
)
from llmnb.ar.speculative_verify import TokenTree

__all__ = ["ALPHA_CEILING", "DEPTHS", "K_LIMIT", "KNOTS", "PRIOR_STEPS", "PRIOR_STEPS_QUANTIZED",
           "PRIOR_STEPS_QUANTIZED_WIDE", "PRIOR_STEPS_WIDE", "PROBE_SHARE", "SHADOW",
           "BubbleController", "DrafterCosts", "VerifyCosts", "costs_for", "depth_bucket",
           "expected_tokens", "geometric"]

K_LIMIT = 64          # the most tokens a drafter may be asked for (per round, per drafter)
SHADOW = K_LIMIT      # tokens of a draft checked against what gets committed
DEPTHS = 8            # depth buckets of the conditional acceptance: 0, 1, 2, 3, 4-7, ..., 32+
ALPHA_CEILING = 0.9   # the acceptance a model drafter is granted when asked "could it ever pay?"
PROBE_SHARE = 0.25    # a probe may cost at most this share of what the drafter could save
PRIOR_TRIES = 2.0     # the weight of a bucket's prior, in tries, before it has counts of its own
EVIDENCE = 2          # drafts a bucket must have been scored on before its rate may pass its prior
ANY = -1              # the tag of a free drafter's record over all its kinds (depth 0 only)
GUESS = 0.5           # that record's prior: a guess, right half the time

def expected_tokens(alpha: float, k: int) -> float:
    """Tokens a round commits with a draft of k at a constant per-token acceptance alpha:
    1 + alpha + ... + alpha^k (the accepted prefix and the target's own token)."""
    al = min(alpha, 0.999)
    return (1.0 - al ** (k + 1)) / (1.0 - al)


def geometric(alpha: float, n: int) -> list[float]:
    """S(1..n) at a constant per-token acceptance alpha: alpha, alpha^2, ..., alpha^n."""
    al, s = min(alpha, 0.999), 1.0
    out: list[float] = []
    for _ in range(n):
        s *= al
        out.append(s)
    return out


def depth_bucket(i: int) -> int:
    """The bucket of draft depth i (0-based): 0, 1, 2, 3, then 4-7, 8-15, 16-31, 32+."""
    return i if i < 4 else min(DEPTHS - 1, i.bit_length() + 1)


class BubbleController:
    """Per-drafter K, draft trimming and the verify-or-step gate, from bubbles and measured
    costs (module docstring). ``gate=False``: the bubble rule alone, every draft verified."""

    def __init__(self, free: Sequence[bool], k: int, k_max: int, adaptive: bool = True,
                 gate: bool = True, decay: float = 0.8, probe_every: int = 16,
                 costs: VerifyCosts | None = None, keys: Sequence[str] = ()) -> None:
        n = len(free)
        self.free = list(free)            # drafters whose proposals cost no forward pass
        self.costs = costs if costs is not None else VerifyCosts()
        # a model drafter's measured costs and standing decision, kept by the target's costs
        # for later generations under its ``Drafter.cost_key`` (`keys`; none: this one only)
        self.drafter = [self.costs.drafter(keys[j] if j < len(keys) and not free[j] else "")
                        for j in range(n)]
        self.k = [k] * n
        self.k_max = k_max
        self.adaptive = adaptive
        self.gate = gate
        self.decay = decay
        self.probe_every = probe_every
        # (drafter, draft tag, depth bucket) -> weighted drafts whose token at that depth was
        # right, and weighted drafts that reached that depth (their tokens before it right)
        self.hits: dict[tuple[int, int, int], float] = {}
        self.tries: dict[tuple[int, int, int], float] = {}
        self.seen: dict[tuple[int, int, int], int] = {}     # ... and the drafts scored there
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
        # per drafter, its drafts still being checked against the committed tokens, each with
        # how many of its tokens the committed ones matched so far
        self.shadow: list[list[tuple[Draft, int]]] = [[] for _ in range(n)]

    # -- what was measured --------------------------------------------------------------
    def rates(self, j: int, tag: int = 0, prior: float = 0.5) -> list[float]:
        """Drafter j's conditional acceptance h per depth bucket for drafts tagged `tag`, each
        bucket's counts starting from ``PRIOR_TRIES`` tries at its prior: `prior` (the draft's)
        at depth 0, the rate of the bucket before at each deeper one. A free drafter's rate
        passes its prior only once ``EVIDENCE`` drafts were scored in its bucket: one lucky
        run of a short match in prose is not a copy. (A model drafter's drafts are paid for
        and probed rarely: its first one counts.) A free drafter's depth-0 prior is the higher
        of `prior` and its record over all kinds, once that has EVIDENCE (module docstring)."""
        out: list[float] = []
        before = prior
        shared = (j, ANY, 0)
        if self.free[j] and tag != ANY and self.seen.get(shared, 0) >= EVIDENCE:
            hits, tries = self._counts(shared, GUESS)
            before = max(prior, hits / tries)
        for b in range(DEPTHS):
            key = (j, tag, b)
            hits, tries = self._counts(key, before)
            h = hits / tries
            before = (min(h, before) if self.free[j] and self.seen.get(key, 0) < EVIDENCE
                      else h)
            out.append(before)
        return out

    def _counts(self, key: tuple[int, int, int], prior: float) -> tuple[float, float]:
        """The weighted (hits, tries) of bucket `key`, or its prior's while it has none."""
        tries = self.tries.get(key, 0.0)
        if tries == 0.0:
            return PRIOR_TRIES * prior, PRIOR_TRIES
        return self.hits[key], tries

    def alpha(self, j: int, tag: int = 0, prior: float = 0.5) -> float:
        """Drafter j's recent acceptance of the first token of drafts tagged `tag`."""
        return self.rates(j, tag, prior)[0]

    def survival(self, j: int, tag: int, prior: float, n: int) -> list[float]:
        """S(1..n): the chance that the first i tokens of drafter j's draft tagged `tag` are all
        accepted, the product of the conditional rates up to depth i - 1; it stops early once
        S < 1e-4 (deeper tokens add nothing a round could gain)."""
        h = self.rates(j, tag, prior)
        out: list[float] = []
        s = 1.0
        i = 0
        while i < n and s >= 1e-4:
            s *= min(h[depth_bucket(i)], 0.999)
            out.append(s)
            i += 1
        return out

    def _score(self, j: int, d: Draft, run: int, miss: bool, start: int = 0) -> None:
        """Drafter j's draft `d` showed `run` more right tokens from depth `start` on, then a
        wrong one if `miss`."""
        hits = [0] * DEPTHS
        tries = [0] * DEPTHS
        for i in range(start, start + run):
            b = depth_bucket(i)
            hits[b] += 1
            tries[b] += 1
        if miss:
            tries[depth_bucket(start + run)] += 1
        h = self.rates(j, d.tag, d.prior)            # the priors of buckets not seen yet
        counted = depth_bucket(start - 1) if start > 0 else -1   # buckets it was counted in
        for b in range(DEPTHS):
            if tries[b] > 0:
                self._add((j, d.tag, b), d.prior if b == 0 else h[b - 1], hits[b], tries[b],
                          b > counted)
        if self.free[j] and tries[0] > 0:            # the record over all its kinds
            self._add((j, ANY, 0), GUESS, hits[0], tries[0], True)

    def _add(self, key: tuple[int, int, int], prior: float, hits: int, tries: int,
             new: bool) -> None:
        """Add `hits` in `tries` to bucket `key` (its counts decayed first, or its prior's),
        and one draft scored there if it is `new` to it."""
        h0, t0 = self._counts(key, prior)
        self.hits[key] = self.decay * h0 + hits
        self.tries[key] = self.decay * t0 + tries
        if new:
            self.seen[key] = self.seen.get(key, 0) + 1

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

    def _check(self, j: int, d: Draft, matched: int, committed: Sequence[int]) -> int:
        """Check drafter j's draft `d`, of which `matched` tokens were right so far, against
        `committed`, the round's tokens, and score what it shows at once (the tokens it matched,
        and a miss if one did not); the tokens matched now, or -1 once it is done: it missed or
        SHADOW (or all) of its tokens matched."""
        want = min(len(d), SHADOW)
        hits, miss = 0, False
        for tok in committed:
            if matched + hits == want:
                break
            if d.tokens[matched + hits] != tok:
                miss = True
                break
            hits += 1
        self._score(j, d, hits, miss, matched)
        return -1 if miss or matched + hits == want else matched + hits

    def after_round(self, drafts: Sequence[Draft], lengths: Sequence[int], accepted: Sequence[int],
                    committed: Sequence[int]) -> None:
        """Score the drafts (each by the run it has among the `committed` tokens of this and
        the next rounds: all its tokens, verified or not), then set every drafter's next K
        (the bubble rule without costs)."""
        for j, d in enumerate(drafts):
            n = lengths[j]
            if len(d) > 0:
                self.drafter[j].ran = True
            still: list[tuple[Draft, int]] = []
            for dj, matched in [*self.shadow[j], (d, 0)]:   # the earlier drafts still open,
                if len(dj) > 0:                               # then this round's
                    m = self._check(j, dj, matched, committed)
                    if m >= 0:
                        still.append((dj, m))
            self.shadow[j] = still
            if n > 0 and self.adaptive and not self.costed:    # the bubble rule
                bubble = n - accepted[j]
                if bubble == 0 and n >= self.k[j]:
                    self.k[j] = min(self.k_max, self.k[j] + (self.k[j] + 1) // 2)
                elif bubble > 0:
                    self.k[j] = max(1, self.k[j] - (bubble + 1) // 2)
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
