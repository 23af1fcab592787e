"""95% intervals for the figures the notebooks compare, so that a difference is called one only
when its interval says so.

- ``proportion``: a share of prompts (k of n valid), by Wilson's score interval (E. B. Wilson,
  "Probable Inference, the Law of Succession, and Statistical Inference", 1927). Unlike
  p ± 1.96·sqrt(p(1-p)/n) it stays inside [0, 1] and does not shrink to a point at k = 0 or n.
  ``share`` prints one as "62.5% [52.1, 71.9] (75/120)"; ``separated`` says whether two differ
  (their intervals do not overlap).
- ``mean``: the mean of n values and its interval, mean ± 1.96·s/sqrt(n) (the normal
  approximation, for n of 30 or more). For two settings scored on the same items (the same
  tokens, the same prompts), pass the per-item differences: a paired interval, much narrower
  than two separate ones because the items' own difficulty cancels.
- ``paired``: two methods' valid/invalid outcomes on the same prompts. Only the prompts where
  they disagree carry information about which is better: the difference in validity gets
  Newcombe's paired interval, the disagreements an exact McNemar test, and "as good as" is one
  rule with one stated margin (``MARGIN``), counted in integers. ``separated`` is for two
  unpaired samples only: on paired data it ignores the pairing and calls almost nothing.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from llmnb.errors import UsageError

Z95 = 1.959963984540054          # the standard normal's 97.5th percentile


def proportion(k: int, n: int) -> tuple[float, float]:
    """Wilson's 95% interval for k successes in n trials: (low, high), inside [0, 1]."""
    if n <= 0 or not 0 <= k <= n:
        raise UsageError(f"proportion: expected 0 <= k <= n and n > 0, got k={k}, n={n}")
    p, z2 = k / n, Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    low = 0.0 if k == 0 else max(0.0, centre - half)
    return low, 1.0 if k == n else min(1.0, centre + half)


def share(k: int, n: int) -> str:
    """k of n as the notebooks and tables print a validity: "62.5% [52.1, 71.9] (75/120)", the
    95% interval in brackets."""
    low, high = proportion(k, n)
    return f"{100 * k / n:.1f}% [{100 * low:.1f}, {100 * high:.1f}] ({k}/{n})"


