"""Selective KV cache: keep a budget of positions, evict the rest (the Initial-Key Cache).

A full KV cache grows by one position per token. This one holds at most ``budget`` positions
between forward passes, in three groups:

    sinks   the first ``sinks`` positions of the sequence (attention sinks: every query
            pays them attention whatever they say), never evicted;
    recent  the last ``recent`` positions (local context), never evicted;
    middle  the ``budget - sinks - recent`` other positions with the highest score.

When a forward pass leaves more than ``budget`` positions, ``commit`` ranks the middle,
drops the lowest and compacts: each kept key/value that sits past slot ``budget`` moves into
a freed slot, so the arrays never grow and the live part is always slots ``0..budget-1``.

Policies (``policy``) differ only in the score that ranks the middle:

- ``"initial_key"`` (Tang et al., "Initial-Key Cache", IJCNN 2025): the **Score Sum**, the
  attention each key received over the last ``window`` query rows (a rolling sum over a
  ring of rows), summed over heads. It reuses the softmax weights the attention has just
  computed (``observe_attention``), so it adds no transformer FLOPs. The paper scores
  each layer separately (``scope="layer"``, the default: each layer keeps its own set);
  ``scope="global"`` sums the scores of all layers and keeps one set for every layer (the
  simplification some CPU engines make). The paper's row window is not known here;
  ``window=8`` is llmnb's choice.
- ``"h2o"`` (Zhang et al., "H2O: Heavy-Hitter Oracle", NeurIPS 2023): heavy hitters by
  attention *accumulated* since the key arrived (per layer, summed over heads; H2O itself
  ranks per head). H2O has no sinks; pass ``sinks=0`` for the paper's setting.
- ``"streaming"`` (Xiao et al., "StreamingLLM", ICLR 2024): no scores; the sinks plus the
  most recent positions fill the whole budget (``recent`` is ``budget - sinks``).

Positions. Keys are cached after RoPE, each rotated at its true position. Compaction moves
rotated keys as they are, so a kept key keeps its original position, and a new token is
rotated at its true position (``length``, the positions seen so far). The relative
distances attention sees are therefore the true ones, and with nothing evicted the cache is
bit-identical to ``KVCache``. Positions thus still run up to the model's context length
(``capacity``); StreamingLLM's re-numbering of positions inside the cache (which lets it
run past the trained context) is not done here.

Memory. Between passes at most ``budget`` positions are held; during a pass the new tokens
are appended after them, so the arrays have ``budget + chunk`` slots (``capacity`` if that is
less) and a forward pass may add at most ``room`` positions (the engine prefills a long
prompt in pieces that fit).
"""
from __future__ import annotations

import operator
from typing import SupportsIndex

import numpy as np
import numpy.typing as npt

from llmnb.ar.errors import GenerationError
from llmnb.ar.kv_cache import KVCache
from llmnb.errors import UsageError
from llmnb.model.config import ModelConfig

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
POLICIES = ("initial_key", "streaming", "h2o")
SCOPES = ("layer", "global")


def check_budget(budget: SupportsIndex, recent: SupportsIndex | None = None,
                 sinks: SupportsIndex = 4, policy: str = "initial_key",
                 scope: str = "layer") -> tuple[int, int, int]:
    """Validate a budget; return (budget, recent, sinks) with `recent` resolved.

    The default `recent` is half of what the sinks leave, ``(budget - sinks) // 2``, the
    other half going to the top-scored middle; for ``"streaming"`` it is ``budget - sinks``.
    """
    b, s = operator.index(budget), operator.index(sinks)
    if policy not in POLICIES:
        raise UsageError(f"kv policy: expected one of {', '.join(POLICIES)}, got {policy!r}")
    if scope not in SCOPES:
        raise UsageError(f"kv scope: expected one of {', '.join(SCOPES)}, got {scope!r}")
    if b < 1:
        raise UsageError(f"kv budget: expected at least 1 position, got {b}")
    if s < 0:
        raise UsageError(f"kv sinks: expected 0 or more, got {s}")
    if recent is None:
        r = b - s if policy == "streaming" else (b - s) // 2
    else:
        r = operator.index(recent)
    if r < 0:
        raise UsageError(f"kv recent: expected 0 or more, got {r}")
    if s + r > b:
        raise UsageError(f"kv budget {b} is smaller than kv sinks {s} + kv recent {r}; "
                         f"expected a budget of at least {s + r}")
    if policy == "streaming":
        r = b - s                      # StreamingLLM: everything but the sinks is recent
    return b, r, s


