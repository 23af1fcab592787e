"""WINO's verification rows: re-read a drafted token with its own position masked.

WINO (Hong et al., "Wide-In, Narrow-Out: Revokable Decoding for Efficient and Effective
DLLMs", 2025) checks every token drafted earlier in the block against the context the
later drafts have built: what would the model predict at position p if p were masked
again? One extra query row per drafted position answers it in the same forward as the
step's own rows, with an attention mask:

    canvas rows   see the canvas (as always), never a verification row
    row A_p       a mask token at position p; sees the canvas except p, and itself
    (Dream) B_p   the token at p - 1, at p - 1; sees the canvas except p - 1 and p, A_p and
                  itself: Dream reads p's prediction from the row left of it

so A_p's (LLaDA) or B_p's (Dream) logits give p(token at p | everything else, p masked).
The rest of the canvas is not recomputed for it (their rows still see p's token), and the
verification rows see no other verification row. (The authors' code appends the whole
block as masks at once, each seeing all the others: every position re-read next to the
block's other positions masked as well as filled; llmnb masks only p, and appends rows only
for the positions it verifies.)

With the inter-step cache on, ``VerifyStore`` keeps the verification rows' keys and values
out of the cache: they exist for one forward only.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from llmnb.model.transformer import KVStore

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]


@dataclass
class VerifyRows:
    """The extra query rows of one forward."""

    ids: I64            # (k,) tokens
    positions: I64      # (k,) canvas positions (RoPE)
    hide: I64           # (k, 2) canvas positions each row must not see (-1: none)
    partner: I64        # (k,) another verification row it sees (-1: none)
    read: I64           # (n,) for each verified position, the row whose logits predict it


def verification_rows(canvas: I64, verified: I64, mask: int, shift: bool) -> VerifyRows:
    """The rows that re-read `verified` positions of `canvas` masked (``shift``: Dream)."""
    n = len(verified)
    a_hide = np.stack([verified, np.full(n, -1, dtype=np.int64)], axis=1)      # (n, 2)
    if not shift:
        return VerifyRows(np.full(n, mask, dtype=np.int64), verified, a_hide,
                          np.full(n, -1, dtype=np.int64), np.arange(n, dtype=np.int64))
    left = verified - 1                    # Dream: p is read from row p - 1 (row 0 reads itself)
    has_left = left >= 0
    b = np.flatnonzero(has_left)
    ids = np.concatenate([np.full(n, mask, dtype=np.int64), canvas[left[b]]])
    positions = np.concatenate([verified, left[b]])
    hide = np.concatenate([a_hide, np.stack([verified[b], left[b]], axis=1)])
    partner = np.concatenate([np.full(n, -1, dtype=np.int64), b])              # B_p sees A_p
    read = np.arange(n, dtype=np.int64)
    read[b] = n + np.arange(len(b))
    return VerifyRows(ids.astype(np.int64), positions.astype(np.int64), hide.astype(np.int64),
                      partner.astype(np.int64), read)


def verify_key_mask(key_positions: I64, visible: B, n_rows: int, v: VerifyRows) -> B:
    """(n_rows + k, S + k) which keys each query sees: the first `n_rows` queries are the
    canvas rows (they see the `visible` ones of the S canvas keys at `key_positions`), the
    last k the verification rows `v`."""
    k, s = len(v.ids), len(key_positions)
    out = np.zeros((n_rows + k, s + k), dtype=np.bool_)
    out[:n_rows, :s] = visible[None, :]
    out[n_rows:, :s] = (visible[None, :] & (key_positions[None, :] != v.hide[:, :1])
                        & (key_positions[None, :] != v.hide[:, 1:]))
    rows = np.arange(k)
    out[n_rows + rows, s + rows] = True                                          # itself
    seen = v.partner >= 0
    out[n_rows + rows[seen], s + v.partner[seen]] = True
    return out


class VerifyStore:
    """A ``KVStore`` for a forward whose last `k` query rows are verification rows: the
    canvas rows' K/V go to the inter-step cache `inner`, the last k are appended to what it
    returns, for this forward only."""

    def __init__(self, inner: KVStore, k: int) -> None:
        self.inner = inner
        self.k = k
        self.observe: Callable[[int, F32], None] | None = getattr(inner, "observe_attention",
                                                                  None)

    def update(self, layer: int, k: F32, v: F32) -> tuple[F32, F32]:
        a = k.shape[1] - self.k
        kc, vc = self.inner.update(layer, k[:, :a], v[:, :a])                   # (nkv, S, hd)
        return np.concatenate([kc, k[:, a:]], axis=1), np.concatenate([vc, v[:, a:]], axis=1)

    def observe_attention(self, layer: int, probs: F32) -> None:
        """Pass the canvas rows' weights over the canvas keys on to an observing cache."""
        if self.observe is not None:
            t, s = probs.shape[2] - self.k, probs.shape[3] - self.k
            self.observe(layer, np.ascontiguousarray(probs[:, :, :t, :s]))
