"""The timing verdicts: each flips both ways and to "the same" on hand-made runs (no clock)."""
from __future__ import annotations

import pytest

from llmnb.errors import UsageError
from llmnb.perf.timing import Ratio, Timing, against, ratio, speed_verdict, timed, timed_together


def runs(*ms: float) -> Timing:
    return Timing(tuple(t / 1e3 for t in ms))


BASE = runs(10.0, 10.2, 9.9, 10.1, 10.4)            # median 10.1, Q1 10.0, Q3 10.2 (ms)


def test_timing_keeps_every_run_and_reads_its_median_and_quartiles() -> None:
    assert BASE.seconds == pytest.approx((0.010, 0.0102, 0.0099, 0.0101, 0.0104))
    assert (BASE.median, BASE.q1, BASE.q3) == pytest.approx((0.0101, 0.0100, 0.0102))
    assert (BASE.low, BASE.high) == pytest.approx((0.0099, 0.0104))
    assert BASE.text() == "10.1 ms (IQR 10.0-10.2, 5 runs)"
    assert runs(4.05, 4.12, 4.2, 4.0, 4.3).text() == "4.12 ms (IQR 4.05-4.20, 5 runs)"
    assert BASE.text("us") == "10100 us (IQR 10000-10200, 5 runs)"


def test_ratio_range_is_slow_q1_over_fast_q3_to_slow_q3_over_fast_q1() -> None:
    fast = runs(5.0, 5.1, 4.9, 5.05, 5.2)           # Q1 5.0, median 5.05, Q3 5.1
    r = ratio(BASE, fast)
    assert (r.median, r.low, r.high) == pytest.approx((10.1 / 5.05, 10.0 / 5.1, 10.2 / 5.0))
    assert r.text() == "2.00x (1.96-2.04)"


def test_speed_verdict_flips_faster_slower_and_the_same() -> None:
    quicker = runs(9.0, 9.1, 8.9, 9.2, 9.5)          # Q3 9.2 < BASE's Q1 10.0
    assert speed_verdict(BASE, quicker) == "faster"
    assert speed_verdict(quicker, BASE) == "slower"
    overlapping = runs(10.1, 9.95, 10.05, 10.3, 9.8)  # quartiles 9.95..10.1 straddle BASE's
    assert speed_verdict(BASE, overlapping) == "the same"
    assert speed_verdict(overlapping, BASE) == "the same"
    # a 1% lower median is not a speed-up when the runs' spread is wider than 1%
    assert speed_verdict(BASE, runs(*(t * 0.99e3 for t in BASE.seconds))) == "the same"


def test_against_flips_above_below_and_as_expected() -> None:
    r = Ratio(2.0, 1.9, 2.1)
    assert against(r, 2.05, "the byte ratio") == "as expected"
    assert against(r, 1.9, "the byte ratio") == "as expected"       # the range's edge counts
    assert against(r, 1.5, "the byte ratio") == "more than expected"
    assert against(r, 3.0, "the byte ratio") == "less than expected"
    with pytest.raises(UsageError, match="the byte ratio is 0"):
        against(r, 0, "the byte ratio")


def test_fewer_than_five_runs_is_refused_naming_the_argument() -> None:
    with pytest.raises(UsageError, match="repeats=3; expected at least 5"):
        timed(lambda: None, repeats=3)
    with pytest.raises(UsageError, match="repeats=4"):
        timed_together([lambda: None], repeats=4)
    with pytest.raises(UsageError, match="fast has 3 runs"):
        ratio(BASE, runs(1.0, 1.0, 1.0))
    with pytest.raises(UsageError, match="positive run times"):
        Timing(())


def test_timed_runs_the_warm_up_untimed_and_keeps_each_run() -> None:
    calls: list[int] = []
    t = timed(lambda: calls.append(1), repeats=6, warmup=2)
    assert len(calls) == 8 and len(t.seconds) == 6 and all(s > 0 for s in t.seconds)
    order: list[str] = []
    a, b = timed_together([lambda: order.append("a"), lambda: order.append("b")], repeats=5,
                          warmup=0)
    assert order == ["a", "b"] * 5 and len(a.seconds) == len(b.seconds) == 5
