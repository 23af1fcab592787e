"""Drafters for speculative decoding: cheap guesses of the next K tokens, by name.

Every kind shares the target's vocabulary (``llmnb.ar.speculative_draft`` defines a draft and
the interface):

- ``LookupDrafter`` ("lookup") and ``NgramDrafter`` ("ngram", "ngram:N"): copies from the
  context itself, no model (``llmnb.ar.lookup``);
- ``ModelDrafter`` over a smaller model: a quantized copy of the target written by
  ``llmnb quantize`` (a Q8_0 or Q4_0 copy, say), or any model with the same
  tokenizer (a path or hub name);
- ``ModelDrafter`` with ``n_layers`` ("self:N"): the target's own first N layers followed by its
  final norm and output head, sharing the target's weights in memory (a layer-truncated
  self-drafter, early exit without a trained exit head).

A model drafter keeps its own KV cache and the ids it holds keys for. Each round it rewinds
its cache to the longest prefix it shares with the committed sequence (``KVCache.truncate``;
only the tokens since its last round are compared), feeds the rest in one batch (its
``catch_up``: the tokens committed since its last draft, or the whole prompt before its
first), and decodes K tokens one at a time: K forward passes per round.
"""
from __future__ import annotations

import dataclasses
import operator
from collections.abc import Sequence
from typing import SupportsIndex

import numpy as np
import numpy.typing as npt

from llmnb.ar.speculative_draft import Draft, Drafter, extends
from llmnb.ar.kv_cache import KVCache
from llmnb.ar.lookup import LookupDrafter, NgramDrafter, lookup
from llmnb.ar.sampling import Sampler
from llmnb.errors import UsageError
from llmnb.model.config import ModelError
from llmnb.model.model import Model, load

