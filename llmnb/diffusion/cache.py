"""The inter-step K/V cache of diffuse-cpp: recompute only the positions that changed.

Between two denoising steps most of the canvas stays put: the prompt never changes, and a
committed token never changes again. diffuse-cpp therefore keeps every layer's keys and
values (after RoPE) from the last forward and recomputes only the *active* set:

    active(step) = still masked
                 U committed since the last forward (token differs from then)
                 U committed within the last `keep_active` steps

The other positions' K/V are reused as they were, which is an approximation: the prompt's
K/V are computed once, at step 0, while the whole answer was still masks, and a committed
token's K/V once more after it lands. A full forward runs on step 0, every `refresh` steps
(0 = never) and whenever every position is active.

Two alternatives from Fast-dLLM (``policy``): ``prefix`` recomputes, after a full forward at
the start of each block, the current block and everything after it against the frozen K/V
of the positions before it; ``dual`` recomputes only the current block, the prefix and the
masked suffix both frozen. ``diffuse`` (the default) is diffuse-cpp's active set above;
``elastic`` (``elastic.py``) refreshes when attention drifts.

llmnb stores K/V at key/value-head width (n_head_kv, not n_head after GQA expansion):
the same results for n_head / n_head_kv times less memory (7x for Dream-7B), the saving the
paper names as future work. For Dream, whose masked position i reads the logits of i - 1,
llmnb also recomputes the rows the step reads (i - 1 for each position it proposes), so no
logits row is read stale (diffuse-cpp reads a row left from the last step i - 1 was active;
that is a bug there, not reproduced here). Only those rows: the left neighbours of masks
outside the current block are not read, and keeping them active would make ``dual``
recompute the whole suffix like ``prefix``.

Re-masking (WINO) needs nothing special: a re-masked position's token changed, so it is
active. A forward that sees only part of the canvas (DPad's suffix window,
``engine.visible_positions``) gets `visible`: the active set stays inside it, a "full"
forward is all of it, and a position whose K/V were never computed (it was out of sight
until now) is active when it comes into view; the keys out of sight are hidden from the
attention by the caller's key mask.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np
import numpy.typing as npt

from llmnb.errors import UsageError
from llmnb.model.config import ModelConfig

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]
POLICIES = ("diffuse", "prefix", "dual", "elastic")


class InterStepCache:
    """Per-layer K/V of the whole canvas; a forward on the active positions scatters its
    fresh K/V in and attends over everything (``KVStore`` for ``Transformer.hidden``)."""

    handles: ClassVar[tuple[str, ...]] = ("diffuse", "prefix", "dual")   # ElasticCache: elastic

    def __init__(self, config: ModelConfig, n_positions: int, keep_active: int = 0,
                 refresh: int = 0, policy: str = "diffuse") -> None:
        if policy not in self.handles:
            raise UsageError(f"cache policy: expected one of {', '.join(POLICIES)}, got {policy!r}"
                             + (" (ElasticCache's)" if policy in POLICIES else ""))
        shape = (config.n_layer, config.n_head_kv, n_positions, config.head_dim)
        self.k: F32 = np.zeros(shape, dtype=np.float32)       # (L, n_kv, N, hd)
        self.v: F32 = np.zeros(shape, dtype=np.float32)
        self.n_positions = n_positions
        self.keep_active = keep_active
        self.refresh = refresh
        self.policy = policy
        self.prev_tokens: I64 | None = None                    # canvas at the last forward
        self.last_changed: I64 = np.full(n_positions, -1, dtype=np.int64)
        self.active: I64 = np.arange(n_positions, dtype=np.int64)
        self.valid: B = np.zeros(n_positions, dtype=np.bool_)   # K/V computed at least once
        self.full_forwards = 0
        self.partial_forwards = 0

    def proposal_window(self, masked_positions: I64, last: bool) -> I64:
        """The masked positions a step proposes tokens for: all the block's (``elastic``
        narrows them)."""
        return masked_positions

    def choose_active(self, step: int, tokens: I64, masked: B, block: tuple[int, int],
                      block_step: int, todo: I64, rows: I64, visible: I64 | None = None) -> I64:
        """Choose the positions to recompute at `step` (all of them on a full step); `block` is
        the current block's [lo, hi), `block_step` the step's index within it, `todo` the
        masked positions the step proposes tokens for and `rows` the logits rows it reads
        (always recomputed); `visible` the positions the forward may see (default: all)."""
        see = np.ones(self.n_positions, dtype=np.bool_)
        if visible is not None:
            see[:] = False
            see[visible] = True
        full = self.prev_tokens is None or (self.refresh > 0 and step > 0
                                            and step % self.refresh == 0)
        if self.policy in ("prefix", "dual") and block_step == 0:
            full = True                                        # Fast-dLLM: refresh per block
        if not full:
            act = self.recompute(step, tokens, masked, block, todo)
            act[rows] = True       # Dream: masked i reads row i - 1, which must be fresh
            act |= see & ~self.valid                           # come into view: never computed
            act &= see
            full = bool(act[see].all()) or not bool(act.any())
        self.active = (np.flatnonzero(see) if full else np.flatnonzero(act)).astype(np.int64)
        self.valid[self.active] = True
        self.prev_tokens = tokens.copy()
        if full:
            self.full_forwards += 1
        else:
            self.partial_forwards += 1
        return self.active

    def recompute(self, step: int, tokens: I64, masked: B, block: tuple[int, int],
                  todo: I64) -> B:
        """The policy's active set on a step that is not a full forward."""
        assert self.prev_tokens is not None
        act = np.zeros_like(masked)
        if self.policy == "diffuse":
            changed = tokens != self.prev_tokens
            self.last_changed[changed] = step
            act = masked | changed
            if self.keep_active > 0:
                act |= (self.last_changed >= 0) & (step - self.last_changed <= self.keep_active)
        else:
            act[block[0]:block[1] if self.policy == "dual" else None] = True
        return act

    def update(self, layer: int, k: F32, v: F32) -> tuple[F32, F32]:
        """Scatter the active positions' fresh k, v (n_kv, A, hd); return the whole canvas's."""
        self.k[layer][:, self.active] = k
        self.v[layer][:, self.active] = v
        return self.k[layer], self.v[layer]

    @property
    def nbytes(self) -> int:
        return int(self.k.nbytes + self.v.nbytes)
