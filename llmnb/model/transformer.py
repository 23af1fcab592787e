"""The forward pass: token ids in, logits out, for Llama / Qwen2 (and their diffusion kin).

    h = embed(ids)                                            # (T, d)
    for each layer:
        a = rms_norm(h) @ Wqkv.T (+ b)  -> q, k, v            # (T, (nh + 2 nkv) hd)
        q, k = apply_rope(q), apply_rope(k)                   # at positions start .. start+T-1
        k, v = cache.update(layer, k, v)                      # all keys/values so far
        h = h + attention(q, k, v) @ Wo.T
        g, u = rms_norm(h) @ Wgate_up.T                       # (T, 2 ff)
        h = h + swiglu(g, u) @ Wdown.T
    logits = rms_norm(h) @ Whead.T                            # (T, vocab)

The KV cache is anything with ``update(layer, k, v) -> (k_all, v_all)`` (``KVStore``): the
autoregressive engine passes a preallocated one (``llmnb.ar.kv_cache``), a diffusion step
with the inter-step cache passes one that scatters the recomputed positions into a full
canvas (``llmnb.diffusion.cache``). Without a cache the pass sees only the given tokens.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from llmnb.model.blocks import (
    apply_rope, attention, linear, rms_norm, rope_inv_freq, rope_tables, swiglu,
)
from llmnb.model.config import ModelConfig
from llmnb.model.weights import Weights

F32 = npt.NDArray[np.float32]


class KVStore(Protocol):
    def update(self, layer: int, k: F32, v: F32) -> tuple[F32, F32]:
        """Store k, v (n_kv, T, hd) for the next T positions; return all (n_kv, S, hd)."""
        ...


class Transformer:
    """A decoder stack over ``Weights``; ``forward`` returns float32 logits."""

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        self.config = config
        self.weights = weights
        self.inv_freq = rope_inv_freq(config.rope_dim, config.rope_base, weights.rope_freq_factors)

    def hidden(self, ids: npt.NDArray[np.int64], start: int = 0, cache: KVStore | None = None,
               causal: bool | None = None, key_mask: npt.NDArray[np.bool_] | None = None,
               positions: npt.NDArray[np.int64] | None = None) -> F32:
        """The final normalised hidden states (T, d) for `ids` at positions start.. (or at
        explicit `positions`, for a diffusion step that recomputes only some of its canvas)."""
        c = self.config
        causal = c.causal if causal is None else causal
        t = len(ids)
        nq, nkv = c.n_head * c.head_dim, c.n_head_kv * c.head_dim
        if positions is None:
            positions = np.arange(start, start + t, dtype=np.int64)
        cos, sin = rope_tables(positions, self.inv_freq)
        h = self.weights.embed(ids)                                        # (T, d)
        for i in range(c.n_layer):
            lw = self.weights.layer(i)
            x = rms_norm(h, lw.attn_norm, c.rms_eps)                       # (T, d)
            qkv = linear(x, lw.wqkv_t)                                           # (T, nq + 2 nkv)
            if lw.bqkv is not None:
                qkv += lw.bqkv
            # q and k heads side by side, rotated in one call: (nh + nkv, T, hd)
            qk = apply_rope(qkv[:, :nq + nkv].reshape(t, -1, c.head_dim).transpose(1, 0, 2),
                            cos, sin)
            q, k = qk[:c.n_head], qk[c.n_head:]                                 # (nh, T, hd), (nkv, T, hd)
            v = qkv[:, nq + nkv:].reshape(t, c.n_head_kv, c.head_dim).transpose(1, 0, 2)
            if cache is not None:
                k, v = cache.update(i, k, np.ascontiguousarray(v))        # (nkv, S, hd)
            a = attention(q, k, v, causal, q_offset=start, key_mask=key_mask)   # (T, nq)
            h = h + linear(a, lw.wo_t)                                         # (T, d)
            x = rms_norm(h, lw.ffn_norm, c.rms_eps)
            gu = linear(x, lw.w_gate_up_t)                                     # (T, 2 ff)
            h = h + linear(swiglu(gu[:, :c.n_ff], gu[:, c.n_ff:]), lw.w_down_t)  # (T, d)
        return rms_norm(h, self.weights.output_norm, c.rms_eps)

    def logits(self, hidden: F32) -> F32:
        """(T, d) hidden states -> (T, vocab) logits through the output head."""
        return linear(hidden, self.weights.head_t())

    def forward(self, ids: npt.NDArray[np.int64], start: int = 0, cache: KVStore | None = None,
                causal: bool | None = None, key_mask: npt.NDArray[np.bool_] | None = None,
                last_only: bool = False) -> F32:
        """Logits (T, vocab), or (1, vocab) for the last position only with `last_only`."""
        h = self.hidden(ids, start, cache, causal, key_mask)
        return self.logits(h[-1:] if last_only else h)
