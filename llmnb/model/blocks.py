"""The transformer's building blocks, in numpy, one function each, in the order they run.

    x -> rms_norm -> q, k, v projections -> apply_rope(q, k) -> attention -> o projection -> + x
      -> rms_norm -> swiglu feed-forward -> + x

Conventions: activations are float32 row vectors, ``(T, d)`` for T tokens. GGUF stores a
weight as ``(out, in)``; the loader keeps it transposed, ``(in, out)``, so a projection is
``x @ W.T`` = ``Linear(W.T).matmul(x)``. RoPE uses the half-split ("NEOX", Hugging Face) pairing
(i, i + d/2); the loader converts llama.cpp's interleaved Llama files to it
(``weights.unpermute_qk``).

The file has two parts: first the blocks, plain numpy one function each (picoGPT's
``gpt2.py`` is the model), then the performance path: ``Linear``, a projection's weight with
its one ``matmul``, which picks a way to multiply by how many rows there are and how the
weight is held.

References: RMSNorm (Zhang & Sennrich 2019), RoPE (Su et al. 2021), GQA (Ainslie et al.
2023), SwiGLU (Shazeer 2020); Llama-3 RoPE frequency scaling as llama.cpp's ``rope_freqs``;
linear RoPE scaling (Chen et al. 2023) and YaRN (Peng et al. 2023) as ggml's ``rope_yarn``.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from llmnb.kernels.layout import F32Tiles
from llmnb.model.config import ROPE_SCALINGS, ModelError
from llmnb.scratch import Scratch

F32 = npt.NDArray[np.float32]


# --- the blocks, in the order they run ------------------------------------------------------

# ``attention`` computes up to this many rows of a causal (or tree-masked) pass one by one
# (``llmnb.kernels.attention``), a prompt's too: its keys in tiles and its rows in chunks that
# stay in the caches, where BLAS writes the whole (T, S) score matrix and softmaxes it on one
# thread. A layer of SmolLM2-135M (9 query heads of 64, 3 key/value heads) on a 2-core Xeon, one
# row at a time against BLAS at 1 / 2 threads, median of 10: 128 rows 0.48 / 0.29 ms against
# 0.55 / 0.46, 512 rows 4.8 / 2.8 against 7.3 / 5.3, 2048 rows 74 / 42 against 141 / 97
EXACT_ROWS = 2048


def exact_pass(rows: int, causal: bool, key_mask: npt.NDArray[np.bool_] | None) -> bool:
    """Whether ``attention`` takes a pass of `rows` rows one row at a time (a causal pass or
    one with a per-row mask, up to EXACT_ROWS rows), not through BLAS (a bidirectional
    diffusion canvas, a longer prompt)."""
    return rows <= EXACT_ROWS and (causal or (key_mask is not None and key_mask.ndim == 2))

def rms_norm(x: F32, weight: F32, eps: float, out: F32 | None = None) -> F32:
    """x / sqrt(mean(x^2) + eps) * weight, per row (one (T, d) array written, `out` if given,
    the weight applied in place: the same arithmetic as the one-line form, without its
    temporary)."""
    ms = np.einsum("td,td->t", x, x)[:, None] / np.float32(x.shape[-1])   # (T, 1) mean of squares
    y: F32 = np.divide(x, np.sqrt(ms + np.float32(eps)), out=out)        # (T, d)
    y *= weight
    return y


# YaRN's correction range: the dimensions that turn more than BETA_FAST times over the original
# context keep their frequency, those turning fewer than BETA_SLOW times are interpolated
# (Peng et al. 2023; llama.cpp's and transformers' defaults).
YARN_BETA_FAST = 32.0
YARN_BETA_SLOW = 1.0


def rope_inv_freq(rope_dim: int, base: float, freq_factors: F32 | None = None,
                  scaling: str = "none", factor: float = 1.0,
                  orig_ctx: int = 0) -> npt.NDArray[np.float64]:
    """theta_i = base^(-2i/rope_dim) for i < rope_dim/2, divided by Llama-3's per-frequency
    factors when the file has them (``rope_freqs.weight``), then scaled for a longer context
    as ggml's ``rope_yarn`` does: ``linear`` divides every frequency by `factor` (position
    interpolation); ``yarn`` divides only the slow ones, blending across the correction range
    of the `orig_ctx` the model was trained on. ``none`` and ``llama3`` scale nothing more."""
    inv = 1.0 / base ** (np.arange(0, rope_dim, 2, dtype=np.float64) / rope_dim)  # (rope_dim/2,)
    if freq_factors is not None:
        inv = inv / freq_factors.astype(np.float64)
    if scaling == "linear":
        inv = inv / factor
    elif scaling == "yarn":
        low, high = yarn_correction_range(rope_dim, orig_ctx, base)
        i = np.arange(rope_dim // 2, dtype=np.float64)
        keep = 1.0 - np.clip((i - low) / max(0.001, high - low), 0.0, 1.0)   # 1: extrapolate
        inv = inv / factor * (1.0 - keep) + inv * keep
    elif scaling not in ("none", "llama3"):
        raise ModelError(f"rope scaling: expected one of {', '.join(ROPE_SCALINGS)}, "
                         f"got {scaling!r}")
    return inv


def yarn_correction_range(rope_dim: int, orig_ctx: int, base: float) -> tuple[float, float]:
    """The pair indices where YaRN's ramp starts and ends: the dimension whose wavelength fits
    BETA_FAST (resp. BETA_SLOW) times into `orig_ctx`, floored (ceiled), clamped to the dims."""
    def dim_for(rotations: float) -> float:
        turns = float(np.log(orig_ctx / (rotations * 2 * np.pi)))
        return rope_dim * turns / (2 * float(np.log(base)))
    low = float(np.floor(dim_for(YARN_BETA_FAST)))
    high = float(np.ceil(dim_for(YARN_BETA_SLOW)))
    return max(0.0, low), min(float(rope_dim - 1), high)


def rope_mscale(scaling: str, factor: float, attn_factor: float = 1.0) -> float:
    """The factor cos and sin are multiplied by (so q.k by its square): YaRN's
    0.1 ln(factor) + 1 for a factor above 1, times the file's ``rope.scaling.attn_factor``."""
    yarn = 0.1 * float(np.log(factor)) + 1.0 if scaling == "yarn" and factor > 1.0 else 1.0
    return yarn * attn_factor


