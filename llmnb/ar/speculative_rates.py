"""How far a drafter's draft will be accepted: llmnb's acceptance rates for speculative decoding.

A copying drafter (prompt lookup, n-grams, a quantized copy) is not wrong at random: a copy is
right for a long stretch, then wrong where the text was edited. So the chance that token i of a
draft is accepted depends on whether tokens 0..i-1 were, and the model keeps, per drafter j,
kind of draft t (``Draft.tag``: a lookup's match length) and depth bucket b(i) (0, 1, 2, 3,
4-7, 8-15, 16-31, 32+), the conditional acceptance and what it implies:

    h(i) = P(token i accepted | tokens 0..i-1 were) = hits_b(i) / tries_b(i)
    S(i) = h(0) h(1) ... h(i - 1)                  the first i tokens all accepted
    E(K) = 1 + S(1) + ... + S(K)                   tokens a round verifying K of them commits

(the 1: the target's own token). hits and tries are counts decayed by `decay` per draft
scored there: new = decay * old + this draft's. A bucket without counts counts PRIOR_TRIES
tries at its prior p: p = the draft's own prior (``Draft.prior``) at depth 0, the rate of the
bucket before it deeper, so with no evidence S(i) = h(0)^i, the geometric model. Two rules
keep a free drafter (one whose drafts cost no forward pass, so it offers many) from buying a
batch on luck:

    h_b <- min(h_b, p_b) until EVIDENCE drafts were scored in bucket b
    p_0 = max(Draft.prior, hits / tries of the drafter's drafts of every kind at depth 0)
          once EVIDENCE of those were scored (a record kept as kind ANY, prior GUESS)

The second lets a kind not seen yet, such as a copy re-joined after an edit (a lookup match of
1, 2, 3 ... tokens, one kind a round), start from what the drafter showed in this text instead
of needing EVIDENCE copies of its own. Every draft is scored by the run it would have had,
verified or not: its tokens are checked against the tokens committed in its round and the
next ones (``shadow``), up to SHADOW tokens or its first miss.
"""
from __future__ import annotations

from collections.abc import Sequence

from llmnb.ar.speculative_draft import Draft
from llmnb.ar.speculative_costs import KNOTS

SHADOW = KNOTS[-1]    # 64: a draft is checked as far as a round could verify it (the cost curve)
DEPTHS = 8            # buckets 0, 1, 2, 3, then one per doubling: 4 + log2(SHADOW / 4)
PRIOR_TRIES = 2.0     # a prior weighs two tries: a draft moves h 1 / (0.8 * 2 + 1) of the way
EVIDENCE = 2          # one right run can be luck; a second agreeing one is evidence
ANY = -1              # the kind of a free drafter's record over all its kinds (depth 0 only)
GUESS = 0.5           # that record's prior: no information, a coin


def expected_tokens(alpha: float, k: int) -> float:
    """E(K) at a constant acceptance alpha: 1 + alpha + ... + alpha^k."""
    al = min(alpha, 0.999)
    return (1.0 - al ** (k + 1)) / (1.0 - al)


def geometric(alpha: float, n: int) -> list[float]:
    """S(1..n) at a constant acceptance alpha: alpha, alpha^2, ..., alpha^n."""
    al, s = min(alpha, 0.999), 1.0
    out: list[float] = []
    for _ in range(n):
        s *= al
        out.append(s)
    return out


def depth_bucket(i: int) -> int:
    """b(i), the bucket of draft depth i (0-based): 0, 1, 2, 3, then 4-7, 8-15, 16-31, 32+."""
    return i if i < 4 else min(DEPTHS - 1, i.bit_length() + 1)