def keep_mask(scores: F32, positions: I64, seen: int, budget: int, sinks: int,
              recent: int) -> npt.NDArray[np.bool_]:
    """Which slots to keep, per layer: (L, n) scores and positions -> (L, n) bool.

    Sinks (position < sinks) and recent positions (>= seen - recent) are always kept; the rest
    of the budget goes to the highest scores, ties to the later position.
    """
    protected = (positions < sinks) | (positions >= seen - recent)        # (L, n)
    rank = np.where(protected, np.float32(np.inf), scores)                 # (L, n)
    # lexsort: last key first; descending rank, then descending position
    order = np.lexsort((-positions, -rank), axis=-1)[:, :budget]           # (L, budget)
    keep = np.zeros(positions.shape, dtype=np.bool_)
    np.put_along_axis(keep, order, True, axis=-1)
    return keep


class EvictingKVCache(KVCache):
    """A ``KVCache`` that holds at most ``budget`` positions between forward passes.

    ``length`` counts the positions seen (the next token's RoPE position, as in ``KVCache``);
    ``held`` the positions whose keys and values are stored; ``capacity`` bounds ``length``
    (the model's context). ``pos[l, i]`` is the position of layer l's slot i.
    """

    def __init__(self, config: ModelConfig, capacity: SupportsIndex, budget: SupportsIndex,
                 recent: SupportsIndex | None = None, sinks: SupportsIndex = 4,
                 policy: str = "initial_key", scope: str = "layer", window: SupportsIndex = 8,
                 chunk: SupportsIndex = 32) -> None:
        b, r, s = check_budget(budget, recent, sinks, policy, scope)
        cap, w, ch = operator.index(capacity), operator.index(window), operator.index(chunk)
        if w < 1:
            raise UsageError(f"kv window: expected at least 1 attention row, got {w}")
        if ch < 1:
            raise UsageError(f"kv chunk: expected at least 1 position, got {ch}")
        slots = cap if b >= cap else b + ch          # never more than the run can use
        super().__init__(config, slots)
        self.capacity = cap
        self.slots = slots
        self.budget, self.recent, self.sinks = b, r, s
        self.policy, self.scope, self.window, self.chunk = policy, scope, w, ch
        self.held = 0                                # slots in use
        self.evicted = 0                             # positions dropped so far (per layer)
        n_layer = config.n_layer
        self.pos: I64 = np.zeros((n_layer, slots), dtype=np.int64)          # (L, slots)
        # attention received: a ring of the last `window` rows (initial_key) or a running
        # sum (h2o); streaming needs none
        rows = w if policy == "initial_key" else 1 if policy == "h2o" else 0
        self.ring: F32 = np.zeros((n_layer, rows, slots), dtype=np.float32)  # (L, W, slots)

    @property
    def room(self) -> int:
        """Positions the next forward pass may add."""
        return min(self.slots - self.held, self.capacity - self.length)

    def update(self, layer: int, k: F32, v: F32) -> tuple[F32, F32]:
        """Append k, v (n_kv, T, hd) after the held slots; return (n_kv, held + T, hd)."""
        t = k.shape[1]
        end = self.held + t
        if self.length + t > self.capacity:
            raise GenerationError(f"kv cache full: {self.length} + {t} positions exceed its "
                                  f"capacity of {self.capacity}")
        if end > self.slots:
            raise GenerationError(f"kv cache: {self.held} held + {t} new positions exceed its "
                                  f"{self.slots} slots (feed at most {self.room} positions per "
                                  "pass)")
        self.k[layer, :, self.held:end] = k
        self.v[layer, :, self.held:end] = v
        self.pos[layer, self.held:end] = np.arange(self.length, self.length + t, dtype=np.int64)
        self._pending = t
        return self.k[layer, :, :end], self.v[layer, :, :end]

    def in_place(self, layer: int, t: int) -> tuple[F32, F32, int] | None:
        """None: the held keys are not positions 0..length-1, so every pass goes through
        ``update``."""
        return None

    def observe_attention(self, layer: int, probs: F32) -> None:
        """Record layer `layer`'s attention weights (n_kv, group, T, S) for the scores."""
        if self.policy == "streaming":
            return
        rows = probs.sum(axis=(0, 1))                # (T, S) summed over all query heads
        t, s = rows.shape
        if self.policy == "h2o":
            self.ring[layer, 0, :s] += rows.sum(axis=0)
            return
        first = max(0, t - self.window)              # only the last `window` rows count
        idx = (self.length + np.arange(first, t)) % self.window   # ring rows by query position
        self.ring[layer, idx, :s] = rows[first:]
        self.ring[layer, idx, s:] = 0.0

    def scores(self) -> F32:
        """The score of each held slot, (L, held): Score Sum, accumulated attention, or the
        position itself (streaming: the most recent win); summed over layers for ``global``."""
        n = self.held
        sc: F32
        if self.policy == "streaming":
            sc = self.pos[:, :n].astype(np.float32)
        else:
            sc = self.ring[:, :, :n].sum(axis=1)     # (L, held)
        if self.scope == "global":
            sc = np.broadcast_to(sc.sum(axis=0, keepdims=True), sc.shape).copy()
        return sc

    def commit(self) -> None:
        """The pass finished: its positions join the context; past the budget, evict."""
        self.length += self._pending
        self.held += self._pending
        self._pending = 0
        if self.held > self.budget:
            self._evict()

    def _evict(self) -> None:
        b, n = self.budget, self.held
        keep = keep_mask(self.scores(), self.pos[:, :n], self.length, b, self.sinks, self.recent)
        # every layer keeps b of its n slots: fill its holes below b with its keepers above b
        hole_l, hole_s = np.nonzero(~keep[:, :b])
        move_l, move_s = np.nonzero(keep[:, b:])
        move_s = move_s + b
        self.k[hole_l, :, hole_s] = self.k[move_l, :, move_s]                # (moves, n_kv, hd)
        self.v[hole_l, :, hole_s] = self.v[move_l, :, move_s]
        self.pos[hole_l, hole_s] = self.pos[move_l, move_s]
        self.ring[hole_l, :, hole_s] = self.ring[move_l, :, move_s]
        self.ring[:, :, b:] = 0.0                    # freed slots start from zero attention
        self.evicted += n - b
        self.held = b

    def truncate(self, length: int) -> None:
        """Rewind to `length` positions; only possible while nothing was evicted."""
        if self.evicted > 0 and length != self.length:
            raise GenerationError("kv cache: cannot rewind a cache that has evicted positions")
        super().truncate(length)
        self.held = self.length
        self.ring[:, :, self.held:] = 0.0

    def key_positions(self, layer: int) -> I64:
        """The position of every key the last ``update`` of `layer` returned, in slot order
        (``transformer.KeyPositions``: a sliding-window layer masks by them)."""
        out: I64 = self.pos[layer, :self.held + self._pending]
        return out

    def move(self, src: int, dst: int, n: int) -> None:
        """Refused: slots here are not positions (speculative decoding keeps a full cache)."""
        raise GenerationError("kv cache: an evicting cache cannot move positions")

    def kept_positions(self, layer: int) -> I64:
        """The positions layer `layer` holds, ascending."""
        out: I64 = np.sort(self.pos[layer, :self.held])
        return out

    def groups(self, layer: int) -> tuple[I64, I64, I64]:
        """Layer `layer`'s held positions split into (sinks, recent, middle), each ascending."""
        p = self.kept_positions(layer)
        sink = p < self.sinks
        rec = ~sink & (p >= self.length - self.recent)
        return p[sink], p[rec], p[~sink & ~rec]