__all__ = ["Draft", "Drafter", "LookupDrafter", "ModelDrafter", "NgramDrafter",
           "check_same_vocabulary", "lookup", "make_drafter"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


class ModelDrafter(Drafter):
    """A draft model with its own KV cache: a smaller / quantized model, or the first
    ``n_layers`` of the target itself (pass the target's ``Model``)."""

    def __init__(self, model: Model, n_layers: SupportsIndex | None = None, name: str = "") -> None:
        c = model.config
        self.model = model
        self.n_layers = c.n_layer if n_layers is None else operator.index(n_layers)
        if not 1 <= self.n_layers <= c.n_layer:
            raise UsageError(f"self-drafter: expected 1 <= N <= {c.n_layer} layers of "
                             f"{model.path.name}, got {self.n_layers}")
        self.name = name or (model.path.stem if n_layers is None else f"self:{self.n_layers}")
        self.config = dataclasses.replace(c, n_layer=self.n_layers)
        self.cache = KVCache(self.config, 1)
        self.seen: list[int] = []              # ids whose keys/values the cache holds
        self.base = 0                          # length of the context of the last round
        self.logits: npt.NDArray[np.float32] | None = None   # after seen[-1], until a draft

    def cost_key(self) -> str:
        """Its model file, weights kind and layers: two drafters with the same key cost the same."""
        return f"{self.model.path} {self.model.plan.weights} layers={self.n_layers}"

    def reset(self, capacity: int) -> None:
        self.cache = KVCache(self.config, max(1, min(capacity, self.config.n_ctx)))
        self.seen = []
        self.base = 0
        self.logits = None

    def _forward(self, ids: Sequence[int]) -> npt.NDArray[np.float32]:
        arr: I64 = np.asarray(ids, dtype=np.int64)
        logits = self.model.transformer.forward(arr, start=self.cache.length, cache=self.cache,
                                                last_only=True, n_layers=self.n_layers)
        self.cache.commit()
        self.seen.extend(int(i) for i in ids)
        row: npt.NDArray[np.float32] = logits[0]
        return row

    def _shared(self, context: Sequence[int]) -> int:
        """Length of the longest prefix its cache shares with `context` (the context of its
        last round is a prefix of this one, so compared from that round's end)."""
        limit = min(len(self.seen), len(context))
        keep = min(self.base, limit) if extends(self.seen, self.base, context) else 0
        while keep < limit and self.seen[keep] == context[keep]:
            keep += 1
        return keep

    def _synced(self, context: Sequence[int], keep: int) -> bool:
        """Does the cache hold exactly `context`, with the logits after its last token?"""
        return self.logits is not None and keep == len(context) == len(self.seen)

    def behind(self, context: Sequence[int]) -> int:
        keep = self._shared(context)
        return 0 if self._synced(context, keep) else len(context) - min(keep, len(context) - 1)

    def catch_up(self, context: Sequence[int]) -> int:
        keep = self._shared(context)
        if self._synced(context, keep):
            return 0
        keep = min(keep, len(context) - 1)                 # feed at least one token: its logits
        self.cache.truncate(keep)
        del self.seen[keep:]
        self.base = len(context)
        self.logits = self._forward(context[keep:])
        return len(context) - keep

    def propose(self, context: Sequence[int], k: int, sampler: Sampler,
                rng: np.random.Generator) -> Draft:
        k = min(k, self.cache.capacity - len(context) + 1)    # room left in the cache
        if k < 1:
            return Draft([])
        self.catch_up(context)
        logits = self.logits
        assert logits is not None                             # catch_up set them
        self.logits = None                                    # the drafts below move the cache on
        tokens: list[int] = []
        rows: list[F64] = []
        for i in range(k):
            if sampler.greedy:
                tok = int(np.argmax(logits))
            else:
                p = sampler.probs(logits)                      # (V,) the draft's q
                tok = int(rng.choice(p.shape[0], p=p))
                rows.append(p)
            tokens.append(tok)
            if i + 1 < k:
                logits = self._forward([tok])
        return Draft(tokens, np.stack(rows) if rows else None)


def check_same_vocabulary(target: Model, draft: Model) -> None:
    """Refuse a draft model whose token ids do not mean the same text as the target's."""
    t, d = target.tokenizer, draft.tokenizer
    where = f"drafter {draft.path.name}"
    if draft.config.vocab_size != target.config.vocab_size or d.vocab_size != t.vocab_size:
        raise ModelError(f"{where}: expected the target's vocabulary of {target.config.vocab_size} "
                         f"tokens ({target.path.name}), got {draft.config.vocab_size}")
    if d.kind != t.kind:
        raise ModelError(f"{where}: expected a {t.kind!r} tokenizer like the target's, "
                         f"got {d.kind!r}")
    for i, (a, b) in enumerate(zip(t.tokens, d.tokens)):
        if a != b:
            raise ModelError(f"{where}: token {i} is {b!r}, the target's is {a!r} (expected the "
                             f"same tokenizer as {target.path.name})")
    if (d.bos_id, d.eos_id, d.eot_id) != (t.bos_id, t.eos_id, t.eot_id):
        raise ModelError(f"{where}: special ids bos/eos/eot {(d.bos_id, d.eos_id, d.eot_id)} "
                         f"differ from the target's {(t.bos_id, t.eos_id, t.eot_id)}")


def _count(spec: str, what: str, valid: str) -> int:
    """The number after the colon of a drafter name such as self:N, or a UsageError."""
    n = spec.partition(":")[2]
    if not n.isdigit():
        raise UsageError(f"--spec {spec}: expected {what} with N {valid}, got {n!r}")
    return int(n)


def make_drafter(spec: str, target: Model) -> Drafter:
    """A drafter from its command-line name: ``lookup``, ``ngram``, ``ngram:N``, ``self:N``,
    or a model path / hub name."""
    if spec == "lookup":
        return LookupDrafter()
    if spec == "ngram":
        return NgramDrafter()
    if spec.startswith("ngram:"):
        return NgramDrafter(_count(spec, "ngram:N", "an n-gram length (1..64)"))
    if spec.startswith("self:"):
        return ModelDrafter(target, n_layers=_count(
            spec, "self:N", f"a number of layers (1..{target.config.n_layer})"))
    draft = load(spec)
    check_same_vocabulary(target, draft)
    if draft.config.causal is False:
        raise ModelError(f"drafter {draft.path.name}: expected a causal (autoregressive) model, "
                         f"got arch {draft.config.arch!r}")
    return ModelDrafter(draft)
