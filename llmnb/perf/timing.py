"""The one way llmnb times things: untimed warm-up rounds, then the median of timed rounds.

A round runs each function once, in order, each between two reads of ``time.perf_counter``:
timing two implementations in one round (``median_times([ours, theirs], ...)``) alternates
them, so that a noisy neighbour on a shared machine slows both; a round of stateful phases
(``[prefill, decode]``, with ``before`` building fresh state untimed) times each phase.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence


def median_times(fns: Sequence[Callable[[], object]], repeats: int, warmup: int = 1,
                 before: Callable[[], object] | None = None, in_a_row: int = 1) -> list[float]:
    """Median wall time of each of `fns` over `repeats` rounds after `warmup` untimed rounds;
    `before` (untimed) opens every round. With `in_a_row` > 1 each fn runs that many times in a
    row per round, the first untimed, and a round's time is the others' mean (a call timed right
    after a call of its own kind)."""
    for _ in range(warmup):
        if before is not None:
            before()
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    timed = max(1, in_a_row - 1)
    for _ in range(repeats):
        if before is not None:
            before()
        for i, fn in enumerate(fns):
            if in_a_row > 1:
                fn()
            t0 = time.perf_counter()
            for _ in range(timed):
                fn()
            times[i].append((time.perf_counter() - t0) / timed)
    return [statistics.median(t) for t in times]


def median_time(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall time of `fn` over `repeats` runs after `warmup` untimed runs."""
    return median_times([fn], repeats, warmup)[0]