def separated(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two shares, each (k, n), of two unpaired samples (different prompts) differ:
    their 95% intervals do not overlap. Two methods on the same prompts are compared with
    ``paired``: this test ignores the pairing, and needs a far larger difference to call one."""
    (a_low, a_high), (b_low, b_high) = proportion(*a), proportion(*b)
    return a_high < b_low or b_high < a_low


def mean(values: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    """(mean, low, high): the mean of `values` and its 95% interval (normal approximation)."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or len(x) < 2:
        raise UsageError(f"mean: expected a 1-d sequence of 2 or more values, got shape {x.shape}")
    m = float(x.mean())
    half = Z95 * float(x.std(ddof=1)) / math.sqrt(len(x))
    return m, m - half, m + half


MARGIN = 0.05
"""How much validity a method may lose and still be said to keep the reference's: 5 points.

What ~100-150 paired prompts can resolve sets it. Even two methods that agree on every prompt
get a paired interval of about +-2 to +-4 points at n = 100 (+-1.9 at 50% validity, +-2.9 at
80%, +-3.8 at 95%; about two thirds of that at n = 150), and each prompt on which they disagree
widens it by about a point. At 5 points, a method that loses one answer of 100 (two of 150) and
gains none keeps, and so does one that trades a few answers for as many others; a 2-3 point
margin could rarely be met however alike the methods, and a 10-point one would call "keeps" a
method that loses 8 answers of 150 and gains none (5.3 points, McNemar p = 0.008). One margin
for every table and notebook, so that "as good as" means one thing."""


@dataclass(frozen=True)
class Paired:
    """Two methods on the same n prompts: the 2x2 table of their outcomes, the paired 95%
    interval of the difference in validity (other - reference), the exact McNemar p-value and
    the verdict at `margin`."""

    n: int
    ref_valid: int
    other_valid: int
    only_ref: int                  # valid with the reference, not with the other method
    only_other: int                # valid with the other method, not with the reference
    low: float                     # the interval of the difference, as fractions
    high: float
    p_value: float
    margin: float

    @property
    def difference(self) -> float:
        """other - reference, as a fraction of the prompts (from the integer counts)."""
        return (self.other_valid - self.ref_valid) / self.n

    @property
    def verdict(self) -> str:
        """"keeps" when the interval's low end is above -margin (any loss is smaller than the
        margin); "loses" when its high end is below 0 and it does not keep; else "cannot
        tell". A method that loses a little but surely, less than the margin, keeps."""
        if self.low > -self.margin:
            return "keeps"
        return "loses" if self.high < 0 else "cannot tell"

    def text(self) -> str:
        """"79/100 against 80/100: 3 lost, 2 gained, difference -1.0 points [-6.2, 4.1],
        p = 1.00: cannot tell (margin 5 points)"."""
        gain = self.other_valid - self.ref_valid
        points = f"{100 * gain / self.n:+.1f}" if gain else "0.0"
        return (f"{self.other_valid}/{self.n} against {self.ref_valid}/{self.n}: "
                f"{self.only_ref} lost, {self.only_other} gained, difference {points} points "
                f"[{100 * self.low:.1f}, {100 * self.high:.1f}], {p_text(self.p_value)}: "
                f"{self.verdict} (margin {100 * self.margin:g} points)")


def p_text(p: float) -> str:
    """A p-value as printed: two decimals, or "p < 0.001" / "p = 0.004" where two decimals
    would print a small one as 0.00."""
    if p < 0.001:
        return "p < 0.001"
    return f"p = {p:.3f}" if p < 0.01 else f"p = {p:.2f}"


def paired(reference: Sequence[bool], other: Sequence[bool], margin: float = MARGIN) -> Paired:
    """Compare two methods' outcomes (valid or not) on the same prompts, in the same order."""
    if len(reference) != len(other) or not reference:
        raise UsageError(f"paired: expected two equally long, non-empty lists of outcomes (one "
                         f"per prompt), got {len(reference)} and {len(other)}")
    only_ref = sum(1 for r, o in zip(reference, other) if r and not o)
    only_other = sum(1 for r, o in zip(reference, other) if o and not r)
    both = sum(1 for r, o in zip(reference, other) if r and o)
    return paired_table(both, only_ref, only_other, len(reference) - both - only_ref - only_other,
                        margin)


def paired_table(both: int, only_ref: int, only_other: int, neither: int,
                 margin: float = MARGIN) -> Paired:
    """``paired`` from the 2x2 table's four counts."""
    n = both + only_ref + only_other + neither
    if min(both, only_ref, only_other, neither) < 0 or n == 0:
        raise UsageError(f"paired_table: expected counts >= 0 with a positive total, got "
                         f"both={both}, only_ref={only_ref}, only_other={only_other}, "
                         f"neither={neither}")
    if not 0 < margin < 1:
        raise UsageError(f"paired: margin={margin!r}; expected a fraction between 0 and 1")
    low, high = newcombe_paired(both, only_other, only_ref, neither)
    return Paired(n, both + only_ref, both + only_other, only_ref, only_other, low, high,
                  mcnemar_exact(only_ref, only_other), margin)


def verdict_from_totals(n: int, ref_valid: int, other_valid: int,
                        margin: float = MARGIN) -> str | None:
    """The paired verdict when only each method's total of valid answers is known (not which
    prompts): the verdict every 2x2 table with those totals gives, or None when the tables
    disagree and only the per-prompt outcomes could decide."""
    if not (0 <= ref_valid <= n and 0 <= other_valid <= n and n > 0):
        raise UsageError(f"verdict_from_totals: expected 0 <= valid <= n, got n={n}, "
                         f"ref_valid={ref_valid}, other_valid={other_valid}")
    lost = max(0, ref_valid - other_valid)
    found = {paired_table(ref_valid - only_ref, only_ref, only_ref - (ref_valid - other_valid),
                          n - other_valid - only_ref, margin).verdict
             for only_ref in range(lost, min(ref_valid, n - other_valid) + 1)}
    return found.pop() if len(found) == 1 else None


def newcombe_paired(a: int, b: int, c: int, d: int) -> tuple[float, float]:
    """The 95% interval of p1 - p2 for paired proportions, p1 = (a + b)/n, p2 = (a + c)/n (a:
    both yes, b: only the first, c: only the second, d: neither): Newcombe's hybrid score
    interval, method 10 of R. G. Newcombe, "Improved confidence intervals for the difference
    between binomial proportions based on paired data", Statistics in Medicine 17 (1998)
    2635-2650. Each proportion's Wilson interval, combined square-and-add with the estimated
    correlation phi of the two (its numerator ad - bc shrunk by n/2 towards 0 when positive)."""
    n = a + b + c + d
    k1, k2 = a + b, a + c
    p1, p2 = k1 / n, k2 / n
    l1, u1 = proportion(k1, n)
    l2, u2 = proportion(k2, n)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    phi = 0.0
    if margins > 0:
        cross = a * d - b * c                       # integers: exact
        if cross > n / 2:
            phi = (cross - n / 2) / math.sqrt(margins)
        elif cross < 0:
            phi = cross / math.sqrt(margins)
    dl = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    du = math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    estimate = (b - c) / n
    return max(-1.0, estimate - dl), min(1.0, estimate + du)


def mcnemar_exact(b: int, c: int) -> float:
    """The exact (conditional) McNemar test: given b + c prompts on which two methods disagree,
    the two-sided probability under "neither is better" (each disagreement a fair coin) of a
    split at least as uneven as b : c. 1.0 when they never disagree."""
    m, k = b + c, min(b, c)
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, i) for i in range(k + 1))          # integers: exact
    return min(1.0, 2 * tail / (1 << m))                      # exact even past 2 ** 1023