def rope_tables(positions: npt.NDArray[np.int64], inv_freq: npt.NDArray[np.float64],
                mscale: float = 1.0) -> tuple[F32, F32]:
    """cos and sin of position * theta_i (times `mscale`), each (T, rope_dim/2)."""
    angles = positions.astype(np.float64)[:, None] * inv_freq[None, :]  # (T, rope_dim/2)
    if mscale == 1.0:
        return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    return ((np.cos(angles) * mscale).astype(np.float32),
            (np.sin(angles) * mscale).astype(np.float32))


def apply_rope(x: F32, cos: F32, sin: F32) -> F32:
    """Rotate pairs (i, i + r/2) of the first r = 2*cos.shape[1] dims of each head.

    x: (n_heads, T, head_dim); cos, sin: (T, r/2). Dimensions past r pass through.
    """
    half = cos.shape[1]
    x1 = x[..., :half]                                        # (h, T, r/2)
    x2 = x[..., half:2 * half]                                # (h, T, r/2)
    out = np.empty_like(x)
    out[..., :half] = x1 * cos - x2 * sin
    out[..., half:2 * half] = x2 * cos + x1 * sin
    out[..., 2 * half:] = x[..., 2 * half:]
    return out


def attention(q: F32, k: F32, v: F32, causal: bool, q_offset: int = 0,
              key_mask: npt.NDArray[np.bool_] | None = None,
              scratch: Scratch | None = None) -> F32:
    """Grouped-query scaled dot-product attention.

    q: (n_head, T, hd); k, v: (n_kv, S, hd) with n_head a multiple of n_kv (each group of
    n_head/n_kv query heads shares one key/value head). Query t sits at absolute position
    q_offset + t; with `causal` it sees keys 0 .. q_offset + t. `key_mask` (S,) False hides
    a key from every query (padding); a (T, S) mask hides it per query. Returns (T, n_head * hd).
    With `scratch` the scaled queries, the scores and the output go into its buffers.

    Up to EXACT_ROWS rows of a causal pass (a decode step, a prompt) or of a pass with a
    per-row mask (a speculative verify batch's tree) are computed one by one in a fixed order
    (``llmnb.kernels.attention``): a row of a verify batch is then the same bits as that token
    decoded alone, which 8-bit activations need. A bidirectional canvas keeps BLAS.
    """
    return attention_observed(q, k, v, causal, q_offset, key_mask, scratch, False)[0]


