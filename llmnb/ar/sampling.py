"""Samplers: from a row of logits to the next token.

Every sampler turns logits into a probability distribution over the vocabulary, then draws
from it (``Greedy`` puts all mass on the argmax). The chain is llama.cpp's default order:

    top-k  ->  top-p  ->  min-p      (filters, on softmax(logits))
    ->  temperature                  (softmax(logits / T) over the survivors)
    ->  draw with a seeded numpy Generator

- top-k keeps the k largest logits (0 = off);
- top-p keeps the smallest set of most likely tokens whose probability reaches p (1 = off);
- min-p keeps tokens with probability >= min_p * p(most likely) (0 = off; Nguyen et al. 2024);
- temperature 0 is greedy.

Ties are broken towards the lower token id, everywhere. ``probs`` returns the final
distribution itself, which speculative decoding's acceptance rule needs.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt
from mypy_extensions import mypyc_attr

from llmnb.errors import UsageError
from llmnb.softmax import softmax

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

RANKED = 64              # top-p's first candidate set (``Sampler.ranked_prefix``)


@mypyc_attr(allow_interpreted_subclasses=True)
class Sampler:
    """A sampling configuration; ``sample(logits)`` draws one token id (subclass to customise)."""

    def __init__(self, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                 min_p: float = 0.0, seed: int | None = None) -> None:
        if not temperature >= 0.0:
            raise UsageError(f"temperature: expected >= 0, got {temperature}")
        if top_k < 0:
            raise UsageError(f"top_k: expected >= 0 (0 = off), got {top_k}")
        if not 0.0 < top_p <= 1.0:
            raise UsageError(f"top_p: expected 0 < p <= 1, got {top_p}")
        if not 0.0 <= min_p <= 1.0:
            raise UsageError(f"min_p: expected 0 <= p <= 1, got {min_p}")
        self.temperature = float(temperature)
        self.top_k = int(top_k)
        self.top_p = float(top_p)
        self.min_p = float(min_p)
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def filters(self) -> bool:
        return self.top_k > 0 or self.top_p < 1.0 or self.min_p > 0.0

    def keep_mask(self, logits: F32) -> npt.NDArray[np.bool_]:
        """Which tokens survive top-k, top-p and min-p (in that order)."""
        v = logits.shape[0]
        keep = np.zeros(v, dtype=np.bool_)
        if not self.filters:
            keep[:] = True
            return keep
        if 0 < self.top_k < v:   # only the k largest need sorting
            top = np.argpartition(-logits, self.top_k - 1)[:self.top_k]
            order = top[np.lexsort((top, -logits[top]))]           # by logit, ties to lower id
            p = softmax(logits[order])                             # renormalised over the k
        elif self.top_p < 1.0:
            order, p = self.ranked_prefix(logits)
        else:                    # min-p alone is a threshold on p: nothing to sort
            p_all = softmax(logits)
            keep[:] = p_all >= self.min_p * p_all.max()
            return keep
        n = len(order)
        if self.top_p < 1.0:
            # smallest prefix whose mass reaches top_p (always at least one token)
            n = min(n, int(np.searchsorted(np.cumsum(p), self.top_p)) + 1)
            p = p[:n] / p[:n].sum()
        if self.min_p > 0.0:
            n = max(1, int(np.count_nonzero(p[:n] >= self.min_p * p[0])))
        keep[order[:n]] = True
        return keep

    def ranked_prefix(self, logits: F32) -> tuple[npt.NDArray[np.intp], F64]:
        """The most likely tokens, most likely first (ties to the lower id), just enough of
        them to reach top_p in mass, with their probabilities over the whole vocabulary.

        Top-p needs the order of the head of the distribution only: the first m tokens of
        the full order (those above the m-th largest logit, found by partitioning, and the
        lowest ids among those equal to it) are sorted, m = RANKED first and four times as
        many until their mass reaches top_p; the whole vocabulary only when it must be."""
        v = logits.shape[0]
        p_all = softmax(logits)                                    # (V,) float64
        m = RANKED
        while m < v:
            kth = -np.partition(-logits, m - 1)[m - 1]             # the m-th largest logit
            above = np.flatnonzero(logits > kth)
            at = np.flatnonzero(logits == kth)[:m - len(above)]    # ties: the lower ids first
            head = np.concatenate((above, at))                     # the first m of the order
            order = head[np.lexsort((head, -logits[head]))]
            p = p_all[order]
            if np.cumsum(p)[-1] >= self.top_p:
                return order, p
            m *= 4
        order = np.argsort(-logits, kind="stable")                 # (V,) most likely first
        return order, p_all[order]

    def probs(self, logits: F32) -> F64:
        """The distribution this sampler draws from (V,), float64, zeros where filtered."""
        if self.greedy:
            out = np.zeros(logits.shape[0], dtype=np.float64)
            out[int(np.argmax(logits))] = 1.0
            return out
        if not self.filters:
            return softmax(logits, self.temperature)
        keep = self.keep_mask(logits)
        masked = np.where(keep, logits.astype(np.float64), -np.inf)
        return softmax(masked, self.temperature)

    def sample(self, logits: F32) -> int:
        """One token id drawn from ``probs(logits)``."""
        if self.greedy:
            return int(np.argmax(logits))
        p = self.probs(logits)
        return int(self.rng.choice(p.shape[0], p=p))

    def __repr__(self) -> str:
        return (f"Sampler(temperature={self.temperature}, top_k={self.top_k}, top_p={self.top_p}, "
                f"min_p={self.min_p}, seed={self.seed})")


class Greedy(Sampler):
    """Always the most likely token (temperature 0)."""

    def __init__(self) -> None:
        super().__init__(temperature=0.0)

    def __repr__(self) -> str:
        return "Greedy()"
