"""Drafters for speculative decoding: cheap guesses of the next K tokens.

A drafter proposes up to K tokens after the committed sequence; the target model then checks
them (``llmnb.ar.speculative``). Three kinds, all sharing the target's vocabulary:

- ``LookupDrafter`` ("lookup"; prompt-lookup decoding, Saxena 2023): find the latest earlier
  occurrence of the sequence's last n tokens (n = 3, then 2, then 1) and propose what followed
  it. No model, no cache: it costs a few array comparisons, and it shines when the output
  copies or edits text already in the context.
- ``ModelDrafter`` over a smaller model: a quantized copy of the target written by
  ``llmnb quantize`` (a Q8_0 or Q4_0 copy, say), or any model with the same tokenizer.
- ``ModelDrafter`` with ``n_layers`` ("self:N"): the target's own first N layers followed by its
  final norm and output head, sharing the target's weights in memory (a layer-truncated
  self-drafter, early exit without a trained exit head).

A model drafter keeps its own KV cache and the ids it holds keys for. Each round it rewinds
its cache to the longest prefix it shares with the committed sequence (``KVCache.truncate``),
feeds the rest in one batch, and decodes K tokens one at a time: K forward passes per round.

A draft carries its proposal distributions q (K, vocab) when it sampled them; ``None`` means
deterministic (greedy drafts and lookups), i.e. q is one-hot on the proposed token.
"""
from __future__ import annotations

import bisect
import dataclasses
import operator
from collections.abc import Sequence
from typing import SupportsIndex

import numpy as np
import numpy.typing as npt
from mypy_extensions import mypyc_attr

from llmnb.ar.kv_cache import KVCache
from llmnb.ar.sampling import Sampler
from llmnb.errors import UsageError
from llmnb.model.config import ModelError
from llmnb.model.model import Model, load

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


class Draft:
    """Up to K proposed tokens and, when they were sampled, their distributions q (K, vocab).
    `tag` sorts a drafter's drafts into kinds whose acceptance is tracked apart (the lookup's
    match length); `prior` is the per-token acceptance to assume for a kind not seen yet."""

    def __init__(self, tokens: list[int], q: F64 | None = None, tag: int = 0,
                 prior: float = 0.5) -> None:
        self.tokens = tokens
        self.q = q
        self.tag = tag
        self.prior = prior

    def cut(self, n: int) -> Draft:
        """The first `n` tokens of this draft."""
        if n >= len(self.tokens):
            return self
        return Draft(self.tokens[:n], None if self.q is None else self.q[:n], self.tag,
                     self.prior)

    def __len__(self) -> int:
        return len(self.tokens)

    def __repr__(self) -> str:
        return f"Draft({self.tokens}, q={'sampled' if self.q is not None else 'one-hot'})"