def attention_observed(q: F32, k: F32, v: F32, causal: bool, q_offset: int = 0,
                       key_mask: npt.NDArray[np.bool_] | None = None,
                       scratch: Scratch | None = None,
                       weights: bool = True) -> tuple[F32, F32 | None]:
    """``attention`` and, with `weights`, its softmax weights (n_kv, group, T, S), arrays of
    their own (a cache that watches attention keeps them)."""
    t = q.shape[1]
    if exact_pass(t, causal, key_mask):
        from numba import get_num_threads

        from llmnb.kernels.attention import exact_attention, vectors   # numba on first use

        allowed = step_mask(causal, q_offset, t, k.shape[1], key_mask)   # (T, S)
        out = (np.empty((t, q.shape[0] * q.shape[2]), dtype=np.float32) if scratch is None
               else scratch.take("attn", t, q.shape[0] * q.shape[2]))
        probs = np.empty((q.shape[0], t, k.shape[1]), dtype=np.float32) if weights else None
        exact_attention(*vectors(), np.ascontiguousarray(q), heads_in_place(k), heads_in_place(v),
                        allowed, np.float32(1.0 / np.sqrt(q.shape[2])), out, probs,
                        get_num_threads())
        n_kv = k.shape[0]
        return out, None if probs is None else probs.reshape(n_kv, -1, t, k.shape[1])
    # (n_kv, g, T, S); in the scratch unless the caller keeps the weights (then their own)
    p = attention_weights(q, k, causal, q_offset, key_mask, None if weights else scratch)
    return attend(p, v, scratch), p if weights else None


def step_mask(causal: bool, q_offset: int, t: int, s: int,
              key_mask: npt.NDArray[np.bool_] | None) -> npt.NDArray[np.bool_]:
    """(T, S): True where query t (at position q_offset + t) may see key j: j <= q_offset + t
    when `causal`, and where `key_mask` ((S,) or (T, S)) allows."""
    allowed = np.ones((t, s), dtype=np.bool_)
    if causal and not (t == 1 and q_offset == s - 1):          # one newest query sees every key
        allowed &= np.arange(s)[None, :] <= (q_offset + np.arange(t))[:, None]
    if key_mask is not None:
        allowed &= key_mask if key_mask.ndim == 2 else key_mask[None, :]
    return allowed


