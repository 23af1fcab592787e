"""Perplexity: how surprised a model is by a text, exp(mean negative log-likelihood).

The text is tokenized once and cut into non-overlapping windows of `ctx` tokens; each
window is one causal forward pass. Two scoring rules:

- ``"half"`` (default) is llama-perplexity's: in every window score only the second half,
  positions ctx/2 .. ctx-2 each predicting the next token, so every scored token has at
  least ctx/2 tokens of context; when the model adds BOS, a window's first token is
  replaced by BOS. Figures are comparable with llama.cpp's under the same ctx.
- ``"full"`` scores every position 0 .. ctx-2 of every window.

NLL sums are kept in float64; the log-softmax is computed only at scored positions.

With ``kv_budget`` the windows are read in *streaming* fashion through an evicting cache
(``llmnb.ar.kv_eviction``), the way a generation with that budget would see them: each
window starts from an empty cache; its first ``budget + 1`` tokens go in one pass (nothing
is evicted before the cache passes the budget, so that equals feeding them one by one), then
one token per pass, the cache evicting back to the budget after every pass. The scored
positions and the BOS rule are as above; with a budget of at least ``ctx`` nothing is
evicted and the result equals the plain one up to float rounding.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import SupportsIndex

import numpy as np
import numpy.typing as npt

from llmnb.ar.errors import GenerationError
from llmnb.ar.kv_eviction import EvictingKVCache, check_budget
from llmnb.errors import UsageError
from llmnb.model.model import Model
from llmnb.softmax import log_softmax


@dataclass
class PerplexityResult:
    ppl: float                        # exp(nll)
    nll: float                        # mean negative log-likelihood per scored token (nats)
    n_scored: int                     # tokens scored in all
    n_chunks: int
    ctx: int
    rule: str
    chunk_ppl: list[float] = field(default_factory=list)   # running ppl after each window
    kv_budget: int | None = None      # positions the evicting cache held (None: all)
    # (n_scored,) each scored token's NLL in text order: two runs over the same text pair up
    # token by token (a paired comparison, llmnb.perf.intervals.mean of the differences)
    token_nlls: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))


def token_nll(logits: npt.NDArray[np.float32],
              targets: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """-log softmax(logits)[target] per row: (n, vocab), (n,) -> (n,) float64."""
    out: npt.NDArray[np.float64] = -log_softmax(logits)[np.arange(len(targets)), targets]
    return out


def streaming_hidden(model: Model, window: npt.NDArray[np.int64],
                     cache: EvictingKVCache) -> npt.NDArray[np.float32]:
    """Hidden states (n, d) of `window` fed through an evicting cache, as many positions per
    pass as it has room for (``cache.room``; with ``chunk=1``: budget + 1, then one at a time)."""
    tr = model.transformer
    out = np.empty((len(window), model.config.n_embd), dtype=np.float32)   # (n, d)
    for a, b in cache.pieces(len(window)):
        out[a:b] = tr.hidden(window[a:b], start=cache.length, cache=cache, causal=True)
        cache.commit()
    return out


def perplexity(model: Model, text: str, ctx: int = 512, rule: str = "half",
               max_chunks: int | None = None,
               progress: Callable[[int, int], None] | None = None,
               kv_budget: SupportsIndex | None = None, kv_recent: SupportsIndex | None = None,
               kv_sinks: SupportsIndex = 4, kv_policy: str = "initial_key",
               kv_scope: str = "layer", kv_window: SupportsIndex = 8) -> PerplexityResult:
    """Perplexity of `model` on `text` in windows of `ctx` tokens (``llmnb.perplexity``);
    with `kv_budget`, streamed through an ``EvictingKVCache`` (arguments as ``generate``;
    `kv_window` is the Score Sum's number of attention rows)."""
    if rule not in ("half", "full"):
        raise UsageError(f"rule: expected 'half' or 'full', got {rule!r}")
    if ctx < 4:
        raise UsageError(f"ctx: expected at least 4 tokens, got {ctx}")
    if ctx > model.config.n_ctx:
        raise UsageError(f"ctx: {ctx} exceeds the model's context of {model.config.n_ctx}")
    if kv_budget is not None:      # refuse a bad budget before any work
        check_budget(kv_budget, kv_recent, kv_sinks, kv_policy, kv_scope)
    tok = model.tokenizer
    ids = np.asarray(tok.encode(text, add_special=True), dtype=np.int64)
    n_chunks = len(ids) // ctx
    if max_chunks is not None:
        n_chunks = min(n_chunks, max_chunks)
    need = 2 * ctx if rule == "half" else ctx
    if len(ids) < need or n_chunks < 1:
        raise GenerationError(f"perplexity: the text has {len(ids)} tokens; ctx={ctx} needs at "
                              f"least {need}")
    first = ctx // 2 if rule == "half" else 0
    bos = tok.bos_id if tok.add_bos else None
    total, scored = 0.0, 0
    chunk_ppl: list[float] = []
    nlls: list[npt.NDArray[np.float64]] = []
    for c in range(n_chunks):
        window = ids[c * ctx:(c + 1) * ctx].copy()
        if bos is not None:
            window[0] = bos
        if kv_budget is None:
            hidden = model.transformer.hidden(window, causal=True)     # (ctx, d)
        else:
            cache = EvictingKVCache(model.config, ctx, kv_budget, kv_recent, kv_sinks, kv_policy,
                                    kv_scope, kv_window, chunk=1)
            hidden = streaming_hidden(model, window[:ctx - 1], cache)  # (ctx-1, d)
        logits = model.transformer.logits(hidden[first:ctx - 1])       # (ctx-1-first, vocab)
        nll = token_nll(logits, window[first + 1:ctx])
        nlls.append(nll)
        total += float(nll.sum())
        scored += len(nll)
        chunk_ppl.append(math.exp(total / scored))
        if progress is not None:
            progress(c + 1, n_chunks)
    return PerplexityResult(ppl=math.exp(total / scored), nll=total / scored, n_scored=scored,
                            n_chunks=n_chunks, ctx=ctx, rule=rule, chunk_ppl=chunk_ppl,
                            kv_budget=None if kv_budget is None else operator.index(kv_budget),
                            token_nlls=np.concatenate(nlls))