@mypyc_attr(allow_interpreted_subclasses=True)
class Drafter:
    """Proposes tokens after a context; subclass and override ``propose`` for a new kind."""

    name = "drafter"
    free = False           # True when a proposal costs no forward pass (lookup)

    def reset(self, capacity: int) -> None:
        """Start a new generation whose sequence may reach `capacity` tokens."""

    def propose(self, context: Sequence[int], k: int, sampler: Sampler,
                rng: np.random.Generator) -> Draft:
        """Up to `k` tokens to follow `context` (the whole committed sequence). ``Drafter`` is
        the base every kind extends; it has no proposal of its own."""
        raise TypeError(f"{type(self).__name__} does not override Drafter.propose: a drafter "
                        f"kind must say how it proposes tokens")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class LookupDrafter(Drafter):
    """Prompt lookup: copy what followed the latest earlier match of the last n tokens.

    An index maps every n-gram (n = min_ngram..max_ngram) that has a token after it to the
    positions where its occurrences end; it grows with the context, so a proposal costs a few
    dictionary look-ups whatever the context length.

    With `follow` (the default) the drafter also remembers where its last draft copied from
    and how far the sequence has moved on since: a *cursor* in the copied text. Of several
    earlier occurrences of the n-gram it takes the one ending nearest the cursor, if within
    ``FOLLOW_SLACK`` tokens (else the latest), so a copy that was edited --
    a word corrected, a name changed -- picks the text up again where it left off instead of
    at some later repetition of a common word. Without it: always the latest occurrence.

    A draft's tag is the length of the
    match it copies (followed back up to ``LONG_MATCH`` tokens, in the buckets 1, 2, 3, 4-7,
    8+): a long match is a copy in progress, a short one a guess. Its prior acceptance is
    m / (m + 1) for a bucket starting at m (0.5 for a single token, 0.89 for 8 or more).
    """

    LONG_MATCH = 8
    FOLLOW_SLACK = 8

    free = True

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, follow: bool = True) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise UsageError(f"lookup drafter: expected 1 <= min_ngram <= max_ngram, got "
                             f"{min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.name = "lookup"
        self.follow = follow
        self.tokens: list[int] = []                     # the context seen so far
        self.ends: dict[tuple[int, ...], list[int]] = {}  # n-gram -> end of each occurrence
        self.src = -1                                   # where the last draft copied from ...
        self.src_ctx = 0                                # ... and the context length then

    def reset(self, capacity: int) -> None:
        self.tokens = []
        self.ends = {}
        self.src, self.src_ctx = -1, 0

    def _extend(self, context: Sequence[int]) -> None:
        toks = self.tokens
        n0 = len(toks)
        if len(context) < n0 or list(context[:n0]) != toks:
            self.reset(0)                               # not a continuation: start over
            toks, n0 = self.tokens, 0
        toks.extend(int(t) for t in context[n0:])
        # n-grams ending at e get indexed once token e + 1 exists (so they have a successor)
        for e in range(max(0, n0 - 1), len(toks) - 1):
            for n in range(self.min_ngram, min(self.max_ngram, e + 1) + 1):
                key = tuple(toks[e - n + 1:e + 1])
                ends = self.ends.get(key)
                if ends is None:
                    self.ends[key] = [e]
                else:
                    ends.append(e)                      # ascending: e only grows

    def propose(self, context: Sequence[int], k: int, sampler: Sampler,
                rng: np.random.Generator) -> Draft:
        self._extend(context)
        toks = self.tokens
        n_ctx = len(toks)
        cursor = self.src + n_ctx - self.src_ctx if self.follow and self.src >= 0 else -1
        for n in range(min(self.max_ngram, n_ctx), self.min_ngram - 1, -1):
            ends = self.ends.get(tuple(toks[n_ctx - n:]))
            if ends is None:
                continue
            end = ends[-1]                              # the latest occurrence, or the one
            if cursor >= 0:                             # ending nearest the cursor
                i = bisect.bisect_left(ends, cursor - 1)
                near = min(ends[max(0, i - 1):i + 1], key=lambda e: abs(e - cursor + 1))
                if abs(near - cursor + 1) <= self.FOLLOW_SLACK:
                    end = near
            src = end + 1                               # the token after the match
            self.src, self.src_ctx = src, n_ctx
            out = toks[src:src + k]
            period = n_ctx - src
            while len(out) < k:                         # past the end: the copy copies itself
                out.append(out[len(out) - period])
            m = n                                       # how far back the match goes
            while (m < self.LONG_MATCH and end - m >= 0
                   and toks[end - m] == toks[n_ctx - 1 - m]):
                m += 1
            tag = m if m < 4 else 4 if m < self.LONG_MATCH else self.LONG_MATCH
            return Draft(out, tag=tag, prior=tag / (tag + 1.0))
        return Draft([])


def lookup(context: Sequence[int], k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """The `k` tokens after the latest earlier occurrence of the context's last n tokens,
    longest n first; [] when no n-gram recurs. A loop of period p proposes the loop again
    (the copy runs on into its own output), so a repeating pattern yields `k` tokens."""
    d = LookupDrafter(max_ngram, min_ngram, follow=False)
    return d.propose(context, k, Sampler(temperature=0.0), np.random.default_rng(0)).tokens


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

    def reset(self, capacity: int) -> None:
        self.cache = KVCache(self.config, max(1, min(capacity, self.config.n_ctx)))
        self.seen = []

    def _forward(self, ids: Sequence[int]) -> npt.NDArray[np.float32]:
        arr: I64 = np.asarray(ids, dtype=np.int64)
        logits = self.model.transformer.forward(arr, start=self.cache.length, cache=self.cache,
                                                last_only=True, n_layers=self.n_layers)
        self.cache.commit()
        self.seen.extend(int(i) for i in ids)
        row: npt.NDArray[np.float32] = logits[0]
        return row

    def propose(self, context: Sequence[int], k: int, sampler: Sampler,
                rng: np.random.Generator) -> Draft:
        k = min(k, self.cache.capacity - len(context) + 1)    # room left in the cache
        if k < 1:
            return Draft([])
        # rewind to the longest prefix the cache shares with the context (keep >= 1 to feed)
        keep, limit = 0, min(len(self.seen), len(context) - 1)
        while keep < limit and self.seen[keep] == context[keep]:
            keep += 1
        self.cache.truncate(keep)
        del self.seen[keep:]
        logits = self._forward(context[keep:])
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


def make_drafter(spec: str, target: Model) -> Drafter:
    """A drafter from its command-line name: ``lookup``, ``self:N``, or a model path / hub name."""
    if spec == "lookup":
        return LookupDrafter()
    if spec.startswith("self:"):
        n = spec[5:]
        if not n.isdigit():
            raise UsageError(f"--spec {spec}: expected self:N with N a number of layers "
                             f"(1..{target.config.n_layer}), got {n!r}")
        return ModelDrafter(target, n_layers=int(n))
    draft = load(spec)
    check_same_vocabulary(target, draft)
    if draft.config.causal is False:
        raise ModelError(f"drafter {draft.path.name}: expected a causal (autoregressive) model, "
                         f"got arch {draft.config.arch!r}")
    return ModelDrafter(draft)
