"""Masked diffusion: diffuse-cpp's schedules and rules reproduced exactly at temperature 0."""
from __future__ import annotations

import numpy as np
import pytest

import llmnb
from llmnb.diffusion import DiffusionError, diffuse, transfer_counts
from llmnb.diffusion.transfer_schedule import transfer_count
from llmnb.errors import UsageError
from llmnb.model import Model, ModelError
from oracle import ORACLE

PROMPT = [3, 17, 120, 42, 99, 7]


@pytest.fixture(scope="module")
def llada() -> Model:
    return llmnb.load(ORACLE / "llada_f32.gguf")


@pytest.fixture(scope="module")
def dream() -> Model:
    return llmnb.load(ORACLE / "dream_f32.gguf")


# --- schedules: the worked lists of reference/diffuse-cpp.md §4.4 and peers.md §1-2 -------------

def test_cosine_counts_for_256_and_64_tokens_in_16_steps() -> None:
    assert transfer_counts("cosine", 16, 256) == [1, 4, 6, 8, 11, 13, 15, 17, 19, 20, 22, 23, 23,
                                                  24, 25, 25]
    assert transfer_counts("cosine", 16, 64) == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6]
    assert transfer_counts("cosine", 32, 256) == [1, 1, 2, 2, 3, 3, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9,
                                                  9, 10, 10, 11, 11, 11, 11, 12, 12, 12, 12, 12,
                                                  12, 12, 13]


def test_linear_even_and_dream_eps_counts() -> None:
    assert transfer_counts("linear", 16, 256) == [16] * 16
    assert transfer_counts("linear", 16, 64) == [4] * 16
    assert transfer_counts("even", 4, 10) == [3, 3, 2, 2]               # LLaDA's remainder rule
    assert transfer_counts("eps", 16, 256) == [15] + [16] * 14 + [17]   # Dream, eps = 1e-3
    assert transfer_counts("eps", 16, 64) == [3] + [4] * 14 + [5]


def test_counts_are_relative_to_what_is_still_masked_and_finish_on_the_last_step() -> None:
    assert transfer_count("cosine", 15, 16, 7) == 7
    assert transfer_count("cosine", 0, 16, 256) == 1 and transfer_count("cosine", 0, 16, 0) == 0
    with pytest.raises(UsageError, match="schedule"):
        transfer_count("quadratic", 0, 4, 10)


# --- the loop, against a plain re-statement of diffuse-cpp's algorithm -------------------------

def nats(rows: np.ndarray) -> np.ndarray:
    """Entropy by its definition, -sum p ln p, in float64 (terms with p <= 1e-10 dropped)."""
    z = rows.astype(np.float64)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    return -(np.where(p > 1e-10, p * np.log(np.where(p > 1e-10, p, 1.0)), 0.0)).sum(1)


def reference_loop(m: Model, steps: int, n: int, rule: str, tau: float = 1.5) -> list[list[int]]:
    """diffuse-cpp §4 at temperature 0, no cache, written out: full forward, candidates in
    position order, cosine count on the current masked count, stable order, commit."""
    mask = int(m.config.mask_token_id)  # type: ignore[arg-type]
    seq = np.array(PROMPT + [mask] * n)
    masked = np.r_[np.zeros(len(PROMPT), bool), np.ones(n, bool)]
    hist = []
    for step in range(steps):
        if not masked.any():
            break
        logits = m.forward(seq)
        pos = np.flatnonzero(masked)
        rows = logits[np.maximum(pos - 1, 0)] if m.config.shift_logits else logits[pos]
        tok = rows.argmax(1)
        ent = nats(rows)
        k = transfer_count("cosine", step, steps, len(pos))
        if rule == "entropy_exit":
            k = min(max(k, int((ent < tau).sum())), len(pos))
            idx = np.lexsort((pos, ent))
        else:
            conf = rows[np.arange(len(pos)), tok] if rule == "low_confidence" else \
                np.sort(rows, 1)[:, -1] - np.sort(rows, 1)[:, -2]
            idx = np.lexsort((pos, -conf))
        seq[pos[idx[:k]]] = tok[idx[:k]]
        masked[pos[idx[:k]]] = False
        hist.append(np.where(masked, mask, seq)[len(PROMPT):].tolist())
    return hist


@pytest.mark.parametrize("rule", ["low_confidence", "topk_margin", "entropy_exit"])
@pytest.mark.parametrize("model", ["llada", "dream"])
def test_denoising_matches_the_reference_rules(
        rule: str, model: str, request: pytest.FixtureRequest) -> None:
    m = request.getfixturevalue(model)
    # tau = 3.85 nats: about half of these random-weight rows count as easy at step 0
    scheduler = "entropy_exit" if rule == "entropy_exit" else "low_confidence"
    remasking = None if rule == "entropy_exit" else rule
    r = diffuse(m, PROMPT, gen_length=24, steps=8, scheduler=scheduler, remasking=remasking,
                cache=False, entropy_threshold=3.85)
    want = reference_loop(m, 8, 24, rule, tau=3.85)
    assert [h.tolist() for h in r.history] == want
    assert r.steps_taken == len(want) and r.tokens == want[-1]
    if rule == "entropy_exit":
        assert 1 < r.stats.committed[0] < 24


