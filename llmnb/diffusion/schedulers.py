"""How many masked positions a step commits, and which: the schedulers.

Every scheduler sees the step's candidates (``remasking.py``: a token, a confidence by the
remasking rule, the entropy and the probability of the token per masked position) and the
schedule's count, and returns the positions to commit, most certain first by the remasking
rule. The rule always orders; the schedulers differ in how far down that order they go.

| scheduler        | commits                                                      | from        |
|------------------|--------------------------------------------------------------|-------------|
| `low_confidence` | the schedule's count                                         | diffuse-cpp |
| `entropy_exit`   | max(schedule's count, positions with entropy < threshold)    | diffuse-cpp |
| `threshold`      | the first, and every other with probability >= threshold     | Fast-dLLM   |
| `factor`         | the longest prefix whose weakest p has (n + 1)(1 - p) <= f   | Fast-dLLM   |
| `entropy_bound`  | the longest prefix whose entropies, less the largest, <= gamma | EB-Sampler |
| `klass`          | every confident and stable position, else the schedule's count | KLASS     |
| `wino`           | a wide draft over a low threshold; re-masks what fails a high one | WINO   |

A *budgeted* scheduler finishes a block in its `steps` (the last one commits what is left);
an *adaptive* one (``adaptive``) runs until the block has no masks, however many forwards
that takes: Fast-dLLM's threshold and factor rules (Wu et al., "Fast-dLLM: Training-free
Acceleration of Diffusion LLM by Enabling KV Cache and Parallel Decoding", 2025) do, and
the step budget does not bound them; EB-Sampler and WINO neither. Each commits at least one
position per step, and WINO's re-masks take back fewer than the previous step drafted, so
after T steps at most B - T of a block's B positions are masked: B forwards at most.

Fast-dLLM's rules compare the probability of the proposed token (float64 softmax of the
untempered logits, as Fast-dLLM computes it) with the threshold, whatever the rule that
orders; with their default rule, ``probability``, order and gate are Fast-dLLM's own. Where
llmnb differs: Fast-dLLM offers only that rule and ``random`` (whose noise it gates as if it
were a probability); and its factor code, when only the last of the sorted positions fails
the bound, commits that one too (an off-by-one of its loop), which llmnb does not copy.
"""
from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from llmnb.diffusion.remasking import Candidates, order
from llmnb.diffusion.wino import VerifyRows, verification_rows
from llmnb.errors import UsageError
from llmnb.softmax import entropy, softmax

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]
SCHEDULERS = ("low_confidence", "entropy_exit", "threshold", "factor", "entropy_bound", "klass",
              "wino")


class Scheduler:
    """``low_confidence``: the schedule's count, most certain first (diffuse-cpp's default)."""

    def __init__(self, remasking: str = "low_confidence", adaptive: bool = False) -> None:
        self.remasking = remasking          # the rule used when the caller names none
        self.adaptive = adaptive            # True: a block runs until it is done

    def start_block(self) -> None:
        """A new block begins (schedulers with memory forget the last one)."""

    def temperature(self, step: int, steps: int, temperature: float) -> float:
        """The sampling temperature of a block's `step` of `steps` (the caller's by default)."""
        return temperature

    def select(self, c: Candidates, logits: F32, n_sched: int, temperature: float) -> I64:
        """Indices into `c` to commit now, in commit order; `logits` are the candidates'
        rows (m, V), `n_sched` the schedule's count, `temperature` the step's."""
        return order(c)[:n_sched]

    def verify_rows(self, canvas: I64, masked: B, block: tuple[int, int], mask: int,
                    shift: bool) -> VerifyRows | None:
        """Extra query rows for this step's forward (WINO's re-reads); none by default."""
        return None

    def revoke(self, verify_logits: F32, canvas: I64, n_committed: int) -> I64:
        """Positions to mask again, given the logits of ``verify_rows`` and the count this
        step committed (WINO); none by default: a committed token is final."""
        return np.zeros(0, dtype=np.int64)


