"""Drafters without a model: guesses copied from the context itself.

Both cost a few dictionary or list look-ups per round whatever the context length (each keeps
an index it extends with the round's new tokens only), and both propose as long a draft as
their match supports: the controller (``llmnb.ar.speculative_control``) trims it to what the
measured acceptance makes worth verifying.

- ``LookupDrafter`` ("lookup"; prompt-lookup decoding, Saxena 2023): find an earlier occurrence
  of the sequence's last n tokens (n = 3, then 2, then 1) and copy what followed it. It shines
  when the output copies or edits text already in the context, and re-synchronises after an
  edit within a token or two.
- ``NgramDrafter`` ("ngram", "ngram:N"; llama.cpp's draftless ``ngram-mod`` idea): a table of
  fixed size from a rolling hash of n consecutive tokens to the token that last followed them.
  A draft chains look-ups -- hash the last n tokens, take the next, roll the hash on -- until
  the table has no entry, so its length is what the context supports. Constant memory, no
  scan; it needs n tokens of agreement after an edit before it drafts again.
"""
from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Final

import numpy as np

from llmnb.ar.speculative_draft import Draft, Drafter, extends
from llmnb.ar.sampling import Sampler
from llmnb.errors import UsageError


class LookupDrafter(Drafter):
    """Prompt lookup: copy what followed an earlier match of the last n tokens.

    An index maps every n-gram (n = min_ngram..max_ngram) that has a token after it to the
    positions where its occurrences end; each round adds the new tokens' n-grams only.

    With `follow` (the default) the drafter also remembers where its last draft copied from
    and how far the sequence has moved on since: a *cursor* in the copied text. Of several
    earlier occurrences of the n-gram it takes the one ending nearest the cursor, if within
    ``FOLLOW_SLACK`` tokens (else the latest), so a copy that was edited -- a word corrected,
    a name changed -- picks the text up again where it left off instead of at some later
    repetition of a common word. Without it: always the latest occurrence.

    It also remembers *edits* (with `follow`): when a draft went wrong at a copied token and a
    later match re-joins the copy within ``EDIT_SPAN`` tokens, the copied tokens in between were
    replaced by the output's ("lighthouse" by "tower", ``width`` by ``length``). Later drafts
    apply the latest ``EDITS`` such edits wherever their copied tokens recur, so a copy edited
    throughout is drafted right through the edits; an edit whose draft token turns out wrong is
    forgotten.

    A draft copies up to k tokens from there; past the end of the context the copy runs on
    into its own output (a loop of period p repeats). Its tag is the length of the match it
    copies, followed back up to ``LONG_MATCH`` tokens, in the buckets 1, 2, 3, 4-7, 8-15, 16+:
    a long match is a copy in progress, a short one a guess. Its prior acceptance is
    m / (m + 1) for the buckets of a copy in progress, m = 8 and 16 (0.89, 0.94), and 0.5 for a
    guess: below what a verify batch needs to pay on a CPU (notebook 10 measures its cost
    curve), so in prose a short match is not verified until the first tokens of its unverified
    drafts (which the controller scores against what the round committed) have shown it right.
    """

    LONG_MATCH: Final = 16
    FOLLOW_SLACK: Final = 8
    EDIT_SPAN: Final = 8        # the most tokens on either side of a remembered edit
    EDITS: Final = 16           # edits remembered (the latest ones)

    free = True

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, follow: bool = True) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise UsageError(f"lookup drafter: expected 1 <= min_ngram <= max_ngram, got "
                             f"{min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.name = "lookup"
        self.follow = follow
        self.tokens: list[int] = []                     # the context seen so far
        self.ends: dict[tuple[int, ...], list[int]] = {}  # n-gram -> end of each occurrence
        self.src = -1                                   # where the last draft copied from ...
        self.src_ctx = 0                                # ... and the context length then
        self.last: list[int] = []                       # the last draft, and for each of its
        self.last_src: list[int] = []                   # tokens the position it copied (-1:
        #                                                 past the context's end) ...
        self.last_edit: list[tuple[int, ...]] = []      # ... and the edit it applied (())
        self.pending = (-1, -1)                         # (copied, output) position of a miss
        self.edits: dict[tuple[int, ...], list[int]] = {}   # copied tokens -> what replaced them
        self.first: dict[int, tuple[int, ...]] = {}     # first copied token -> its edit's key

    def reset(self, capacity: int) -> None:
        self.tokens = []
        self.ends = {}
        self.src, self.src_ctx = -1, 0
        self.last, self.last_src, self.last_edit = [], [], []
        self.pending = (-1, -1)
        self.edits, self.first = {}, {}

    def _extend(self, context: Sequence[int]) -> None:
        toks = self.tokens
        n0 = len(toks)
        if not extends(toks, n0, context):
            self.reset(0)                               # not a continuation: start over
            toks, n0 = self.tokens, 0
        toks.extend(int(t) for t in context[n0:])
        # n-grams ending at e get indexed once token e + 1 exists (so they have a successor)
        for e in range(max(0, n0 - 1), len(toks) - 1):
            for n in range(self.min_ngram, min(self.max_ngram, e + 1) + 1):
                key = tuple(toks[e - n + 1:e + 1])
                ends = self.ends.get(key)
                if ends is None:
                    self.ends[key] = [e]
                else:
                    ends.append(e)                      # ascending: e only grows

    def _missed(self) -> int:
        """Compare the last draft with the tokens committed since: where it first went wrong,
        remember the copied and the output position (an edit starts there), and forget an edit
        the draft applied at that token (it was wrong). Returns the copied position the
        sequence has reached when all of them matched (the cursor), else -1."""
        toks, base = self.tokens, self.src_ctx
        a, n = 0, min(len(self.last), len(toks) - base)
        while a < n and self.last[a] == toks[base + a]:
            a += 1
        cursor = -1
        if a < n:
            edit = self.last_edit[a]
            if edit:
                self._forget(edit)
            self.pending = (self.last_src[a], base + a) if self.last_src[a] >= 0 else (-1, -1)
        elif a < len(self.last) and self.last_src[a] >= 0 and not self.last_edit[a]:
            cursor = self.last_src[a]
        self.last = []
        return cursor

    def _forget(self, key: tuple[int, ...]) -> None:
        self.edits.pop(key, None)
        if self.first.get(key[0]) == key:
            del self.first[key[0]]

    def _learn(self, src: int, m: int) -> None:
        """A match of m tokens before copied position `src` re-joins the copy after a miss:
        the copied tokens from the miss to the match were replaced by the output's tokens from
        the miss to the match. Remember that edit (within EDIT_SPAN tokens a side)."""
        s, o = self.pending
        self.pending = (-1, -1)
        toks = self.tokens
        s_end, o_end = src - m, len(toks) - m           # where the match starts on each side
        if not (0 <= s < s_end <= s + self.EDIT_SPAN and o <= o_end <= o + self.EDIT_SPAN):
            return
        before, after = tuple(toks[s:s_end]), toks[o:o_end]
        if list(before) == after:
            return
        old = self.first.get(before[0])
        if old is not None:                             # one edit per first copied token
            self._forget(old)
        if len(self.edits) >= self.EDITS:               # the oldest goes
            self._forget(next(iter(self.edits)))
        self.edits[before] = after
        self.first[before[0]] = before

    def _copy(self, src: int, k: int) -> list[int]:
        """Up to k tokens copied from position `src` on, each remembered edit applied where its
        copied tokens recur; past the end of the context the copy copies its own output."""
        toks, n_ctx = self.tokens, len(self.tokens)
        out: list[int] = []
        self.last_src, self.last_edit = [], []
        p = src
        while len(out) < k:
            if p >= n_ctx:                              # past the end: the output so far
                if p - n_ctx >= len(out):
                    break
                out.append(out[p - n_ctx])
                self.last_src.append(-1)
                self.last_edit.append(())
                p += 1
                continue
            key = self.first.get(toks[p]) if self.follow else None
            if key is not None and tuple(toks[p:p + len(key)]) == key:
                after = self.edits[key]
                out.extend(after)
                self.last_src.extend([p] * len(after))
                self.last_edit.extend([key] * len(after))
                p += len(key)
                continue
            out.append(toks[p])
            self.last_src.append(p)
            self.last_edit.append(())
            p += 1
        del out[k:]
        del self.last_src[k:]
        del self.last_edit[k:]
        return out

    def propose(self, context: Sequence[int], k: int, sampler: Sampler,
                rng: np.random.Generator) -> Draft:
        self._extend(context)
        toks = self.tokens
        n_ctx = len(toks)
        cursor = self._missed() if self.follow else -1
        if cursor < 0 and self.follow and self.src >= 0:
            cursor = self.src + n_ctx - self.src_ctx
        for n in range(min(self.max_ngram, n_ctx), self.min_ngram - 1, -1):
            ends = self.ends.get(tuple(toks[n_ctx - n:]))
            if ends is None:
                continue
            end = ends[-1]                              # the latest occurrence, or the one
            if cursor >= 0:                             # ending nearest the cursor
                i = bisect.bisect_left(ends, cursor - 1)
                near = min(ends[max(0, i - 1):i + 1], key=lambda e: abs(e - cursor + 1))
                if abs(near - cursor + 1) <= self.FOLLOW_SLACK:
                    end = near
            src = end + 1                               # the token after the match
            m = n                                       # how far back the match goes
            while (m < self.LONG_MATCH and end - m >= 0
                   and toks[end - m] == toks[n_ctx - 1 - m]):
                m += 1
            if self.pending[0] >= 0:
                self._learn(src, m)
            self.src, self.src_ctx = src, n_ctx
            out = self._copy(src, k)
            if self.follow:
                self.last = out
            tag = m if m < 4 else 4 if m < 8 else 8 if m < self.LONG_MATCH else self.LONG_MATCH
            return Draft(out, tag=tag, prior=tag / (tag + 1.0) if tag >= 8 else 0.5)
        return Draft([])


def lookup(context: Sequence[int], k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """The `k` tokens after the latest earlier occurrence of the context's last n tokens,
    longest n first; [] when no n-gram recurs. A loop of period p proposes the loop again
    (the copy runs on into its own output), so a repeating pattern yields `k` tokens."""
    d = LookupDrafter(max_ngram, min_ngram, follow=False)
    return d.propose(context, k, Sampler(temperature=0.0), np.random.default_rng(0)).tokens


class NgramDrafter(Drafter):
    """A fixed-size table from a rolling hash of n tokens to the token that last followed them
    (module docstring). The hash of a window t_0..t_{n-1} is sum t_i B^(n-1-i) mod M, so the
    next window's is (h - t_0 B^(n-1)) B + t_n mod M: one multiply-add per token. A slot
    keeps the full hash beside the token, so two n-grams that share a slot are told apart."""

    MOD: Final = (1 << 31) - 1   # a prime; (h mod M) * B + t stays within 63 bits
    BASE: Final = 1_000_003

    free = True

    def __init__(self, n: int = 8, slots: int = 1 << 16) -> None:
        if not 1 <= n <= 64:
            raise UsageError(f"ngram drafter: expected an n-gram length in 1..64, got {n}")
        if slots < 1:
            raise UsageError(f"ngram drafter: expected at least one slot, got {slots}")
        self.n = n
        self.slots = slots
        self.name = "ngram" if n == 8 else f"ngram:{n}"
        self.top = pow(self.BASE, n - 1, self.MOD)      # B^(n-1) mod M
        self.tokens: list[int] = []
        self.keys: list[int] = []                       # slot -> the hash it holds (-1: empty)
        self.next: list[int] = []                       # slot -> the token that followed it
        self.h = 0                                      # hash of the last n tokens seen
        self.reset(0)

    def reset(self, capacity: int) -> None:
        self.tokens = []
        self.keys = [-1] * self.slots
        self.next = [0] * self.slots
        self.h = 0

    def _roll(self, h: int, old: int, new: int) -> int:
        return ((h - old * self.top) % self.MOD * self.BASE + new) % self.MOD

    def _extend(self, context: Sequence[int]) -> None:
        toks, n = self.tokens, self.n
        if not extends(toks, len(toks), context):
            self.reset(0)
            toks = self.tokens
        for t in context[len(toks):]:
            tok = int(t)
            if len(toks) >= n:                          # the last window now has a successor
                slot = self.h % self.slots
                self.keys[slot], self.next[slot] = self.h, tok
                self.h = self._roll(self.h, toks[len(toks) - n], tok)
            else:
                self.h = (self.h * self.BASE + tok) % self.MOD
            toks.append(tok)

    def propose(self, context: Sequence[int], k: int, sampler: Sampler,
                rng: np.random.Generator) -> Draft:
        self._extend(context)
        n = self.n
        if len(self.tokens) < n:
            return Draft([])
        window = self.tokens[len(self.tokens) - n:]     # the last n tokens, then the draft
        h = self.h
        out: list[int] = []
        while len(out) < k:
            slot = h % self.slots
            if self.keys[slot] != h:
                break
            tok = self.next[slot]
            out.append(tok)
            h = self._roll(h, window[len(out) - 1], tok)
            window.append(tok)
        return Draft(out, tag=0, prior=n / (n + 1.0))
