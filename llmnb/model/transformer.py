"""The forward pass: token ids in, logits out, for Llama / Qwen2 / Gemma 3 (and the
diffusion kin of the first two).

    h = embed(ids)                                            # (T, d)
    for each layer:
        a = rms_norm(h) @ Wqkv.T (+ b)  -> q, k, v            # (T, (nh + 2 nkv) hd)
        q, k = apply_rope(q), apply_rope(k)                   # at positions start .. start+T-1
        k, v = cache.update(layer, k, v)                      # all keys/values so far
        h = h + attention(q, k, v) @ Wo.T
        g, u = rms_norm(h) @ Wgate_up.T                       # (T, 2 ff)
        h = h + swiglu(g, u) @ Wdown.T
    logits = rms_norm(h) @ Whead.T                            # (T, vocab)

Gemma 3 (``config.arch == "gemma3"``) adds, in order: embeddings times sqrt(d); an RMSNorm
over every q and k head before RoPE; sliding-window layers (a query sees the last
``sliding_window`` keys) with their own RoPE base, interleaved with global ones; an RMSNorm
on the attention output and on the FFN output before each residual add; GeGLU in place of
SwiGLU; and, when the file asks, soft-capped logits. With the defaults of every other
family each of these steps is skipped.

The KV cache is anything with ``update(layer, k, v) -> (k_all, v_all)`` (``KVStore``): the
autoregressive engine passes a preallocated one (``llmnb.ar.kv_cache``), a diffusion step
with the inter-step cache passes one that scatters the recomputed positions into a full
canvas (``llmnb.diffusion.cache``). Without a cache the pass sees only the given tokens.

A causal pass over a cache treats every cached key as past: query t sees all S - T cached
keys plus the new keys 0..t. For an append-only cache that is the usual mask (S - T = start);
for a cache that evicted positions (``llmnb.ar.kv_eviction``) S - T < start, and the keys'
RoPE rotations, applied before caching, still carry their original positions. A store that
also implements ``observe_attention`` (``AttentionObserver``) is handed each layer's softmax
weights as they are computed, for free; other stores cost nothing extra. A store with
``in_place(layer, T)`` (``InPlace``: the append-only ``KVCache``) hands over its arrays
instead, and a pass of a few rows rotates, caches and attends in one compiled call
(``llmnb.kernels.attention.cached_attention``), the bits of the steps done apart.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
import numpy.typing as npt

from llmnb.kernels.layout import F32Tiles
from llmnb.model.blocks import (
    TILED_MAX, TILED_ROWS, Linear, attention, attention_observed, exact_pass, geglu,
    head_rms_norm, rope_inv_freq, rope_mscale, rope_tables, sliding_window_mask, softcap,
    step_mask, swiglu_halves,
)
from llmnb.model.batch_copy import batch_copy, batch_copy_size
from llmnb.model.config import ModelConfig
from llmnb.model.weights import INTEGER, LayerWeights, Weights, available_memory
from llmnb.scratch import Scratch

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


class KVStore(Protocol):
    def update(self, layer: int, k: F32, v: F32) -> tuple[F32, F32]:
        """Store k, v (n_kv, T, hd) for the next T positions; return all (n_kv, S, hd)."""
        ...


class AttentionObserver(Protocol):
    """A ``KVStore`` that also wants the attention weights (found by the method's name:
    compiled code cannot ``isinstance`` a protocol)."""

    def observe_attention(self, layer: int, probs: F32) -> None:
        """Receive a layer's attention weights (n_kv, group, T, S) for the keys `update`
        returned."""
        ...


class InPlace(Protocol):
    """A ``KVStore`` whose keys sit at positions 0..S-1 in arrays it can hand over (found by
    the method's name, as above)."""

    def in_place(self, layer: int, t: int) -> tuple[F32, F32, int] | None:
        """``update`` for a step that writes its T rows itself: the layer's key and value arrays
        (n_kv, capacity, hd) and the position the rows go to; None: use ``update``."""
        ...


class KeyPositions(Protocol):
    """A ``KVStore`` whose keys do not sit at positions 0..S-1 (an evicting cache): sliding-
    window layers ask it where each key is (found by the method's name, as above)."""

    def key_positions(self, layer: int) -> I64:
        """The position of every key the last ``update`` of `layer` returned, (S,)."""
        ...


def projections(lw: LayerWeights) -> tuple[Linear, Linear, Linear, Linear]:
    """A layer's four products as ``Linear``s: Q/K/V side by side, the output, gate/up side
    by side, down."""
    return Linear(lw.wqkv_t), Linear(lw.wo_t), Linear(lw.w_gate_up_t), Linear(lw.w_down_t)


class Transformer:
    """A decoder stack over ``Weights``; ``forward`` returns float32 logits.

    The activations between blocks go into buffers it keeps from pass to pass (``Scratch``,
    llama2.c's ``RunState``): a Transformer runs one pass at a time."""

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        self.config = config
        self.weights = weights
        self.inv_freq = rope_inv_freq(config.rope_dim, config.rope_base, weights.rope_freq_factors,
                                      config.rope_scaling, config.rope_factor, config.rope_orig_ctx)
        self.rope_mscale = rope_mscale(config.rope_scaling, config.rope_factor,
                                       config.rope_attn_factor)
        # each layer's four projections and the head as ``Linear``s, which also hold the copies
        # ``use_batch_copies`` makes: kept for weights held in memory, made per pass for streamed
        # ones
        resident = weights.residency == "resident"
        self.linears = ([projections(weights.layer(i)) for i in range(config.n_layer)]
                        if resident else [])
        self.head = Linear(weights.head_t()) if resident else None
        self.copies_held = False                  # the copies of ``use_batch_copies`` are held
        # sliding-window layers: their own base, never scaled (llama.cpp's freq_scale_swa = 1)
        self.inv_freq_swa = rope_inv_freq(config.rope_dim, config.rope_base_swa or config.rope_base)
        # cos and sin of every position up to the largest asked for so far, (P, rope_dim/2)
        # each, global and sliding-window: built once per model, grown when a pass goes past
        self.rope_cache: dict[bool, tuple[F32, F32]] = {}
        # attention() scales q.k by 1/sqrt(head_dim); a family with another scale rescales q
        self.q_scale = (config.attn_scale * float(np.sqrt(config.head_dim))
                        if config.attn_scale else 1.0)
        self.scratch = Scratch()

    def use_batch_copies(self, on: bool = True, quantized: bool = False, tiles: bool = True) -> int:
        """Keep (or drop) the batch copies of the weights, which batches of several rows
        multiply faster (``llmnb.model.batch_copy``): float32 weights held in memory get their copy
        in 64-output tiles (or, `tiles` False, their (out, in) copy for W @ X.T); quantized
        ones only with `quantized` (a dequantized (out, in) float32 copy of the whole model).
        Each copy goes into its ``Linear``. Returns the bytes held (0: off, weights without a
        copy, or a copy that would leave less than a quarter of the available memory)."""
        w = self.weights
        if w.residency != "resident" or (w.kind != "f32" and not quantized):
            on = False
        every = self.held_linears()
        if on and not self.copies_held:
            on = sum(batch_copy_size(lin.w_t) for lin in every) < 0.75 * available_memory()
        if not on:
            for lin in every:
                lin.copy = None
            self.copies_held = False
            return 0
        if not self.copies_held:
            for lin in every:
                lin.copy = batch_copy(lin.w_t, quantized, tiles)
            self.copies_held = True
            first = every[0].copy if every else None
            if isinstance(first, F32Tiles):
                # numba loads the tiled kernel now, not inside the first verify batch, whose
                # time sets the level of the speculative controller's whole cost curve
                first.matmul(np.zeros((2, first.tiles.shape[1]), dtype=np.float32))
        return self.batch_copy_bytes()

    def held_linears(self) -> list[Linear]:
        """Every ``Linear`` this Transformer keeps, the layers' then the head's (none for
        streamed weights)."""
        return [lin for four in self.linears for lin in four] + (
            [] if self.head is None else [self.head])

    def batch_copy_bytes(self) -> int:
        """Bytes the copies of ``use_batch_copies`` and ``use_head_copy`` hold."""
        return sum(lin.copy_bytes for lin in self.held_linears())

    def use_head_copy(self) -> int:
        """Keep the head's (vocab, d) copy alone (``use_batch_copies`` keeps it with every layer's):
        a diffusion step's head, its masked rows against the whole vocabulary, runs as
        W @ X.T on it faster than as X @ W.T on the (d, vocab) layout (SmolLM2-135M's head at
        64 and 256 masked rows, 1 and 2 threads: time ``Transformer.logits`` on a canvas with
        and without this copy). Float32 weights held in memory only, and only when the copy
        (vocab x d x 4 bytes) takes less than a quarter of the available memory; returns the
        bytes it holds."""
        head = self.head
        if head is None or self.weights.kind != "f32":
            return 0
        if head.copy is None and batch_copy_size(head.w_t) < 0.25 * available_memory():
            head.copy = batch_copy(head.w_t)
        return head.copy_bytes

    @property
    def head_copy(self) -> F32 | F32Tiles | None:
        """The head's copy, if held."""
        return None if self.head is None else self.head.copy

    def hidden(self, ids: npt.NDArray[np.int64], start: int = 0, cache: KVStore | None = None,
               causal: bool | None = None, key_mask: npt.NDArray[np.bool_] | None = None,
               positions: npt.NDArray[np.int64] | None = None, n_layers: int | None = None) -> F32:
        """The final normalised hidden states (T, d) for `ids` at positions start.. (or at
        explicit `positions`, for a diffusion step that recomputes only some of its canvas).
        `n_layers` runs only the first layers before the final norm (a self-drafter).

        BLAS and numba's kernels do not share the cores: whichever ran last leaves its threads
        spinning on them. So a pass whose products all run in the integer kernels and whose
        attention runs in BLAS (a diffusion canvas, a prompt past EXACT_ROWS: ``exact_pass``)
        runs BLAS on one thread (``one_blas_thread``); a pass whose products run in BLAS (float32
        weights, but for the tiled few-row kernel) runs numba's kernels on one thread
        (``one_kernel_thread``)."""
        causal = self.config.causal if causal is None else causal
        if not exact_pass(len(ids), causal, key_mask) and self.kernels_only():
            from llmnb.perf.threads import one_blas_thread

            with one_blas_thread():
                return self._hidden(ids, start, cache, causal, key_mask, positions, n_layers)
        if self.weights.kind == "f32" and not self.tiled(len(ids)):
            from llmnb.perf.threads import one_kernel_thread

            with one_kernel_thread():
                return self._hidden(ids, start, cache, causal, key_mask, positions, n_layers)
        return self._hidden(ids, start, cache, causal, key_mask, positions, n_layers)

    def tiled(self, rows: int) -> bool:
        """Whether a pass of `rows` rows multiplies through the tiled few-row kernel (float32
        weights with their batch copies in tiles, ``Linear.matmul``)."""
        first = self.linears[0][0].copy if self.linears else None
        return self.copies_held and isinstance(first, F32Tiles) and TILED_ROWS <= rows < TILED_MAX

    def kernels_only(self) -> bool:
        """Whether every product of the layers runs in the integer kernels (no float32 copy)."""
        return bool(self.linears) and all(isinstance(lin.w_t, INTEGER) and lin.copy is None
                                           for four in self.linears for lin in four)

    def _hidden(self, ids: npt.NDArray[np.int64], start: int, cache: KVStore | None,
                causal: bool, key_mask: npt.NDArray[np.bool_] | None,
                positions: npt.NDArray[np.int64] | None, n_layers: int | None) -> F32:
        c = self.config
        t = len(ids)
        nq, nkv = c.n_head * c.head_dim, c.n_head_kv * c.head_dim
        if positions is None:
            positions = np.arange(start, start + t, dtype=np.int64)
        cos, sin = self.rope_at(positions, False)                         # (T, rope_dim/2)
        cos_swa, sin_swa = self.rope_at(positions, True) if any(c.swa_layers) else (cos, sin)
        observe: Callable[[int, F32], None] | None = getattr(cache, "observe_attention", None)
        s, d = self.scratch, c.n_embd
        from numba import get_num_threads

        from llmnb.kernels.attention import cached_attention, vectors  # numba on first use
        from llmnb.kernels.rowwise import add_rms_norm, rms_norm as norm, rope

        # a KV cache that lets a compiled call write its rows (``KVCache.in_place``), on a pass
        # the exact attention takes (a few causal or tree-masked rows): each layer's RoPE, cache
        # write and attention in that one call, the same bits as done apart below
        cache_rows: Callable[[int, int], tuple[F32, F32, int] | None] | None = getattr(
            cache, "in_place", None)
        if observe is not None or self.q_scale != 1.0 or not exact_pass(t, causal, key_mask):
            cache_rows = None
        allowed: npt.NDArray[np.bool_] | None = None       # the pass's (T, S) mask, if it has one
        threads = get_num_threads()
        scale = np.float32(1.0 / np.sqrt(c.head_dim))
        eps = c.rms_eps
        h = self.weights.embed(ids)                                        # (T, d), this pass's own
        if c.embd_scale != 1.0:
            h *= np.float32(c.embd_scale)
        count = c.n_layer if n_layers is None else n_layers
        x: F32 | None = None              # the next layer's normed input, if the last one made it
        for i in range(count):
            lw = self.weights.layer(i)
            qkv_proj, o_proj, gate_up_proj, down_proj = (
                self.linears[i] if self.linears else projections(lw))
            slides = c.swa_layers[i] if c.swa_layers else False
            if x is None:
                x = norm(h, lw.attn_norm, eps, s.take("x", t, d))         # (T, d)
            qkv = np.ascontiguousarray(qkv_proj.matmul(x, s.take("qkv", t, nq + 2 * nkv)))
            if lw.bqkv is not None:
                qkv += lw.bqkv
            # q and k heads side by side as the projection wrote them, (T, nh + nkv, hd):
            # normed per head, then rotated in place; every head below is a view of qkv
            qk = qkv[:, :nq + nkv].reshape(t, -1, c.head_dim)
            if lw.q_norm is not None and lw.k_norm is not None:
                qk[:, :c.n_head] = head_rms_norm(qk[:, :c.n_head].transpose(1, 0, 2), lw.q_norm,
                                                 c.rms_eps).transpose(1, 0, 2)
                qk[:, c.n_head:] = head_rms_norm(qk[:, c.n_head:].transpose(1, 0, 2), lw.k_norm,
                                                 c.rms_eps).transpose(1, 0, 2)
            in_place = (cache_rows(i, t) if cache_rows is not None and not slides
                        and lw.q_norm is None else None)
            if in_place is not None:       # rotate, cache and attend in one compiled call
                keys, values, length = in_place
                if allowed is None and (not causal or key_mask is not None):
                    allowed = step_mask(causal, length, t, length + t, key_mask)
                a = s.take("attn", t, nq)
                cached_attention(*vectors(), qkv, c.n_head, cos, sin, keys, values, length,
                                 allowed, scale, a, threads)
            else:
                rope(qk, cos_swa, sin_swa) if slides else rope(qk, cos, sin)
                q = qk[:, :c.n_head].transpose(1, 0, 2)                         # (nh, T, hd)
                k = qk[:, c.n_head:].transpose(1, 0, 2)                         # (nkv, T, hd)
                if self.q_scale != 1.0:
                    q = q * np.float32(self.q_scale)
                v = qkv[:, nq + nkv:].reshape(t, c.n_head_kv, c.head_dim).transpose(1, 0, 2)
                q_offset = start
                if cache is not None:
                    k, v = cache.update(i, k, np.ascontiguousarray(v))    # (nkv, S, hd)
                    q_offset = k.shape[1] - t                       # cached keys are all past
                mask = key_mask
                if slides:
                    mask = self._window_mask(i, positions, k.shape[1], cache, key_mask)
                if observe is None:
                    a = attention(q, k, v, causal, q_offset, mask, s)      # (T, nq)
                else:                                        # weights of its own, to be kept
                    a, p = attention_observed(q, k, v, causal, q_offset, mask, s)
                    assert p is not None
                    observe(i, p)                                        # (nkv, g, T, S)
            o = o_proj.matmul(a, s.take("delta", t, d))                    # (T, d)
            if lw.post_attn_norm is not None:
                o = norm(o, lw.post_attn_norm, eps, o)
            # h is this pass's own: added in place, then normed for the feed-forward
            x = add_rms_norm(h, o, lw.ffn_norm, eps, s.take("x", t, d))
            gu = gate_up_proj.matmul(x, s.take("gu", t, 2 * c.n_ff))      # (T, 2 ff)
            ff = s.take("ff", t, c.n_ff)                                              # (T, ff)
            if c.ffn_act == "gelu":
                geglu(gu[:, :c.n_ff], gu[:, c.n_ff:], ff)
            else:
                swiglu_halves(gu, ff)
            f = down_proj.matmul(ff, s.take("delta", t, d))               # (T, d)
            if lw.post_ffn_norm is not None:
                f = norm(f, lw.post_ffn_norm, eps, f)
            after = self._attn_norm(i + 1) if i + 1 < count else None
            if after is not None:            # the residual add and the next layer's norm
                x = add_rms_norm(h, f, after, eps, s.take("x", t, d))
            else:
                h += f
                x = None
        return norm(h, self.weights.output_norm, eps)

    def _attn_norm(self, i: int) -> F32 | None:
        """Layer i's attention norm if its weights are held (streamed weights load a layer only
        when it runs)."""
        return self.weights.layer(i).attn_norm if self.weights.residency == "resident" else None

    def rope_at(self, positions: I64, swa: bool) -> tuple[F32, F32]:
        """RoPE's cos and sin at `positions`, (T, rope_dim/2) each: rows of tables built once
        per model (``rope_tables`` of 0..P-1, the same values it gives at any position), grown
        to twice the largest position asked for when a pass goes past them."""
        need = int(positions.max()) + 1 if len(positions) else 1
        table = self.rope_cache.get(swa)
        if table is None or len(table[0]) < need:
            size = max(need, 2 * (0 if table is None else len(table[0])), 256)
            every = np.arange(size, dtype=np.int64)
            table = (rope_tables(every, self.inv_freq_swa) if swa
                     else rope_tables(every, self.inv_freq, self.rope_mscale))
            self.rope_cache[swa] = table
        return table[0][positions], table[1][positions]               # (T, rope_dim/2) each

    def _window_mask(self, layer: int, positions: I64, n_keys: int, cache: KVStore | None,
                     key_mask: npt.NDArray[np.bool_] | None) -> npt.NDArray[np.bool_] | None:
        """A sliding-window layer's (T, S) mask (and `key_mask`, if any), or `key_mask` alone
        when every key is inside every query's window. Keys sit at 0..S-1 unless the cache
        says where (``KeyPositions``)."""
        where: Callable[[int], I64] | None = getattr(cache, "key_positions", None)
        key_pos = where(layer) if where is not None else np.arange(n_keys, dtype=np.int64)
        if int(positions.max()) - int(key_pos.min()) < self.config.sliding_window:
            return key_mask
        mask = sliding_window_mask(positions, key_pos, self.config.sliding_window)   # (T, S)
        return mask if key_mask is None else mask & key_mask

    def logits(self, hidden: F32) -> F32:
        """(T, d) hidden states -> (T, vocab) logits through the output head (soft-capped
        when the config asks)."""
        head = self.head if self.head is not None else Linear(self.weights.head_t())
        out = head.matmul(hidden)
        return softcap(out, self.config.logit_softcap) if self.config.logit_softcap else out

    def forward(self, ids: npt.NDArray[np.int64], start: int = 0, cache: KVStore | None = None,
                causal: bool | None = None, key_mask: npt.NDArray[np.bool_] | None = None,
                last_only: bool = False, n_layers: int | None = None) -> F32:
        """Logits (T, vocab), or (1, vocab) for the last position only with `last_only`."""
        h = self.hidden(ids, start, cache, causal, key_mask, n_layers=n_layers)
        return self.logits(h[-1:] if last_only else h)
