"""Training-free parallel decoding beyond entropy_exit: EB-Sampler, KLASS, WINO, the elastic
cache and the suffix window, each rule checked by hand and against a written-out loop."""
from __future__ import annotations

import math

import numpy as np
import pytest

from llmnb.diffusion import diffuse
from llmnb.diffusion.elastic import ElasticCache, cosine
from llmnb.diffusion.engine import step_logits, visible_positions
from llmnb.diffusion.remasking import propose
from llmnb.diffusion.schedulers import (
    EntropyBound, Klass, Wino, entropy_bound_pick, kl_divergence, make_scheduler,
)
from llmnb.diffusion.transfer_schedule import transfer_count
from llmnb.diffusion.wino import verification_rows, verify_key_mask
from llmnb.errors import UsageError
from llmnb.model import Model
from test_diffusion import PROMPT, dream, llada, nats  # noqa: F401  (the fixtures)
from test_diffusion_rules import LOGITS, POSITIONS


def canvas_of(m: Model, n: int) -> tuple[np.ndarray, int]:
    mask = int(m.config.mask_token_id)  # type: ignore[arg-type]
    return np.array(PROMPT + [mask] * n), mask


# --- EB-Sampler --------------------------------------------------------------------------------

def test_entropy_bound_accepts_while_the_sum_less_the_largest_stays_under_gamma() -> None:
    ranked = np.arange(4, dtype=np.int64)
    h = np.array([0.01, 0.02, 0.05, 0.5])           # sums less max: 0, .01, .03, .08
    assert len(entropy_bound_pick(ranked, h, 0.1)) == 4
    assert len(entropy_bound_pick(ranked, h, 0.02)) == 2
    assert len(entropy_bound_pick(ranked, h, 0.0)) == 1   # the first always
    # the order need not be by entropy: the largest so far is left out, wherever it came
    assert len(entropy_bound_pick(ranked[:3], np.array([0.3, 0.01, 0.02]), 0.1)) == 3
    assert len(entropy_bound_pick(ranked[:3], np.array([0.01, 0.3, 0.02]), 0.1)) == 3
    assert len(entropy_bound_pick(ranked[:3], np.array([0.01, 0.3, 0.2]), 0.1)) == 2   # .21


def test_entropy_bound_on_hand_made_logits_and_its_temperature_anneal() -> None:
    # entropy order 1, 3, 0, 2, 4 with .086, .680, .728, .820, 1.778 nats (raw logits)
    c = propose(LOGITS, POSITIONS, "entropy", 0.0, np.random.default_rng(0))
    for gamma, want in ((0.05, [11]), (0.1, [11, 13]), (1.0, [11, 13, 10])):
        got = EntropyBound(gamma, 0.0, 0.0).select(c, LOGITS, 1, 0.0)
        assert c.positions[got].tolist() == want
    # diffusers' EntropyBoundScheduler: t = t_min + (t_max - t_min) (T - s) / T
    eb = make_scheduler("entropy_bound")
    assert [round(eb.temperature(s, 16, 0.0), 6) for s in (0, 8, 15, 16, 40)] == [
        0.8, 0.6, 0.425, 0.4, 0.4]
    # the entropy it bounds is the sampling distribution's: at T = 0.5 row 3 is sharper
    sharp = EntropyBound(0.1, 0.5, 0.5).select(c, LOGITS, 1, 0.5)
    assert c.positions[sharp].tolist() == [11, 13, 10]


def test_entropy_bound_greedy_matches_a_written_out_loop(llada: Model) -> None:
    seq, mask = canvas_of(llada, 16)
    masked = seq == mask
    masked[:len(PROMPT)] = False
    want = []
    while masked.any():
        pos = np.flatnonzero(masked)
        rows = llada.forward(seq)[pos]
        h = nats(rows)
        ranked = np.lexsort((pos, h))
        spent = np.cumsum(h[ranked]) - np.maximum.accumulate(h[ranked])
        take = ranked[:max(1, int((spent <= 0.1).sum()))]
        seq[pos[take]] = rows.argmax(1)[take]
        masked[pos[take]] = False
        want.append(np.where(masked, mask, seq)[len(PROMPT):].tolist())
    r = diffuse(llada, PROMPT, gen_length=16, steps=4, scheduler="entropy_bound",
                eb_temperature=(0.0, 0.0), eb_gamma=0.1, cache=False)
    assert [h.tolist() for h in r.history] == want and len(want) > 4   # not bound by steps


