"""Speculative decoding (llmnb.ar.speculative): greedy output identical to plain decoding for
any drafters and K, sampled output distributed as the target's, the batched verifier equal to
separate forwards, KV rollback, drafters and bad input."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llmnb
from llmnb.ar import Sampler, generate
from llmnb.ar.drafters import Draft, Drafter, check_same_vocabulary, make_drafter
from llmnb.ar.kv_cache import KVCache
from llmnb.ar.speculative import generate_speculative
from llmnb.ar.speculative_accept import accept_greedy, accept_sampled
from llmnb.ar.speculative_verify import rollback, token_tree, verify
from llmnb.errors import UsageError
from llmnb.gguf.reader import MetadataField, open_gguf
from llmnb.gguf.writer import write_gguf
from llmnb.model import Model, ModelError
from llmnb.quant.gguf_file import convert_tensor, quantize_file
from real_models import hub_model
from real_models import hub_model

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "data" / "models" / "tiny-ar.gguf"
HELDOUT = [json.loads(line) for line in (ROOT / "data" / "eval" / "tiny_heldout.jsonl").open()]
PROMPTS = [r["prompt"] for r in HELDOUT[::9]]          # every task family


@pytest.fixture(scope="module")
def tiny() -> Model:
    return llmnb.load(TINY)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Q8_0 and Q4_0 copies of tiny-ar written by `llmnb quantize`'s function."""
    d = tmp_path_factory.mktemp("drafters")
    out = {}
    for kind in ("Q8_0", "Q4_0"):
        out[kind] = d / f"tiny-ar.{kind}.gguf"
        quantize_file(TINY, out[kind], kind)
    return out


# --- the batched verifier and rollback -----------------------------------------------------------

def test_token_tree_shares_rows_between_drafts_with_a_common_prefix() -> None:
    tree = token_tree([[10, 11, 12], [10, 11, 13], [20], []])
    assert tree.tokens[1:] == [10, 11, 12, 13, 20]
    assert tree.rows == [[1, 2, 3], [1, 2, 4], [5], []]
    pos, mask = tree.layout(3)
    assert pos.tolist() == [3, 4, 5, 6, 6, 4]
    want = np.zeros((6, 9), dtype=bool)
    want[:, :4] = True                                  # prefix 0..2 and the root (slot 3)
    for row, ancestors in {1: [1], 2: [1, 2], 3: [1, 2, 3], 4: [1, 2, 4], 5: [5]}.items():
        want[row, [3 + a for a in ancestors]] = True    # its own path, nothing of the others
    assert (mask == want).all()
    assert tree.shared([10, 11, 99]) == 2
    assert tree.path(1, 3) == [1, 2, 4] and tree.path(-1, 0) == []


@pytest.mark.parametrize("copies, tiles", [(False, False), (True, False), (True, True)])
def test_batched_verify_rows_equal_separate_forwards(tiny: Model, copies: bool,
                                                     tiles: bool) -> None:
    ids = tiny.prompt_ids("Compute the sum of 22 and 13.", chat=True)
    branches = [[50, 51, 52], [60], [50, 51, 70, 71]]   # the third shares two rows with the first
    cache = KVCache(tiny.config, 64)
    tiny.transformer.forward(np.array(ids[:-1]), cache=cache)
    cache.commit()
    # 7 rows: W @ X.T on the (out, in) copy, or the tiled kernel on the copy in tiles
    assert (tiny.transformer.use_batch_copies(copies, tiles=tiles) > 0) == copies
    logits, tree = verify(tiny.transformer, cache, ids[-1], branches)
    tiny.transformer.use_batch_copies(False)
    assert len(logits) == 1 + 3 + 1 + 2
    np.testing.assert_allclose(logits[0], tiny.forward(ids)[-1], rtol=1e-4, atol=1e-4)
    for b, rows in zip(branches, tree.rows):
        full = tiny.forward(ids + b)[len(ids):]         # rows after each branch token
        np.testing.assert_allclose(logits[rows], full, rtol=1e-4, atol=1e-4)


