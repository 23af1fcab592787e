"""Acceptance: which drafted tokens the target keeps, from the logits of one verify batch.

`rows[j][i]` is the batch row of draft j's token i (``llmnb.ar.speculative_verify``); the
target's distribution for draft j's token i is in the row before it: row 0 (the root) for
i = 0, else ``rows[j][i - 1]``.

**Greedy** (Leviathan et al. 2023, T = 0). Draft j keeps the prefix of its tokens equal to the
target's argmax at every step. The *global-optimal* choice (SuperSpec) commits the longest such
prefix over all drafts, plus the target's own argmax after it, so a round commits at least one
token and every committed token is the target's argmax: exactly greedy decoding.

**Sampling** (Leviathan et al. 2023; Chen et al. 2023; several candidates as in SpecTr and
llama.cpp's multi-branch drafting). Level by level, over the drafts still agreeing with what was
committed: a candidate x drawn from q is accepted with probability min(1, p(x) / q(x));
otherwise p is replaced by the normalised residual max(0, p - q) and the next candidate is
tried; when none is left, a token is drawn from p and the round ends. Then
P(x) = min(p, q)(x) + (1 - sum min(p, q)) max(0, p - q)(x) / sum max(0, p - q) = p(x): the
committed tokens are distributed exactly as the target's sampler would draw them. A draft
without q (a lookup, a greedy drafter) is a one-hot q on its token.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from llmnb.ar.speculative_draft import Draft
from llmnb.ar.sampling import Sampler

F32 = npt.NDArray[np.float32]


def accept_greedy(top: Sequence[int], branches: Sequence[Sequence[int]],
                  rows: Sequence[Sequence[int]]) -> tuple[list[int], int, list[int]]:
    """From the argmax of every batch row: (accepted tokens per draft, the draft committed
    (-1 if none), the committed tokens = its accepted prefix + the target's next token). Ties
    between drafts go to the lower index."""
    accepted: list[int] = []
    for b, r in zip(branches, rows):
        a, row = 0, 0
        while a < len(b) and b[a] == top[row]:
            row = r[a]
            a += 1
        accepted.append(a)
    best = max(accepted, default=0)
    if best == 0:
        return accepted, -1, [int(top[0])]
    j = accepted.index(best)
    return accepted, j, [int(x) for x in branches[j][:best]] + [int(top[rows[j][best - 1]])]


def accept_sampled(logits: F32, drafts: Sequence[Draft], rows: Sequence[Sequence[int]],
                   sampler: Sampler, rng: np.random.Generator) -> tuple[list[int], int, list[int]]:
    """Recursive rejection sampling over the drafts (module docstring); returns what
    ``accept_greedy`` returns. Exact for drafts drawn independently, each from its q."""
    accepted = [0] * len(drafts)
    alive = [j for j in range(len(drafts)) if len(drafts[j]) > 0]
    committed: list[int] = []
    row, level, chosen = 0, 0, -1
    while True:
        p = sampler.probs(logits[row])                       # (V,) the target's distribution
        hit = -1
        for j in [j for j in alive if len(drafts[j]) > level]:
            x = drafts[j].tokens[level]
            q = drafts[j].q
            qx = 1.0 if q is None else float(q[level, x])
            if rng.random() * qx < p[x]:                     # accept with prob min(1, p/q)
                hit = j
                break
            if q is None:
                residual = p.copy()
                residual[x] = 0.0                            # max(0, p - onehot(x))
            else:
                residual = np.maximum(p - q[level], 0.0)     # (V,)
            total = float(residual.sum())
            if total > 0.0:                                  # 0 only if p == q up to rounding
                p = residual / total
        if hit < 0:                                          # nothing accepted: draw from p
            committed.append(int(rng.choice(p.shape[0], p=p)))
            return accepted, chosen, committed
        x = drafts[hit].tokens[level]
        committed.append(x)
        alive = [j for j in alive if len(drafts[j]) > level and drafts[j].tokens[level] == x]
        for j in alive:
            accepted[j] = level + 1
        chosen = alive[0]
        row = rows[chosen][level]
        level += 1


def accept(logits: F32, drafts: Sequence[Draft], rows: Sequence[Sequence[int]],
           sampler: Sampler) -> tuple[list[int], int, list[int]]:
    """``accept_greedy`` for a greedy sampler, else ``accept_sampled`` (with its rng)."""
    if sampler.greedy:
        top = [int(x) for x in np.argmax(logits, axis=1)]        # (T,) the target's choices
        return accept_greedy(top, [d.tokens for d in drafts], rows)
    return accept_sampled(logits, drafts, rows, sampler, sampler.rng)
