"""The forward pass's small per-row steps, compiled: RMSNorm and RoPE over a few rows.

Between two products a decode step does little arithmetic (a norm over 576 values, a rotation
of 12 heads), and numpy pays a fixed cost of about a microsecond per operation for it, a dozen
operations per step and layer. Here each step is one compiled loop. Every row is computed on
its own in a fixed order, so a row of a T-row pass gets the bits of that row alone (what a
speculative verify batch needs, ``llmnb.kernels.attention``).

- ``rms_norm_rows``: y = x / sqrt(mean(x^2) + eps) * w (Zhang & Sennrich 2019), the squares
  summed in float64 as ggml sums them (in eight interleaved partial sums, then in order), the
  scale 1 / sqrt(mean + eps) in float32 and applied before the weight, as ggml's
  ``rms_norm`` then ``mul``.
- ``rope_rows``: the half-split rotation of ``blocks.apply_rope`` (pairs i, i + r/2), in
  place on the heads as the projection wrote them (a view, no copy): the same float32
  operations, so the same bits.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

import llmnb.kernels.jit  # noqa: F401  (numba configured before the first compile)

F32 = npt.NDArray[np.float32]

PARTIAL = 8          # interleaved float64 partial sums of the squares


def rms_norm(x: F32, weight: F32, eps: float, out: F32 | None = None) -> F32:
    """RMSNorm of every row of x (T, n), into `out` if given (x itself is allowed)."""
    y = np.empty_like(x) if out is None else out
    rms_norm_rows(x, weight, np.float32(eps), y)
    return y


@njit(cache=True)
def rms_norm_rows(x, weight, eps, out):  # type: ignore[no-untyped-def]
    """x (T, n) float32, weight (n,), eps float32 -> out (T, n) (may be x itself)."""
    rows, n = x.shape
    partial = np.zeros(PARTIAL, np.float64)
    full = n - n % PARTIAL                       # the inputs the partial sums take
    for r in range(rows):
        partial[:] = 0.0
        for i in range(0, full, PARTIAL):
            for j in range(PARTIAL):
                v = x[r, i + j]
                partial[j] += np.float64(v * v)
        total = 0.0
        for j in range(PARTIAL):
            total += partial[j]
        for i in range(full, n):
            v = x[r, i]
            total += np.float64(v * v)
        mean = np.float32(total / n)
        scale = np.float32(1.0) / np.sqrt(mean + eps)
        for i in range(n):
            out[r, i] = (x[r, i] * scale) * weight[i]


@njit(cache=True)
def rope_rows(x, cos, sin):  # type: ignore[no-untyped-def]
    """Rotate x (T, heads, hd) in place: pairs (i, i + r/2) of the first r = 2 * cos.shape[1]
    dims of every head by the row's cos and sin (T, r/2); dims past r untouched."""
    for t in range(x.shape[0]):
        for h in range(x.shape[1]):
            rotate_head(x[t, h], cos[t], sin[t])


@njit(cache=True)
def rotate_head(head, cos, sin):  # type: ignore[no-untyped-def]
    """Rotate one head (hd,) in place: pairs (i, i + r/2) by cos and sin (r/2,)."""
    half = cos.shape[0]
    for i in range(half):
        a = head[i]
        b = head[half + i]
        c = cos[i]
        s = sin[i]
        head[i] = a * c - b * s
        head[half + i] = b * c + a * s
