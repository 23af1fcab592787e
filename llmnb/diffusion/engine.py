"""Masked diffusion generation (LLaDA, Dream): fill a canvas of masks in a few parallel steps.

    canvas = prompt + [mask] * gen_length                   (optionally in blocks, left to right)
    for each step:
        logits = model(canvas)                              # bidirectional: every position sees all
        propose a token and a confidence per masked position (remasking.py)
        n = how many to commit now (schedules.py; entropy_exit / threshold / factor may change n)
        commit the n most certain, leave the rest masked
    until nothing is masked

The scheduler (``schedulers.py``) says how many to commit and the remasking rule
(``remasking.py``) in which order; each scheduler has a rule of its own for when none is
named (low_confidence: diffuse-cpp's raw top-1 logit; entropy_exit: the entropy; threshold
and factor: Fast-dLLM's probability). A budgeted scheduler ends a block on its last step by
committing what is left; an adaptive one (threshold, factor) runs until the block is done.

A Dream model reads position i's proposal from logits row i - 1 (its training shifted the
targets by one); every other model reads row i. Only the rows that are read go through the
output head. Throughput is reported two ways: tokens of the whole canvas per second (as
diffuse-cpp reports it, end-of-text filler included) and content tokens, up to the first
end-of-text, per second.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from llmnb.diffusion.cache import InterStepCache
from llmnb.diffusion.remasking import order, propose
from llmnb.diffusion.schedulers import make_scheduler
from llmnb.diffusion.schedules import SCHEDULES, transfer_count
from llmnb.errors import UsageError
from llmnb.model.config import ModelError
from llmnb.model.model import Model

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
                "committed": self.committed}


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
        raise UsageError(f"block_length: expected a divisor of gen_length {gen_length}, got {block}")
    n_blocks = gen_length // block
    if steps % n_blocks:
        raise UsageError(f"steps: expected a multiple of the {n_blocks} blocks, got {steps}")
    if n_prompt + gen_length > c.n_ctx:
        raise ModelError(f"{model.path.name}: prompt ({n_prompt}) + canvas ({gen_length}) "
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


def diffuse(model: Model, prompt: str | Sequence[int], gen_length: int = 128, steps: int = 32,
            scheduler: str = "low_confidence", schedule: str = "cosine",
            remasking: str | None = None, temperature: float = 0.0,
            entropy_threshold: float = 1.5, threshold: float = 0.9, factor: float = 1.0,
            block_length: int | None = None, cache: bool = True, cache_keep_active: int = 0,
            cache_refresh: int = 0, cache_policy: str = "diffuse", chat: bool = False,
            system: str | None = None, seed: int = 42) -> DiffusionResult:
    """Denoise `gen_length` masked positions after `prompt` (``llmnb.diffuse``).

    `scheduler` and its parameters (`entropy_threshold`, `threshold`, `factor`) say how many
    positions a step commits, `remasking` (default: the scheduler's own rule) in which order.
    `cache`: reuse K/V between steps (``cache.py``; `cache_policy` "diffuse", "prefix" or
    "dual"); `cache_keep_active` and `cache_refresh` are diffuse-cpp's options."""
    ids = model.prompt_ids(prompt, chat, system)
    block, steps_per_block = _check(model, gen_length, steps, block_length, schedule, len(ids))
    rule = make_scheduler(scheduler, entropy_threshold, threshold, factor)
    remasking = rule.remasking if remasking is None else remasking
    mask = mask_id_of(model)
    shift = model.config.shift_logits
    n_prompt = len(ids)
    canvas: I64 = np.array(list(ids) + [mask] * gen_length, dtype=np.int64)
    masked = np.zeros(len(canvas), dtype=np.bool_)
    masked[n_prompt:] = True
    rng = np.random.default_rng(seed)
    t = model.transformer
    store = InterStepCache(model.config, len(canvas), cache_keep_active, cache_refresh,
                           cache_policy) if cache else None
    stats = DiffusionStats(gen_length=gen_length)
    history: list[I64] = []
    t0 = time.perf_counter()
    step = 0
    for b in range(gen_length // block):
        lo, hi = n_prompt + b * block, n_prompt + (b + 1) * block
        s = 0
        while True:                                       # a block's steps, until it is done
            todo = np.flatnonzero(masked[lo:hi]).astype(np.int64) + lo     # masked, this block
            if len(todo) == 0:
                break
            f0 = time.perf_counter()
            rows = np.maximum(todo - 1, 0) if shift else todo
            if store is None:
                hidden = t.hidden(canvas, causal=False)                   # (N, d)
                logits = t.logits(hidden[rows])                           # (m, V)
                stats.active_positions.append(len(canvas))
            else:
                active = store.plan(step, canvas, masked, (lo, hi), s, rows)
                hidden = t.hidden(canvas[active], cache=store, causal=False, positions=active)
                where = np.searchsorted(active, rows)                     # rows are all active
                logits = t.logits(hidden[where])
                stats.active_positions.append(len(active))
            stats.forward_s.append(time.perf_counter() - f0)
            cands = propose(logits, todo, remasking, temperature, rng)
            n_sched = transfer_count(schedule, s, steps_per_block, len(todo), block)
            if not rule.adaptive and s >= steps_per_block - 1:
                pick = order(cands)                               # a budget ends on its last step
            else:
                pick = rule.select(cands, logits, n_sched)
            stats.committed.append(len(pick))
            canvas[cands.positions[pick]] = cands.tokens[pick]
            masked[cands.positions[pick]] = False
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