class EntropyExit(Scheduler):
    """``entropy_exit``: at least the schedule's count, and every position whose entropy
    (from the raw logits) is under `threshold` nats (diffuse-cpp; strict, default 1.5), in
    the rule's order: its own, ``entropy``, is diffuse-cpp's at T = 0; at T > 0 it ranks by
    the tempered entropy, where diffuse-cpp keeps ranking by the raw one."""

    def __init__(self, threshold: float) -> None:
        super().__init__("entropy")
        self.threshold = threshold

    def select(self, c: Candidates, logits: F32, n_sched: int, temperature: float) -> I64:
        easy = int(np.count_nonzero(c.entropy < self.threshold))
        return order(c)[:max(n_sched, easy)]


def threshold_pick(ranked: I64, probability: F64, threshold: float) -> I64:
    """Fast-dLLM's threshold rule: the first of `ranked` always, then every other whose
    probability reaches `threshold`."""
    rest = ranked[1:][probability[ranked[1:]] >= threshold]
    out: I64 = np.concatenate([ranked[:1], rest]).astype(np.int64)
    return out


def factor_pick(ranked: I64, probability: F64, factor: float) -> I64:
    """Fast-dLLM's factor rule: the longest prefix of `ranked` in which the n-th position
    keeps the prefix's weakest probability c at c >= 1 - factor / (n + 1); n = 1 always."""
    weakest = np.minimum.accumulate(probability[ranked])                 # (m,) running minimum
    bound = 1.0 - factor / (np.arange(len(ranked)) + 2.0)                # n = 1, 2, ...
    fails = np.flatnonzero(weakest[1:] < bound[1:])
    n = int(fails[0]) + 1 if len(fails) else len(ranked)
    return ranked[:n]


class FastDLLM(Scheduler):
    """``threshold`` (default 0.9) or ``factor`` (default f = 1): Fast-dLLM's rules."""

    def __init__(self, rule: str, value: float) -> None:
        super().__init__("probability", adaptive=True)
        self.rule = rule
        self.value = value

    def select(self, c: Candidates, logits: F32, n_sched: int, temperature: float) -> I64:
        pick = threshold_pick if self.rule == "threshold" else factor_pick
        return pick(order(c), c.probability, self.value)


def entropy_bound_pick(ranked: I64, h: F64, gamma: float) -> I64:
    """EB-Sampler's rule: the longest prefix of `ranked` whose entropies `h`, summed less
    their largest, stay within `gamma` (that sum bounds the accepted tokens' mutual
    information); the first position always."""
    hs = h[ranked]
    spent = np.cumsum(hs) - np.maximum.accumulate(hs)          # (m,) nondecreasing
    return ranked[:max(1, int(np.count_nonzero(spent <= gamma)))]


class EntropyBound(Scheduler):
    """``entropy_bound``: EB-Sampler (Ben-Hamu, Gat, Severo, Nolte, Karrer, "Accelerated
    Sampling from Masked Diffusion Models via Entropy Bounded Unmasking", 2025), with the
    defaults of diffusers' EntropyBoundScheduler: gamma 0.1, the sampling temperature
    annealed from t_max on a block's first step to t_min at its `steps`-th, the entropy
    taken from the distribution the tokens are drawn from (softmax(logits / T)). (diffusers'
    class serves a uniform-noise model and re-noises what it rejects; here the rejected
    positions stay masked, as in the paper's masked models.)"""

    def __init__(self, gamma: float, t_max: float, t_min: float) -> None:
        super().__init__("entropy", adaptive=True)
        self.gamma = gamma
        self.t_max = t_max
        self.t_min = t_min

    def temperature(self, step: int, steps: int, temperature: float) -> float:
        left = max(steps - step, 0) / steps                    # 1 on the first step
        return self.t_min + (self.t_max - self.t_min) * left

    def select(self, c: Candidates, logits: F32, n_sched: int, temperature: float) -> I64:
        h = entropy(logits, temperature if temperature > 0.0 else 1.0)   # T = 0: the raw logits'
        return entropy_bound_pick(order(c), h, self.gamma)