def test_a_quantized_target_gets_its_batch_copy_only_when_asked_and_verifies_the_same(
        quantized: dict[str, Path]) -> None:
    target = llmnb.load(quantized["Q8_0"], weights="quantized-float")   # the float kernels
    tr = target.transformer
    assert tr.use_batch_copies(True) == 0 and tr.batch_copy_bytes() == 0   # blocks stay blocks
    ids = target.prompt_ids("Compute the sum of 22 and 13.", chat=True)
    branches = [[50, 51, 52, 53, 54], [60, 61, 62, 63]]  # 10 rows: W @ X.T on the copy
    cache = KVCache(target.config, 64)
    tr.forward(np.array(ids[:-1]), cache=cache)
    cache.commit()
    assert tr.use_batch_copies(True, quantized=True) > 0
    logits, tree = verify(tr, cache, ids[-1], branches)
    for b, rows in zip(branches, tree.rows):
        full = target.forward(ids + b)[len(ids):]      # the kernels, row by row
        np.testing.assert_allclose(logits[rows], full, rtol=1e-4, atol=1e-4)
    for prompt in PROMPTS[:4]:
        ref = generate(target, prompt, max_new_tokens=40, chat=True)
        for copies in (None, True):
            r = generate_speculative(target, prompt, ["lookup", "ngram:2"], max_new_tokens=40,
                                     chat=True, gate=False, batch_copies=copies)
            assert r.tokens == ref.tokens
            assert bool(tr.copies_held) == bool(copies)


@pytest.mark.parametrize("branch, keep", [(0, 2), (1, 2), (2, 3), (2, 0)])
def test_rollback_leaves_the_cache_of_the_committed_sequence(tiny: Model, branch: int,
                                                             keep: int) -> None:
    ids = tiny.prompt_ids("Please translate to French: I love programming", chat=True)
    branches = [[40, 41], [30, 31, 32], [40, 45, 46]]   # the third runs on from the first's row
    cache = KVCache(tiny.config, 64)
    tiny.transformer.forward(np.array(ids[:-1]), cache=cache)
    cache.commit()
    length = cache.length
    _, tree = verify(tiny.transformer, cache, ids[-1], branches)
    rollback(cache, length, tree.path(branch, keep))
    ref = KVCache(tiny.config, 64)
    tiny.transformer.forward(np.array(ids + branches[branch][:keep]), cache=ref)
    ref.commit()
    assert cache.length == ref.length == len(ids) + keep
    n = ref.length
    np.testing.assert_allclose(cache.k[:, :, :n], ref.k[:, :, :n], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(cache.v[:, :, :n], ref.v[:, :, :n], rtol=1e-4, atol=1e-5)


def test_greedy_acceptance_commits_the_longest_prefix_plus_the_targets_token() -> None:
    # rows: root, branch 0 (3 rows), branch 1 (2 rows); top[row] = the target's argmax after it
    top = [7, 8, 9, 1, 8, 5]
    assert accept_greedy(top, [[7, 8, 2], [7, 8]], [[1, 2, 3], [4, 5]]) == ([2, 2], 0, [7, 8, 9])
    assert accept_greedy(top, [[7, 3, 2], [7, 8]], [[1, 2, 3], [4, 5]]) == ([1, 2], 1, [7, 8, 5])
    assert accept_greedy(top, [[1], [2]], [[1], [2]]) == ([0, 0], -1, [7])
    # a tree: branch 1 shares branch 0's first row; the target's choice after it is top[1]
    assert accept_greedy(top, [[7, 3], [7, 8, 1]], [[1, 2], [1, 3, 4]]) == ([1, 3], 1, [7, 8, 1, 8])


# --- greedy: bit-identical to plain decoding ----------------------------------------------------

POOL = ["lookup", "ngram", "ngram:2", "self:1", "self:2", "self:3", "self:4", "Q8_0", "Q4_0"]


@pytest.fixture(scope="module")
def pool(tiny: Model, quantized: dict[str, Path]) -> dict[str, Drafter]:
    """One drafter of each kind, loaded once (a drafter restarts with every generation)."""
    return {x: make_drafter(str(quantized.get(x, x)), tiny) for x in POOL}


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=st.sampled_from(PROMPTS),
       names=st.lists(st.sampled_from(POOL), min_size=1, max_size=3, unique=True),
       k=st.integers(1, 12), extra=st.integers(0, 8), adaptive=st.booleans(),
       n=st.integers(1, 48))