def test_entropy_bound_samples_seeded_and_refuses_a_second_temperature(llada: Model) -> None:
    a, b = (diffuse(llada, PROMPT, gen_length=16, steps=4, scheduler="entropy_bound", seed=3,
                    cache=False) for _ in range(2))
    assert a.tokens == b.tokens and sum(a.stats.committed) == 16
    with pytest.raises(UsageError, match="entropy_bound anneals its own"):
        diffuse(llada, PROMPT, gen_length=8, steps=2, scheduler="entropy_bound", temperature=0.7)


# --- KLASS -------------------------------------------------------------------------------------

def test_klass_stability_by_hand() -> None:
    # p: .5/.5 -> .6/.4 -> .6/.4 -> .6/.4; KL(p2 || p1) = .6 ln 1.2 + .4 ln .8 = 0.0201
    p = [np.array([[0.5, 0.5]]), np.array([[0.6, 0.4]]), np.array([[0.6, 0.4]]),
         np.array([[0.6, 0.4]])]
    assert float(kl_divergence(p[1], p[0])[0]) == pytest.approx(
        0.6 * math.log(1.2) + 0.4 * math.log(0.8), rel=1e-9)
    pos = np.array([7], dtype=np.int64)
    strict, loose = Klass(0.0, 0.015, 2), Klass(0.0, 0.03, 2)
    assert [bool(strict.stable(pos, q)[0]) for q in p] == [False, False, False, True]
    assert [bool(loose.stable(pos, q)[0]) for q in p] == [False, False, True, True]
    loose.start_block()                                      # a new block forgets
    assert not loose.stable(pos, p[3])[0]


def test_klass_commits_every_ready_position_else_the_schedule(llada: Model) -> None:
    # random weights: no probability reaches 0.6, so KLASS is the schedule in probability order
    kw = {"gen_length": 24, "steps": 8, "schedule": "even", "cache": False}
    plain = diffuse(llada, PROMPT, remasking="probability", **kw)
    klass = diffuse(llada, PROMPT, scheduler="klass", **kw)
    assert [h.tolist() for h in klass.history] == [h.tolist() for h in plain.history]
    # confidence 0 and any KL: ready once `history` (1) finite KL is in, i.e. on step 2
    eager = diffuse(llada, PROMPT, scheduler="klass", klass_confidence=0.0, klass_kl=1e9,
                    klass_history=1, **kw)
    assert eager.stats.committed == [3, 21]


def test_klass_defaults_follow_the_model_type() -> None:
    llada_k, dream_k = make_scheduler("klass"), make_scheduler("klass", arch="dream")
    assert isinstance(llada_k, Klass) and isinstance(dream_k, Klass)
    assert (llada_k.confidence, llada_k.kl, dream_k.confidence, dream_k.kl) == (
        0.6, 0.015, 0.9, 0.001)
    with pytest.raises(UsageError, match="klass_history"):
        make_scheduler("klass", klass_history=0)


# --- WINO --------------------------------------------------------------------------------------

def test_wino_drafts_wide_and_remasks_narrow_by_hand() -> None:
    c = propose(LOGITS, POSITIONS, "probability", 0.0, np.random.default_rng(0))
    # probabilities .52 .99 .80 .83 .18: over 0.6 -> 11, 13, 12 (at most max(int(3.5), 5) = 5)
    assert c.positions[Wino(0.6, 0.9).select(c, LOGITS, 0, 0.0)].tolist() == [11, 13, 12]
    assert c.positions[Wino(0.95, 0.9).select(c, LOGITS, 0, 0.0)].tolist() == [11]
    assert c.positions[Wino(0.999, 0.9).select(c, LOGITS, 0, 0.0)].tolist() == [11]  # the first
    w = Wino(0.6, 0.9)
    verified = np.array([20, 21, 22, 23], dtype=np.int64)
    p = np.array([0.95, 0.5, 0.2, 0.85])
    assert w.remask(verified, p, 3).tolist() == [21, 22, 23]  # under 0.9 (a block starts at 30)
    assert w.remask(verified, p, 2).tolist() == [21, 22]  # 3 weak, 3 drafted last: the 2 weakest
    assert w.remask(verified, p, 2).tolist() == [22]      # 2 drafted last: the weakest only
    assert w.remask(verified, p, 1).tolist() == []        # drafted one: no re-mask