def heads_in_place(a: F32) -> F32:
    """Keys or values (n_kv, S, hd) as a C-contiguous array for the compiled attention, which
    vectorizes only over contiguous rows: a view when every head's rows are contiguous (the KV
    cache's slice of its first S positions: the view runs on to the cache's capacity, and the
    kernel reads only the first S rows it is told of), else a copy."""
    if a.flags.c_contiguous:
        return a
    n, s, hd = a.shape
    step, row, item = a.strides
    if item == a.itemsize and row == hd * item and n > 1 and step % row == 0 and step // row >= s:
        view: F32 = np.lib.stride_tricks.as_strided(a, (n, step // row, hd), a.strides)
        return view
    return np.ascontiguousarray(a)


def attention_weights(q: F32, k: F32, causal: bool, q_offset: int = 0,
                      key_mask: npt.NDArray[np.bool_] | None = None,
                      scratch: Scratch | None = None) -> F32:
    """The first half of ``attention``: softmax(q k^T / sqrt(hd)) over the keys (the last
    axis), (n_kv, group, T, S) float32. Its own softmax, not ``llmnb.softmax``'s float64 one:
    float32, normalised in place in the scores buffer, for speed. With `scratch` that buffer
    is its own, reused by the next call: a caller that keeps the weights passes none."""
    n_head, t, hd = q.shape
    n_kv, s, _ = k.shape
    group = n_head // n_kv
    # q scaled first (one (nh, T, hd) array written, where scaling the scores would pass over
    # all of them; exact for a power-of-two head size), its heads then one (g*T, hd) matrix
    # per key/value head: one product per group, not one per query head
    qs = None if scratch is None else scratch.take("q", n_head * t, hd).reshape(n_head, t, hd)
    qs = np.multiply(q, np.float32(1.0 / np.sqrt(hd)), out=qs)   # (nh, T, hd), contiguous
    out = None if scratch is None else scratch.take("scores", n_kv * group * t, s).reshape(
        n_kv, group * t, s)
    scores = np.matmul(qs.reshape(n_kv, group * t, hd), k.transpose(0, 2, 1), out=out).reshape(
        n_kv, group, t, s)                                    # (n_kv, g, T, S)
    if key_mask is not None:   # (S,) for every query, or (T, S) per query (speculative branches)
        m = key_mask[None, None, None, :] if key_mask.ndim == 1 else key_mask[None, None, :, :]
        np.copyto(scores, np.float32(-np.inf), where=~m)
    # softmax over each row in place, in one compiled pass (the causal limit applied there,
    # the sum in float64, then rounded)
    from llmnb.kernels.rowwise import softmax

    softmax(scores.reshape(-1, s), t, q_offset if causal else -1)
    return scores


def attend(probs: F32, v: F32, scratch: Scratch | None = None) -> F32:
    """The second half of ``attention``: the weighted sum of values, (T, n_head * hd) (in
    `scratch`'s buffers, if given)."""
    n_kv, group, t, s = probs.shape
    hd = v.shape[2]
    heads = None if scratch is None else scratch.take("heads", n_kv * group * t, hd).reshape(
        n_kv, group * t, hd)
    out: F32 = np.matmul(probs.reshape(n_kv, group * t, s), v, out=heads)   # (n_kv, g*T, hd)
    by_row = out.reshape(n_kv, group, t, hd).transpose(2, 0, 1, 3)      # (T, n_kv, g, hd), a view
    if scratch is None:
        return by_row.reshape(t, n_kv * group * hd)
    rows = scratch.take("attn", t, n_kv * group * hd)
    np.copyto(rows.reshape(t, n_kv, group, hd), by_row)
    return rows


def silu(x: F32) -> F32:
    """x * sigmoid(x)."""
    return (x / (np.float32(1.0) + np.exp(-x))).astype(np.float32, copy=False)


def swiglu(gate: F32, up: F32, out: F32 | None = None) -> F32:
    """SwiGLU's elementwise part (Shazeer 2020): silu(gate) * up (the projections happen
    around it), gate and up (T, ff), into `out` if given (``swiglu_halves``)."""
    gu = np.concatenate([gate, up], axis=1, dtype=np.float32)        # (T, 2 ff)
    return swiglu_halves(gu, out)


def swiglu_halves(gu: F32, out: F32 | None = None) -> F32:
    """silu(gate) * up for gu (T, 2 ff) = [gate | up], the gate-and-up projection's output
    as it comes, into `out` (T, ff) if given: one compiled pass (``rowwise.swiglu``: its exp is
    a vectorized polynomial, within a few units in the last place of numpy's; many rows split
    between numba's threads). Every row is the same bits however many rows come with it."""
    # imported under another name: as ``swiglu`` it would shadow this module's ``swiglu``, and
    # the compiled build then freed the array it returned while the caller still held it (its
    # memory came back from the next allocation)
    from llmnb.kernels.rowwise import swiglu as swiglu_kernel

    gu = np.ascontiguousarray(gu, dtype=np.float32)
    t, n = gu.shape[0], gu.shape[1] // 2
    y = np.empty((t, n), np.float32) if out is None else out
    return swiglu_kernel(gu, y)


# --- Gemma 3's pieces (Gemma Team 2025; llama.cpp's llm_build_gemma3) -------------------------

def gelu_tanh(x: F32) -> F32:
    """GELU in its tanh form, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks &
    Gimpel 2016): Gemma's ``gelu_pytorch_tanh`` and ggml's ``gelu``."""
    c = np.float32(np.sqrt(2.0 / np.pi))
    inner = c * (x + np.float32(0.044715) * x * x * x)
    return (np.float32(0.5) * x * (np.float32(1.0) + np.tanh(inner))).astype(np.float32, copy=False)


def geglu(gate: F32, up: F32, out: F32 | None = None) -> F32:
    """GeGLU's elementwise part: gelu(gate) * up (Shazeer 2020), into `out` if given."""
    y: F32 = np.multiply(gelu_tanh(gate), up, out=out)
    return y


def head_rms_norm(x: F32, weight: F32, eps: float) -> F32:
    """RMSNorm of every head vector: x (n_heads, T, head_dim), weight (head_dim,) — Gemma 3's
    q and k norms, applied before RoPE."""
    h, t, hd = x.shape
    return rms_norm(x.reshape(h * t, hd), weight, eps).reshape(h, t, hd)


def sliding_window_mask(q_positions: npt.NDArray[np.int64], k_positions: npt.NDArray[np.int64],
                        window: int) -> npt.NDArray[np.bool_]:
    """(T, S): True where query i may see key j in a sliding-window layer, i.e. the key is
    less than `window` positions back (q - k < window; llama.cpp's LLAMA_SWA_TYPE_STANDARD).
    Causality is applied separately."""
    return (q_positions[:, None] - k_positions[None, :]) < window       # (T, S)


def softcap(logits: F32, cap: float) -> F32:
    """cap * tanh(logits / cap): logits bounded to (-cap, cap) (Gemma 2's final soft-capping)."""
    c = np.float32(cap)
    out: F32 = np.tanh(logits / c) * c
    return out


# --- the performance path: the projections, x @ W.T, by rows and by how W is held ---------

class Product(Protocol):
    """A weight that multiplies itself: x (T, in) -> x @ W.T (T, out). The quantized
    residency's weights (``llmnb.kernels.PackedMatrix``, or several side by side)."""

    def matmul(self, x: F32, out: F32 | None = None) -> F32:
        """x @ W.T, written into `out` (T, out) where its path can, else an array of its own."""
        ...

    @property
    def nbytes(self) -> int:
        ...


# A product over a few rows (a speculative verify batch, a short prompt) is one matrix-vector
# product per row rather than one OpenBLAS matrix-matrix product, which pays a fixed cost per
# call: walking the weight in column blocks of COL_BLOCK, the first row streams a block from
# memory and the others find it in cache. What this path costs, in decode steps:
# ``python -m llmnb.perf.bench_spec --threads 1 --paths X@W`` (its T <= FEW_ROWS rows).
FEW_ROWS = 6
COL_BLOCK = 1024
# From this many rows on, W @ X.T with W in its own (out, in) layout (``llmnb.model.batch_copy``,
# ``tiles=False``) beats both ways above; at T = 2 and 3 it loses. What each costs, in decode
# steps at every T (SmolLM2-135M, 150 cached tokens):
# ``python -m llmnb.perf.bench_spec --threads 1 --paths X@W W@X.T``.
COPY_ROWS = 4
# A quantized weight's batch copy (its dequantized (out, in) float32, ``llmnb.model.batch_copy``,
# held only when asked: ``generate_speculative(..., batch_copies=True)``) beats the float
# kernels' few-row products (``llmnb.kernels.matvec``) from this many rows on (``python -m
# llmnb.perf.bench_spec --threads 1 --paths quantized-float quantized-float+W@X.T``,
# SmolLM2-135M, 150 cached tokens). Against the integer kernels (``--paths quantized
# quantized+W@X.T``) a verify batch of 16 to 128 rows measured no clear difference either way
# on the 2-core Xeon (2026-12-08, the two ways alternating in rounds, medians of 7 and 15: every
# copy/integer ratio's quartile range straddled 1), so the threshold stays the float kernels'.
COPY_ROWS_QUANTIZED = 32
# From TILED_ROWS rows up to TILED_MAX, a float32 weight held in tiles (``llmnb.kernels.F32Tiles``,
# the batch copies' default) multiplies through the tiled few-row kernel (``llmnb.kernels.floats``);
# from TILED_MAX rows on (a long prompt's prefill) sgemm on the loaded layout (``python -m
# llmnb.perf.bench_spec --threads 1 --paths X@W W@X.T tiles`` measures each, in decode steps).
TILED_ROWS = 2
TILED_MAX = 64


class Linear:
    """One weight matrix W (out, in) as the forward pass multiplies it, x (T, in) -> x @ W.T:
    the weight as loaded, `w_t`, and on request a `copy` for batches of rows
    (``llmnb.model.batch_copy``). ``matmul`` is the one way in, and chooses by the rows:

    - float32 `w_t` = W.T, (in, out), the layout OpenBLAS streams fastest for one token (sgemv
      over columns, for rows as short as these models'). One row is a vector @ matrix product,
      bound by reading w_t; up to FEW_ROWS rows one such product per row over cache-sized
      column blocks; more rows one matrix product, or W @ X.T on the (out, in) copy from
      COPY_ROWS rows on, or the tiled kernel on a copy in tiles (``F32Tiles``) from TILED_ROWS
      up to TILED_MAX rows.
    - a quantized `w_t` (a ``Product``: the integer or float kernels on the file's blocks)
      multiplies itself, or from COPY_ROWS_QUANTIZED rows on runs W @ X.T on its dequantized
      (out, in) copy, when one is held.

    `out`, a (T, out) float32 buffer, receives the product on the paths over the loaded layout
    and the quantized products; the others return an array of their own."""

    __slots__ = ("w_t", "copy")

    def __init__(self, w_t: F32 | Product, copy: F32 | F32Tiles | None = None) -> None:
        self.w_t = w_t
        self.copy = copy

    def matmul(self, x: F32, out: F32 | None = None) -> F32:
        y: F32
        w_t, w, t = self.w_t, self.copy, x.shape[0]
        if not isinstance(w_t, np.ndarray):
            if isinstance(w, np.ndarray) and t >= COPY_ROWS_QUANTIZED:
                y = (w @ x.T).T                               # (T, out), a view of (out, T)
                return y
            return w_t.matmul(x, out)
        if isinstance(w, F32Tiles):
            if TILED_ROWS <= t < TILED_MAX:
                return w.matmul(x)
            w = None
        if w is not None and t >= COPY_ROWS:
            y = (w @ x.T).T                                   # (T, out), a view of (out, T)
        elif t == 1:
            y = np.empty((1, w_t.shape[1]), dtype=np.float32) if out is None else out
            np.matmul(x[0], w_t, out=y[0])                    # (1, out)
        elif t <= FEW_ROWS:
            n = w_t.shape[1]
            y = np.empty((t, n), dtype=np.float32) if out is None else out   # (T, out)
            for j in range(0, n, COL_BLOCK):
                block = w_t[:, j:j + COL_BLOCK]               # (in, <= COL_BLOCK), strided
                for r in range(t):
                    np.matmul(x[r], block, out=y[r, j:j + COL_BLOCK])
        else:
            y = np.matmul(x, w_t, out=out)                    # (T, out)
        return y

    @property
    def copy_bytes(self) -> int:
        """Bytes the copy holds (0: none)."""
        return 0 if self.copy is None else int(self.copy.nbytes)