def test_greedy_output_identical_to_plain_greedy(tiny: Model, pool: dict[str, Drafter], prompt: str,
                                                 names: list[str], k: int, extra: int,
                                                 adaptive: bool, n: int) -> None:
    ref = generate(tiny, prompt, max_new_tokens=n, chat=True)
    r = generate_speculative(tiny, prompt, [pool[x] for x in names], max_new_tokens=n, chat=True,
                             k=k, k_max=k + extra, adaptive=adaptive, gate=False)
    assert (r.tokens, r.text, r.stop_reason) == (ref.tokens, ref.text, ref.stop_reason)
    assert sum(x.committed for x in r.rounds) >= len(r.tokens) - 1   # the first: the prompt's pass


def test_greedy_identical_with_the_cost_gate_and_stop_strings(tiny: Model) -> None:
    for prompt in PROMPTS[:8]:
        for stop in ((), ("return",), ("e",)):
            ref = generate(tiny, prompt, max_new_tokens=40, chat=True, stop=stop)
            pieces: list[str] = []
            r = generate_speculative(tiny, prompt, ["lookup", "ngram:2", "self:2"],
                                     max_new_tokens=40, chat=True, stop=stop,
                                     on_text=pieces.append)
            assert (r.tokens, r.text, r.stop_reason) == (ref.tokens, ref.text, ref.stop_reason)
            assert "".join(pieces) == r.text


def test_greedy_identical_up_to_a_full_context(tiny: Model) -> None:
    words = " ".join(["the cat sat on the mat"] * 60)     # tiny-ar continues it to the end
    ids = tiny.tokenizer.encode(words)[:tiny.config.n_ctx - 12]
    ref = generate(tiny, ids, max_new_tokens=40)
    r = generate_speculative(tiny, ids, ["lookup"], max_new_tokens=40, k=8, gate=False)
    assert ref.stop_reason == "context_full"
    assert (r.tokens, r.stop_reason) == (ref.tokens, ref.stop_reason)


class Oracle(Drafter):
    """A user-written drafter (an interpreted subclass) that knows the answer but one token."""

    name = "oracle"
    free = True

    def __init__(self, answer: list[int], prompt_len: int) -> None:
        self.answer, self.prompt_len = answer, prompt_len

    def propose(self, context, k, sampler, rng):  # type: ignore[no-untyped-def]
        done = len(context) - self.prompt_len
        out = self.answer[done:done + k]
        if len(out) > 3:
            out[3] = 0                                       # one wrong token per draft
        return Draft(out)


def test_a_user_drafter_subclass_is_verified_like_the_built_in_ones(tiny: Model) -> None:
    ref = generate(tiny, PROMPTS[5], max_new_tokens=40, chat=True)
    r = generate_speculative(tiny, PROMPTS[5], [Oracle(ref.tokens, len(ref.prompt_ids))],
                             max_new_tokens=40, chat=True, k=8, adaptive=False, gate=False)
    assert r.tokens == ref.tokens
    # accepted up to the error
    assert all(x.accepted[0] == min(3, x.proposed[0]) for x in r.rounds)