def test_wino_verification_rows_see_the_canvas_without_their_position() -> None:
    canvas = np.array([5, 6, 7, 8, 9, 3], dtype=np.int64)
    v = verification_rows(canvas, np.array([3, 4], dtype=np.int64), 3, shift=False)
    assert (v.ids.tolist(), v.positions.tolist(), v.read.tolist()) == ([3, 3], [3, 4], [0, 1])
    keys = np.arange(6, dtype=np.int64)
    km = verify_key_mask(keys, np.ones(6, dtype=bool), 6, v)
    assert km.shape == (8, 8) and km[:6, :6].all() and not km[:6, 6:].any()
    assert km[6].tolist() == [1, 1, 1, 0, 1, 1, 1, 0]         # A_3: not 3, itself
    assert km[7].tolist() == [1, 1, 1, 1, 0, 1, 0, 1]         # A_4: not 4, itself
    d = verification_rows(canvas, np.array([3, 4], dtype=np.int64), 3, shift=True)
    assert d.ids.tolist() == [3, 3, 7, 8] and d.positions.tolist() == [3, 4, 2, 3]
    assert d.read.tolist() == [2, 3]                          # Dream reads p from row p - 1
    km = verify_key_mask(keys, np.ones(6, dtype=bool), 6, d)
    assert km[8].tolist() == [1, 1, 0, 0, 1, 1, 1, 0, 1, 0]   # B_3 at 2: not 2, 3; A_3, itself
    assert km[9].tolist() == [1, 1, 1, 0, 0, 1, 0, 1, 0, 1]   # B_4 at 3: not 3, 4; A_4, itself


@pytest.mark.parametrize("model", ["llada", "dream"])
def test_wino_verification_reads_p_with_only_p_masked(model: str,
                                                      request: pytest.FixtureRequest) -> None:
    # a verification row is a query of a forward over the canvas plus itself, in which it
    # sees every canvas key but p's (Dream: and p - 1's, replaced by its own copy)
    m = request.getfixturevalue(model)
    seq, mask = canvas_of(m, 10)
    seq[len(PROMPT):len(PROMPT) + 4] = [11, 12, 13, 14]
    p = len(PROMPT) + 2
    t = m.transformer
    shift = bool(m.config.shift_logits)
    extra = [(mask, p)] + ([(int(seq[p - 1]), p - 1)] if shift else [])
    ids = np.concatenate([seq, [e[0] for e in extra]])
    pos = np.concatenate([np.arange(len(seq)), [e[1] for e in extra]])
    km = np.ones((len(ids), len(ids)), dtype=bool)
    km[:len(seq), len(seq):] = False
    km[len(seq):, p] = False
    if shift:
        km[len(seq) + 1, p - 1] = False
    km[len(seq), len(seq) + 1:] = False
    want = t.logits(t.hidden(ids, causal=False, positions=pos, key_mask=km)[-1:])
    v = verification_rows(seq, np.array([p], dtype=np.int64), mask, shift)
    got = step_logits(t, seq, np.array([len(PROMPT) + 5]), None, None, None, v)[1:]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def wino_counts(m: int, wide: tuple[float, int, int] = (0.7, 5, 20)) -> tuple[list[int], list[int]]:
    """WINO's draft and re-mask counts for a block of m when every mask passes the draft
    and every verified position fails the verify threshold (counts only)."""
    drafted, remasked, masked, verified, last = [], [], m, 0, 30
    while masked:
        d = min(min(max(int(masked * wide[0]), wide[1]), wide[2]), masked)
        r = 0 if d <= 1 else (verified if verified < last else last - 1)
        drafted.append(d)
        remasked.append(r)
        masked, verified, last = masked - d + r, verified - r + d, d
    return drafted, remasked


