"""A draft and the drafter interface of speculative decoding.

A drafter proposes up to K tokens after the committed sequence; the target model then checks
them (``llmnb.ar.speculative``). Whatever a drafter proposes, the target's output stays exactly
what it would have been: a draft only decides how many tokens a target pass commits.

Within one generation (between two ``reset`` calls) the committed sequence only grows, so a
drafter keeps what it learnt from it (an index, a KV cache) and, each round, reads only the
tokens added since (``extends`` checks the join in O(1)): a round costs the same at token 10 and
at token 10,000.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from mypy_extensions import mypyc_attr

from llmnb.ar.sampling import Sampler

F64 = npt.NDArray[np.float64]


@dataclass(eq=False)                  # a draft is itself, not its tokens
class Draft:
    """Up to K proposed tokens and, when they were sampled, their distributions q (K, vocab).
    `tag` sorts a drafter's drafts into kinds whose acceptance is tracked apart (the lookup's
    match length); `prior` is the per-token acceptance to assume for a kind not seen yet.
    ``q is None`` means deterministic (greedy drafts, lookups): q is one-hot on each token."""

    tokens: list[int]
    q: F64 | None = None
    tag: int = 0
    prior: float = 0.5

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
    free = False           # True when a proposal costs no forward pass (lookup, n-gram)

    def reset(self, capacity: int) -> None:
        """Start a new generation whose sequence may reach `capacity` tokens."""

    def behind(self, context: Sequence[int]) -> int:
        """Tokens this drafter has to feed through its model before it can draft after
        `context`: its catch-up (the whole context before its first draft, the tokens
        committed since its last draft after that). 0 for a drafter without a model."""
        return 0

    def cost_key(self) -> str:
        """What its costs are measured for (the controller keeps a model drafter's measured
        step time and its standing decision under this key across generations, see
        ``llmnb.ar.speculative_costs``); "" (the default): nothing is kept."""
        return ""

    def catch_up(self, context: Sequence[int]) -> int:
        """Bring its state up to `context` (a model drafter: feed the ``behind`` tokens in one
        batch), so that ``propose`` only drafts; returns the tokens fed. ``propose`` catches up
        by itself when this was not called; the loop calls it apart to time the two parts."""
        return 0

    def propose(self, context: Sequence[int], k: int, sampler: Sampler,
                rng: np.random.Generator) -> Draft:
        """Up to `k` tokens to follow `context` (the whole committed sequence, which between
        two resets only grows). ``Drafter`` is the base every kind extends; it has no proposal
        of its own."""
        raise TypeError(f"{type(self).__name__} does not override Drafter.propose: a drafter "
                        f"kind must say how it proposes tokens")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def extends(known: Sequence[int], n: int, context: Sequence[int]) -> bool:
    """Does `context` continue the first `n` tokens of `known`? Checked where they join (its
    token n - 1), which is enough for a sequence that only grows; a context that fails is a
    new one, and the drafter starts over from it. (One changed further back but equal there is
    taken for a continuation: its drafts are then worse guesses, never wrong output, since the
    target checks every drafted token.)"""
    return len(context) >= n and (n == 0 or context[n - 1] == known[n - 1])
