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
"""
from __future__ import annotations

import math
from collections.abc import Sequence

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
    """Whether two shares, each (k, n), differ: their 95% intervals do not overlap."""
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