@pytest.mark.parametrize("model", ["llada", "dream"])
def test_wino_history_shows_remasks_and_the_stats_count_them(model: str,
                                                            request: pytest.FixtureRequest) -> None:
    m = request.getfixturevalue(model)
    mask = m.config.mask_token_id
    r = diffuse(m, PROMPT, gen_length=24, steps=4, scheduler="wino", wino_draft=0.0,
                wino_verify=1.0, cache=False)
    drafted, remasked = wino_counts(24)
    assert (r.stats.committed, r.stats.remasked) == (drafted, remasked)
    assert sum(remasked) > 0 and r.steps_taken == len(drafted) <= 24
    before = np.full(24, mask)
    for h, d, k in zip(r.history, r.stats.committed, r.stats.remasked):
        assert int(((before == mask) & (h != mask)).sum()) == d - int(((before != mask) &
                                                                       (h == mask)).sum()) + k
        assert int(((before != mask) & (h == mask)).sum()) == k   # re-masked: the mask id again
        before = h
    assert not (r.history[-1] == mask).any() and r.tokens == r.history[-1].tolist()


@pytest.mark.parametrize("policy", ["diffuse", "dual", "elastic"])
def test_wino_with_a_cache_refreshed_every_step_equals_no_cache(
        llada: Model, dream: Model, policy: str) -> None:
    for m in (llada, dream):
        kw = {"gen_length": 16, "steps": 4, "scheduler": "wino", "wino_draft": 0.0,
              "wino_verify": 0.999, "block_length": 8}
        a = diffuse(m, PROMPT, cache=False, **kw)
        b = diffuse(m, PROMPT, cache=True, cache_refresh=1, cache_policy=policy,
                    elastic_window=16, **kw)
        assert [h.tolist() for h in a.history] == [h.tolist() for h in b.history]
        assert sum(b.stats.remasked) > 0


# --- the elastic cache -------------------------------------------------------------------------

def test_cosine_by_hand() -> None:
    a = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    assert cosine(a, a) == pytest.approx(1.0)
    assert cosine(a, np.array([[1.0, 1.0], [0.0, 0.0]], dtype=np.float32)) == pytest.approx(0.5)