class AcceptanceModel:
    """The conditional acceptance of each drafter's drafts, learnt from every draft's run
    (module docstring); `free` says which drafters cost no forward pass."""

    def __init__(self, free: Sequence[bool], decay: float = 0.8) -> None:
        self.free = list(free)
        self.decay = decay                # 0.8: a memory of about 1 / (1 - 0.8) = 5 drafts
        # (drafter, kind, bucket) -> weighted drafts whose token at that depth was right, and
        # weighted drafts that reached that depth (their tokens before it right)
        self.hits: dict[tuple[int, int, int], float] = {}
        self.tries: dict[tuple[int, int, int], float] = {}
        self.seen: dict[tuple[int, int, int], int] = {}     # ... and the drafts scored there
        # per drafter, its drafts still being checked against the committed tokens, each with
        # how many of its tokens the committed ones matched so far
        self.shadow: list[list[tuple[Draft, int]]] = [[] for _ in free]

    def rates(self, j: int, tag: int = 0, prior: float = 0.5) -> list[float]:
        """h per depth bucket for drafter j's drafts of kind `tag` with prior `prior`."""
        out: list[float] = []
        before = prior
        shared = (j, ANY, 0)
        if self.free[j] and tag != ANY and self.seen.get(shared, 0) >= EVIDENCE:
            hits, tries = self._counts(shared, GUESS)
            before = max(prior, hits / tries)
        for b in range(DEPTHS):
            key = (j, tag, b)
            hits, tries = self._counts(key, before)
            h = hits / tries
            before = (min(h, before) if self.free[j] and self.seen.get(key, 0) < EVIDENCE
                      else h)
            out.append(before)
        return out

    def _counts(self, key: tuple[int, int, int], prior: float) -> tuple[float, float]:
        """The weighted (hits, tries) of bucket `key`, or its prior's while it has none."""
        tries = self.tries.get(key, 0.0)
        if tries == 0.0:
            return PRIOR_TRIES * prior, PRIOR_TRIES
        return self.hits[key], tries

    def alpha(self, j: int, tag: int = 0, prior: float = 0.5) -> float:
        """h(0): drafter j's acceptance of the first token of drafts of kind `tag`."""
        return self.rates(j, tag, prior)[0]

    def survival(self, j: int, tag: int, prior: float, n: int) -> list[float]:
        """S(1..n) of drafter j's draft of kind `tag`; it stops early once S < 1e-4 (deeper
        tokens add nothing a round could gain)."""
        h = self.rates(j, tag, prior)
        out: list[float] = []
        s = 1.0
        i = 0
        while i < n and s >= 1e-4:
            s *= min(h[depth_bucket(i)], 0.999)
            out.append(s)
            i += 1
        return out

    def score_round(self, drafts: Sequence[Draft], committed: Sequence[int]) -> None:
        """Score each drafter's drafts still open and its draft of this round against the
        round's `committed` tokens."""
        for j, d in enumerate(drafts):
            still: list[tuple[Draft, int]] = []
            for dj, matched in [*self.shadow[j], (d, 0)]:   # the earlier drafts still open,
                if len(dj) > 0:                               # then this round's
                    m = self._check(j, dj, matched, committed)
                    if m >= 0:
                        still.append((dj, m))
            self.shadow[j] = still

    def _check(self, j: int, d: Draft, matched: int, committed: Sequence[int]) -> int:
        """Check drafter j's draft `d`, of which `matched` tokens were right so far, against
        `committed` and score what it shows (the tokens it matched, and a miss if one did
        not); the tokens matched now, or -1 once it is done: it missed or SHADOW (or all) of
        its tokens matched."""
        want = min(len(d), SHADOW)
        hits, miss = 0, False
        for tok in committed:
            if matched + hits == want:
                break
            if d.tokens[matched + hits] != tok:
                miss = True
                break
            hits += 1
        self._score(j, d, hits, miss, matched)
        return -1 if miss or matched + hits == want else matched + hits

    def _score(self, j: int, d: Draft, run: int, miss: bool, start: int = 0) -> None:
        """Drafter j's draft `d` showed `run` more right tokens from depth `start` on, then a
        wrong one if `miss`."""
        hits = [0] * DEPTHS
        tries = [0] * DEPTHS
        for i in range(start, start + run):
            b = depth_bucket(i)
            hits[b] += 1
            tries[b] += 1
        if miss:
            tries[depth_bucket(start + run)] += 1
        h = self.rates(j, d.tag, d.prior)            # the priors of buckets not seen yet
        counted = depth_bucket(start - 1) if start > 0 else -1   # buckets it was counted in
        for b in range(DEPTHS):
            if tries[b] > 0:
                self._add((j, d.tag, b), d.prior if b == 0 else h[b - 1], hits[b], tries[b],
                          b > counted)
        if self.free[j] and tries[0] > 0:            # the record over all its kinds
            self._add((j, ANY, 0), GUESS, hits[0], tries[0], True)

    def _add(self, key: tuple[int, int, int], prior: float, hits: int, tries: int,
             new: bool) -> None:
        """Add `hits` in `tries` to bucket `key` (its counts decayed first, or its prior's),
        and one draft scored there if it is `new` to it."""
        h0, t0 = self._counts(key, prior)
        self.hits[key] = self.decay * h0 + hits
        self.tries[key] = self.decay * t0 + tries
        if new:
            self.seen[key] = self.seen.get(key, 0) + 1