def test_round_metrics_account_for_every_token(tiny: Model) -> None:
    r = generate_speculative(tiny, PROMPTS[5], ["self:3", "lookup"], max_new_tokens=40, chat=True,
                             k=4, gate=False)
    assert r.target_forwards == len(r.rounds) and r.tokens_per_forward > 1.5
    made = sum(x.committed for x in r.rounds)           # the first token: the prompt's pass
    assert made == len(r.tokens) - 1 if r.stop_reason == "max_tokens" else made >= len(r.tokens) - 1
    for x in r.rounds:
        assert (x.rows > 1) == (sum(x.proposed) > 0)
        assert x.rows <= 1 + sum(x.proposed)                 # shared rows
        assert all(a <= p for a, p in zip(x.accepted, x.proposed))
        assert x.committed == (max(x.accepted) if x.chosen >= 0 else 0) + 1
    acc = r.acceptance()
    assert set(acc) == {"self:3", "lookup"} and 0.3 < acc["self:3"] <= 1.0


# --- sampling: the target's distribution --------------------------------------------------------

def chi2_limit(df: int, z: float = 3.09) -> float:
    """The chi-square quantile at 1 - 0.001 (Wilson-Hilferty)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi2(counts: dict[tuple[int, ...], int],
         expected: dict[tuple[int, ...], float]) -> tuple[float, int]:
    """Pearson's statistic over the outcomes (those expected < 5 pooled) and its df."""
    n = sum(counts.values())
    assert set(counts) <= set(expected)
    stat, pooled_o, pooled_e, bins = 0.0, 0, 0.0, 0
    for key, p in expected.items():
        e, o = n * p, counts.get(key, 0)
        if e < 5:
            pooled_o, pooled_e = pooled_o + o, pooled_e + e
        else:
            stat, bins = stat + (o - e) ** 2 / e, bins + 1
    if pooled_e > 0:
        stat, bins = stat + (pooled_o - pooled_e) ** 2 / pooled_e, bins + 1
    return stat, bins - 1


