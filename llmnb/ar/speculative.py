"""SuperSpec speculative decoding: several drafters, one batched verification per round.

After Shen et al., "SuperSpec: Enhanced Verification and Sampling for End-to-End LLM
Speculative Decoding" (IEEE HPCC 2025), as the llm-cpu README describes it, and the
speculative sampling of Leviathan et al. (2023) and Chen et al. (2023). One round, each step
in its own module:

1. **Draft** (``llmnb.ar.drafters``). Every drafter proposes tokens after the committed
   sequence from its own state: prompt lookup and an n-gram table (free: as many tokens as
   their match supports), the target's first N layers (``self:N``), a quantized copy.
2. **Plan** (``llmnb.ar.speculative_control``). The controller trims each draft to the length
   its measured acceptance and the measured cost of a verify batch make worth it, and decides
   whether the round is a verify batch at all or a plain decode step.
3. **Verify** (``llmnb.ar.speculative_verify``). The root (the last committed token) and the
   token tree of the drafts go through the target as one batch of T rows.
4. **Accept** (``llmnb.ar.speculative_accept``). Greedy: the longest draft prefix equal to the
   target's argmax, plus the target's own next token; sampling: recursive rejection sampling,
   exactly the target's distribution.
5. **Roll back** (``speculative_verify.rollback``). The target's cache keeps the accepted path;
   each drafter catches up with the committed sequence at the start of its next round.

The committed tokens go through the same ``TextStream`` as ``llmnb.generate``'s, so both stop at
the same token with the same text.
"""
from __future__ import annotations

import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import SupportsIndex

import numpy as np

from llmnb.ar.drafters import Draft, Drafter, make_drafter
from llmnb.ar.engine import GenerationStats, check_max_new_tokens, check_room
from llmnb.ar.kv_cache import KVCache
from llmnb.ar.sampling import Greedy, Sampler
from llmnb.ar.speculative_accept import accept
from llmnb.ar.speculative_control import K_LIMIT, BubbleController
from llmnb.ar.speculative_costs import VerifyCosts, costs_for
from llmnb.ar.speculative_verify import rollback, verify
from llmnb.ar.text_stream import TextStream
from llmnb.errors import UsageError
from llmnb.model.config import ModelError
from llmnb.model.model import Model


@dataclass
class SpecRound:
    """One round: what each drafter was asked for, proposed and got accepted."""
    k: list[int]                  # the controller's K per drafter (a free drafter: its trim)
    drafted: list[int]            # tokens each drafter proposed (a lookup may find none)
    proposed: list[int]           # of those, verified by the target (0: not this round)
    accepted: list[int]           # of those, accepted by the target
    chosen: int                   # the drafter whose branch was committed (-1: none)
    committed: int                # tokens committed this round (accepted + the target's own)
    rows: int                     # rows of the target's batch (1 = a plain decode step)
    draft_s: float
    verify_s: float


@dataclass
class SpeculativeResult:
    prompt_ids: list[int]
    tokens: list[int]             # new tokens only (an end-of-generation token included)
    text: str
    stop_reason: str
    stats: GenerationStats
    drafters: list[str]
    rounds: list[SpecRound] = field(default_factory=list)

    @property
    def target_forwards(self) -> int:
        """Target forward passes after the prompt's (one per round)."""
        return len(self.rounds)

    @property
    def tokens_per_forward(self) -> float:
        """Tokens per target forward after the prompt's (whose logits give the first token,
        as in plain decoding; plain decoding's figure is 1)."""
        return (len(self.tokens) - 1) / len(self.rounds) if self.rounds else 1.0

    def acceptance(self) -> dict[str, float | None]:
        """Per drafter: accepted / verified tokens, None for a drafter never verified."""
        out: dict[str, float | None] = {}
        for j, name in enumerate(self.drafters):
            prop = sum(r.proposed[j] for r in self.rounds)
            acc = sum(r.accepted[j] for r in self.rounds)
            out[name] = acc / prop if prop else None
        return out

    def spec_json(self) -> dict[str, object]:
        return {"drafters": self.drafters, "rounds": len(self.rounds),
                "verified_rounds": sum(1 for r in self.rounds if r.rows > 1),
                "tokens_per_forward": self.tokens_per_forward, "acceptance": self.acceptance(),
                "k": [r.k for r in self.rounds], "committed": [r.committed for r in self.rounds],
                "rows": [r.rows for r in self.rounds],
                "draft_s": sum(r.draft_s for r in self.rounds),
                "verify_s": sum(r.verify_s for r in self.rounds)}


