"""The one way llmnb times things: untimed warm-up rounds, then timed rounds, and the verdicts
read from them.

A round runs each function once, in order, each between two reads of ``time.perf_counter``:
timing two implementations in one round (``median_times([ours, theirs], ...)``,
``timed_together``) alternates them, so that a noisy neighbour on a shared machine slows both;
a round of stateful phases (``[prefill, decode]``, with ``before`` building fresh state
untimed) times each phase.

A verdict reads a ``Timing`` (every run kept, at least ``MIN_RUNS`` of them), never one number:

- ``ratio(slow, fast)``: the median ratio and its range from the quartiles, the slow run's Q1
  over the fast run's Q3 up to its Q3 over the fast one's Q1. The range is what the middle
  half of each side's runs allows; a difference smaller than it is the machine's noise.
- ``speed_verdict(before, after)``: "faster" or "slower" only where that whole range is on one
  side of 1; "the same" only where it straddles 1.
- ``against(ratio, expected, what)``: a measured ratio against a predicted one (a speed-up
  against a byte ratio): "as expected" only where the range straddles the prediction.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llmnb.errors import UsageError

MIN_RUNS = 5        # a verdict reads a median of at least this many timed runs
UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}


def timed_rounds(fns: Sequence[Callable[[], object]], repeats: int, warmup: int = 1,
                 before: Callable[[], object] | None = None,
                 in_a_row: int = 1) -> list[list[float]]:
    """Wall times of each of `fns` in each of `repeats` rounds after `warmup` untimed rounds;
    `before` (untimed) opens every round. With `in_a_row` > 1 each fn runs that many times in a
    row per round, the first untimed, and a round's time is the others' mean (a call timed right
    after a call of its own kind)."""
    for _ in range(warmup):
        if before is not None:
            before()
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    runs = max(1, in_a_row - 1)
    for _ in range(repeats):
        if before is not None:
            before()
        for i, fn in enumerate(fns):
            if in_a_row > 1:
                fn()
            t0 = time.perf_counter()
            for _ in range(runs):
                fn()
            times[i].append((time.perf_counter() - t0) / runs)
    return times


def median_times(fns: Sequence[Callable[[], object]], repeats: int, warmup: int = 1,
                 before: Callable[[], object] | None = None, in_a_row: int = 1) -> list[float]:
    """Median wall time of each of `fns` over `repeats` rounds (``timed_rounds``)."""
    return [statistics.median(t) for t in timed_rounds(fns, repeats, warmup, before, in_a_row)]


def median_time(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall time of `fn` over `repeats` runs after `warmup` untimed runs."""
    return median_times([fn], repeats, warmup)[0]


@dataclass(frozen=True)
class Timing:
    """Every timed run of one thing, in seconds, in the order they ran (the warm-up left out).
    Quartiles are the inclusive ones (numpy's default): with 5 runs, Q1 and Q3 are the 2nd and
    4th fastest."""

    seconds: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.seconds or min(self.seconds) <= 0:
            raise UsageError(f"Timing: expected one or more positive run times in seconds, got "
                             f"{self.seconds!r}")

    @property
    def median(self) -> float:
        return float(statistics.median(self.seconds))

    @property
    def q1(self) -> float:
        return self.quartiles()[0]

    @property
    def q3(self) -> float:
        return self.quartiles()[2]

    @property
    def low(self) -> float:
        """The fastest run."""
        return min(self.seconds)

    @property
    def high(self) -> float:
        """The slowest run."""
        return max(self.seconds)

    def quartiles(self) -> tuple[float, float, float]:
        if len(self.seconds) == 1:
            return self.seconds[0], self.seconds[0], self.seconds[0]
        q = statistics.quantiles(self.seconds, n=4, method="inclusive")
        return float(q[0]), float(q[1]), float(q[2])

    def text(self, unit: str = "ms") -> str:
        """The median and its interquartile range: "4.12 ms (IQR 4.05-4.20, 5 runs)"."""
        if unit not in UNITS:
            raise UsageError(f"Timing.text: unit {unit!r}; expected one of {', '.join(UNITS)}")
        k = UNITS[unit]
        return (f"{_sig(self.median * k)} {unit} (IQR {_sig(self.q1 * k)}-{_sig(self.q3 * k)}, "
                f"{len(self.seconds)} runs)")


def _sig(x: float) -> str:
    """Three significant figures without an exponent: 412, 41.2, 4.12, 0.412."""
    return (f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}" if x >= 1
            else f"{x:.3g}")


def timed(fn: Callable[[], object], repeats: int = MIN_RUNS, warmup: int = 1) -> Timing:
    """`fn`'s wall time over `repeats` runs after `warmup` untimed ones: every run kept. At least
    ``MIN_RUNS`` runs: a verdict reads their median and quartiles."""
    _enough("timed", repeats)
    return Timing(tuple(timed_rounds([fn], repeats, warmup)[0]))


def timed_together(fns: Sequence[Callable[[], object]], repeats: int = MIN_RUNS,
                   warmup: int = 1, before: Callable[[], object] | None = None) -> list[Timing]:
    """``timed`` for several functions in alternating rounds (each round runs each once, in
    order), so that machine noise falls on all of them alike: one ``Timing`` each."""
    _enough("timed_together", repeats)
    return [Timing(tuple(t)) for t in timed_rounds(fns, repeats, warmup, before)]


def _enough(who: str, repeats: int) -> None:
    if repeats < MIN_RUNS:
        raise UsageError(f"{who}: repeats={repeats}; expected at least {MIN_RUNS} (a verdict "
                         f"reads the median and quartiles of {MIN_RUNS} or more runs)")


@dataclass(frozen=True)
class Ratio:
    """slow / fast: the ratio of the medians, and its range from the quartiles."""

    median: float
    low: float                     # slow.q1 / fast.q3
    high: float                    # slow.q3 / fast.q1

    def text(self) -> str:
        """"2.31x (2.10-2.52)": the median ratio and its range."""
        return f"{self.median:.2f}x ({self.low:.2f}-{self.high:.2f})"


def ratio(slow: Timing, fast: Timing) -> Ratio:
    """How many times `fast` fits in `slow`: medians' ratio, range from the quartiles. Both
    timings need ``MIN_RUNS`` runs or more."""
    for name, t in (("slow", slow), ("fast", fast)):
        if len(t.seconds) < MIN_RUNS:
            raise UsageError(f"ratio: {name} has {len(t.seconds)} runs; expected at least "
                             f"{MIN_RUNS} (time it with timed(fn, repeats={MIN_RUNS}))")
    return Ratio(slow.median / fast.median, slow.q1 / fast.q3, slow.q3 / fast.q1)


def speed_verdict(before: Timing, after: Timing) -> str:
    """"faster" when even the least favourable quartiles say `after` is faster than `before`
    (the ratio before/after has its whole range above 1), "slower" when its whole range is
    below 1, "the same" only where the range straddles 1: a change inside the runs' own spread
    is not called a speed-up."""
    r = ratio(before, after)
    return "faster" if r.low > 1 else "slower" if r.high < 1 else "the same"


def against(measured: Ratio, expected: float, what: str) -> str:
    """A measured ratio against the one a model predicts (`what` names the prediction, e.g.
    "the byte ratio"): "more than expected" when the measured range is wholly above it, "less
    than expected" when wholly below, "as expected" only where the range straddles it."""
    if not expected > 0:
        raise UsageError(f"against: {what} is {expected!r}; expected a positive ratio")
    if measured.low > expected:
        return "more than expected"
    return "less than expected" if measured.high < expected else "as expected"