def test_elastic_drift_at_a_layer_refreshes_the_layers_above_it(llada: Model) -> None:
    c = llada.config
    heads, kv = c.n_head, c.n_head_kv
    cache = ElasticCache(c, 4, gamma=0.9)
    masked = np.array([False, False, True, True])
    tokens = np.array([5, 6, 3, 3], dtype=np.int64)
    todo = np.array([2, 3], dtype=np.int64)
    assert cache.choose_active(0, tokens, masked, (2, 4), 0, todo, todo).tolist() == [0, 1, 2, 3]

    def weights(rows: list[list[float]]) -> np.ndarray:      # the same rows for every head
        p = np.array(rows, dtype=np.float32)
        return np.broadcast_to(p, (heads,) + p.shape).reshape(kv, heads // kv, *p.shape)

    # step 0: the masks (rows 2, 3) attend most to decoded key 1 in both layers
    first = [[1, 0, 0, 0], [0, 1, 0, 0], [0.2, 0.7, 0.1, 0], [0.3, 0.6, 0, 0.1]]
    for layer in range(c.n_layer):
        cache.observe_attention(layer, weights(first))
    assert cache.tracked.tolist() == [1] * c.n_layer and cache.drifted == -1
    # step 1: 2 committed; active = changed 2 + window 3 + tracked 1
    tokens[2], masked[2] = 9, False
    act = cache.choose_active(1, tokens, masked, (2, 4), 1, todo[1:], todo[1:])
    assert act.tolist() == [1, 2, 3]
    moved = [[0.5, 0.5, 0, 0], [0.1, 0.2, 0.7, 0], [0.3, 0.6, 0, 0.1]]  # cos 0.71 < 0.9
    cache.observe_attention(0, weights(moved))
    cache.observe_attention(1, weights(moved))
    assert cache.drifted == 0                                 # the first layer that moved
    # step 2: a refresh from layer 1 (the first above the one that drifted): every row is a
    # query, layer 0 writes only the rows a normal step would have, layer 1 all of them
    assert c.n_layer == 2
    act = cache.choose_active(2, tokens, masked, (2, 4), 2, todo[1:], todo[1:])
    assert act.tolist() == [0, 1, 2, 3] and cache.refresh_from == 1
    assert cache.refreshes == 1 and cache.full_forwards == 2
    k = np.full((kv, 4, c.head_dim), 7.0, dtype=np.float32)
    kept, _ = cache.update(0, k, k)                           # a normal step: 1 (tracked), 3
    assert (kept[:, [1, 3]] == 7.0).all() and not (kept[:, [0, 2]] == 7.0).any()
    fresh, _ = cache.update(1, k, k)
    assert (fresh == 7.0).all()
    for layer in range(c.n_layer):                            # no drift test on a refresh
        cache.observe_attention(layer, weights(first))
    assert cache.drifted == -1


def test_elastic_never_refreshes_at_gamma_0_and_alternates_past_1(llada: Model) -> None:
    kw = {"gen_length": 24, "steps": 8, "cache_policy": "elastic", "elastic_window": 4}
    calm = diffuse(llada, PROMPT, elastic_gamma=0.0, **kw)
    assert calm.stats.full_forwards == 1
    # every active row: the window of 4, last step's commits, one tracked token per layer
    # (the budget's last step proposes for every mask left)
    for act, prev in zip(calm.stats.active_positions[1:-1], calm.stats.committed):
        assert act <= 4 + prev + llada.config.n_layer
    jumpy = diffuse(llada, PROMPT, elastic_gamma=1.01, **kw)        # layer 0 always drifts
    n = len(PROMPT) + 24
    assert jumpy.stats.active_positions[:7:2] == [n] * 4
    assert all(a < n for a in jumpy.stats.active_positions[1:6:2])


def test_elastic_proposes_only_in_its_window_until_a_budgets_last_step(llada: Model) -> None:
    r = diffuse(llada, PROMPT, gen_length=24, steps=4, schedule="linear", cache_policy="elastic",
                elastic_window=2)
    assert r.stats.committed == [2, 2, 2, 18]         # linear wants 6 a step; the window has 2
    mask = llada.config.mask_token_id
    first = np.flatnonzero(r.history[0] != mask).tolist()
    assert first == [0, 1]                            # the two leftmost masks


# --- the suffix window -------------------------------------------------------------------------

def test_suffix_window_positions() -> None:
    assert visible_positions(30, 14, 4).tolist() == list(range(18))
    assert visible_positions(30, 14, None) is None and visible_positions(30, 28, 4) is None


def test_suffix_window_drops_the_masks_beyond_it(llada: Model) -> None:
    kw = {"gen_length": 24, "steps": 6, "block_length": 8, "cache": False}
    r = diffuse(llada, PROMPT, suffix_window=4, **kw)
    n = len(PROMPT)
    assert r.stats.active_positions == [n + 12] * 2 + [n + 20] * 2 + [n + 24] * 2
    # block 0 is what a model sees of a canvas cut 4 positions after the block
    seq, mask = canvas_of(llada, 12)
    for s in range(2):
        pos = np.flatnonzero(seq[n:n + 8] == mask) + n
        rows = llada.forward(seq)[pos]
        k = transfer_count("cosine", s, 2, len(pos))
        top = np.lexsort((pos, -rows.max(1)))[:k]
        seq[pos[top]] = rows.argmax(1)[top]
        assert r.history[s][:12].tolist() == seq[n:].tolist()
    wide = diffuse(llada, PROMPT, suffix_window=16, **kw)   # beyond the canvas: no change
    assert [h.tolist() for h in wide.history] == [h.tolist() for h in diffuse(
        llada, PROMPT, **kw).history]


@pytest.mark.parametrize("policy", ["diffuse", "prefix", "dual", "elastic"])
def test_suffix_window_with_a_cache_refreshed_every_step_equals_no_cache(
        llada: Model, dream: Model, policy: str) -> None:
    for m in (llada, dream):
        kw = {"gen_length": 24, "steps": 6, "block_length": 8, "suffix_window": 4,
              "elastic_window": 8}
        a = diffuse(m, PROMPT, cache=False, **kw)
        b = diffuse(m, PROMPT, cache=True, cache_refresh=1, cache_policy=policy, **kw)
        assert [h.tolist() for h in a.history] == [h.tolist() for h in b.history]


def test_bad_method_parameters_are_refused(llada: Model) -> None:
    for kw, field in (({"suffix_window": -1}, "suffix_window"), ({"eb_gamma": -1.0}, "eb_gamma"),
                      ({"wino_draft": 1.5}, "wino_draft"),
                      ({"elastic_window": 0}, "elastic_window"),
                      ({"cache_policy": "lru"}, "cache policy")):
        with pytest.raises(UsageError, match=field):
            diffuse(llada, PROMPT, gen_length=8, steps=2, scheduler="entropy_bound"
                    if "eb" in field else "wino" if "wino" in field else "low_confidence", **kw)