def generate_speculative(model: Model, prompt: str | Sequence[int],
                         drafters: Sequence[Drafter | str] = ("lookup",),
                         max_new_tokens: int = 128, sampler: Sampler | None = None,
                         k: SupportsIndex = 4, k_max: SupportsIndex = K_LIMIT,
                         adaptive: bool = True, gate: bool = True, chat: bool = False,
                         system: str | None = None, stop: Sequence[str] = (),
                         on_text: Callable[[str], None] | None = None,
                         costs: VerifyCosts | None = None,
                         batch_copies: bool | None = None) -> SpeculativeResult:
    """``llmnb.generate`` with speculative decoding: same arguments and the same tokens
    (greedy) or the same distribution (sampling), in fewer target forward passes.

    `drafters`: ``Drafter`` objects or names (``"lookup"``, ``"ngram"``, ``"ngram:N"``,
    ``"self:N"``, a model path or hub name). `k`: the initial draft length of a model drafter
    (and of every drafter with ``gate=False``); `k_max`: the most tokens a drafter is asked
    for; `adaptive=False` keeps K fixed; `gate=False` verifies every round that has drafts.
    `costs`: the verify-cost model to use and update (default: the process's one for this model
    and thread count, ``costs_for``). `batch_copies`: verify with the batch copies of the
    weights (``Transformer.use_batch_copies``: a float32 copy of every matrix in 64-output tiles
    for the few-row kernel, kept by the model for later calls; cheaper batches from 2 rows on;
    on quantized weights a dequantized (out, in) copy, cheaper from COPY_ROWS_QUANTIZED rows
    on), else without it (and drop it). Default: on for float32 weights; off for quantized ones,
    whose copy is a dequantized float32 model, the memory the quantized residency saves
    (``llmnb.model.batch_copy`` gives its size and the measured costs of both).
    """
    k0, kmax = operator_index(k, "k"), operator_index(k_max, "k_max")
    if not 1 <= k0 <= K_LIMIT:
        raise UsageError(f"k: expected a draft length in 1..{K_LIMIT}, got {k0}")
    if not k0 <= kmax <= K_LIMIT:
        raise UsageError(f"k_max: expected {k0}..{K_LIMIT} (at least k), got {kmax}")
    check_max_new_tokens(max_new_tokens)
    c = model.config
    if not c.causal or c.shift_logits:
        raise ModelError(f"{model.path.name}: speculative decoding needs an autoregressive "
                         f"(causal) target, got arch {c.arch!r}")
    sampler = sampler if sampler is not None else Greedy()
    ds = [d if isinstance(d, Drafter) else make_drafter(d, model) for d in drafters]
    ids = model.check_ids(model.prompt_ids(prompt, chat, system)).tolist()
    capacity = min(len(ids) + max_new_tokens, c.n_ctx)      # as llmnb.generate's cache
    check_room(model, len(ids), capacity)
    transformer = model.transformer
    on = transformer.weights.kind == "f32" if batch_copies is None else batch_copies
    transformer.use_batch_copies(on, quantized=on)
    cache = KVCache(c, min(c.n_ctx, capacity + 1 + len(ds) * kmax))
    for d in ds:
        d.reset(capacity + kmax)
    rngs = [np.random.default_rng(None if sampler.seed is None else [sampler.seed, 1, j])
            for j in range(len(ds))]
    ctrl = BubbleController([d.free for d in ds], k0, kmax, adaptive, gate,
                            costs=costs if costs is not None else costs_for(model),
                            keys=[d.cost_key() for d in ds])
    order = [j for j in range(len(ds)) if ds[j].free] + [j for j in range(len(ds))
                                                         if not ds[j].free]
    out = TextStream(model.tokenizer, max_new_tokens, stop, on_text)
    eog = set(model.tokenizer.eog_ids)
    stats = GenerationStats(prompt_tokens=len(ids))
    rounds: list[SpecRound] = []

    t0 = time.perf_counter()                                 # the prompt, as llmnb.generate's:
    first = transformer.forward(np.array(ids, dtype=np.int64), cache=cache, last_only=True)
    cache.commit()
    stats.prefill_s = time.perf_counter() - t0
    ctrl.time_prefill(len(ids), stats.prefill_s)             # the prior of a drafter's catch-up
    t_start = time.perf_counter()
    seq = [*ids, sampler.sample(first[0])]                   # its logits give the first token,
    stopped = out.push(seq[-1], context_full=len(seq) - 1 >= capacity)   # the root of round 1
    while not stopped:
        length = cache.length                                # == len(seq) - 1
        longest = min(max_new_tokens - len(out.tokens) - 1,  # the round adds one token itself
                      c.n_ctx - 1 - length)                  # draft positions stay in context
        room = cache.capacity - length - 1                   # rows the cache can take
        t_draft = time.perf_counter()
        drafts = [Draft([]) for _ in ds]
        for j in order:                                      # free drafters first
            dj = ds[j]
            if ctrl.needs_timing(j):                         # one step of a model drafter
                t_j = time.perf_counter()
                ctrl.time_feed(j, dj.catch_up(seq[:1]), time.perf_counter() - t_j)
            if ctrl.resting(j):                              # a model drafter sitting out
                continue
            kj = min(ctrl.draft_length(j, drafts, 0 if dj.free else dj.behind(seq),
                                       max_new_tokens - len(out.tokens)), longest, room)
            if kj <= 0:
                continue
            t_j = time.perf_counter()
            fed = dj.catch_up(seq)                           # timed apart from the drafting
            t_fed = time.perf_counter()
            dr = dj.propose(seq, kj, sampler, rngs[j])
            t_end = time.perf_counter()
            if fed > 0:
                ctrl.time_feed(j, fed, t_fed - t_j)
                ctrl.time_draft(j, len(dr) - 1, t_end - t_fed)
            else:                                            # all of it in propose
                ctrl.time_draft(j, len(dr), t_end - t_j)
            drafts[j] = through_end(dr.cut(kj), eog)
            room -= len(drafts[j])
        t_verify = time.perf_counter()
        lengths = ctrl.verify_lengths(drafts)                # tokens of each draft to verify
        if sampler.greedy and sum(lengths) == 0:             # a plain step, as generate's
            step = transformer.forward(np.array(seq[-1:], dtype=np.int64), start=length,
                                       cache=cache, last_only=True)
            cache.commit()
            accepted, chosen, committed = [0] * len(ds), -1, [int(np.argmax(step[0]))]
            t_end = time.perf_counter()
            ctrl.time_step(t_end - t_verify)
            rows = 1
        else:
            branches = [dr.cut(n) for dr, n in zip(drafts, lengths)]
            logits, tree = verify(transformer, cache, seq[-1], [b.tokens for b in branches])
            accepted, chosen, committed = accept(logits, branches, tree.rows, sampler)
            t_end = time.perf_counter()
            rollback(cache, length, tree.path(chosen, len(committed) - 1))
            rows = len(tree)
            if rows > 1:
                ctrl.time_verify(rows, t_end - t_verify)
            else:
                ctrl.time_step(t_end - t_verify)
        ctrl.after_round(drafts, lengths, accepted, committed)
        rounds.append(SpecRound(list(ctrl.k_used), [len(dr) for dr in drafts], list(lengths),
                                accepted, chosen, len(committed), rows,
                                t_verify - t_draft, t_end - t_verify))
        stopped = commit_tokens(out, seq, committed, capacity)
    stats.decode_s = time.perf_counter() - t_start
    out.finish()
    stats.new_tokens = len(out.tokens)
    return SpeculativeResult(ids, out.tokens, out.text, out.stop_reason, stats,
                             [d.name for d in ds], rounds)


def through_end(d: Draft, eog: set[int]) -> Draft:
    """`d` up to and including its first end-of-generation token: nothing after it can be
    committed, so it is not worth a row of the verify batch."""
    i = 0
    while i < len(d.tokens) and d.tokens[i] not in eog:
        i += 1
    return d.cut(i + 1)


def commit_tokens(out: TextStream, seq: list[int], committed: Sequence[int],
                  capacity: int) -> bool:
    """Append a round's committed tokens to `seq` and the text stream, as plain decoding
    would one at a time; True once the stream stops (end of text, a stop string, the token
    budget, or the context: the plain cache would then hold len(seq) - 1 positions)."""
    for tok in committed:
        seq.append(tok)
        if out.push(tok, context_full=len(seq) - 1 >= capacity):
            return True
    return False


def operator_index(value: SupportsIndex, name: str) -> int:
    """`value` as an int, or a UsageError naming the argument."""
    try:
        return operator.index(value)
    except TypeError:
        raise UsageError(f"{name}: expected a whole number, got {value!r}") from None
