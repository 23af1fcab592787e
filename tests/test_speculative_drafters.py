"""Drafters (llmnb.ar.drafters, llmnb.ar.lookup): what each proposes against a brute-force
oracle, drafts as long as the match supports, and a round that reads only the new tokens."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import overload

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import llmnb
from llmnb.ar import Greedy, generate
from llmnb.ar.drafters import LookupDrafter, ModelDrafter, NgramDrafter, lookup, make_drafter
from llmnb.errors import UsageError
from llmnb.model import Model

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "data" / "models" / "tiny-ar.gguf"


@pytest.fixture(scope="module")
def tiny() -> Model:
    return llmnb.load(TINY)


def propose(
        d: LookupDrafter | NgramDrafter | ModelDrafter, ctx: Sequence[int], k: int) -> list[int]:
    return d.propose(ctx, k, Greedy(), np.random.default_rng(0)).tokens


# --- prompt lookup ---------------------------------------------------------------------------

def test_lookup_copies_what_followed_the_latest_longest_match() -> None:
    ctx = [5, 6, 7, 8, 9, 1, 5, 6, 7, 2, 3, 5, 6, 7]
    assert lookup(ctx, 3) == [2, 3, 5]                  # 3-gram (5 6 7): latest earlier match
    assert lookup([1, 2, 3, 4, 9, 9, 3], 2) == [4, 9]   # only the 1-gram (3) recurs
    assert lookup([1, 2, 3, 4], 3) == []                # nothing recurs
    assert lookup([4, 7, 4, 7, 4], 5) == [7, 4, 7, 4, 7]  # a loop copies on into its own output
    ctx = [5, 6, 7, 8, 1, 2, 7, 9, 5, 6, 7]
    assert propose(LookupDrafter(), ctx, 2) == [8, 1]
    assert propose(LookupDrafter(max_ngram=1), ctx, 2) == [9, 5]


def test_lookup_follows_an_edited_copy_where_it_left_off() -> None:
    prompt = [20, 3, 21, 22, 3, 24, 25, 3, 26, 27, 28, 0]      # the text to copy, then a separator
    d = LookupDrafter()
    assert propose(d, prompt + [20, 3, 21], 3) == [22, 3, 24]
    assert propose(d, prompt + [20, 3, 21, 99], 3) == []        # 22 corrected to 99
    # the common token 3 occurs three times: the copy goes on after the one at the cursor
    assert propose(d, prompt + [20, 3, 21, 99, 3], 3) == [24, 25, 3]
    assert lookup(prompt + [20, 3, 21, 99, 3], 3) == [21, 99, 3]   # latest: the copy itself
    t = d.propose(prompt + [20, 3, 21, 99, 3], 3, Greedy(), np.random.default_rng())
    assert t.tag == 1 and abs(t.prior - 0.5) < 1e-9
    long = LookupDrafter().propose(prompt + [20, 3, 21, 22, 3, 24, 25, 3, 26], 2, Greedy(),
                                   np.random.default_rng())
    assert long.tokens == [27, 28] and long.tag == 8 and long.prior > 0.88  # a copy in progress


def test_lookup_learns_an_edit_drafts_through_it_and_forgets_it_when_wrong() -> None:
    text = [10, 11, 12, 13, 50, 51, 14, 15, 16, 17, 18, 50, 51, 19, 20, 21]
    prompt = text + [0]                                          # then a copy, 50 51 -> 77
    d = LookupDrafter()
    assert propose(d, prompt + [10], 8) == [11, 12, 13, 50, 51, 14, 15, 16]
    assert propose(d, prompt + [10, 11, 12, 13, 77], 8) == []    # wrong at 50; 77 is new
    assert propose(d, prompt + [10, 11, 12, 13, 77, 14], 8) == [15, 16, 17, 18, 77, 19, 20, 21]
    assert d.edits == {(50, 51): [77]}                           # the copy re-joined after 51
    assert propose(d, prompt + [10, 11, 12, 13, 77, 14, 15, 16, 17, 18, 50], 2) == [51, 19]
    assert d.edits == {}                                         # this time 50 was kept
    plain = LookupDrafter(follow=False)
    propose(plain, prompt + [10], 8)
    propose(plain, prompt + [10, 11, 12, 13, 77, 14], 8)
    assert plain.edits == {}                                     # only with follow


def test_lookup_drafts_as_far_as_the_copied_text_goes() -> None:
    text = list(range(100, 160))                                 # 60 distinct tokens
    ctx = text + [0] + text[:20]                                 # copying, 20 tokens in
    d = LookupDrafter()
    draft = d.propose(ctx, 64, Greedy(), np.random.default_rng())
    assert draft.tokens[:41] == text[20:] + [0]                  # the rest of the text, then on
    assert draft.tag == LookupDrafter.LONG_MATCH and draft.prior > 0.94


def brute_force_lookup(ctx: list[int], k: int, max_ngram: int = 3) -> list[int]:
    for n in range(min(max_ngram, len(ctx) - 1), 0, -1):
        for i in range(len(ctx) - n - 1, -1, -1):          # latest start with a token after it
            if ctx[i:i + n] == ctx[len(ctx) - n:]:
                full = list(ctx)
                for j in range(k):
                    full.append(full[i + n + j])
                return full[len(ctx):]
    return []


@settings(max_examples=200, deadline=None, derandomize=True)
@given(ctx=st.lists(st.integers(0, 4), min_size=1, max_size=40), k=st.integers(1, 9),
       cut=st.integers(0, 40))
def test_indexed_lookup_equals_brute_force_also_when_grown_in_steps(ctx: list[int], k: int,
                                                                     cut: int) -> None:
    want = brute_force_lookup(ctx, k)
    assert lookup(ctx, k) == want
    d = LookupDrafter(follow=False)
    propose(d, ctx[:max(1, min(cut, len(ctx)))], k)
    assert propose(d, ctx, k) == want


# --- the n-gram table ----------------------------------------------------------------------

def ngram_by_hand(ctx: list[int], k: int, n: int, slots: int) -> list[int]:
    """The n-gram drafter's definition, computed the slow way: every window's hash from its
    formula, the table filled in context order (a later window overwrites its slot), then the
    draft chained through the table."""
    m, b = NgramDrafter.MOD, NgramDrafter.BASE

    def h(w: Sequence[int]) -> int:
        return sum(t * pow(b, n - 1 - i, m) for i, t in enumerate(w)) % m

    keys, nxt = [-1] * slots, [0] * slots
    for e in range(n - 1, len(ctx) - 1):                     # window ending at e, successor e + 1
        hw = h(ctx[e - n + 1:e + 1])
        keys[hw % slots], nxt[hw % slots] = hw, ctx[e + 1]
    if len(ctx) < n:
        return []
    full, out = list(ctx), []
    while len(out) < k:
        hw = h(full[len(full) - n:])
        if keys[hw % slots] != hw:
            break
        out.append(nxt[hw % slots])
        full.append(out[-1])
    return out


@settings(max_examples=200, deadline=None, derandomize=True)
@given(ctx=st.lists(st.integers(0, 3), min_size=1, max_size=60), k=st.integers(1, 30),
       n=st.integers(1, 4), slots=st.sampled_from([7, 64, 1 << 16]), cut=st.integers(0, 60))
def test_ngram_table_equals_its_definition_also_when_grown_in_steps(
        ctx: list[int], k: int, n: int, slots: int, cut: int) -> None:
    want = ngram_by_hand(ctx, k, n, slots)
    d = NgramDrafter(n, slots)
    propose(d, ctx[:cut], k)
    assert propose(d, ctx, k) == want


def test_ngram_drafts_until_the_chain_breaks() -> None:
    text = list(range(100, 150))
    ctx = text + [0] + text[:10]
    d = NgramDrafter(4)
    assert propose(d, ctx, 64) == text[10:] + [0] + text[:10] + text[10:23]  # round the loop
    assert propose(NgramDrafter(4), text, 64) == []              # nothing seen twice: no draft
    assert make_drafter("ngram:5", llmnb.load(TINY)).name == "ngram:5"
    with pytest.raises(UsageError, match="ngram"):
        NgramDrafter(0)


# --- a round reads only what is new ----------------------------------------------------------

class CountingSequence(Sequence[int]):
    """A committed sequence that counts how many of its tokens a drafter reads."""

    def __init__(self, items: list[int]) -> None:
        self.items, self.reads = items, 0

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...

    def __getitem__(self, i: int | slice) -> int | list[int]:
        got = self.items[i]
        self.reads += len(got) if isinstance(got, list) else 1
        return got

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[int]:
        self.reads += len(self.items)
        return iter(self.items)


@pytest.mark.parametrize("kind", ["lookup", "ngram", "self:1"])
def test_a_round_reads_only_the_tokens_added_since_the_last(tiny: Model, kind: str) -> None:
    rng = np.random.default_rng(0)
    ids = [int(x) for x in rng.integers(5, 400, size=200)]
    d = make_drafter(kind, tiny)
    d.reset(tiny.config.n_ctx)
    seq = CountingSequence(ids)
    d.propose(seq, 4, Greedy(), rng)
    for tok in (7, 8, 9):                        # three rounds of one committed token each
        seq.items.append(tok)
        seq.reads = 0
        assert len(d.propose(seq, 4, Greedy(), rng)) > 0 or kind != "self:1"
        assert seq.reads <= 8, (kind, seq.reads)  # not the 200 tokens before


# --- model drafters -------------------------------------------------------------------------

def test_model_drafter_rewinds_its_cache_to_the_shared_prefix(tiny: Model) -> None:
    d = ModelDrafter(tiny, n_layers=2)
    d.reset(64)
    ids = tiny.prompt_ids("Please multiply 10 by 2.", chat=True)
    first = d.propose(ids, 4, Greedy(), np.random.default_rng(0))
    assert d.seen == ids + first.tokens[:-1] and d.cache.length == len(d.seen)
    # the context moved on with one of its tokens and a different one: the cache keeps the
    # shared prefix and the result equals a drafter that starts from nothing
    ctx = ids + first.tokens[:1] + [7]
    again = propose(d, ctx, 3)
    assert d.seen[:len(ctx)] == ctx
    fresh = ModelDrafter(tiny, n_layers=2)
    fresh.reset(64)
    assert again == propose(fresh, ctx, 3)


def test_self_drafter_with_every_layer_proposes_the_targets_greedy_tokens(tiny: Model) -> None:
    ids = tiny.prompt_ids("Please name the planets in our solar system.", chat=True)
    d = make_drafter(f"self:{tiny.config.n_layer}", tiny)
    d.reset(128)
    assert propose(d, ids, 8) == generate(tiny, ids, max_new_tokens=8).tokens


def test_model_drafter_catches_up_on_what_it_is_behind_then_only_drafts(tiny: Model) -> None:
    ids = tiny.prompt_ids("Please name the planets in our solar system.", chat=True)
    d = ModelDrafter(tiny)
    d.reset(128)
    assert d.behind(ids) == len(ids)                        # before its first draft: the prompt
    assert d.catch_up(ids[:1]) == 1 and d.behind(ids) == len(ids) - 1   # (the loop's timing)
    assert d.catch_up(ids) == len(ids) - 1 and d.behind(ids) == 0 and d.catch_up(ids) == 0
    first = d.propose(ids, 8, Greedy(), np.random.default_rng(0))
    assert first.tokens == generate(tiny, ids, max_new_tokens=8).tokens   # the same drafts
    assert d.behind(ids + first.tokens[:1] + [7]) == 1      # one committed token it has not seen
    assert d.catch_up(ids + first.tokens[:1] + [7]) == 1


def test_bad_drafter_names_are_usage_errors(tiny: Model) -> None:
    for spec in ("self:0", "self:5", "self:x", "ngram:x", "ngram:0"):
        with pytest.raises(UsageError, match=spec.partition(":")[0]):
            make_drafter(spec, tiny)
