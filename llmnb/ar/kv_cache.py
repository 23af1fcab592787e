"""The KV cache: keys and values of every past position, preallocated once.

Attention at step t needs the keys and values of positions 0..t. Recomputing them would make
decoding quadratic; keeping them makes each new token cost one position's projections. The
cache is one float32 array per kind, ``(n_layer, n_kv_head, capacity, head_dim)``, filled
left to right; ``update`` writes a layer's new rows and returns views of everything so far.
``commit`` advances the length after a forward pass; ``truncate`` rewinds it (speculative
decoding rolls back rejected tokens this way, with no copying).
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
from mypy_extensions import mypyc_attr

from llmnb.ar.errors import GenerationError
from llmnb.model.config import ModelConfig

F32 = npt.NDArray[np.float32]


@mypyc_attr(allow_interpreted_subclasses=True)   # the evicting cache (kv_eviction) extends it
class KVCache:
    def __init__(self, config: ModelConfig, capacity: int) -> None:
        if capacity < 1:
            raise GenerationError("kv cache: expected a capacity of at least 1 token, got "
                                  f"{capacity}")
        shape = (config.n_layer, config.n_head_kv, capacity, config.head_dim)
        self.k: F32 = np.zeros(shape, dtype=np.float32)      # (L, n_kv, capacity, hd)
        self.v: F32 = np.zeros(shape, dtype=np.float32)
        self.capacity = capacity
        self.length = 0          # positions committed so far
        self._pending = 0        # positions written by the forward pass in progress

    @property
    def room(self) -> int:
        """Positions the next forward pass may add."""
        return self.capacity - self.length

    def pieces(self, n: int) -> Iterator[tuple[int, int]]:
        """Spans [a, b) that feed an input of `n` positions in passes that fit, each as long as
        ``room`` allows when it is reached (commit a pass before taking the next span): one
        span here, several for a cache that holds fewer positions than it has seen."""
        done = 0
        while done < n:
            step = max(1, min(n - done, self.room))      # no room at all: update says so
            yield done, done + step
            done += step

    def update(self, layer: int, k: F32, v: F32) -> tuple[F32, F32]:
        """Write k, v (n_kv, T, hd) at positions length..length+T; return (n_kv, length+T, hd)."""
        end = self._reserve(k.shape[1])
        self.k[layer, :, self.length:end] = k
        self.v[layer, :, self.length:end] = v
        return self.k[layer, :, :end], self.v[layer, :, :end]

    def in_place(self, layer: int, t: int) -> tuple[F32, F32, int] | None:
        """``update`` for a compiled step that writes its own rows
        (``kernels.attention.cached_attention``): the layer's whole key and value arrays
        (n_kv, capacity, hd) and the position its T new rows go to; the step attends over the
        keys before that and its own."""
        self._reserve(t)
        return self.k[layer], self.v[layer], self.length

    def _reserve(self, t: int) -> int:
        """The pass in progress writes t positions from ``length`` on: the end, checked."""
        end = self.length + t
        if end > self.capacity:
            raise GenerationError(f"kv cache full: {self.length} + {t} tokens exceed its capacity "
                                  f"of {self.capacity}")
        self._pending = t
        return end

    def commit(self) -> None:
        """The forward pass finished: the positions it wrote are now part of the context."""
        self.length += self._pending
        self._pending = 0

    def truncate(self, length: int) -> None:
        """Forget every position from `length` on."""
        if not 0 <= length <= self.length:
            raise GenerationError(f"kv cache: cannot truncate to {length} (length {self.length})")
        self.length = length
        self._pending = 0

    def move(self, src: int, dst: int, n: int) -> None:
        """Copy the `n` positions at src.. to dst.. in every layer (speculative decoding moves
        the accepted draft branch next to the prefix it extends, then truncates the rest)."""
        if not (0 <= dst and 0 <= src and n >= 0 and max(src, dst) + n <= self.length):
            raise GenerationError(f"kv cache: cannot move {n} positions from {src} to {dst} "
                                  f"(length {self.length})")
        # numpy copies overlapping spans safely
        self.k[:, :, dst:dst + n] = self.k[:, :, src:src + n]
        self.v[:, :, dst:dst + n] = self.v[:, :, src:src + n]

    @property
    def nbytes(self) -> int:
        return int(self.k.nbytes + self.v.nbytes)

    @staticmethod
    def bytes_for(config: ModelConfig, tokens: int) -> int:
        """Bytes a cache of `tokens` positions takes (``ModelConfig.kv_bytes``)."""
        return config.kv_bytes(tokens)
