"""The forward pass's small per-row steps, compiled: RMSNorm, RoPE and SwiGLU.

Between two products a decode step does little arithmetic (a norm over 576 values, a rotation
of 12 heads), and numpy pays a fixed cost of about a microsecond per operation for it, a dozen
operations per step and layer. Here each step is one compiled loop. Every row is computed on
its own in a fixed order, so a row of a T-row pass gets the bits of that row alone (what a
speculative verify batch needs, ``llmnb.kernels.attention``).

- ``rms_norm_rows``: y = x / sqrt(mean(x^2) + eps) * w (Zhang & Sennrich 2019), the squares
  summed in float64 as ggml sums them (in eight interleaved partial sums, then in order), the
  scale 1 / sqrt(mean + eps) in float32 and applied before the weight, as ggml's
  ``rms_norm`` then ``mul``.
- ``add_rms_norm``: the residual add and the norm after it, in one call.
- ``rope_rows``: the half-split rotation of ``blocks.apply_rope`` (pairs i, i + r/2), in
  place on the heads as the projection wrote them (a view, no copy): the same float32
  operations, so the same bits.
- ``swiglu_rows``: silu(g) * u = g / (1 + e^-g) * u over the gate and up halves of a
  projection's output, with e^x as Cephes' ``expf`` computes it (``exp_parts``, also the
  attention's softmax): a polynomial in a loop the compiler vectorizes, where numpy's
  SwiGLU is five passes over memory with a temporary each. It agrees with numpy's ``exp``
  to a few units in the last place, not bit for bit.
- ``softmax_rows``: the softmax of every row of a score matrix in place (the many-row
  attention's, ``blocks.attention_weights``), a causal limit or a masked score (-inf) giving
  exactly 0, each row summed in float64: one compiled pass where numpy makes six.

A pass of many rows (a prompt, a diffusion canvas) splits its rows between numba's threads
(``split``: from PARALLEL_ROWS rows, when numba has more than one thread): each row is computed
by the same code either way, so it is the same bits. A pass whose products run in BLAS runs
numba on one thread (``Transformer.hidden``), so these never wait for BLAS's spinning threads.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import get_num_threads, njit, prange

import llmnb.kernels.jit  # noqa: F401  (numba configured before the first compile)

F32 = npt.NDArray[np.float32]

PARTIAL = 8          # interleaved float64 partial sums (of the squares, of the weights)
# rows from which a step splits them between numba's threads: a parallel region costs a few
# microseconds to start, a row of SmolLM2's SwiGLU about one (2-core Xeon)
PARALLEL_ROWS = 32


def split(rows: int) -> int:
    """How many parts a step over `rows` rows splits them into: numba's threads from
    PARALLEL_ROWS rows on, else 1 (one thread, no parallel region)."""
    return get_num_threads() if rows >= PARALLEL_ROWS else 1


def by_rows(rows: int, one: Callable[..., None], parts: Callable[..., None], *args: Any) -> None:
    """A step over `rows` rows: one(*args) on one thread, or parts(*args, n) with its rows in
    n parts, one per thread, where ``split`` says n > 1."""
    n = split(rows)
    if n > 1:
        parts(*args, n)
    else:
        one(*args)


def rms_norm(x: F32, weight: F32, eps: float, out: F32 | None = None) -> F32:
    """RMSNorm of every row of x (T, n), into `out` if given (x itself is allowed)."""
    y = np.empty_like(x) if out is None else out
    by_rows(x.shape[0], rms_norm_rows, rms_norm_parts, x, weight, np.float32(eps), y)
    return y


@njit(inline="always")
def rms_norm_row(x, weight, eps, out, partial):  # type: ignore[no-untyped-def]
    """One row: x (n,) float32 -> out (n,) (may be x itself); partial (PARTIAL,) float64."""
    n = x.shape[0]
    full = n - n % PARTIAL                       # the inputs the partial sums take
    partial[:] = 0.0
    for i in range(0, full, PARTIAL):
        for j in range(PARTIAL):
            v = x[i + j]
            partial[j] += np.float64(v * v)
    total = 0.0
    for j in range(PARTIAL):
        total += partial[j]
    for i in range(full, n):
        v = x[i]
        total += np.float64(v * v)
    mean = np.float32(total / n)
    scale = np.float32(1.0) / np.sqrt(mean + eps)
    for i in range(n):
        out[i] = (x[i] * scale) * weight[i]


@njit(cache=True)
def rms_norm_rows(x, weight, eps, out):  # type: ignore[no-untyped-def]
    """x (T, n) float32, weight (n,), eps float32 -> out (T, n) (may be x itself)."""
    partial = np.zeros(PARTIAL, np.float64)
    for r in range(x.shape[0]):
        rms_norm_row(x[r], weight, eps, out[r], partial)


@njit(parallel=True, cache=True)
def rms_norm_parts(x, weight, eps, out, parts):  # type: ignore[no-untyped-def]
    """``rms_norm_rows`` with the rows in `parts` parts, one per thread."""
    rows = x.shape[0]
    for p in prange(parts):
        partial = np.zeros(PARTIAL, np.float64)
        for r in range(rows * p // parts, rows * (p + 1) // parts):
            rms_norm_row(x[r], weight, eps, out[r], partial)


def add_rms_norm(h: F32, delta: F32, weight: F32, eps: float, out: F32) -> F32:
    """h += delta (the residual add), then RMSNorm of every row of h into `out`: one call
    where a decode step made two, the same bits as ``h += delta`` and ``rms_norm`` apart."""
    by_rows(h.shape[0], add_rms_norm_rows, add_rms_norm_parts, h, delta, weight, np.float32(eps),
            out)
    return out


@njit(cache=True)
def add_rms_norm_rows(h, delta, weight, eps, out):  # type: ignore[no-untyped-def]
    """h (T, n) += delta (T, n), then ``rms_norm_rows`` of h into out."""
    partial = np.zeros(PARTIAL, np.float64)
    for r in range(h.shape[0]):
        for i in range(h.shape[1]):
            h[r, i] += delta[r, i]
        rms_norm_row(h[r], weight, eps, out[r], partial)


@njit(parallel=True, cache=True)
def add_rms_norm_parts(h, delta, weight, eps, out, parts):  # type: ignore[no-untyped-def]
    """``add_rms_norm_rows`` with the rows in `parts` parts, one per thread."""
    rows = h.shape[0]
    for p in prange(parts):
        partial = np.zeros(PARTIAL, np.float64)
        for r in range(rows * p // parts, rows * (p + 1) // parts):
            for i in range(h.shape[1]):
                h[r, i] += delta[r, i]
            rms_norm_row(h[r], weight, eps, out[r], partial)


def rope(x: F32, cos: F32, sin: F32) -> None:
    """``rope_rows``, its rows split between numba's threads where there are many."""
    by_rows(x.shape[0], rope_rows, rope_parts, x, cos, sin)


