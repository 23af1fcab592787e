"""Masked diffusion generation (LLaDA, Dream): fill a canvas of masks in a few parallel steps.

    canvas = prompt + [mask] * gen_length                   (optionally in blocks, left to right)
    for each step:
        logits = model(canvas)                              # bidirectional: every position sees all
        propose a token and a confidence per masked position (remasking.py)
        n = how many to commit now (schedules.py; the scheduler may change n)
        commit the n most certain, leave the rest masked    (WINO may re-mask some)
    until nothing is masked

The scheduler (``schedulers.py``) says how many to commit and the remasking rule
(``remasking.py``) in which order; each scheduler has a rule of its own for when none is
named (low_confidence: diffuse-cpp's raw top-1 logit; entropy_exit and entropy_bound: the
entropy; threshold, factor, klass and wino: the probability). A budgeted scheduler ends a
block on its last step by committing what is left; an adaptive one (threshold, factor,
entropy_bound, wino) runs until the block is done.

A Dream model reads position i's proposal from logits row i - 1 (its training shifted the
targets by one); every other model reads row i. Only the rows that are read go through the
output head. What a forward computes:

- without the cache, every position it sees; with it (``cache.py``, ``elastic.py``), the
  active set; ``elastic`` also proposes only for a window of the block's leftmost masks
  (`elastic_window`, but every mask on a budget's last step);
- with `suffix_window` = N (DPad: Chen et al., "DPad: Efficient Diffusion Language Models
  with Suffix Dropout", 2025; its sliding window, not its random dropout), it sees only the
  prompt, the blocks so far and the N positions after the current block: the masks beyond
  are not in the forward at all, neither as queries nor as keys;
- ``wino`` adds a verification row per position drafted earlier in the block (``wino.py``).

Committed tokens are final except under ``wino``, which masks some again. ``history[i]`` is
the canvas after step i, the mask id where a position is masked, so a re-masked position
shows the mask id again; ``stats.committed[i]`` counts the positions step i unmasked and
``stats.remasked[i]`` those it masked again (committed - remasked = the step's net gain).
Throughput is reported two ways: tokens of the whole canvas per second (as diffuse-cpp
reports it, end-of-text filler included) and content tokens, up to the first end-of-text,
per second.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from llmnb.diffusion.cache import InterStepCache
from llmnb.diffusion.elastic import ElasticCache
from llmnb.diffusion.errors import DiffusionError
from llmnb.diffusion.remasking import order, propose
from llmnb.diffusion.schedulers import Wino, make_scheduler
from llmnb.diffusion.schedules import SCHEDULES, transfer_count
from llmnb.diffusion.wino import VerifyRows, VerifyStore, verification_rows, verify_key_mask
from llmnb.errors import UsageError
from llmnb.model.config import ModelError
from llmnb.model.model import Model
from llmnb.model.transformer import KVStore, Transformer
from llmnb.softmax import softmax

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


@dataclass
class DiffusionStats:
    steps: int = 0                    # forward passes (NFE)
    seconds: float = 0.0              # the denoising loop's wall time
    forward_s: list[float] = field(default_factory=list)    # per step
    gen_length: int = 0
    content_tokens: int = 0           # generated tokens before the first end-of-text
    full_forwards: int = 0            # with the cache: steps that recomputed everything
    active_positions: list[int] = field(default_factory=list)  # per step: positions recomputed
    committed: list[int] = field(default_factory=list)          # per step: positions unmasked
    remasked: list[int] = field(default_factory=list)           # per step: masked again (wino)

    @property
    def tok_s(self) -> float:
        """Canvas tokens per second, end-of-text filler included (diffuse-cpp's figure)."""
        return self.gen_length / self.seconds if self.seconds > 0 else 0.0

    @property
    def useful_tok_s(self) -> float:
        """Content tokens (up to the first end-of-text) per second."""
        return self.content_tokens / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, object]:
        return {"steps": self.steps, "seconds": self.seconds, "gen_length": self.gen_length,
                "content_tokens": self.content_tokens, "tok_s": self.tok_s,
                "useful_tok_s": self.useful_tok_s, "full_forwards": self.full_forwards,
                "forward_s": self.forward_s, "active_positions": self.active_positions,
                "committed": self.committed, "remasked": self.remasked}


@dataclass
class DiffusionResult:
    prompt_ids: list[int]
    tokens: list[int]                 # the whole generated canvas (gen_length ids)
    text: str                         # decoded up to the first end-of-text
    steps_taken: int
    history: list[I64]                # canvas after each step (mask id where still masked)
    stats: DiffusionStats


