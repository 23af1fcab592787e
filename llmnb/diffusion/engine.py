"""Masked diffusion generation (LLaDA, Dream): fill a canvas of masks in a few parallel steps.

    canvas = prompt + [mask] * gen_length               (optionally in blocks, left to right)
    for each step:
        logits = model(canvas)                          # bidirectional: every position sees all
        propose a token and a confidence per masked position        (remasking.py)
        n = how many to commit now        (transfer_schedule.py; the scheduler may change n)
        commit the n most certain, leave the rest masked            (WINO may re-mask some)
    until nothing is masked

``denoise`` is that loop, as LLaDA's reference ``generate()`` writes it (Nie et al., "Large
Language Diffusion Models", 2025): canvas, forward, choose, commit. What varies plugs in as
objects it calls: the scheduler (``schedulers.py``: ``select``, and WINO's ``verify_rows`` and
``revoke``) and the inter-step cache (``cache.py``, ``elastic.py``: ``proposal_window`` and
``choose_active``), both built from one ``DiffusionOptions`` (``options.py``), which
``llmnb.diffuse``'s keywords fill in.

The scheduler (``schedulers.py``) says how many to commit and the remasking rule
(``remasking.py``) in which order; each scheduler has a rule of its own for when none is
named (low_confidence: diffuse-cpp's raw top-1 logit; entropy_exit and entropy_bound: the
entropy; threshold, factor, klass and wino: the probability). A budgeted scheduler ends a
block on its last step by committing what is left; an adaptive one (threshold, factor,
entropy_bound, wino) runs until the block is done.

A Dream model reads position i's proposal from logits row i - 1 (its training shifted the
targets by one); every other model reads row i. Only the rows that are read go through the
output head. What a forward computes:

- without the cache, every position it sees; with it, the active set; ``elastic`` also
  proposes only for a window of the block's leftmost masks (`elastic_window`, but every mask
  on a budget's last step);
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
from llmnb.diffusion.options import DEFAULT, DiffusionOptions
from llmnb.diffusion.remasking import order, propose
from llmnb.diffusion.transfer_schedule import transfer_count
from llmnb.diffusion.wino import VerifyRows, VerifyStore, verify_key_mask
from llmnb.model.config import ModelError
from llmnb.model.model import Model
from llmnb.model.transformer import KVStore, Transformer

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]


def denoise(model: Model, prompt: str | Sequence[int],
            options: DiffusionOptions = DEFAULT) -> DiffusionResult:
    """Fill ``options.gen_length`` masks after `prompt`, block by block, step by step."""
    o = options
    ids = model.prompt_ids(prompt, o.chat, o.system)
    block, steps = o.check(model, len(ids))
    scheduler = o.make_scheduler(model.config.arch)
    remasking = scheduler.remasking if o.remasking is None else o.remasking
    mask = mask_id_of(model)
    n_prompt = len(ids)
    canvas: I64 = np.array([*ids] + [mask] * o.gen_length, dtype=np.int64)      # (N,)
    masked: B = np.zeros(len(canvas), dtype=np.bool_)
    masked[n_prompt:] = True
    forward = StepForward(model, o.make_cache(model.config, len(canvas)), o.suffix_window)
    rng = np.random.default_rng(o.seed)
    stats = DiffusionStats(gen_length=o.gen_length)
    history: list[I64] = []
    t0 = time.perf_counter()
    for lo in range(n_prompt, len(canvas), block):              # blocks, left to right
        hi = lo + block
        scheduler.start_block()
        s = 0                                                   # the block's step
        while masked[lo:hi].any():
            todo = np.flatnonzero(masked[lo:hi]).astype(np.int64) + lo   # (m,) its masks
            last = not scheduler.adaptive and s >= steps - 1        # a budget's end: all
            n = transfer_count(o.schedule, s, steps, len(todo), block)
            todo = forward.proposal_window(todo, last)
            # forward: logits of the rows that propose for `todo`, then any verification rows
            verify = scheduler.verify_rows(canvas, masked, (lo, hi), mask, forward.shift)
            logits = forward(canvas, masked, todo, (lo, hi), s, verify, stats)
            # choose: a token and a confidence per masked position, the most certain first
            temperature = scheduler.temperature(s, steps, o.temperature)
            c = propose(logits[:len(todo)], todo, remasking, temperature, rng)
            pick = order(c) if last else scheduler.select(c, logits[:len(todo)], n, temperature)
            again = scheduler.revoke(logits[len(todo):], canvas, len(pick))
            # commit
            canvas[c.positions[pick]] = c.tokens[pick]
            masked[c.positions[pick]] = False
            canvas[again] = mask
            masked[again] = True
            stats.committed.append(len(pick))
            stats.remasked.append(len(again))
            history.append(np.where(masked[n_prompt:], mask, canvas[n_prompt:]).astype(np.int64))
            s += 1
    stats.seconds = time.perf_counter() - t0
    stats.steps = len(history)
    stats.full_forwards = forward.full_forwards(stats.steps)
    return finish(model, ids, canvas[n_prompt:], mask, history, stats)


def diffuse(model: Model, prompt: str | Sequence[int], gen_length: int = DEFAULT.gen_length,
            steps: int = DEFAULT.steps, scheduler: str = DEFAULT.scheduler,
            schedule: str = DEFAULT.schedule, remasking: str | None = DEFAULT.remasking,
            temperature: float = DEFAULT.temperature,
            entropy_threshold: float = DEFAULT.entropy_threshold,
            threshold: float = DEFAULT.threshold, factor: float = DEFAULT.factor,
            eb_gamma: float = DEFAULT.eb_gamma,
            eb_temperature: tuple[float, float] = DEFAULT.eb_temperature,
            klass_confidence: float | None = DEFAULT.klass_confidence,
            klass_kl: float | None = DEFAULT.klass_kl, klass_history: int = DEFAULT.klass_history,
            wino_draft: float = DEFAULT.wino_draft, wino_verify: float = DEFAULT.wino_verify,
            block_length: int | None = DEFAULT.block_length, cache: bool = DEFAULT.cache,
            cache_keep_active: int = DEFAULT.cache_keep_active,
            cache_refresh: int = DEFAULT.cache_refresh, cache_policy: str = DEFAULT.cache_policy,
            elastic_gamma: float = DEFAULT.elastic_gamma,
            elastic_window: int = DEFAULT.elastic_window,
            suffix_window: int | None = DEFAULT.suffix_window, chat: bool = DEFAULT.chat,
            system: str | None = DEFAULT.system, seed: int = DEFAULT.seed) -> DiffusionResult:
    """Denoise `gen_length` masked positions after `prompt` (``llmnb.diffuse``): the keywords
    make a ``DiffusionOptions`` for ``denoise``.

    `scheduler` and its parameters say how many positions a step commits (``schedulers.py``:
    `entropy_threshold`; `threshold`, `factor`; EB-Sampler's `eb_gamma` and `eb_temperature`
    (t_max, t_min), which anneals the sampling temperature in place of `temperature`; KLASS's
    `klass_confidence`, `klass_kl` (default: per model type) and `klass_history`; WINO's
    `wino_draft` and `wino_verify`), `remasking` (default: the scheduler's own rule) in
    which order. `cache`: reuse K/V between steps (``cache.py``; `cache_policy` "diffuse",
    "prefix", "dual" or "elastic" with `elastic_gamma` and `elastic_window`);
    `cache_keep_active` and `cache_refresh` are diffuse-cpp's options. `suffix_window`: the
    forward sees only that many positions beyond the current block (DPad)."""
    return denoise(model, prompt, DiffusionOptions(
        gen_length=gen_length, steps=steps, block_length=block_length, schedule=schedule,
        scheduler=scheduler, remasking=remasking, temperature=temperature, seed=seed,
        entropy_threshold=entropy_threshold, threshold=threshold, factor=factor,
        eb_gamma=eb_gamma, eb_temperature=eb_temperature, klass_confidence=klass_confidence,
        klass_kl=klass_kl, klass_history=klass_history, wino_draft=wino_draft,
        wino_verify=wino_verify, cache=cache, cache_policy=cache_policy,
        cache_keep_active=cache_keep_active, cache_refresh=cache_refresh,
        elastic_gamma=elastic_gamma, elastic_window=elastic_window, suffix_window=suffix_window,
        chat=chat, system=system))


# --- the forward of one step ------------------------------------------------------------------

def mask_id_of(model: Model) -> int:
    mid = model.config.mask_token_id
    if mid is None:
        mid = model.tokenizer.mask_id
    if mid is None:
        raise ModelError(f"{model.path.name}: no mask token id (tokenizer.ggml.mask_token_id or "
                         "diffuse.mask_token_id)")
    return int(mid)


class StepForward:
    """One step's forward pass: the logits rows the step reads (Dream reads position i from
    row i - 1), through the inter-step cache when there is one, over DPad's suffix window."""

    def __init__(self, model: Model, cache: InterStepCache | None,
                 suffix_window: int | None) -> None:
        self.t = model.transformer
        self.t.use_head_copy()            # the head's (vocab, d) copy, for its many rows
        self.cache = cache
        self.shift = model.config.shift_logits
        self.suffix_window = suffix_window
        self.step = 0                     # forwards so far (the cache's refresh clock)

    def proposal_window(self, todo: I64, last: bool) -> I64:
        return todo if self.cache is None else self.cache.proposal_window(todo, last)

    def __call__(self, canvas: I64, masked: B, todo: I64, block: tuple[int, int],
                 block_step: int, verify: VerifyRows | None, stats: DiffusionStats) -> F32:
        """Logits (len(todo) + verified, V) at step `block_step` of `block`; the forward's
        time and the positions it computed go to `stats`."""
        f0 = time.perf_counter()
        rows = np.maximum(todo - 1, 0) if self.shift else todo
        visible = visible_positions(len(canvas), block[1], self.suffix_window)
        active = None if self.cache is None else self.cache.choose_active(
            self.step, canvas, masked, block, block_step, todo, rows, visible)
        logits = step_logits(self.t, canvas, rows, visible, self.cache, active, verify)
        seen = len(canvas) if visible is None else len(visible)
        stats.active_positions.append(seen if active is None else len(active))
        stats.forward_s.append(time.perf_counter() - f0)
        self.step += 1
        return logits

    def full_forwards(self, steps: int) -> int:
        return steps if self.cache is None else self.cache.full_forwards


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



# --- the result ---------------------------------------------------------------------------

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


def finish(model: Model, ids: Sequence[int], generated: I64, mask: int, history: list[I64],
           stats: DiffusionStats) -> DiffusionResult:
    """The result: the canvas's tokens, its text up to the first end-of-text."""
    tokens = [int(x) for x in generated]
    eog = set(model.tokenizer.eog_ids)
    end = next((i for i, x in enumerate(tokens) if x in eog), len(tokens))
    stats.content_tokens = end
    text = model.tokenizer.decode([x for x in tokens[:end] if x != mask])
    return DiffusionResult(list(ids), tokens, text, stats.steps, history, stats)