def toy_problem() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A 6-token target p1, p2(.|x1), and a draft q1, q2(.|x1) with zeros where p has mass."""
    p1 = np.array([0.30, 0.05, 0.25, 0.15, 0.10, 0.15])
    p2 = np.array([np.roll([0.4, 0.2, 0.1, 0.1, 0.1, 0.1], x) for x in range(6)])
    q1 = np.array([0.10, 0.40, 0.0, 0.30, 0.20, 0.0])
    q2 = np.array([np.roll([0.0, 0.5, 0.3, 0.2, 0.0, 0.0], x) for x in range(6)])
    return p1, p2, q1, q2


def test_rejection_sampling_over_two_drafters_gives_the_target_distribution() -> None:
    p1, p2, q1, q2 = toy_problem()
    sampler = Sampler(temperature=1.0)
    rng = np.random.default_rng(1234)
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(30000):
        a1 = int(rng.choice(6, p=q1))
        a2 = int(rng.choice(6, p=q2[a1]))
        sampled = Draft([a1, a2], np.stack([q1, q2[a1]]))
        fixed = Draft([2, 3])                                   # a lookup's deterministic draft
        rows = [p1, p2[a1], p2[a2], p2[2], p2[3]]               # root, branch 0, branch 1
        with np.errstate(divide="ignore"):
            logits = np.log(np.array(rows)).astype(np.float32)
        _, _, out = accept_sampled(logits, [sampled, fixed], [[1, 2], [3, 4]], sampler, rng)
        if len(out) == 1:                                       # the next round's token
            out.append(int(rng.choice(6, p=p2[out[0]])))
        key = (out[0], out[1])
        counts[key] = counts.get(key, 0) + 1
    expected = {(x, y): float(p1[x] * p2[x, y]) for x in range(6) for y in range(6)}
    stat, df = chi2(counts, expected)
    assert stat < chi2_limit(df), (stat, df)


def test_the_chi_square_check_catches_a_residual_left_out() -> None:
    """Negative control: rejected drafts resampled from p instead of max(0, p - q) are biased."""
    p1, _, q1, _ = toy_problem()
    rng = np.random.default_rng(1234)
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(30000):
        x = int(rng.choice(6, p=q1))
        if rng.random() * q1[x] >= p1[x]:
            x = int(rng.choice(6, p=p1))                        # the bug: no residual
        counts[(x,)] = counts.get((x,), 0) + 1
    stat, df = chi2(counts, {(x,): float(p1[x]) for x in range(6)})
    assert stat > chi2_limit(df)


def test_sampled_speculative_output_follows_the_target_on_tiny_ar(tiny: Model) -> None:
    ids = tiny.prompt_ids("The capital of")
    base = Sampler(temperature=2.0, top_k=3)
    p1 = base.probs(tiny.forward(ids)[-1])
    expected: dict[tuple[int, ...], float] = {}
    for x in np.flatnonzero(p1):
        p2 = base.probs(tiny.forward(ids + [int(x)])[-1])
        for y in np.flatnonzero(p2):
            expected[(int(x), int(y))] = float(p1[x] * p2[y])
    counts: dict[tuple[int, ...], int] = {}
    for seed in range(1000):
        r = generate_speculative(tiny, ids, ["self:1", "lookup"], max_new_tokens=2, k=2, gate=False,
                                 sampler=Sampler(temperature=2.0, top_k=3, seed=seed))
        key = (r.tokens[0], r.tokens[1])
        counts[key] = counts.get(key, 0) + 1
    stat, df = chi2(counts, expected)
    assert stat < chi2_limit(df), (stat, df, counts)


# --- bad input ----------------------------------------------------------------------------------

def test_k_out_of_range_is_a_usage_error(tiny: Model) -> None:
    for kw in ({"k": 0}, {"k": 65}, {"k": 8, "k_max": 4}, {"k": 1.5}):
        with pytest.raises(UsageError, match="k"):
            generate_speculative(tiny, "hi", ["lookup"], max_new_tokens=4, **kw)  # type: ignore[arg-type]
    for spec in ("self:0", "self:5", "self:x"):
        with pytest.raises(UsageError, match="self"):
            make_drafter(spec, tiny)


def _with_tokens_swapped(src: Path, dst: Path, token_id: int) -> None:
    """A copy of `src` whose ids `token_id` and `token_id + 1` mean each other's text."""
    f = open_gguf(src)
    fields = []
    for fld in f.fields.values():
        if fld.key == "tokenizer.ggml.tokens":
            tokens = list(fld.value)
            tokens[token_id], tokens[token_id + 1] = tokens[token_id + 1], tokens[token_id]
            fld = MetadataField(fld.key, fld.value_type, tokens, fld.item_type)
        fields.append(fld)
    write_gguf(dst, f.architecture, fields,
               [convert_tensor(f, info, info.ggml_type) for info in f.tensors.values()])


def test_drafter_with_another_vocabulary_is_refused(tiny: Model, tmp_path: Path) -> None:
    other = tmp_path / "renamed.gguf"
    _with_tokens_swapped(TINY, other, 300)
    with pytest.raises(ModelError, match="token 300"):
        make_drafter(str(other), tiny)
    with pytest.raises(ModelError, match="causal"):
        make_drafter(str(ROOT / "data" / "models" / "tiny-llada.gguf"), tiny)
    with pytest.raises(ModelError, match="autoregressive"):
        generate_speculative(llmnb.load(ROOT / "data" / "models" / "tiny-llada.gguf"), "hi",
                             ["lookup"])


