"""The scale searches behind ggml's k-quant reference quantizers, vectorized.

ggml-quants.c quantizes each sub-block by searching for the scale (and min) that
minimise a weighted squared error: ``make_qkx2_quants`` (affine, for Q4_K and Q5_K)
and ``make_qx_quants`` (symmetric, for Q6_K). This module is an independent numpy
re-implementation of those algorithms: every sub-block of the tensor runs the same
search at once, laid out transposed, xs (n, m) = element i of sub-block k at [i, k].

Sums are accumulated left to right in float32 (``running_sum``), as the C loops
do, and ``nearest_int`` is round-half-to-even (``np.rint``), so for finite input the
results match a C build that does not contract a*b+c into fused multiply-adds.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

from llmnb.quant.block_fields import where32

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]

GROUP_MAX_EPS = 1e-15   # ggml: a group whose largest magnitude is below this is all zero


def running_sum(terms: F32) -> F32:
    """terms (n, m) -> (m,): sum over axis 0 in order, in float32 (the C loop's rounding).

    A row-by-row loop of in-place adds: each add is vectorized over the m sub-blocks
    (``np.add.accumulate`` along axis 0 gives the same bits but runs slower)."""
    total: F32 = terms[0].copy()                                 # (m,)
    for i in range(1, terms.shape[0]):
        total += terms[i]
    return total


def levels(xs: F32, iscale: F32, low: int, high: int) -> F32:
    """clip(nearest_int(iscale * xs), low, high) as float32; xs (n, m), iscale (m,)."""
    v = xs * iscale                                              # (n, m)
    np.rint(v, out=v)
    np.clip(v, np.float32(low), np.float32(high), out=v)
    return v


def make_qkx2_quants(xs: F32, ws: F32, nmax: int, rmin: float, rdelta: float,
                     nstep: int) -> tuple[F32, F32, F32]:
    """Affine fit x ~ scale * l - the_min with l in 0..nmax, per sub-block.

    xs, ws (n, m): values and importance weights. Starts from the min/max grid, then
    tries nstep + 1 stretched grids ((rmin + rdelta*is + nmax) / (max - min)), refits
    scale and min by weighted least squares on each, keeps the lowest weighted squared
    error. Returns scale (m,), the_min (m,) (>= 0, subtracted) and levels l (n, m)."""
    f = np.float32
    lo = np.minimum(xs.min(axis=0), f(0))                        # (m,)  min is never above 0
    hi = xs.max(axis=0)                                          # (m,)
    flat = hi == lo                                              # all equal: scale 0
    span = where32(flat, f(1), hi - lo)                         # (m,)
    sum_w = running_sum(ws)                                      # (m,)
    sum_x = running_sum(ws * xs)                                 # (m,)

    iscale = f(nmax) / span
    scale = f(1) / iscale                                        # (m,)
    best = levels(xs - lo, iscale, 0, nmax)                      # (n, m)
    diff = best * scale + lo - xs
    best_error = running_sum(ws * (diff * diff))                 # (m,)

    with np.errstate(divide="ignore", invalid="ignore"):
        for step in range(nstep + 1):
            grid = f(rmin) + f(rdelta) * f(step) + f(nmax)
            iscale = grid / where32(flat, f(1), hi - lo)
            aux = levels(xs - lo, iscale, 0, nmax)               # (n, m)
            wl = ws * aux
            sum_l = running_sum(wl)
            sum_l2 = running_sum(wl * aux)
            sum_xl = running_sum(wl * xs)
            det = sum_w * sum_l2 - sum_l * sum_l                 # (m,)
            # (float32 / float32 stays float32; the astype only informs the type checker)
            this_scale = ((sum_w * sum_xl - sum_x * sum_l) / det).astype(np.float32, copy=False)
            this_min = ((sum_l2 * sum_x - sum_l * sum_xl) / det).astype(np.float32, copy=False)
            clamp = this_min > 0                                 # a positive min is not allowed:
            this_min = where32(clamp, f(0), this_min)           # refit the scale alone
            this_scale = where32(clamp, sum_xl / sum_l2, this_scale)
            diff = aux * this_scale + this_min - xs
            error = running_sum(ws * (diff * diff))
            better = (det > 0) & (error < best_error)
            if better.any():
                best = where32(better, aux, best)
                best_error = where32(better, error, best_error)
                scale = where32(better, this_scale, scale)
                lo = where32(better, this_min, lo)
    scale = where32(flat, f(0), scale)
    best = where32(flat, f(0), best)
    return scale, -lo, best


def make_qx_quants_rmse(xs: F32, nmax: int) -> tuple[F32, F32]:
    """Symmetric fit x ~ scale * (l - nmax), l in 0..2*nmax-1, weights x^2 (rmse_type 1).

    Starts from scale = -max/nmax (max = the value of largest magnitude), tries the
    18 grids -(nmax + 0.1*is)/max for is = -9..9 (not 0), keeps the least-squares scale
    of the grid with the largest sum(w*x*l)^2 / sum(w*l^2). Returns scale (m,), l (n, m)."""
    f = np.float32
    n, m = xs.shape
    first = np.abs(xs).argmax(axis=0)                            # (m,) first largest |x|
    peak = xs[first, np.arange(m)]                               # (m,) signed
    zero = np.abs(peak) < f(GROUP_MAX_EPS)
    peak = where32(zero, f(1), peak)
    w = xs * xs                                                  # (n, m)
    wx = w * xs

    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = f(-nmax) / peak
        ls = levels(xs, iscale, -nmax, nmax - 1)                 # (n, m)
        sum_lx = running_sum(wx * ls)
        sum_l2 = running_sum(w * ls * ls)
        scale = where32(sum_l2 != 0, sum_lx / sum_l2, f(0))     # (m,)
        best = scale * sum_lx
        for step in range(-9, 10):
            if step == 0:
                continue
            iscale = -(f(nmax) + f(0.1) * f(step)) / peak
            aux = levels(xs, iscale, -nmax, nmax - 1)
            slx = running_sum(wx * aux)
            sl2 = running_sum(w * aux * aux)
            better = (sl2 > 0) & (slx * slx > best * sl2)
            if better.any():
                ls = where32(better, aux, ls)
                scale = where32(better, slx / sl2, scale)
                best = where32(better, scale * slx, best)
    ls += f(nmax)
    scale = where32(zero, f(0), scale)
    ls = where32(zero, f(0), ls)
    return scale, ls