def kl_divergence(p: F64, q: F64) -> F64:
    """KL(p || q) per row, natural log, both offset by 1e-12 as KLASS computes it."""
    out: F64 = (p * (np.log(p + 1e-12) - np.log(q + 1e-12))).sum(axis=1)
    return out


class Klass(Scheduler):
    """``klass``: KLASS (Kim, Hong, Jung, Park, Yun, "KLASS: KL-Adaptive Stability Sampling
    for Fast Inference in Masked Diffusion Models", NeurIPS 2025). A masked position is
    ready once the probability of its token exceeds `confidence` and its predicted
    distribution p_t has moved by KL(p_t || p_{t-1}) < `kl` on each of the last `history`
    steps; a step commits every ready position, and the schedule's count when none is.
    Budgeted, as in the authors' code (its defaults: LLaDA 0.6 / 0.015, Dream 0.9 / 0.001,
    history 2). The history starts with the block (the authors' code runs the output head
    on every position every step, llmnb only on the block's masked ones)."""

    def __init__(self, confidence: float, kl: float, history: int) -> None:
        super().__init__("probability")
        self.confidence = confidence
        self.kl = kl
        self.history = history
        self.prev: dict[int, F64] = {}           # position -> its last distribution (V,)
        self.kls: dict[int, list[float]] = {}     # position -> its last `history` KLs

    def start_block(self) -> None:
        self.prev = {}
        self.kls = {}

    def stable(self, positions: I64, p: F64) -> npt.NDArray[np.bool_]:
        """Record this step's distributions p (m, V) of `positions`; which have been stable
        for `history` steps."""
        out = np.zeros(len(positions), dtype=np.bool_)
        for i, pos in enumerate(positions.tolist()):
            last = self.prev.get(pos)
            kl = math.inf if last is None else float(kl_divergence(p[i:i + 1], last[None])[0])
            self.kls[pos] = (self.kls.get(pos, []) + [kl])[-self.history:]
            self.prev[pos] = p[i].copy()
            out[i] = len(self.kls[pos]) == self.history and max(self.kls[pos]) < self.kl
        return out

    def select(self, c: Candidates, logits: F32, n_sched: int, temperature: float) -> I64:
        stable = self.stable(c.positions, softmax(logits))
        ready = stable & (c.probability > self.confidence)
        ranked = order(c)
        return ranked[ready[ranked]] if ready.any() else ranked[:n_sched]


WINO_WIDE, WINO_MIN, WINO_MAX = 0.7, 5, 20     # a draft takes at most 70% of the masks, 5..20