def test_entropy_exit_commits_at_least_the_schedule_and_every_easy_position(llada: Model) -> None:
    easy = diffuse(llada, PROMPT, gen_length=24, steps=8, scheduler="entropy_exit",
                   entropy_threshold=100.0, cache=False)       # every position counts as easy
    assert easy.steps_taken == 1
    hard = diffuse(llada, PROMPT, gen_length=24, steps=8, scheduler="entropy_exit",
                   entropy_threshold=0.0, cache=False)         # none: the cosine schedule alone
    filled = [int((h != llada.config.mask_token_id).sum()) for h in hard.history]
    assert np.diff([0] + filled).tolist() == transfer_counts("cosine", 8, 24)


def fast_dllm_loop(m: Model, n: int, threshold: float | None = None,
                   factor: float | None = None) -> list[list[int]]:
    """Fast-dLLM's generate() with threshold or factor, one block, no cache, written out:
    full forward, float64 softmax confidence of the argmax, commit the top-1 and every other
    position at or above the threshold (factor: the sorted prefix with c_n >= 1 - f/(n + 1);
    Fast-dLLM's code also takes the last one when only it fails, a slip llmnb does not copy,
    see test_diffusion_rules), until nothing is masked."""
    mask = int(m.config.mask_token_id)  # type: ignore[arg-type]
    seq = np.array(PROMPT + [mask] * n)
    masked = np.r_[np.zeros(len(PROMPT), bool), np.ones(n, bool)]
    hist = []
    while masked.any():
        pos = np.flatnonzero(masked)
        rows = m.forward(seq).astype(np.float64)[np.maximum(pos - 1, 0) if m.config.shift_logits
                                                 else pos]
        p = np.exp(rows - rows.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        tok = rows.argmax(1)
        conf = p[np.arange(len(pos)), tok]
        ranked = np.lexsort((pos, -conf))
        if threshold is not None:
            take = [ranked[0]] + [i for i in ranked[1:] if conf[i] >= threshold]
        else:
            assert factor is not None
            k = 0
            while k < len(ranked) and (k == 0 or conf[ranked[k]] >= 1 - factor / (k + 2)):
                k += 1
            take = list(ranked[:k])
        seq[pos[take]] = tok[take]
        masked[pos[take]] = False
        hist.append(np.where(masked, mask, seq)[len(PROMPT):].tolist())
    return hist


@pytest.mark.parametrize("model", ["llada", "dream"])
def test_fast_dllm_threshold_and_factor_iterate_until_the_block_is_done(
        model: str, request: pytest.FixtureRequest) -> None:
    # the step budget does not bound them: the reference loops until the block has no masks
    m = request.getfixturevalue(model)
    for kw in ({"threshold": 0.9}, {"threshold": 0.0}, {"factor": 1.0}, {"factor": 30.0}):
        r = diffuse(m, PROMPT, gen_length=16, steps=4, scheduler=next(iter(kw)), cache=False,
                    **kw)
        assert [h.tolist() for h in r.history] == fast_dllm_loop(m, 16, **kw)
        assert r.steps_taken == len(r.history) and sum(r.stats.committed) == 16


def test_fast_dllm_rules_keep_the_users_remasking_rule(llada: Model) -> None:
    # the rule orders (its top-1 always goes in), the probability gates the rest
    mask = int(llada.config.mask_token_id)  # type: ignore[arg-type]
    rows = llada.forward(np.array(PROMPT + [mask] * 16))[len(PROMPT):]
    top2 = np.sort(rows, 1)[:, -2:]
    first = int(np.argmax(top2[:, 1] - top2[:, 0]))                # the widest logit margin
    assert first != int(np.argmax(rows.max(1) - np.log(np.exp(rows).sum(1))))  # not the likeliest
    for scheduler in ("threshold", "factor"):
        r = diffuse(llada, PROMPT, gen_length=16, steps=4, scheduler=scheduler,
                    remasking="topk_margin", cache=False)
        assert np.flatnonzero(r.history[0] != mask).tolist() == [first]


def test_semi_autoregressive_blocks_fill_left_to_right(llada: Model) -> None:
    r = diffuse(llada, PROMPT, gen_length=16, steps=8, block_length=8, cache=False)
    mask = llada.config.mask_token_id
    for h in r.history[:4]:                                      # first block's steps
        assert (h[8:] == mask).all()
    assert r.steps_taken == 8


def test_cache_refreshed_every_step_equals_no_cache(llada: Model, dream: Model) -> None:
    for m in (llada, dream):
        a = diffuse(m, PROMPT, gen_length=24, steps=8, cache=False)
        b = diffuse(m, PROMPT, gen_length=24, steps=8, cache=True, cache_refresh=1)
        assert [h.tolist() for h in a.history] == [h.tolist() for h in b.history]


def test_cache_recomputes_only_the_active_positions(llada: Model) -> None:
    r = diffuse(llada, PROMPT, gen_length=24, steps=8, cache=True)
    active = r.stats.active_positions
    assert active[0] == len(PROMPT) + 24 and all(a < active[0] for a in active[1:])
    assert r.stats.full_forwards == 1


def test_temperature_sampling_is_seeded(llada: Model) -> None:
    a = diffuse(llada, PROMPT, gen_length=16, steps=4, temperature=1.0, seed=5, cache=False)
    b = diffuse(llada, PROMPT, gen_length=16, steps=4, temperature=1.0, seed=5, cache=False)
    c = diffuse(llada, PROMPT, gen_length=16, steps=4, temperature=1.0, seed=6, cache=False)
    assert a.tokens == b.tokens and a.tokens != c.tokens


def test_bad_requests_are_refused(llada: Model) -> None:
    ar = llmnb.load(ORACLE / "llama_f32.gguf")
    with pytest.raises(ModelError, match="cannot denoise"):
        diffuse(ar, PROMPT, gen_length=8, steps=4)
    with pytest.raises(UsageError, match="block_length"):
        diffuse(llada, PROMPT, gen_length=10, steps=4, block_length=3)
    with pytest.raises(UsageError, match="multiple of the 2 blocks"):
        diffuse(llada, PROMPT, gen_length=16, steps=5, block_length=8)
    with pytest.raises(DiffusionError, match="exceed the context"):
        diffuse(llada, PROMPT, gen_length=64, steps=4)
    with pytest.raises(UsageError, match="scheduler"):
        diffuse(llada, PROMPT, gen_length=8, steps=4, scheduler="fastest")


def test_fast_dllm_cache_policies_recompute_the_block_or_the_block_and_suffix(llada: Model) -> None:
    n, blocks = len(PROMPT) + 24, 3
    prefix = diffuse(llada, PROMPT, gen_length=24, steps=6, block_length=8, cache_policy="prefix")
    dual = diffuse(llada, PROMPT, gen_length=24, steps=6, block_length=8, cache_policy="dual")
    assert prefix.stats.full_forwards == dual.stats.full_forwards == blocks  # one per block
    assert prefix.stats.active_positions == [n, 24, n, 16, n, 8]            # block + suffix
    assert dual.stats.active_positions == [n, 8, n, 8, n, 8]                 # the block only
    with pytest.raises(UsageError, match="cache policy"):
        diffuse(llada, PROMPT, gen_length=8, steps=2, cache_policy="lru")


def test_dream_dual_cache_recomputes_the_block_and_only_the_rows_it_reads(dream: Model) -> None:
    # Dream reads position i's proposal from row i - 1: a cached step must recompute the rows
    # it reads (left neighbours of the block's masked positions), not those of every mask
    n, block = len(PROMPT) + 24, 8
    dual = diffuse(dream, PROMPT, gen_length=24, steps=6, block_length=block, cache_policy="dual")
    prefix = diffuse(dream, PROMPT, gen_length=24, steps=6, block_length=block,
                     cache_policy="prefix")
    mask = dream.config.mask_token_id
    want = []
    for s, before in enumerate([None] + dual.history[:-1]):
        lo = len(PROMPT) + (s // 2) * block
        if s % 2 == 0:
            want.append(n)                                     # a block starts: full forward
            continue
        assert before is not None
        todo = np.flatnonzero(before[lo - len(PROMPT):lo - len(PROMPT) + block] == mask) + lo
        want.append(len(set(range(lo, lo + block)) | set((todo - 1).tolist())))
    assert dual.stats.active_positions == want
    # prefix also recomputes the suffix: more rows, except in the last block (no suffix)
    assert all(d < p for d, p in zip(dual.stats.active_positions[1:4:2],
                                     prefix.stats.active_positions[1:4:2]))


def test_head_copy_gives_the_same_logits_and_diffusion_keeps_it(llada: Model) -> None:
    t = llada.transformer
    t.use_batch_copies(False)
    h = np.random.default_rng(0).standard_normal((8, llada.config.n_embd)).astype(np.float32)
    narrow = t.logits(h)                                          # X @ W.T on (d, vocab)
    held = t.use_head_copy()
    assert held == 4 * llada.config.vocab_size * llada.config.n_embd and t.head_copy is not None
    np.testing.assert_allclose(t.logits(h), narrow, rtol=1e-5, atol=1e-5)   # W @ X.T
    t.use_batch_copies(False)
    assert t.head_copy is None
    diffuse(llada, PROMPT, gen_length=8, steps=2)
    assert t.head_copy is not None                                # the engine asked for it
    t.use_batch_copies(False)
