"""Verification: every draft of a round checked by the target in one batched forward pass.

The drafts of a round all continue the same committed sequence, whose last token, the *root*,
has not been fed to the target yet (the target's cache holds positions 0..L-1). Drafts often
share their first tokens (two drafters copying the same text), so they are laid out as a
**token tree**: one row per distinct prefix, the root first. Row r holds a token at position
L + depth(r) and may attend to the cached prefix, the root and its own ancestors, nothing of
the other branches -- a (T, L + T) attention mask:

    drafts   [a b c]  [a b d]  [e]          tree   root ─ a ─ b ─ c        rows 0 1 2 3
                                                              └── d        row  4
                                                   root ─ e                row  5

Each layer then multiplies all T rows at once (one matrix-matrix, or small-batch, product per
weight) instead of T matrix-vector products. Row 0's logits are the target's distribution for
every draft's first token; the row of a draft's token i gives it for token i + 1.

After acceptance (``llmnb.ar.speculative_accept``), ``rollback`` keeps the root and the rows of
the accepted path, moved next to the root, and forgets the rest of the batch: the cache is then
what plain decoding of the committed tokens would have left (up to float32 rounding: a batch
row sums its products in another order than a decode step).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from llmnb.ar.kv_cache import KVCache
from llmnb.model.transformer import Transformer

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


class TokenTree:
    """The rows of a verify batch: the root (row 0) and one row per distinct draft prefix, in
    the order the branches are added (so a parent always comes before its children)."""

    def __init__(self) -> None:
        self.tokens: list[int] = [-1]          # row -> token (the root's is given to verify)
        self.parent: list[int] = [-1]          # row -> parent row
        self.depth: list[int] = [0]            # row -> tokens after the root (root: 0)
        self.rows: list[list[int]] = []        # branch j -> the row of each of its tokens
        self._child: dict[tuple[int, int], int] = {}   # (parent row, token) -> row

    def add(self, branch: Sequence[int]) -> int:
        """Add a branch; returns how many new rows it needed (its tokens past the longest
        prefix it shares with the branches added before)."""
        rows: list[int] = []
        r, new = 0, 0
        for tok in branch:
            key = (r, int(tok))
            nxt = self._child.get(key, -1)
            if nxt < 0:
                nxt = len(self.tokens)
                self._child[key] = nxt
                self.tokens.append(int(tok))
                self.parent.append(r)
                self.depth.append(self.depth[r] + 1)
                new += 1
            rows.append(nxt)
            r = nxt
        self.rows.append(rows)
        return new

    def shared(self, branch: Sequence[int]) -> int:
        """How many leading tokens of `branch` the tree already has rows for."""
        r, n = 0, 0
        for tok in branch:
            r = self._child.get((r, int(tok)), -1)
            if r < 0:
                break
            n += 1
        return n

    def __len__(self) -> int:
        return len(self.tokens)

    def layout(self, length: int) -> tuple[I64, npt.NDArray[np.bool_]]:
        """Positions (T,) and attention mask (T, length + T) of the rows, with the cached
        prefix 0..length-1 before them."""
        t = len(self.tokens)
        positions: I64 = length + np.asarray(self.depth, dtype=np.int64)     # (T,)
        mask = np.zeros((t, length + t), dtype=np.bool_)                     # (T, L + T)
        mask[:, :length + 1] = True                   # every row: the cached prefix and the root
        for r in range(1, t):                         # its parent's ancestors, and itself
            mask[r, length + 1:length + r] = mask[self.parent[r], length + 1:length + r]
            mask[r, length + r] = True
        return positions, mask

    def path(self, branch: int, n: int) -> list[int]:
        """The rows of the first `n` tokens of branch `branch` (none for branch -1)."""
        return [] if branch < 0 else self.rows[branch][:n]


def token_tree(branches: Sequence[Sequence[int]]) -> TokenTree:
    """The tree of a round's branches (module docstring)."""
    tree = TokenTree()
    for b in branches:
        tree.add(b)
    return tree


def verify(transformer: Transformer, cache: KVCache, root: int,
           branches: Sequence[Sequence[int]]) -> tuple[F32, TokenTree]:
    """One batched target forward over the root and the tree of `branches`: logits (T, vocab)
    and the tree (which row holds which token). The cache keeps all T rows until
    ``rollback``. Without any draft token this is exactly a plain decode step."""
    tree = token_tree(branches)
    tree.tokens[0] = root
    length = cache.length
    ids: I64 = np.asarray(tree.tokens, dtype=np.int64)                       # (T,)
    if len(tree) == 1:                                 # a plain decode step (the vector path)
        logits = transformer.forward(ids, start=length, cache=cache, last_only=True)
    else:
        positions, mask = tree.layout(length)
        h = transformer.hidden(ids, start=length, cache=cache, causal=False, key_mask=mask,
                               positions=positions)                          # (T, d)
        logits = transformer.logits(h)                                       # (T, vocab)
    cache.commit()
    return logits, tree


def rollback(cache: KVCache, root_slot: int, path: Sequence[int]) -> None:
    """Keep the root (at `root_slot`) and the batch rows of the accepted `path`, moved to the
    slots right after it in order; forget every other row of the verify batch."""
    i = 0
    while i < len(path):                 # move runs of consecutive rows with one copy each
        j = i + 1
        while j < len(path) and path[j] == path[j - 1] + 1:
            j += 1
        if path[i] != i + 1:             # rows only move towards the root: path[i] >= i + 1
            cache.move(root_slot + path[i], root_slot + 1 + i, j - i)
        i = j
    cache.truncate(root_slot + 1 + len(path))
