"""The 95% intervals the notebooks print: Wilson's for a proportion, the normal one for a mean,
Newcombe's paired one and the exact McNemar test for two methods on the same prompts."""
from __future__ import annotations

import numpy as np
import pytest

from llmnb.errors import UsageError
from llmnb.perf.intervals import (
    p_text,
    MARGIN,
    mcnemar_exact,
    mean,
    newcombe_paired,
    paired,
    paired_table,
    proportion,
    separated,
    share,
    verdict_from_totals,
)


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


def outcomes(both: int, only_ref: int, only_other: int,
             neither: int) -> tuple[list[bool], list[bool]]:
    """Per-prompt outcomes (reference, other) with that 2x2 table, the kinds interleaved."""
    pairs = ([(True, True)] * both + [(True, False)] * only_ref + [(False, True)] * only_other
             + [(False, False)] * neither)
    pairs = pairs[::2] + pairs[1::2]
    return [r for r, _ in pairs], [o for _, o in pairs]


def test_paired_interval_and_mcnemar_match_a_published_worked_example() -> None:
    # Fagerland, Lydersen and Laake (2014), "Recommended tests and confidence intervals for
    # paired binomial proportions", Statistics in Medicine 33:2850, worked example (Cavo et al.
    # 2012: 59 both, 6 only before, 16 only after, 80 neither): Newcombe's method 10 gives
    # -0.1186 to -0.0046 for p1 - p2; the exact conditional McNemar test P = 0.052479.
    assert newcombe_paired(59, 6, 16, 80) == pytest.approx((-0.1186, -0.0046), abs=5e-5)
    assert mcnemar_exact(6, 16) == pytest.approx(0.052479, abs=5e-7)
    assert mcnemar_exact(16, 6) == mcnemar_exact(6, 16) and mcnemar_exact(0, 0) == 1.0
    # the same table as outcomes: reference = "after", other = "before" (difference other - ref)
    p = paired(*outcomes(59, 16, 6, 80))
    assert (p.n, p.ref_valid, p.other_valid, p.only_ref, p.only_other) == (161, 75, 65, 16, 6)
    assert (p.low, p.high) == pytest.approx((-0.1186, -0.0046), abs=5e-5)


def test_paired_verdict_flips_keeps_loses_and_cannot_tell() -> None:
    keeps = paired(*outcomes(78, 1, 0, 21))            # one answer of 100 lost
    assert keeps.verdict == "keeps" and keeps.low > -MARGIN
    # keeps even though surely a little worse: the loss is smaller than the margin
    assert paired_table(900, 20, 0, 80).verdict == "keeps"
    assert paired_table(900, 20, 0, 80).high < 0
    loses = paired(*outcomes(74, 6, 0, 20))             # six lost, none gained
    assert loses.verdict == "loses" and loses.high < 0 and loses.low <= -MARGIN
    unsure = paired(*outcomes(76, 4, 0, 20))            # four lost: maybe 5 points, maybe 0
    assert unsure.verdict == "cannot tell" and unsure.low <= -MARGIN <= 0 <= unsure.high
    assert paired(*outcomes(70, 0, 10, 20)).verdict == "keeps"          # a gain keeps
    # a wider margin turns "cannot tell" into "keeps"; a narrower one "keeps" into "cannot tell"
    assert paired(*outcomes(76, 4, 0, 20), margin=0.10).verdict == "keeps"
    assert paired(*outcomes(78, 1, 0, 21), margin=0.02).verdict == "cannot tell"


def test_one_prompt_below_is_counted_in_integers() -> None:
    # 79/100 against 80/100: as floats 100 * (0.79 - 0.80) is -1.0000000000000009, below a
    # "-1 point" bar; the paired comparison counts prompts and never subtracts validities.
    assert 100 * (0.79 - 0.80) < -1
    p = paired(*outcomes(79, 1, 0, 20))
    assert (p.ref_valid, p.other_valid, p.difference) == (80, 79, -0.01)
    assert p.text() == ("79/100 against 80/100: 1 lost, 0 gained, difference -1.0 points "
                        "[-4.6, 2.4], p = 1.00: keeps (margin 5 points)")
    assert paired_table(77, 3, 2, 18).text() == (
        "79/100 against 80/100: 3 lost, 2 gained, difference -1.0 points [-6.2, 4.1], "
        "p = 1.00: cannot tell (margin 5 points)")
    assert paired_table(80, 0, 0, 20).text().startswith("80/100 against 80/100: 0 lost, 0 "
                                                        "gained, difference 0.0 points")


def test_the_margin_is_what_100_prompts_can_resolve() -> None:
    # two methods that agree on all 100 prompts: about +-2 to +-4 points, inside the margin
    for valid, half in ((50, 0.019), (80, 0.029), (95, 0.038)):
        p = paired_table(valid, 0, 0, 100 - valid)
        assert (p.low, p.high) == pytest.approx((-half, half), abs=1e-3) and half < MARGIN
    # each disagreement widens it by about a point: five of 100 leave it "cannot tell"
    assert paired_table(78, 1, 1, 20).verdict == "keeps"
    assert paired_table(77, 3, 2, 18).verdict == "cannot tell"
    assert paired_table(117, 3, 2, 28).verdict == "keeps"                     # of 150
    assert paired_table(118, 2, 0, 30).verdict == "keeps"
    # a 10-point margin would keep a sure loss of 8 answers of 150
    eight = paired_table(112, 8, 0, 30)
    assert eight.verdict == "loses" and eight.p_value == pytest.approx(0.0078, abs=1e-4)
    assert paired_table(112, 8, 0, 30, margin=0.10).verdict == "keeps"


def test_verdict_from_totals_is_the_verdict_every_pairing_gives_or_none() -> None:
    assert verdict_from_totals(108, 86, 19) == "loses"          # 67 answers fewer: any pairing
    assert verdict_from_totals(100, 80, 80) is None             # 0 or 40 disagreements
    assert verdict_from_totals(10, 0, 0) == "cannot tell"       # one table only
    with pytest.raises(UsageError, match="0 <= valid <= n"):
        verdict_from_totals(10, 11, 0)


def test_paired_refuses_outcomes_of_different_prompts() -> None:
    with pytest.raises(UsageError, match="got 3 and 2"):
        paired([True, False, True], [True, True])
    with pytest.raises(UsageError, match="margin=1.5"):
        paired([True], [True], margin=1.5)


def test_a_small_p_value_is_printed_as_small_not_as_zero() -> None:
    assert [p_text(p) for p in (0.5, 0.0499, 0.0078, 4e-5)] == [
        "p = 0.50", "p = 0.05", "p = 0.008", "p < 0.001"]