class Wino(Scheduler):
    """``wino``: WINO (Hong et al., "Wide-In, Narrow-Out: Revokable Decoding for Efficient
    and Effective DLLMs", 2025). Wide in: a step drafts every masked position whose
    probability exceeds `draft` (0.6), at most min(max(0.7 m, 5), 20) of the m masks in the
    rule's order, and at least the first. Narrow out: each position drafted on an earlier
    step of the block is re-read with itself masked (``wino.py``) and re-masked if its
    token's probability there falls below `verify` (0.9); only on steps that drafted more
    than one, and fewer than the previous step drafted (the weakest first), so the loop
    still ends. As the authors' code does."""

    def __init__(self, draft: float, verify: float) -> None:
        super().__init__("probability", adaptive=True)
        self.draft = draft
        self.verify = verify
        self.last_drafted = 30                   # the authors' code starts a block at 30
        self.drafted: I64 = np.zeros(0, dtype=np.int64)   # this step's re-read positions

    def start_block(self) -> None:
        self.last_drafted = 30

    def select(self, c: Candidates, logits: F32, n_sched: int, temperature: float) -> I64:
        ranked = order(c)
        wide = min(max(int(len(ranked) * WINO_WIDE), WINO_MIN), WINO_MAX)
        sure = ranked[c.probability[ranked] > self.draft][:wide]
        return sure if len(sure) else ranked[:1]

    def verify_rows(self, canvas: I64, masked: B, block: tuple[int, int], mask: int,
                    shift: bool) -> VerifyRows | None:
        """A verification row for each position of the block drafted on an earlier step."""
        lo, hi = block
        self.drafted = np.flatnonzero(~masked[lo:hi]).astype(np.int64) + lo
        return verification_rows(canvas, self.drafted, mask, shift) if len(self.drafted) else None

    def revoke(self, verify_logits: F32, canvas: I64, n_committed: int) -> I64:
        """p(token at p | p masked) for each drafted p, read off its verification row, then
        ``remask``."""
        rows = np.arange(len(self.drafted))
        p_now = (softmax(verify_logits)[rows, canvas[self.drafted]] if len(self.drafted)
                 else np.zeros(0))
        return self.remask(self.drafted, p_now, n_committed)

    def remask(self, verified: I64, probability: F64, n_drafted: int) -> I64:
        """Of the `verified` positions, with their tokens' `probability` re-read with each
        masked, the ones to mask again after a step that drafted `n_drafted`."""
        drop = np.zeros(0, dtype=np.int64)
        if n_drafted > 1:
            weak = np.flatnonzero(probability < self.verify)
            if len(weak) >= self.last_drafted:
                weak = np.lexsort((verified, probability))[:self.last_drafted - 1]
            drop = verified[np.sort(weak)]
        self.last_drafted = n_drafted
        return drop


def _finite(name: str, value: float, low: float, high: float = math.inf) -> float:
    if not (low <= value <= high) or math.isinf(value):
        span = f">= {low:g}" if math.isinf(high) else f"in {low:g}..{high:g}"
        raise UsageError(f"{name}: expected a finite number {span}, got {value!r}")
    return value


def make_scheduler(name: str, entropy_threshold: float = 1.5, threshold: float = 0.9,
                   factor: float = 1.0, eb_gamma: float = 0.1,
                   eb_temperature: tuple[float, float] = (0.8, 0.4),
                   klass_confidence: float | None = None, klass_kl: float | None = None,
                   klass_history: int = 2, wino_draft: float = 0.6, wino_verify: float = 0.9,
                   arch: str = "llada") -> Scheduler:
    """The scheduler called `name`, its parameters checked (`arch` picks KLASS's defaults)."""
    if name == "low_confidence":
        return Scheduler()
    if name == "entropy_exit":
        return EntropyExit(_finite("entropy_threshold", entropy_threshold, 0.0))
    if name == "threshold":
        return FastDLLM(name, _finite("threshold", threshold, 0.0, 1.0))
    if name == "factor":
        return FastDLLM(name, _finite("factor", factor, 0.0))
    if name == "entropy_bound":
        t_max, t_min = (_finite("eb_temperature", t, 0.0) for t in eb_temperature)
        return EntropyBound(_finite("eb_gamma", eb_gamma, 0.0), t_max, t_min)
    if name == "klass":
        dream = arch == "dream"
        conf = (0.9 if dream else 0.6) if klass_confidence is None else klass_confidence
        kl = (0.001 if dream else 0.015) if klass_kl is None else klass_kl
        if klass_history < 1:
            raise UsageError(f"klass_history: expected 1 or more steps, got {klass_history}")
        return Klass(_finite("klass_confidence", conf, 0.0, 1.0), _finite("klass_kl", kl, 0.0),
                     klass_history)
    if name == "wino":
        return Wino(_finite("wino_draft", wino_draft, 0.0, 1.0),
                    _finite("wino_verify", wino_verify, 0.0, 1.0))
    raise UsageError(f"scheduler: expected one of {', '.join(SCHEDULERS)}, got {name!r}")
