"""Perplexity: the llama-perplexity rule by hand, and agreement with llama.cpp on SmolLM2."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import llmnb
from llmnb.ar import GenerationError
from llmnb.ar.perplexity import perplexity, token_nll
from llmnb.errors import UsageError
from oracle import ORACLE
from real_models import hub_model

ROOT = Path(__file__).parent.parent
TEXT = (ROOT / "data" / "text" / "persuasion.txt").read_text(encoding="utf-8")
REF = json.loads((Path(__file__).parent / "fixtures" / "llamacpp" / "perplexity_smollm2.json"
                  ).read_text())


def test_token_nll_is_minus_log_softmax() -> None:
    logits = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    got = token_nll(logits, np.array([2, 1]))
    want = [-math.log(math.exp(3) / (math.exp(1) + math.exp(2) + math.exp(3))), math.log(3)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_half_rule_scores_the_second_half_of_each_window_by_hand() -> None:
    m = llmnb.load(hub_model("smollm2-135m"))
    text = TEXT[:300]
    ids = np.asarray(m.tokenizer.encode(text, add_special=True))
    ctx = 8
    r = perplexity(m, text, ctx=ctx)
    nll = []
    for c in range(len(ids) // ctx):
        w = ids[c * ctx:(c + 1) * ctx]
        logits = m.forward(w)
        nll += list(token_nll(logits[ctx // 2:ctx - 1], w[ctx // 2 + 1:]))
    assert r.n_scored == len(nll) == (len(ids) // ctx) * (ctx - ctx // 2 - 1)
    # the scored rows go through the head as a few-rows product, the by-hand forward as a full
    # matrix product: float32 logits that differ in the last bits, ~1e-6 in the perplexity
    assert r.ppl == pytest.approx(math.exp(np.mean(nll)), rel=1e-5)
    np.testing.assert_allclose(r.token_nlls, nll, rtol=1e-4)    # each scored token, in text order
    assert r.nll == pytest.approx(r.token_nlls.mean(), rel=1e-12)
    full = perplexity(m, text, ctx=ctx, rule="full")
    assert full.n_scored == (len(ids) // ctx) * (ctx - 1)


def test_bad_arguments() -> None:
    m = llmnb.load(ORACLE / "llama_f32.gguf")
    with pytest.raises(UsageError, match="rule"):
        perplexity(m, "x", rule="middle")
    with pytest.raises(UsageError, match="exceeds the model's context"):
        perplexity(m, "x", ctx=10_000)
    with pytest.raises(GenerationError, match="needs at least"):
        perplexity(m, "<tok1><tok2>", ctx=8)


# The first CHUNKS windows of llama-perplexity's run: its running perplexity after them is in the
# fixture, so the comparison needs a quarter of the run's 16 windows.
CHUNKS = 4


# llama.cpp's run on the F32 copy against llmnb's float32 path on the same file's weights (the
# same products to float32 rounding: 32.92308 against 32.9231), its run on the original Q4_1
# file against the default weights' integer products (8-bit activations on both sides, summed in
# different orders: 33.02 to 33.14 against 33.07 as the attention's last bits change)
@pytest.mark.parametrize("model_file,weights,tolerance", [("f32", "f32", 1e-4),
                                                          ("original", "quantized", 0.01)])
def test_smollm2_matches_llama_perplexity(model_file: str, weights: str,
                                          tolerance: float) -> None:
    run = next(r for r in REF["runs"] if r["model_file"] == model_file and r["n_ctx"] == 512)
    m = llmnb.load(hub_model("smollm2-135m"), weights=weights)
    r = perplexity(m, TEXT, ctx=512, max_chunks=CHUNKS)
    assert r.n_scored == run["scored_tokens_per_chunk"] * CHUNKS
    assert r.ppl == pytest.approx(run["running_ppl"][CHUNKS - 1], rel=tolerance)
