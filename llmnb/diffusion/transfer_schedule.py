"""How many masked positions a denoising step commits: the transfer schedules.

- ``cosine`` (diffuse-cpp's default): at step s of T, with m positions still masked,
  frac = (cos(t0 pi/2) - cos(t1 pi/2)) / cos(t0 pi/2), t0 = s/T, t1 = (s+1)/T, computed in
  float32 as diffuse-cpp does; n = round-half-away(frac * m), at least 1, at most m. The
  count is relative to what is *still* masked, and frac grows towards 1: few tokens early,
  many late (diffuse-cpp's source comment says the opposite; its formula is reproduced).
- ``linear`` (diffuse-cpp): frac = 1 / (T - s), same rounding.
- ``even`` (LLaDA's ``get_num_transfer_tokens``): the block's initial masked count split
  evenly over its steps, the remainder one each to the first steps; fixed in advance.
- ``eps`` (Dream's timesteps linspace(1, eps, T+1)): n = floor(m * (1 - t_{s+1}/t_s)), all on
  the last step; may be 0 on early steps.

Every schedule commits everything by its last step, so a block always finishes in T steps.
"""
from __future__ import annotations

import math

import numpy as np

from llmnb.errors import UsageError

SCHEDULES = ("cosine", "linear", "even", "eps")
DREAM_EPS = 1e-3


def round_half_away(x: float) -> int:
    """C's roundf: halves go away from zero."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def cosine_fraction(step: int, steps: int) -> float:
    """diffuse-cpp's cosine fraction of the still-masked positions to commit, in float32."""
    t0 = np.float32(step) / np.float32(steps)
    t1 = np.float32(step + 1) / np.float32(steps)
    c0 = np.cos(np.float32(float(t0) * math.pi / 2))   # argument formed in double, cosf
    c1 = np.cos(np.float32(float(t1) * math.pi / 2))
    return float(np.float32((c0 - c1) / c0))


def even_counts(n_masked: int, steps: int) -> list[int]:
    """LLaDA: n_masked split over `steps`, the remainder +1 on the first steps."""
    base, extra = divmod(n_masked, steps)
    return [base + (1 if i < extra else 0) for i in range(steps)]


def transfer_count(schedule: str, step: int, steps: int, n_masked: int,
                   n_initial: int = 0) -> int:
    """Positions to commit at `step` (0-based) of `steps`, with `n_masked` still masked;
    `n_initial` is the block's masked count before its first step (``even`` needs it)."""
    if n_masked <= 0:
        return 0
    if step >= steps - 1:
        return n_masked
    if schedule == "cosine" or schedule == "linear":
        frac = cosine_fraction(step, steps) if schedule == "cosine" else \
            float(np.float32(1.0) / np.float32(steps - step))
        n = round_half_away(float(np.float32(frac) * np.float32(n_masked)))
        return min(max(n, 1), n_masked)
    if schedule == "even":
        return min(even_counts(n_initial, steps)[step], n_masked)
    if schedule == "eps":
        ts = np.linspace(1.0, DREAM_EPS, steps + 1)
        return min(int(n_masked * (1.0 - ts[step + 1] / ts[step])), n_masked)
    raise UsageError(f"schedule: expected one of {', '.join(SCHEDULES)}, got {schedule!r}")


def transfer_counts(schedule: str, steps: int, n_masked: int) -> list[int]:
    """The counts a block of `n_masked` positions goes through when each step commits exactly
    its scheduled count (for pictures and tests; entropy_exit may commit more)."""
    counts: list[int] = []
    left = n_masked
    for s in range(steps):
        n = transfer_count(schedule, s, steps, left, n_masked)
        counts.append(n)
        left -= n
    return counts
