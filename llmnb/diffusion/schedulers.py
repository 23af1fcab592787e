"""How many masked positions a step commits, and which: the schedulers.

Every scheduler sees the step's candidates (``remasking.py``: a token, a confidence by the
remasking rule, the entropy and the probability of the token per masked position) and the
schedule's count, and returns the positions to commit, most certain first by the remasking
rule. The rule always orders; the schedulers differ in how far down that order they go.

| scheduler        | commits                                                  | from        |
|------------------|----------------------------------------------------------|-------------|
| `low_confidence` | the schedule's count                                     | diffuse-cpp |
| `entropy_exit`   | max(schedule's count, positions with entropy < threshold) | diffuse-cpp |
| `threshold`      | the first, and every other with probability >= threshold | Fast-dLLM   |
| `factor`         | the longest prefix whose weakest probability c has (n + 1)(1 - c) <= f | Fast-dLLM |

A *budgeted* scheduler finishes a block in its `steps` (the last one commits what is left);
an *adaptive* one (``adaptive``) runs until the block has no masks, however many forwards
that takes: Fast-dLLM's threshold and factor rules (Wu et al., "Fast-dLLM: Training-free
Acceleration of Diffusion LLM by Enabling KV Cache and Parallel Decoding", 2025) do, and
the step budget does not bound them.

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
from llmnb.errors import UsageError

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
SCHEDULERS = ("low_confidence", "entropy_exit", "threshold", "factor")


class Scheduler:
    """``low_confidence``: the schedule's count, most certain first (diffuse-cpp's default)."""

    def __init__(self, remasking: str = "low_confidence", adaptive: bool = False) -> None:
        self.remasking = remasking          # the rule used when the caller names none
        self.adaptive = adaptive            # True: a block runs until it is done

    def select(self, c: Candidates, logits: F32, n_sched: int) -> I64:
        """Indices into `c` to commit now, in commit order; `logits` are the candidates'
        rows (m, V), `n_sched` the schedule's count."""
        return order(c)[:n_sched]


class EntropyExit(Scheduler):
    """``entropy_exit``: at least the schedule's count, and every position whose entropy
    (from the raw logits) is under `threshold` nats (diffuse-cpp; strict, default 1.5)."""

    def __init__(self, threshold: float) -> None:
        super().__init__("entropy")
        self.threshold = threshold

    def select(self, c: Candidates, logits: F32, n_sched: int) -> I64:
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

    def select(self, c: Candidates, logits: F32, n_sched: int) -> I64:
        pick = threshold_pick if self.rule == "threshold" else factor_pick
        return pick(order(c), c.probability, self.value)


def _finite(name: str, value: float, low: float, high: float = math.inf) -> float:
    if not (low <= value <= high) or math.isinf(value):
        span = f">= {low:g}" if math.isinf(high) else f"in {low:g}..{high:g}"
        raise UsageError(f"{name}: expected a finite number {span}, got {value!r}")
    return value


def make_scheduler(name: str, entropy_threshold: float = 1.5, threshold: float = 0.9,
                   factor: float = 1.0) -> Scheduler:
    """The scheduler called `name`, its parameters checked."""
    if name == "low_confidence":
        return Scheduler()
    if name == "entropy_exit":
        return EntropyExit(_finite("entropy_threshold", entropy_threshold, 0.0))
    if name == "threshold":
        return FastDLLM(name, _finite("threshold", threshold, 0.0, 1.0))
    if name == "factor":
        return FastDLLM(name, _finite("factor", factor, 0.0))
    raise UsageError(f"scheduler: expected one of {', '.join(SCHEDULERS)}, got {name!r}")
