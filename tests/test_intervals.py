"""The 95% intervals the notebooks print: Wilson's for a proportion, the normal one for a mean."""
from __future__ import annotations

import numpy as np
import pytest

from llmnb.errors import UsageError
from llmnb.perf.intervals import mean, proportion, separated, share


def test_wilson_interval_matches_its_published_values_and_stays_inside_0_1() -> None:
    # Newcombe (1998), "Two-sided confidence intervals for the single proportion", table I:
    # 81/263 -> 0.2553..0.3662, 15/148 -> 0.0624..0.1605, 0/20 -> 0..0.1611, 1/29 -> 0.0061..0.1718
    for (k, n), (lo, hi) in {(81, 263): (0.2553, 0.3662), (15, 148): (0.0624, 0.1605),
                             (0, 20): (0.0, 0.1611), (1, 29): (0.0061, 0.1718)}.items():
        assert proportion(k, n) == pytest.approx((lo, hi), abs=1e-4)
    assert proportion(20, 20) == pytest.approx((1 - 0.1611, 1.0), abs=1e-4)
    assert proportion(0, 20)[0] == 0.0 and proportion(20, 20)[1] == 1.0     # exactly, at the edges


def test_share_prints_the_interval_and_separated_compares_two() -> None:
    assert share(3, 4) == "75.0% [30.1, 95.4] (3/4)"
    assert separated((90, 100), (50, 100)) and separated((50, 100), (90, 100))
    assert not separated((60, 100), (50, 100))


def test_wilson_interval_narrows_with_more_samples() -> None:
    widths = [np.subtract(*proportion(n // 2, n)[::-1]) for n in (10, 100, 1000)]
    assert widths[0] > widths[1] > widths[2] > 0


def test_mean_interval_is_mean_plus_minus_1_96_standard_errors() -> None:
    x = np.random.default_rng(0).normal(3.0, 2.0, 400)
    m, lo, hi = mean(x)
    se = x.std(ddof=1) / np.sqrt(len(x))
    assert m == pytest.approx(x.mean()) and hi - m == pytest.approx(1.96 * se, rel=1e-3)
    assert lo < 3.0 < hi
    assert mean([1.0, 1.0, 1.0]) == (1.0, 1.0, 1.0)


def test_bad_counts_are_one_clear_error() -> None:
    with pytest.raises(UsageError, match="k=5, n=3"):
        proportion(5, 3)
    with pytest.raises(UsageError, match="2 or more"):
        mean([1.0])