def _check(model: Model, gen_length: int, steps: int, block_length: int | None,
           schedule: str, n_prompt: int) -> tuple[int, int]:
    c = model.config
    if c.causal:
        raise ModelError(f"{model.path.name}: a causal ({c.arch}) model cannot denoise: "
                         "expected a diffusion model (llada, dream, or a diffuse file)")
    if schedule not in SCHEDULES:
        raise UsageError(f"schedule: expected one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if gen_length < 1 or steps < 1:
        raise UsageError(f"gen_length and steps: expected >= 1, got {gen_length} and {steps}")
    block = gen_length if block_length is None else block_length
    if block < 1 or gen_length % block:
        raise UsageError(f"block_length: expected a divisor of gen_length {gen_length}, "
                         f"got {block}")
    n_blocks = gen_length // block
    if steps % n_blocks:
        raise UsageError(f"steps: expected a multiple of the {n_blocks} blocks, got {steps}")
    if n_prompt + gen_length > c.n_ctx:
        raise DiffusionError(f"{model.path.name}: prompt ({n_prompt}) + canvas ({gen_length}) "
                             f"exceed the context of {c.n_ctx}")
    return block, steps // n_blocks


def mask_id_of(model: Model) -> int:
    mid = model.config.mask_token_id
    if mid is None:
        mid = model.tokenizer.mask_id
    if mid is None:
        raise ModelError(f"{model.path.name}: no mask token id (tokenizer.ggml.mask_token_id or "
                         "diffuse.mask_token_id)")
    return int(mid)


def visible_positions(n_positions: int, hi: int, suffix_window: int | None) -> I64 | None:
    """The positions a forward sees with DPad's suffix window: everything up to the current
    block's end `hi` and `suffix_window` positions beyond (None: all of them)."""
    if suffix_window is None or hi + suffix_window >= n_positions:
        return None
    return np.arange(hi + suffix_window, dtype=np.int64)


def step_logits(t: Transformer, canvas: I64, rows: I64, visible: I64 | None,
                store: InterStepCache | None, active: I64 | None,
                verify: VerifyRows | None) -> F32:
    """Logits (len(rows) + verified, V) of one step's forward: the canvas rows `rows`, then
    the verification rows' readings. Without a cache the forward runs every `visible`
    position, with one the `active` ones the cache chose."""
    n = len(canvas)
    keys = np.arange(n, dtype=np.int64) if visible is None else visible
    query = keys if store is None or active is None else active
    ids, positions = canvas[query], query
    mask: npt.NDArray[np.bool_] | None = None
    kv: KVStore | None = store
    if verify is not None:
        ids = np.concatenate([ids, verify.ids])
        positions = np.concatenate([query, verify.positions])
        key_positions = keys if store is None else np.arange(n, dtype=np.int64)
        seen = np.isin(key_positions, keys)
        mask = verify_key_mask(key_positions, seen, len(query), verify)
        kv = None if store is None else VerifyStore(store, len(verify.ids))
    elif store is not None and visible is not None:
        mask = np.zeros(n, dtype=np.bool_)                     # the cache holds every position
        mask[visible] = True
    hidden = t.hidden(ids, cache=kv, causal=False, positions=positions, key_mask=mask)
    where = np.searchsorted(query, rows)                       # rows are all computed
    if verify is not None:
        where = np.concatenate([where, len(query) + verify.read])
    return t.logits(hidden[where])


def diffuse(model: Model, prompt: str | Sequence[int], gen_length: int = 128, steps: int = 32,
            scheduler: str = "low_confidence", schedule: str = "cosine",
            remasking: str | None = None, temperature: float = 0.0,
            entropy_threshold: float = 1.5, threshold: float = 0.9, factor: float = 1.0,
            eb_gamma: float = 0.1, eb_temperature: tuple[float, float] = (0.8, 0.4),
            klass_confidence: float | None = None, klass_kl: float | None = None,
            klass_history: int = 2, wino_draft: float = 0.6, wino_verify: float = 0.9,
            block_length: int | None = None, cache: bool = True, cache_keep_active: int = 0,
            cache_refresh: int = 0, cache_policy: str = "diffuse", elastic_gamma: float = 0.9,
            elastic_window: int = 16, suffix_window: int | None = None, chat: bool = False,
            system: str | None = None, seed: int = 42) -> DiffusionResult:
    """Denoise `gen_length` masked positions after `prompt` (``llmnb.diffuse``).

    `scheduler` and its parameters say how many positions a step commits (``schedulers.py``:
    `entropy_threshold`; `threshold`, `factor`; EB-Sampler's `eb_gamma` and `eb_temperature`
    (t_max, t_min), which anneals the sampling temperature in place of `temperature`; KLASS's
    `klass_confidence`, `klass_kl` (default: per model type) and `klass_history`; WINO's
    `wino_draft` and `wino_verify`), `remasking` (default: the scheduler's own rule) in
    which order. `cache`: reuse K/V between steps (``cache.py``; `cache_policy` "diffuse",
    "prefix", "dual" or "elastic" with `elastic_gamma` and `elastic_window`);
    `cache_keep_active` and `cache_refresh` are diffuse-cpp's options. `suffix_window`: the
    forward sees only that many positions beyond the current block (DPad)."""
    ids = model.prompt_ids(prompt, chat, system)
    block, steps_per_block = _check(model, gen_length, steps, block_length, schedule, len(ids))
    rule = make_scheduler(scheduler, entropy_threshold, threshold, factor, eb_gamma,
                          eb_temperature, klass_confidence, klass_kl, klass_history, wino_draft,
                          wino_verify, model.config.arch)
    if scheduler == "entropy_bound" and temperature != 0.0:
        raise UsageError(f"temperature: entropy_bound anneals its own (eb_temperature="
                         f"{eb_temperature}); got temperature={temperature}")
    if suffix_window is not None and suffix_window < 0:
        raise UsageError(f"suffix_window: expected 0 or more positions, got {suffix_window}")
    if elastic_window < 1:
        raise UsageError(f"elastic_window: expected 1 or more positions, got {elastic_window}")
    remasking = rule.remasking if remasking is None else remasking
    wino = rule if isinstance(rule, Wino) else None
    mask = mask_id_of(model)
    shift = model.config.shift_logits
    n_prompt = len(ids)
    canvas: I64 = np.array(list(ids) + [mask] * gen_length, dtype=np.int64)
    masked = np.zeros(len(canvas), dtype=np.bool_)
    masked[n_prompt:] = True
    rng = np.random.default_rng(seed)
    t = model.transformer
    t.use_wide_head()                    # the head's (vocab, d) copy, for its many rows
    store: InterStepCache | None = None
    if cache and cache_policy == "elastic":
        store = ElasticCache(model.config, len(canvas), elastic_gamma, cache_refresh)
    elif cache:
        store = InterStepCache(model.config, len(canvas), cache_keep_active, cache_refresh,
                               cache_policy)
    stats = DiffusionStats(gen_length=gen_length)
    history: list[I64] = []
    t0 = time.perf_counter()
    step = 0
    for b in range(gen_length // block):
        lo, hi = n_prompt + b * block, n_prompt + (b + 1) * block
        rule.start_block()
        s = 0
        while True:                                       # a block's steps, until it is done
            todo = np.flatnonzero(masked[lo:hi]).astype(np.int64) + lo     # masked, this block
            if len(todo) == 0:
                break
            last = not rule.adaptive and s >= steps_per_block - 1
            n_masked = len(todo)
            if isinstance(store, ElasticCache) and not last:
                todo = todo[:elastic_window]                    # the window of leftmost masks
            f0 = time.perf_counter()
            rows = np.maximum(todo - 1, 0) if shift else todo
            visible = visible_positions(len(canvas), hi, suffix_window)
            done = np.flatnonzero(~masked[lo:hi]).astype(np.int64) + lo   # drafted (wino)
            verify = (verification_rows(canvas, done, mask, shift)
                      if wino is not None and len(done) else None)
            active = None if store is None else store.choose_active(step, canvas, masked, (lo, hi),
                                                                    s, todo, rows, visible)
            logits = step_logits(t, canvas, rows, visible, store, active, verify)
            seen = len(canvas) if visible is None else len(visible)
            stats.active_positions.append(seen if active is None else len(active))
            stats.forward_s.append(time.perf_counter() - f0)
            temp = rule.temperature(s, steps_per_block, temperature)
            cands = propose(logits[:len(todo)], todo, remasking, temp, rng)
            n_sched = transfer_count(schedule, s, steps_per_block, n_masked, block)
            pick = order(cands) if last else rule.select(cands, logits[:len(todo)], n_sched, temp)
            again = np.zeros(0, dtype=np.int64)
            if wino is not None:             # p(token at p | p masked), from the verify rows
                p_now = (softmax(logits[len(todo):])[np.arange(len(done)), canvas[done]]
                         if verify is not None else np.zeros(0))
                again = wino.remask(done, p_now, len(pick))
            stats.committed.append(len(pick))
            stats.remasked.append(len(again))
            canvas[cands.positions[pick]] = cands.tokens[pick]
            masked[cands.positions[pick]] = False
            canvas[again] = mask
            masked[again] = True
            history.append(np.where(masked[n_prompt:], mask, canvas[n_prompt:]).astype(np.int64))
            step += 1
            s += 1
    stats.seconds = time.perf_counter() - t0
    stats.steps = step
    stats.full_forwards = store.full_forwards if store is not None else step
    tokens = [int(x) for x in canvas[n_prompt:]]
    eog = set(model.tokenizer.eog_ids)
    end = next((i for i, x in enumerate(tokens) if x in eog), len(tokens))
    stats.content_tokens = end
    text = model.tokenizer.decode([x for x in tokens[:end] if x != mask])
    return DiffusionResult(list(ids), tokens, text, step, history, stats)