def test_cli_spec_matches_plain_and_refuses_bad_flags(tmp_path: Path, quantized: dict[str, Path],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from llmnb.cli import main

    args = ["generate", str(TINY), "-p", PROMPTS[6], "--chat", "-n", "40", "--json"]
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(args + ["--spec", "lookup", "--spec", str(quantized["Q8_0"]), "--spec-k", "3"]) == 0
    spec = json.loads(capsys.readouterr().out)
    assert spec["ids"] == plain["ids"] and spec["spec"]["rounds"] >= 1
    assert main(args + ["--spec", "self:9"]) == 2
    assert main(args + ["--spec-k", "3"]) == 2
    assert "expected --spec" in capsys.readouterr().err


# --- a real model -------------------------------------------------------------------------------

def test_smollm2_copy_task_greedy_identical_and_drafter_vocabulary_checked() -> None:
    smol = llmnb.load(hub_model("smollm2-135m"))
    prompt = ("Repeat the following text exactly:\n\nThe quick brown fox jumps over the lazy dog. "
              "A journey of a thousand miles begins with a single step.")
    ref = generate(smol, prompt, max_new_tokens=24, chat=True)
    r = generate_speculative(smol, prompt, ["lookup", "self:20"], max_new_tokens=24, chat=True,
                             k=6, gate=False)
    assert r.tokens == ref.tokens
    assert r.tokens_per_forward > 2.0                  # copying: lookup drafts get accepted
    with pytest.raises(ModelError, match="vocabulary"):
        check_same_vocabulary(smol, llmnb.load(TINY))


def test_a_verify_row_is_the_same_bits_as_that_token_decoded_alone_on_the_default_weights() -> None:
    """8-bit activations turn a last-bit difference into logit changes of tenths, so a verify
    batch must give each row exactly what decoding it alone gives (llmnb.kernels.attention)."""
    m = llmnb.load(hub_model("smollm2-135m"))
    t = m.transformer
    ids = m.prompt_ids("Explain how a refrigerator works.", chat=True)
    new = generate(m, ids, max_new_tokens=7).tokens
    seq = [ids[-1]] + new[:6]
    cache = KVCache(m.config, len(ids) + 16)
    t.forward(np.array(ids[:-1]), cache=cache, last_only=True)
    cache.commit()
    alone = []
    for j, tok in enumerate(seq):
        alone.append(t.forward(np.array([tok]), start=len(ids) - 1 + j, cache=cache,
                               last_only=True)[0])
        cache.commit()
    cache.truncate(len(ids) - 1)
    logits, tree = verify(t, cache, ids[-1], [new[:6], [new[0], 7, 8]])   # two branches
    np.testing.assert_array_equal(logits[0], alone[0])
    for j, row in enumerate(tree.rows[0]):
        np.testing.assert_array_equal(logits[row], alone[j + 1])


class UpdateOnly(KVCache):
    """A KV cache whose every pass goes through ``update`` (no compiled in-place step)."""

    def in_place(self, layer: int, t: int) -> None:  # type: ignore[override]
        return None


@pytest.mark.parametrize("name", ["smollm2-135m", "qwen2.5-coder-0.5b"])
def test_the_in_place_attention_step_gives_the_bits_of_rotating_caching_and_attending_apart(
        name: str) -> None:
    """``kernels.attention.cached_attention`` (RoPE, the cache write and the attention in one
    call) against the same pass through ``KVCache.update`` and ``exact_attention``: a prompt,
    a decode step and a tree-masked verify batch, logits and cached keys equal bit for bit."""
    m = llmnb.load(hub_model(name))
    t = m.transformer
    ids = m.prompt_ids("Explain how a refrigerator works.", chat=True)
    mask = np.ones((4, len(ids) + 5), dtype=bool)
    mask[2, -3] = mask[3, -2] = False                  # rows 2 and 3 on another branch
    got = []
    for cache in (KVCache(m.config, len(ids) + 8), UpdateOnly(m.config, len(ids) + 8)):
        first = t.forward(np.array(ids), cache=cache)
        cache.commit()
        step = t.forward(np.array([11]), start=cache.length, cache=cache)
        cache.commit()
        tree = t.forward(np.array([12, 13, 14, 15]), start=cache.length, cache=cache,
                         key_mask=mask)
        got.append((first, step, tree, cache.k.copy(), cache.v.copy()))
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)
