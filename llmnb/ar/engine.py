"""Autoregressive generation: prefill the prompt in one batch, then decode token by token.

The runtime is an explicit state machine, so what may happen next is never implicit:

    loaded --prefill--> prefilled --step--> decoding --step--> ... --> stopped(reason)

Prefill runs the whole prompt through the model in one forward pass (matrix-matrix work)
and fills the KV cache; each decode step feeds one token (matrix-vector work, bound by how
fast the weights stream from memory). Generation stops on an end-of-generation token
("eos"), after max_new_tokens ("max_tokens"), when the context is full ("context_full") or
when the text produced ends with a stop string ("stop_string").

With a KV budget (``kv_budget=``, ``llmnb.ar.kv_eviction``) the cache holds at most that many
positions between steps, evicting by the chosen policy; a prompt longer than the cache's
free slots is prefilled in pieces that fit.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import SupportsIndex

import numpy as np
import numpy.typing as npt

from llmnb.ar.errors import GenerationError
from llmnb.ar.kv_cache import KVCache
from llmnb.ar.kv_eviction import EvictingKVCache
from llmnb.ar.sampling import Greedy, Sampler
from llmnb.ar.text_stream import TextStream
from llmnb.errors import UsageError
from llmnb.model.model import Model

LOADED, PREFILLED, DECODING, STOPPED = "loaded", "prefilled", "decoding", "stopped"


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    new_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0

    @property
    def prefill_tok_s(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tok_s(self) -> float:
        """Tokens per second of the decode loop (the first new token comes from prefill)."""
        steps = self.new_tokens - 1
        return steps / self.decode_s if steps > 0 and self.decode_s > 0 else 0.0

    def to_json(self) -> dict[str, float | int]:
        return {"prompt_tokens": self.prompt_tokens, "new_tokens": self.new_tokens,
                "prefill_s": self.prefill_s, "decode_s": self.decode_s,
                "prefill_tok_s": self.prefill_tok_s, "decode_tok_s": self.decode_tok_s}


@dataclass
class GenerationResult:
    prompt_ids: list[int]
    tokens: list[int]                 # new tokens only (an end-of-generation token included)
    text: str                         # the new text (up to a stop string, if one ended it)
    stop_reason: str
    stats: GenerationStats = field(default_factory=GenerationStats)


class Generator:
    """One generation's runtime: KV cache, sampler and state (see module docstring)."""

    def __init__(self, model: Model, sampler: Sampler, capacity: int,
                 cache: KVCache | None = None) -> None:
        if capacity > model.config.n_ctx:
            capacity = model.config.n_ctx
        self.model = model
        self.sampler = sampler
        self.transformer = model.transformer     # weights are ready before anything is timed
        self.cache = KVCache(model.config, capacity) if cache is None else cache
        self.state = LOADED
        self.stop_reason = ""
        self.logits: npt.NDArray[np.float32] | None = None   # (vocab,) after the last token
        self.stats = GenerationStats()

    def _forward(self, ids: npt.NDArray[np.int64]) -> None:
        logits = self.transformer.forward(ids, start=self.cache.length, cache=self.cache,
                                                last_only=True)
        self.cache.commit()
        self.logits = logits[0]

    def prefill(self, prompt_ids: Sequence[int]) -> None:
        if self.state != LOADED:
            raise GenerationError(f"prefill: expected state {LOADED!r}, in {self.state!r}")
        ids = self.model.check_ids(prompt_ids)
        check_room(self.model, len(ids), self.cache.capacity)
        t0 = time.perf_counter()
        for a, b in self.cache.pieces(len(ids)):   # one pass, or pieces an evicting cache fits
            self._forward(ids[a:b])
        self.stats.prefill_s = time.perf_counter() - t0
        self.stats.prompt_tokens = len(ids)
        self.state = PREFILLED

    def next_token(self) -> int:
        """Sample the next token from the current logits (does not feed it yet)."""
        if self.state not in (PREFILLED, DECODING) or self.logits is None:
            raise GenerationError(f"next_token: expected a prefilled generator, in {self.state!r}")
        return self.sampler.sample(self.logits)

    def feed(self, token: int) -> None:
        """Run one decode step on `token`, leaving the logits for the next one."""
        if self.state not in (PREFILLED, DECODING):
            raise GenerationError(f"feed: expected a prefilled generator, in {self.state!r}")
        self.state = DECODING
        self._forward(np.array([token], dtype=np.int64))

    def stop(self, reason: str) -> None:
        self.state = STOPPED
        self.stop_reason = reason


def check_max_new_tokens(max_new_tokens: int) -> None:
    if max_new_tokens < 1:
        raise UsageError(f"max_new_tokens: expected at least 1, got {max_new_tokens}")


def check_room(model: Model, n_prompt: int, capacity: int) -> None:
    """Refuse a prompt of `n_prompt` tokens that leaves no room to generate in `capacity`."""
    if n_prompt >= capacity:
        raise GenerationError(f"prompt of {n_prompt} tokens leaves no room to generate in a "
                              f"context of {capacity} (the model's is {model.config.n_ctx})")


def generate(model: Model, prompt: str | Sequence[int], max_new_tokens: int = 128,
             sampler: Sampler | None = None, chat: bool = False, system: str | None = None,
             stop: Sequence[str] = (), on_text: Callable[[str], None] | None = None,
             kv_budget: SupportsIndex | None = None, kv_recent: SupportsIndex | None = None,
             kv_sinks: SupportsIndex = 4,
             kv_policy: str = "initial_key", kv_scope: str = "layer") -> GenerationResult:
    """Generate up to `max_new_tokens` after `prompt` (``llmnb.generate``).

    `kv_budget` caps the KV cache at that many positions (``EvictingKVCache``: `kv_sinks`
    initial positions, the `kv_recent` latest, the rest by `kv_policy` "initial_key", "h2o" or
    "streaming", scored per layer or with `kv_scope` "global"); None keeps every position.

    `on_text` receives the new text as it becomes final: token bytes go through an
    incremental UTF-8 decoder (a character split across tokens waits for its last byte) and
    a possible start of a stop string is held back until it resolves.
    """
    check_max_new_tokens(max_new_tokens)
    sampler = sampler if sampler is not None else Greedy()
    ids = model.prompt_ids(prompt, chat, system)
    capacity = min(len(ids) + max_new_tokens, model.config.n_ctx)
    cache = None if kv_budget is None else EvictingKVCache(
        model.config, capacity, kv_budget, kv_recent, kv_sinks, kv_policy, kv_scope)
    g = Generator(model, sampler, capacity=capacity, cache=cache)
    g.prefill(ids)
    out = TextStream(model.tokenizer, max_new_tokens, stop, on_text)
    t0 = time.perf_counter()
    while g.state != STOPPED:
        token = g.next_token()
        if out.push(token, context_full=g.cache.length >= g.cache.capacity):
            g.stop(out.stop_reason)
        else:
            g.feed(token)
    g.stats.decode_s = time.perf_counter() - t0
    g.stats.new_tokens = len(out.tokens)
    out.finish()
    return GenerationResult(ids, out.tokens, out.text, g.stop_reason, g.stats)
