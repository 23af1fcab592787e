"""A drift-triggered inter-step cache, in the spirit of Elastic-Cache.

Nguyen-Tri, Ranjan, Shen, "Attention Is All You Need for KV Cache in Diffusion LLMs" (2025)
observe that the masks far from where the step predicts barely matter (cache them), that
K/V move more in deep layers than in shallow ones, and that the most-attended token's K/V
move least, so its attention is a conservative alarm for everything else. Their cache:

- recompute each step only a window of the leftmost masked positions (``proposal_window``:
  `window`, the option `elastic_window`, 16), the positions committed at the last step (their
  K/V once, as diffuse-cpp's cache does) and, per layer, the most-attended decoded token;
- per layer, the tracked token is the decoded (not masked) position that the window's
  queries attend to most; its own attention row over the canvas is compared with the one
  it had at the last forward (cosine similarity of the (heads, keys) weights);
- when the similarity at layer l falls under `gamma` (0.9), refresh: K/V of every position
  from layer l + 1 up, the shallower layers' cached K/V kept.

llmnb's transformer runs every layer for the rows it is given and cannot start a row at a
cached layer's hidden state, so the refresh here is the next forward, over every visible
position: it writes fresh K/V from layer l + 1 up for all of them and, below, only for the
rows a normal step would have recomputed (the paper's shallow-layer reuse, kept so that its
effect on the output can be measured), and it costs a full forward (the paper's costs the
layers from l + 1 up). The drift is tested on normal steps only.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np
import numpy.typing as npt

from llmnb.diffusion.cache import InterStepCache
from llmnb.model.config import ModelConfig

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]


def cosine(a: F32, b: F32) -> float:
    """Cosine similarity of two arrays, flattened (1 when either is all zero)."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return 1.0 if na == 0.0 or nb == 0.0 else float(np.vdot(a, b)) / (na * nb)


class ElasticCache(InterStepCache):
    """``cache_policy="elastic"``: a window of masks, a tracked token per layer, a refresh
    from the first layer whose tracked token's attention drifted."""

    handles: ClassVar[tuple[str, ...]] = ("elastic",)

    def __init__(self, config: ModelConfig, n_positions: int, gamma: float = 0.9,
                 refresh: int = 0, window: int = 16) -> None:
        super().__init__(config, n_positions, 0, refresh, "elastic")
        self.gamma = gamma
        self.window = window               # masked positions a step proposes for
        self.n_layer = config.n_layer
        self.n_head = config.n_head
        self.tracked: I64 = np.full(config.n_layer, -1, dtype=np.int64)   # per layer
        self.tracked_row: list[F32 | None] = [None] * config.n_layer      # (heads, N)
        self.drifted = -1                  # first layer that drifted in the last forward
        self.refresh_from = config.n_layer  # this forward: layers >= it write every row
        self.nominal: I64 = np.zeros(0, dtype=np.int64)   # rows a normal step recomputes
        self.read: I64 = np.zeros(0, dtype=np.int64)      # indices of the rows read
        self.decoded: B = np.zeros(n_positions, dtype=np.bool_)
        self.refreshes = 0

    def proposal_window(self, masked_positions: I64, last: bool) -> I64:
        """The leftmost `window` of the block's masks, or all of them on a budget's `last`
        step (which commits them all)."""
        return masked_positions if last else masked_positions[:self.window]

    def recompute(self, step: int, tokens: I64, masked: B, block: tuple[int, int],
                  todo: I64) -> B:
        assert self.prev_tokens is not None
        act: B = tokens != self.prev_tokens                    # committed (or re-masked)
        act[todo] = True                                       # the window
        act[self.tracked[self.tracked >= 0]] = True
        return act

    def choose_active(self, step: int, tokens: I64, masked: B, block: tuple[int, int],
                      block_step: int, todo: I64, rows: I64, visible: I64 | None = None) -> I64:
        boundary = self.drifted + 1 if self.drifted >= 0 else self.n_layer
        self.drifted = -1
        nominal = super().choose_active(step, tokens, masked, block, block_step, todo, rows,
                                        visible)
        see = np.arange(self.n_positions, dtype=np.int64) if visible is None else visible
        self.refresh_from = self.n_layer
        if boundary < self.n_layer and len(nominal) < len(see):
            self.nominal = np.searchsorted(see, nominal).astype(np.int64)
            self.active = see.astype(np.int64)                  # every visible row
            self.valid[see] = True
            self.refresh_from = boundary
            self.refreshes += 1
            self.partial_forwards -= 1
            self.full_forwards += 1
        self.decoded = ~masked
        if visible is not None:
            self.decoded &= np.isin(np.arange(self.n_positions), visible)
        self.read = np.searchsorted(self.active, rows).astype(np.int64)
        return self.active

    def update(self, layer: int, k: F32, v: F32) -> tuple[F32, F32]:
        if self.refresh_from >= self.n_layer or layer >= self.refresh_from:
            return super().update(layer, k, v)                 # normal, or refreshed layers
        keep = self.active[self.nominal]                       # a refresh's shallow layers
        self.k[layer][:, keep] = k[:, self.nominal]
        self.v[layer][:, keep] = v[:, self.nominal]
        return self.k[layer], self.v[layer]

    def observe_attention(self, layer: int, probs: F32) -> None:
        """The drift test and the choice of next step's tracked token, from a layer's
        attention weights (n_kv, group, T, N) of the active rows."""
        p = probs.reshape(self.n_head, probs.shape[2], probs.shape[3])      # (heads, T, N)
        tr = int(self.tracked[layer])
        i = int(np.searchsorted(self.active, tr))
        if tr >= 0 and i < len(self.active) and self.active[i] == tr:
            row = p[:, i, :]
            last = self.tracked_row[layer]
            normal = self.refresh_from >= self.n_layer
            if last is not None and normal and self.drifted < 0 and cosine(last, row) < self.gamma:
                self.drifted = layer
            self.tracked_row[layer] = row.copy()
        mass = p[:, self.read, :].sum(axis=(0, 1))             # (N,) from the rows read
        mass[~self.decoded] = -1.0
        new = int(np.argmax(mass))
        if new != tr:
            self.tracked[layer] = new
            j = int(np.searchsorted(self.active, new))
            seen = j < len(self.active) and self.active[j] == new
            self.tracked_row[layer] = p[:, j, :].copy() if seen else None
