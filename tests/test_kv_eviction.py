"""Selective KV cache (llmnb.ar.kv_eviction): full attention when nothing is evicted, flat
memory past the budget, the right three groups on a hand-made attention pattern, eviction
equal to attending over the kept rows only, and clear errors."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import llmnb
from llmnb.ar import GenerationError, Generator, Greedy, generate
from llmnb.ar.kv_cache import KVCache
from llmnb.ar.kv_eviction import POLICIES, EvictingKVCache, check_budget, keep_mask
from llmnb.ar.perplexity import perplexity
from llmnb.cli import main
from llmnb.errors import UsageError
from llmnb.model import Model
from real_models import hub_model

ROOT = Path(__file__).parent.parent
TEXT = (ROOT / "data" / "text" / "persuasion.txt").read_text(encoding="utf-8")
PROMPT = "Which city is the capital city of France?"


@pytest.fixture(scope="module")
def tiny() -> Model:
    return llmnb.load(ROOT / "data" / "models" / "tiny-ar.gguf")


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("scope", ["layer", "global"])
def test_budget_at_least_the_sequence_gives_the_full_attention_tokens(tiny: Model, policy: str,
                                                                      scope: str) -> None:
    full = generate(tiny, PROMPT, max_new_tokens=40, chat=True)
    n = len(full.prompt_ids) + 40
    for budget in (n, n + 100):
        r = generate(tiny, PROMPT, max_new_tokens=40, chat=True, kv_budget=budget, kv_policy=policy,
                     kv_scope=scope)
        assert r.tokens == full.tokens and r.text == full.text


def test_budget_at_least_the_sequence_on_smollm2() -> None:
    m = llmnb.load(hub_model("smollm2-135m"))
    prompt = "The three primary colours are"
    with llmnb.threads(1):
        full = generate(m, prompt, max_new_tokens=24)
        r = generate(m, prompt, max_new_tokens=24, kv_budget=len(full.prompt_ids) + 24, kv_recent=4)
    assert r.tokens == full.tokens


def test_streaming_perplexity_with_a_budget_of_ctx_equals_the_plain_one(tiny: Model) -> None:
    text = TEXT[:3000]
    plain = perplexity(tiny, text, ctx=64, max_chunks=2)
    streamed = perplexity(tiny, text, ctx=64, max_chunks=2, kv_budget=64)
    assert streamed.n_scored == plain.n_scored and streamed.kv_budget == 64
    assert streamed.ppl == pytest.approx(plain.ppl, rel=1e-5)
    evicting = perplexity(tiny, text, ctx=64, max_chunks=2, kv_budget=16)
    assert evicting.ppl != pytest.approx(plain.ppl, rel=1e-5)        # eviction changes something


def test_kv_bytes_stay_flat_past_the_budget(tiny: Model) -> None:
    budget, chunk, n_ctx = 24, 8, tiny.config.n_ctx
    cache = EvictingKVCache(tiny.config, capacity=n_ctx, budget=budget, chunk=chunk)
    g = Generator(tiny, Greedy(), capacity=n_ctx, cache=cache)
    prompt = tiny.prompt_ids("Count: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20")
    g.prefill(prompt)
    steps = n_ctx - len(prompt)                 # up to the model's whole context (256)
    assert steps > 150
    held_bytes = cache.nbytes
    assert held_bytes == KVCache.bytes_for(tiny.config, budget + chunk)
    for _ in range(steps):
        g.feed(g.next_token())
        assert cache.nbytes == held_bytes and cache.held <= budget
    assert cache.held == budget and cache.length == n_ctx and cache.evicted == n_ctx - budget
    assert held_bytes * 6 < KVCache.bytes_for(tiny.config, cache.length)   # a full cache's bytes
    for layer in range(tiny.config.n_layer):                               # distinct true positions
        kept = cache.kept_positions(layer)
        assert len(set(kept.tolist())) == budget and kept.max() == cache.length - 1


def fill(cache: EvictingKVCache, n_kv: int, hd: int,
         rows: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """One pass of T tokens into every layer with hand-made attention rows (T, T) per layer;
    returns the keys written, (n_kv, T, hd) per layer."""
    t = next(iter(rows.values())).shape[0]
    rng = np.random.default_rng(0)
    written = {}
    for layer, r in rows.items():
        k = rng.standard_normal((n_kv, t, hd)).astype(np.float32)
        cache.update(layer, k, k.copy())
        probs = np.broadcast_to(r / (2 * n_kv), (n_kv, 2, t, t)).astype(np.float32)
        cache.observe_attention(layer, probs)
        written[layer] = k
    cache.commit()
    return written


def hand_rows(t: int, hot: list[int], old_hot: list[int], scale: float = 1.0) -> np.ndarray:
    """Rows (T, T): the last two queries look at `hot` (weights 1, 2, ... times `scale`),
    the earlier ones at `old_hot`."""
    r = np.full((t, t), 0.01, dtype=np.float32)
    for q in range(t - 2):
        r[q, old_hot] = 5.0
    for q in range(t - 2, t):
        r[q, hot] = scale * (1.0 + np.arange(len(hot), dtype=np.float32))
    return r


def test_group_membership_on_a_hand_made_attention_pattern(tiny: Model) -> None:
    c = tiny.config
    t = 12                    # positions 0..11; budget 6 = 1 sink + 2 recent + 3 by score
    rows = {0: hand_rows(t, hot=[3, 5, 7, 8], old_hot=[1, 2]),
            1: hand_rows(t, hot=[2, 4, 6, 9], old_hot=[1, 2])}
    rows.update({layer: hand_rows(t, hot=[5, 6, 7], old_hot=[1], scale=10.0)
                 for layer in range(2, c.n_layer)})

    def run(policy: str, scope: str = "layer") -> EvictingKVCache:
        cache = EvictingKVCache(c, 64, budget=6, recent=2, sinks=1, policy=policy, scope=scope,
                                window=2, chunk=t)
        written = fill(cache, c.n_head_kv, c.head_dim, rows)
        assert cache.held == 6 and cache.length == t and cache.evicted == t - 6
        for layer, k in written.items():      # each kept slot holds the key written at its position
            np.testing.assert_array_equal(cache.k[layer, :, :6], k[:, cache.pos[layer, :6]])
        return cache

    ik = run("initial_key")              # Score Sum over the last 2 rows: 3 largest of `hot`
    assert [g.tolist() for g in ik.groups(0)] == [[0], [10, 11], [5, 7, 8]]
    assert [g.tolist() for g in ik.groups(1)] == [[0], [10, 11], [4, 6, 9]]
    glob = run("initial_key", "global")  # summed over layers: 5, 6, 7 are hot in layers 2+
    assert all([g.tolist() for g in glob.groups(layer)] == [[0], [10, 11], [5, 6, 7]]
               for layer in range(c.n_layer))
    h2o = run("h2o")                     # accumulated: the old favourites 1, 2 win
    assert h2o.groups(0)[2].tolist()[:2] == [1, 2]
    st = run("streaming")                # sinks + everything else recent
    assert [g.tolist() for g in st.groups(0)] == [[0], [7, 8, 9, 10, 11], []]


def test_keep_mask_protects_sinks_and_recent_and_breaks_ties_to_the_later_position() -> None:
    pos = np.arange(10, dtype=np.int64)[None, :]
    scores = np.array([[0, 9, 0, 1, 1, 0, 0, 0, 0, 0]], dtype=np.float32)
    keep = keep_mask(scores, pos, seen=10, budget=5, sinks=1, recent=2)
    assert np.flatnonzero(keep[0]).tolist() == [0, 1, 4, 8, 9]


def test_decode_after_eviction_equals_attending_over_the_kept_rows_only(tiny: Model) -> None:
    """Oracle: a plain KVCache holding, per layer, only the rows the evicting cache kept."""
    c = tiny.config
    ids = np.array(tiny.prompt_ids(PROMPT, chat=True), dtype=np.int64)
    n = len(ids)
    tr = tiny.transformer
    for policy in POLICIES:
        ev = EvictingKVCache(c, 64, budget=12, recent=3, sinks=2, policy=policy, chunk=n)
        tr.forward(ids, cache=ev)                   # one pass, evicts down to 12 on commit
        ev.commit()
        full = KVCache(c, 64)
        tr.forward(ids, cache=full)
        full.commit()
        oracle = KVCache(c, 64)
        for layer in range(c.n_layer):
            kept = ev.kept_positions(layer)
            assert len(kept) == 12 and set(range(2)) <= set(kept)
            assert set(range(n - 3, n)) <= set(kept)
            slots = ev.pos[layer, :12]                       # the kept positions in slot order
            oracle.k[layer, :, :12] = full.k[layer][:, slots]
            oracle.v[layer, :, :12] = full.v[layer][:, slots]
        oracle.length = 12
        nxt = np.array([5, 17, 9], dtype=np.int64)
        got = tr.forward(nxt[:1], start=n, cache=ev)
        want = tr.forward(nxt[:1], start=n, cache=oracle)      # RoPE at n, 12 keys held
        np.testing.assert_array_equal(got, want)
        # several new tokens at once over the compacted cache: causal among themselves only
        many = tr.forward(nxt, start=n, cache=oracle)
        oracle.truncate(12)
        one_by_one = []
        for i in range(3):
            one_by_one.append(tr.forward(nxt[i:i + 1], start=n + i, cache=oracle))
            oracle.commit()
        np.testing.assert_allclose(many, np.concatenate(one_by_one), rtol=1e-4, atol=1e-4)


def test_long_prompt_is_prefilled_in_pieces_that_fit(tiny: Model) -> None:
    ids = tiny.tokenizer.encode(TEXT[:600])[:150]
    r = generate(tiny, ids, max_new_tokens=5, kv_budget=32, kv_recent=8)
    assert len(r.tokens) == 5 and r.stats.prompt_tokens == 150


def test_rewinding_or_moving_is_refused_once_positions_were_evicted(tiny: Model) -> None:
    cache = EvictingKVCache(tiny.config, 64, budget=8, chunk=16)
    tiny.transformer.forward(np.arange(6, dtype=np.int64), cache=cache)
    cache.commit()
    cache.truncate(4)                               # nothing evicted yet: a plain rewind
    assert (cache.length, cache.held) == (4, 4)
    tiny.transformer.forward(np.arange(10, dtype=np.int64), start=4, cache=cache)
    cache.commit()
    assert cache.evicted == 6
    with pytest.raises(GenerationError, match="evicted"):
        cache.truncate(10)
    with pytest.raises(GenerationError, match="cannot move"):
        cache.move(0, 1, 1)


@pytest.mark.parametrize("kwargs,needle", [
    ({"budget": 8, "recent": 6}, "smaller than kv sinks 4 \\+ kv recent 6"),
    ({"budget": 0}, "at least 1 position"),
    ({"budget": 8, "recent": -1}, "kv recent: expected 0 or more"),
    ({"budget": 8, "sinks": -2}, "kv sinks: expected 0 or more"),
    ({"budget": 8, "policy": "lru"}, "expected one of initial_key, streaming, h2o"),
    ({"budget": 8, "scope": "head"}, "expected one of layer, global"),
])
def test_bad_budgets_are_usage_errors(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        check_budget(**kwargs)  # type: ignore[arg-type]


def test_numpy_ints_are_accepted_and_defaults_resolve() -> None:
    assert check_budget(np.int64(64)) == (64, 30, 4)
    assert check_budget(64, policy="streaming") == (64, 60, 4)
    assert check_budget(64, np.int32(10), np.int16(0)) == (64, 10, 0)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv,needle", [
    (["--kv-budget", "8", "--kv-recent", "8"],
     "kv budget 8 is smaller than kv sinks 4 + kv recent 8"),
    (["--kv-budget", "-3"], "expected a positive number"),
    (["--kv-budget", "16", "--kv-sinks", "-1"], "expected 0 or more"),
    (["--kv-recent", "4"], "--kv-recent: expected --kv-budget N as well"),
    (["--kv-budget", "16", "--kv-policy", "lru"], "invalid choice"),
])
def test_cli_bad_budget_is_a_usage_error(capsys: pytest.CaptureFixture[str], argv: list[str],
                                         needle: str) -> None:
    model = str(ROOT / "data" / "models" / "tiny-ar.gguf")
    code, out, err = run_cli(capsys, "generate", model, "-p", "x", *argv)
    assert code == 2 and needle in err and out == ""


def test_cli_generate_and_perplexity_with_a_budget(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    model = str(ROOT / "data" / "models" / "tiny-ar.gguf")
    code, out, err = run_cli(capsys, "generate", model, "-p", PROMPT, "--chat", "-n", "12",
                             "--kv-budget", "16", "--kv-recent", "4", "--kv-policy", "h2o")
    assert code == 0 and out.strip() and "kv budget 16 (h2o, layer)" in err
    text = tmp_path / "t.txt"
    text.write_text(TEXT[:2000], encoding="utf-8")
    code, out, err = run_cli(capsys, "perplexity", model, str(text), "--ctx", "32", "--chunks", "1",
                             "--kv-budget", "8")
    assert code == 0 and float(out) > 1.0 and "kv budget 8" in err
    code, _, err = run_cli(capsys, "perplexity", model, str(tmp_path / "none.txt"),
                           "--kv-budget", "8")
    assert code == 3
