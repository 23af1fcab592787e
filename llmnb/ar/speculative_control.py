"""The draft-length controller and its cost model: how many tokens to draft and to verify.

(Longer than the other modules: the cost model and the rules that read it are one decision,
kept in one file, read top to bottom.)

A round that verifies T rows costs c(T) seconds and commits its accepted tokens plus one; a
plain decode step costs t_1 and commits one. On a CPU c(T) is well above t_1 even for two
rows (``python -m llmnb.perf.bench_spec --paths`` measures the curve, notebook 10 draws it),
so the controller has to decide, every round, whether a batch pays and how long each draft
should be. It rests on two models, both measured:

**Costs** (``VerifyCosts``). c(T) = t_1 * s(T), with s(T) in decode steps given at knots
T = 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64 and interpolated linearly between them (a straight
line through the last two beyond). s starts from a measured prior (``PRIOR_STEPS``); the first
verify batch rescales the whole curve to this machine, and every later batch of T rows moves
the two knots around T towards what it measured (a least-mean-squares step of rate 0.3). t_1
is an average of measured plain steps. Costs belong to the machine, the model and the thread
count, not to a prompt, so the process keeps one ``VerifyCosts`` per (model file, threads)
(``costs_for``): a second call starts with what the first one measured.

**Acceptance** (SuperSpec's *bubble controller*: a bubble is a drafted row the target computed
and threw away). A copying drafter is not wrong at random: a copy is right for a long stretch,
then wrong where the text was edited, so the chance that its token i + 1 is accepted once its
first i were is higher than the chance for its first token. The controller therefore keeps,
per drafter, per kind of draft (``Draft.tag``: a lookup's match length) and per depth i (the
buckets 0, 1, 2, 3, 4-7, 8-15, 16-31, 32+), the conditional acceptance h(i) = P(token i accepted
| tokens 0..i-1 were): exponentially weighted counts (factor 0.8) of the drafts that reached
depth i and of those whose token i was right. A depth not seen yet takes the rate of the one
before it as its prior, worth two tries (depth 0: ``Draft.prior``), so with no evidence the
model is geometric. Every draft, verified or not, is judged by the run it would have had: its
tokens, all it proposed and not only the ones verified, are checked against the tokens
committed in this round and the next ones, up to ``SHADOW`` tokens or its first miss, each
round adding the hits and the miss it shows. A draft of K tokens then yields
E(K) = 1 + S(1) + ... + S(K) tokens, with S(i) = h(0) h(1) ... h(i - 1) the chance that its
first i tokens are all accepted (its accepted prefix and the target's own token).

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

from collections.abc import Callable, Sequence

import numexpr

from llmnb.ar.draft import Draft
from llmnb.ar.speculative_verify import TokenTree
from llmnb.errors import UsageError
from llmnb.model.model import Model

K_LIMIT = 64          # the most tokens a drafter may be asked for (per round, per drafter)
SHADOW = K_LIMIT      # tokens of a draft checked against what gets committed
DEPTHS = 8            # depth buckets of the conditional acceptance: 0, 1, 2, 3, 4-7, ..., 32+
ALPHA_CEILING = 0.9   # the acceptance a model drafter is granted when asked "could it ever pay?"
PROBE_SHARE = 0.25    # a probe may cost at most this share of what the drafter could save

KNOTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
# c(T) / t_1 at the knots, measured priors the first batch rescales (SmolLM2-135M, 1 thread,
# 150 cached tokens, median of 5), each from `python -m llmnb.perf.bench_spec --threads 1
# --paths P` with P: float32 weights as loaded, X@W
PRIOR_STEPS = (1.0, 1.45, 1.79, 2.10, 2.74, 3.50, 3.85, 4.19, 5.2, 6.2, 8.0, 9.8)
# ... with the wide layout of the weights (``llmnb.model.wide``: float32 tiles, the
# default; ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE``), tiles
PRIOR_STEPS_WIDE = (1.0, 1.11, 1.64, 1.57, 2.15, 1.87, 2.36, 3.00, 4.11, 5.24, 7.00, 10.3)
# ... quantized weights (SmolLM2's Q4_1 blocks, ``llmnb.kernels``' few-row products; from
# DENSE_ROWS rows on dequantize + sgemm, 48 when these were measured), in quantized decode
# steps, quantized
PRIOR_STEPS_QUANTIZED = (1.0, 2.32, 2.98, 3.56, 5.06, 6.15, 8.47, 12.0, 15.9, 20.5, 15.5, 18.3)
# ... and with their dequantized wide copy (the kernels below WIDE_ROWS_QUANTIZED = 8 rows),
# its W@X.T milliseconds over the quantized step's, quantized+W@X.T
PRIOR_STEPS_QUANTIZED_WIDE = (1.0, 2.32, 2.98, 3.56, 5.06, 4.69, 5.51, 5.45, 7.22, 7.91, 9.89,
                              11.4)


class VerifyCosts:
    """Seconds of a plain decode step (t_1) and of a verify batch of T rows on this machine,
    for one model and thread count (module docstring)."""

    def __init__(self, steps: Sequence[float] = PRIOR_STEPS, rate: float = 0.3) -> None:
        if len(steps) != len(KNOTS):
            raise UsageError(f"VerifyCosts: expected {len(KNOTS)} steps, one per knot {KNOTS}, "
                             f"got {len(steps)}")
        self.steps = [float(s) for s in steps]     # c(T) / t_1 at each knot
        self.rate = rate
        self.t_step = 0.0                 # seconds of a plain decode step (average); 0 = unknown
        self.batches = 0                  # verify batches measured

    def _weights(self, rows: int) -> tuple[int, float]:
        """The knot interval [i, i + 1] of `rows` and its weight on knot i + 1 (> 1 beyond
        the last knot: the line through the last two)."""
        i = 0
        while i < len(KNOTS) - 2 and KNOTS[i + 1] < rows:
            i += 1
        return i, (rows - KNOTS[i]) / (KNOTS[i + 1] - KNOTS[i])

    def steps_at(self, rows: int) -> float:
        """c(rows) / t_1, never below one step."""
        if rows <= 1:
            return 1.0
        i, w = self._weights(rows)
        return max(1.0, (1.0 - w) * self.steps[i] + w * self.steps[i + 1])

    def predict(self, rows: int) -> float:
        """Predicted seconds of a batch of `rows` rows (0 while t_1 is unknown)."""
        return self.t_step * self.steps_at(rows)

    def time_step(self, seconds: float) -> None:
        self.t_step = seconds if self.t_step == 0.0 else 0.7 * self.t_step + 0.3 * seconds

    def time_verify(self, rows: int, seconds: float) -> None:
        if self.t_step == 0.0 or rows < 2:
            return
        measured = seconds / self.t_step
        if self.batches == 0:             # the first batch sets the level of the whole curve
            scale = measured / self.steps_at(rows)
            self.steps = [1.0] + [s * scale for s in self.steps[1:]]
        else:                             # least mean squares on the two knots around T
            i, w = self._weights(rows)
            w = min(w, 1.0)
            err = measured - self.steps_at(rows)
            if i > 0:                     # knot 0 (one row) is a plain step by definition
                self.steps[i] += self.rate * (1.0 - w) * err
            self.steps[i + 1] += self.rate * w * err
        self.batches += 1

    def calibrate(self, seconds_for: Callable[[int], float]) -> None:
        """Measure the curve directly: `seconds_for(T)` times a batch of T rows (T = 1 is a
        plain step), at every knot."""
        t1 = seconds_for(1)
        self.t_step = t1
        self.steps = [1.0] + [max(1.0, seconds_for(t) / t1) for t in KNOTS[1:]]
        self.batches = max(self.batches, 1)


_COSTS: dict[tuple[str, int, bool], VerifyCosts] = {}


def costs_for(model: Model) -> VerifyCosts:
    """The process's verify costs for `model` at the current thread count (numexpr's setting,
    which ``llmnb.threads`` keeps equal to BLAS's), for its weights (float32 with or without the
    wide copies, ``Transformer.use_wide``, quantized with or without: four curves)."""
    weights = model.transformer.weights.weights                # "f32" or "quantized"
    wide = bool(model.transformer.wide)
    key = (f"{model.path} {weights}", int(numexpr.get_num_threads()), wide)
    if key not in _COSTS:
        priors = ({(False, False): PRIOR_STEPS, (False, True): PRIOR_STEPS_WIDE,
                   (True, False): PRIOR_STEPS_QUANTIZED, (True, True): PRIOR_STEPS_QUANTIZED_WIDE})
        _COSTS[key] = VerifyCosts(priors[weights == "quantized", wide])
    return _COSTS[key]


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
                 costs: VerifyCosts | None = None) -> None:
        n = len(free)
        self.free = list(free)            # drafters whose proposals cost no forward pass
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
        self.draft_s = [0.0] * n          # seconds per drafted token, d (EMA)
        self.feed_s = [0.0] * n           # seconds per catch-up token after the first, b (EMA)
        self.timed = [False] * n          # a model drafter's step timed (``needs_timing``)
        self.ran = [False] * n            # ... and it has drafted
        self.prefill_token_s = 0.0        # the target's prompt pass, seconds per token
        self.paused = [0] * n             # rounds a costly drafter has sat out (K = 0) ...
        self.probe_gap = [probe_every] * n  # ... and how many it sits out before a probe
        self.costs = costs if costs is not None else VerifyCosts()
        self.k_used = [k] * n             # K per drafter in the last round (a free drafter's trim)
        # per drafter, its drafts still being checked against the committed tokens, each with
        # how many of its tokens the committed ones matched so far
        self.shadow: list[list[tuple[Draft, int]]] = [[] for _ in range(n)]

    # -- what was measured --------------------------------------------------------------
    def rates(self, j: int, tag: int = 0, prior: float = 0.5) -> list[float]:
        """Drafter j's conditional acceptance h per depth bucket for drafts tagged `tag`: at
        depth 0 its counts start at 2 * prior hits in two tries, at each deeper bucket at two
        tries at the rate of the bucket before (the draft says its prior)."""
        out: list[float] = []
        before = prior
        for b in range(DEPTHS):
            key = (j, tag, b)
            h = self.hits.get(key, 2.0 * before) / self.tries.get(key, 2.0)
            out.append(h)
            before = h
        return out

    def alpha(self, j: int, tag: int = 0, prior: float = 0.5) -> float:
        """Drafter j's recent acceptance of the first token of drafts tagged `tag`."""
        key = (j, tag, 0)
        return self.hits.get(key, 2.0 * prior) / self.tries.get(key, 2.0)

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
        for b in range(DEPTHS):
            if tries[b] > 0:
                key = (j, d.tag, b)
                self.hits[key] = self.decay * self.hits.get(key, 2.0 * (d.prior if b == 0 else
                                                                         h[b - 1])) + hits[b]
                self.tries[key] = self.decay * self.tries.get(key, 2.0) + tries[b]

    def time_draft(self, j: int, tokens: int, seconds: float) -> None:
        """`tokens` draft steps (forward passes of one token) took `seconds`."""
        if tokens > 0:
            s = seconds / tokens
            self.draft_s[j] = s if self.draft_s[j] == 0.0 else 0.7 * self.draft_s[j] + 0.3 * s

    def time_feed(self, j: int, tokens: int, seconds: float) -> None:
        """Drafter j's catch-up fed `tokens` in one batch in `seconds`: one token is a draft
        step (d); more are d and the rest at b each."""
        self.timed[j] = True
        if tokens == 1:
            self.time_draft(j, 1, seconds)
        elif tokens > 1 and self.draft_s[j] > 0.0:
            b = max(0.0, seconds - self.draft_s[j]) / (tokens - 1)
            self.feed_s[j] = b if self.feed_s[j] == 0.0 else 0.7 * self.feed_s[j] + 0.3 * b

    def time_prefill(self, tokens: int, seconds: float) -> None:
        """The target's prompt pass: the prior of a drafter's catch-up cost (``per_fed``)."""
        self.prefill_token_s = seconds / max(1, tokens)

    def needs_timing(self, j: int) -> bool:
        """Should the loop time one step of costly drafter j (``Drafter.catch_up`` of the
        context's first token, the start of the catch-up its first draft needs anyway) before
        the controller decides about it? Once per generation, with the gate on."""
        return not self.free[j] and self.costed and not self.timed[j]

    def per_fed(self, j: int) -> float:
        """b: seconds per catch-up token after the first, measured, else d times the ratio of
        the target's prompt pass per token to its decode step (a batch of n tokens costs a
        model about what its prompt pass of n tokens costs)."""
        if self.feed_s[j] > 0.0 or self.free[j]:
            return self.feed_s[j]
        if self.prefill_token_s > 0.0 and self.t_step > 0.0:
            return self.draft_s[j] * min(1.0, self.prefill_token_s / self.t_step)
        return self.draft_s[j]

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
        d, b = self.draft_s[j], self.per_fed(j)
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
        if not self.costed or not self.timed[j]:
            return 0
        if self.draft_s[j] == 0.0:                # its step could not be timed: one token
            return 1
        d, b = self.draft_s[j], self.per_fed(j)
        if self.k[j] == 0 or not self.ran[j]:     # sitting out, or not tried yet: a probe?
            if self.ran[j] and self.paused[j] < self.probe_gap[j]:
                return 0
            ceiling = geometric(max(ALPHA_CEILING, self.alpha(j)), self.k_max)
            kk = self.best_k(ceiling, d, b)
            if not self.worth(j, ceiling, kk, behind, remaining, PROBE_SHARE, probe=1):
                return 0
            if self.ran[j]:                       # twice as long a rest if it fails again
                self.probe_gap[j] *= 2
            self.paused[j] = 0
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
                self.ran[j] = True
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
            if self.free[j] or self.draft_s[j] == 0.0:    # k_max, trimmed by verify_lengths; or
                continue                                  # its step not timed yet
            kk = self.best_k(self.survival(j, 0, 0.5, self.k_max), self.draft_s[j],
                             self.per_fed(j))
            if kk > 0:
                self.paused[j], self.probe_gap[j] = 0, self.probe_every
            else:                                         # cannot pay: sit out (a probe is
                self.paused[j] += 1                       # ``draft_length``'s to decide)
            self.k[j] = kk