@njit(cache=True)
def rope_rows(x, cos, sin):  # type: ignore[no-untyped-def]
    """Rotate x (T, heads, hd) in place: pairs (i, i + r/2) of the first r = 2 * cos.shape[1]
    dims of every head by the row's cos and sin (T, r/2); dims past r untouched."""
    for t in range(x.shape[0]):
        for h in range(x.shape[1]):
            rotate_head(x[t, h], cos[t], sin[t])


@njit(parallel=True, cache=True)
def rope_parts(x, cos, sin, parts):  # type: ignore[no-untyped-def]
    """``rope_rows`` with the rows in `parts` parts, one per thread."""
    rows = x.shape[0]
    for p in prange(parts):
        for t in range(rows * p // parts, rows * (p + 1) // parts):
            for h in range(x.shape[1]):
                rotate_head(x[t, h], cos[t], sin[t])


@njit(inline="always")
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


# e^x as Cephes' expf computes it: x = k ln 2 + r with |r| <= ln 2 / 2, e^r by a degree-7
# polynomial, 2^k built in a float's exponent bits; within about one unit in the last place
# (numpy's and the C library's expf are calls the compiler cannot vectorize inside a loop)
LOG2E = np.float32(1.4426950408889634)
LN2_HI = np.float32(0.693359375)            # ln 2 in two parts: k * LN2_HI is exact
LN2_LO = np.float32(-2.12194440e-4)
EXP_POLY = (np.float32(1.9875691500e-4), np.float32(1.3981999507e-3),
            np.float32(8.3334519073e-3), np.float32(4.1665795894e-2),
            np.float32(1.6666665459e-1), np.float32(5.0000001201e-1))
EXP_FLOOR = np.float32(-87.0)               # e^-87 ~ 1.6e-38, still a normal float32
EXP_CEIL = np.float32(88.0)                 # e^88 ~ 1.7e38, below float32's largest


@njit(inline="always")
def exp_two(v):  # type: ignore[no-untyped-def]
    """e^v for float32 v as ``exp_parts`` computes it: (e^r, the float32 bits of 2^k), v
    clamped to [EXP_FLOOR, EXP_CEIL] (inlined where it is called: a loop over it vectorizes)."""
    c0, c1, c2, c3, c4, c5 = EXP_POLY
    v = min(max(v, EXP_FLOOR), EXP_CEIL)
    k = np.floor(v * LOG2E + np.float32(0.5))
    r = v - k * LN2_HI
    r = r - k * LN2_LO
    p = ((((c0 * r + c1) * r + c2) * r + c3) * r + c4) * r + c5
    return p * (r * r) + r + np.float32(1.0), (np.int32(k) + 127) << 23


@njit(cache=True)
def exp_parts(x, sign, out, bits):  # type: ignore[no-untyped-def]
    """e^(sign x) for x (n,) float32 and sign +1 or -1, in two parts: out = e^r and bits the
    float32 bits of 2^k, so that e^(sign x) = out * bits.view(float32) (``scale_by_bits``);
    sign x is clamped to [EXP_FLOOR, EXP_CEIL]. The same value for the same x wherever it
    sits in the array."""
    for j in range(x.shape[0]):
        out[j], bits[j] = exp_two(sign * x[j])


@njit(cache=True)
def scale_by_bits(out, bits):  # type: ignore[no-untyped-def]
    """out *= 2^k, `bits` as ``exp_parts`` left them: out becomes e^x."""
    scale = bits.view(np.float32)
    for j in range(out.shape[0]):
        out[j] *= scale[j]


@njit(cache=True, error_model="numpy")
def swiglu_row(gu, n, out, bits):  # type: ignore[no-untyped-def]
    """out (n,) = silu(gate) * up for one row gu (2n,) = [gate | up]: the float32 operations of
    g / (1 + e^-g) * u in that order (numpy's error model: IEEE division, which vectorizes)."""
    exp_parts(gu[:n], np.float32(-1.0), out, bits)
    scale = bits.view(np.float32)
    for i in range(n):
        out[i] = gu[i] / (np.float32(1.0) + out[i] * scale[i]) * gu[n + i]


def swiglu(gu: F32, out: F32) -> F32:
    """``swiglu_rows``, its rows split between numba's threads where there are many."""
    by_rows(gu.shape[0], swiglu_rows, swiglu_parts, gu, out)
    return out


@njit(cache=True)
def swiglu_rows(gu, out):  # type: ignore[no-untyped-def]
    """out (T, n) = silu(gu[:, :n]) * gu[:, n:] for gu (T, 2n), both C-contiguous; row by row."""
    n = out.shape[1]
    bits = np.empty(n, np.int32)
    for t in range(gu.shape[0]):
        swiglu_row(gu[t], n, out[t], bits)


@njit(parallel=True, cache=True)
def swiglu_parts(gu, out, parts):  # type: ignore[no-untyped-def]
    """``swiglu_rows`` with the rows in `parts` parts, one per thread."""
    n = out.shape[1]
    rows = gu.shape[0]
    for p in prange(parts):
        bits = np.empty(n, np.int32)
        for t in range(rows * p // parts, rows * (p + 1) // parts):
            swiglu_row(gu[t], n, out[t], bits)


def softmax(x: F32, t_rows: int, first: int) -> None:
    """``softmax_rows``, its rows split between numba's threads where there are many."""
    by_rows(x.shape[0], softmax_rows, softmax_parts, x, t_rows, first)


@njit(inline="always")
def softmax_row(x, seen, e, bits, partial):  # type: ignore[no-untyped-def]
    """One row x (S,) of ``softmax_rows``: its first `seen` scores -> weights, the rest 0."""
    row = x[:seen]
    x[seen:] = 0.0
    top = np.float32(-np.inf)
    for j in range(seen):
        top = max(top, row[j])
    for j in range(seen):
        row[j] -= top
    for j in range(seen):                    # ``exp_parts``, inlined: no call per row
        e[j], bits[j] = exp_two(row[j])
    scale = bits.view(np.float32)
    for j in range(seen):
        row[j] = e[j] * scale[j] if row[j] != -np.inf else np.float32(0.0)
    full = seen - seen % PARTIAL
    partial[:] = 0.0
    for i in range(0, full, PARTIAL):
        for j in range(PARTIAL):
            partial[j] += np.float64(row[i + j])
    total = 0.0
    for j in range(PARTIAL):
        total += partial[j]
    for j in range(full, seen):
        total += np.float64(row[j])
    norm = np.float32(total)
    for j in range(seen):
        row[j] /= norm


@njit(cache=True, error_model="numpy")
def softmax_rows(x, t_rows, first):  # type: ignore[no-untyped-def]
    """x (N, S) float32 C-contiguous, row r the scores of query r % t_rows -> softmax over each
    row, in place. With `first` >= 0 the attention is causal: query t sees keys 0..first + t and
    the rest become 0 (no mask pass before); a score of -inf (a masked key) becomes exactly 0.
    e^(x - max) by ``exp_parts``; the row's sum in float64 (PARTIAL interleaved partial sums,
    then in order), rounded to float32 and divided into every weight."""
    n, s = x.shape
    e = np.empty(s, np.float32)
    bits = np.empty(s, np.int32)
    partial = np.empty(PARTIAL, np.float64)
    for r in range(n):
        softmax_row(x[r], s if first < 0 else min(s, first + r % t_rows + 1), e, bits, partial)


@njit(parallel=True, cache=True, error_model="numpy")
def softmax_parts(x, t_rows, first, parts):  # type: ignore[no-untyped-def]
    """``softmax_rows`` with the rows in `parts` parts, one per thread."""
    n, s = x.shape
    for p in prange(parts):
        e = np.empty(s, np.float32)
        bits = np.empty(s, np.int32)
        partial = np.empty(PARTIAL, np.float64)
        for r in range(n * p // parts, n * (p + 1) // parts):
            softmax_row(x[r], s if first < 0 else min(s, first + r % t_rows + 1), e, bits,
                        partial)
