"""The explorers of llmnb.widgets (attention, next token, diffusion canvas): their plain functions
against hand computations and the package's own samplers, and their widgets built and redrawn
without a browser (tests/browser renders them in one)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import llmnb
from llmnb.ar import Sampler
from llmnb.diffusion import entropy, mask_id_of
from llmnb.model.blocks import apply_rope, rms_norm, rope_tables

pytest.importorskip("matplotlib")
ROOT = Path(__file__).resolve().parents[1]
ORACLE = ROOT / "tests" / "fixtures" / "oracle"
PROMPT = [3, 17, 120, 42, 99, 7, 64, 127, 1, 88, 100, 31]         # the oracle fixture's prompt


def tiny(name: str) -> llmnb.Model:
    return llmnb.load(ROOT / "data" / "models" / f"{name}.gguf")


# --- attention -------------------------------------------------------------------------

def layer0_attention_by_hand(m: llmnb.Model, ids: list[int], causal: bool) -> np.ndarray:
    """softmax(q k^T / sqrt(hd)) of layer 0, every query head, in float64."""
    c, w = m.config, m.transformer.weights
    t, nq, nkv = len(ids), c.n_head * c.head_dim, c.n_head_kv * c.head_dim
    x = rms_norm(w.embed(np.array(ids)), w.layer(0).attn_norm, c.rms_eps)      # (T, d)
    qkv = x @ w.layer(0).wqkv_t                                                 # (T, nq + 2 nkv)
    cos, sin = rope_tables(np.arange(t), m.transformer.inv_freq)
    q = apply_rope(qkv[:, :nq].reshape(t, c.n_head, c.head_dim).transpose(1, 0, 2), cos, sin)
    k = apply_rope(qkv[:, nq:nq + nkv].reshape(t, c.n_head_kv, c.head_dim).transpose(1, 0, 2),
                   cos, sin)
    k = np.repeat(k, c.n_head // c.n_head_kv, axis=0).astype(np.float64)      # (nh, T, hd)
    s = q.astype(np.float64) @ k.transpose(0, 2, 1) / np.sqrt(c.head_dim)     # (nh, T, T)
    if causal:
        s = np.where(np.tril(np.ones((t, t), dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    out: np.ndarray = p / p.sum(-1, keepdims=True)
    return out


@pytest.mark.parametrize("causal", [True, False])
def test_attention_maps_equal_the_softmax_computed_by_hand(causal: bool) -> None:
    from llmnb.widgets import attention_maps

    m = llmnb.load(ORACLE / "llama_f32.gguf")
    maps = attention_maps(m, PROMPT, causal=causal)
    c = m.config
    assert maps.shape == (c.n_layer, c.n_head, len(PROMPT), len(PROMPT))
    np.testing.assert_allclose(maps[0], layer0_attention_by_hand(m, PROMPT, causal), atol=1e-5)
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-5)
    future = maps[:, :, np.triu_indices(len(PROMPT), 1)[0], np.triu_indices(len(PROMPT), 1)[1]]
    assert (future == 0).all() if causal else (future > 0).all()


def test_head_summary_and_the_plot_report_first_previous_and_own_shares() -> None:
    from llmnb.widgets import plot_attention
    from llmnb.widgets.attention import head_summary

    t = 5
    prev = np.zeros((1, 2, t, t), dtype=np.float32)
    prev[0, 0, 0, 0] = 1.0
    prev[0, 0, np.arange(1, t), np.arange(t - 1)] = 1.0             # head 0: the previous token
    prev[0, 1, :, 0] = 1.0                                          # head 1: the first token
    assert head_summary(prev, 0, 0) == (0.0, 1.0, 0.0)              # queries 2..: three distinct keys
    assert head_summary(prev, 0, 1) == (1.0, 0.0, 0.0)
    assert head_summary(prev[:, :, :1, :1], 0, 0) == (1.0, 1.0, 1.0)   # one token: itself, first
    fig = plot_attention(prev, 0, 0, list("abcde"))
    ax = fig.axes[0]
    assert "previous 100%" in ax.get_title()
    assert [x.get_text() for x in ax.get_xticklabels()] == list("abcde")
    assert np.ma.is_masked(ax.images[0].get_array()[0, 1])         # the future is left blank


def test_attention_explorer_redraws_when_the_layer_or_head_moves() -> None:
    from llmnb.widgets import attention_explorer

    m = tiny("tiny-ar")
    box = attention_explorer(m, "What is the capital of France?")
    assert "llmnb-attention-explorer" in box._dom_classes
    prompt, row, image, status = box.children
    layer, head = row.children
    assert (layer.max, head.max) == (m.config.n_layer - 1, m.config.n_head - 1)
    before = image.value
    layer.value = 2
    after_layer = image.value
    head.value = 1
    assert before != after_layer != image.value
    prompt.value = "Name the planets."
    assert str(len(m.tokenizer.encode("Name the planets.", add_special=True))) in status.value


# --- next token ------------------------------------------------------------------------

def test_filter_stages_name_the_filter_that_removed_each_token() -> None:
    from llmnb.widgets import filter_stages

    p = np.array([0.30, 0.22, 0.14, 0.10, 0.07, 0.05, 0.04, 0.03, 0.03, 0.02])
    logits = np.log(p).astype(np.float32)
    st = filter_stages(logits, temperature=0.6, top_k=6, top_p=0.9, min_p=0.25)
    # top-k 6 keeps 0..5; renormalised, 0..4 reach 0.9 (0.30+0.22+0.14+0.10+0.07 = 0.83 of 0.88);
    # min-p: 0.07 < 0.25 * 0.30, so token 4 goes
    assert st.order.tolist() == list(range(10))
    assert st.removed_by == ["", "", "", "", "min-p", "top-p"] + ["top-k"] * 4
    assert st.survivors == {"top-k": 6, "top-p": 5, "min-p": 4}
    np.testing.assert_allclose(st.p, p / p.sum())
    sampler = Sampler(temperature=0.6, top_k=6, top_p=0.9, min_p=0.25)
    assert np.array_equal(st.q, sampler.probs(logits))


def test_next_token_explorer_redraws_on_each_slider() -> None:
    from llmnb.widgets import next_token_explorer, plot_next_token
    from llmnb.widgets.sampling import filter_stages, last_logits, token_texts

    m = tiny("tiny-ar")
    st = filter_stages(last_logits(m, "The capital of France is"), top_k=5)
    fig = plot_next_token(st, token_texts(m, st.order[:8]), n_show=8)
    assert len(fig.axes[0].patches) == 16                           # 8 model bars, 8 sampler bars
    box = next_token_explorer(m, "The capital of France is", n_show=8)
    assert "llmnb-next-token-explorer" in box._dom_classes
    (temp, k), (p, mp), image, status = (box.children[1].children, box.children[2].children,
                                         *box.children[3:])
    for slider, value in ((temp, 0.5), (k, 3), (p, 0.5), (mp, 0.2)):
        before = image.value
        slider.value = value
        assert image.value != before, slider.description
    assert status.value.startswith("after 'The capital of France is'")


# --- diffusion canvas ------------------------------------------------------------------

@pytest.fixture(scope="module")
def runs() -> tuple[llmnb.Model, dict[str, llmnb.diffusion.DiffusionResult]]:
    m = tiny("tiny-llada")
    q = "Which city is the capital city of Europe?"
    return m, {f"{n} steps": llmnb.diffuse(m, q, chat=True, gen_length=24, steps=n, cache=False)
               for n in (1, 8)}


def test_commit_steps_agree_with_the_history_and_the_stats(
        runs) -> None:  # type: ignore[no-untyped-def]
    from llmnb.widgets import commit_steps

    m, results = runs
    r = results["8 steps"]
    mask = mask_id_of(m)
    steps = commit_steps(r, mask)
    for i, s in enumerate(steps):
        assert r.history[s - 1][i] != mask and (s == 1 or r.history[s - 2][i] == mask)
    assert np.bincount(steps, minlength=r.steps_taken + 1)[1:].tolist() == r.stats.committed
    assert (commit_steps(results["1 steps"], mask) == 1).all()


def test_step_entropies_are_the_entropies_of_each_step_s_starting_canvas(
        runs) -> None:  # type: ignore[no-untyped-def]
    from llmnb.widgets import commit_steps, step_entropies

    m, results = runs
    r = results["8 steps"]
    h = step_entropies(m, r)
    mask = mask_id_of(m)
    n_prompt, s = len(r.prompt_ids), 3
    canvas = np.array(r.prompt_ids + r.history[s - 1].tolist())   # what step s + 1 started from
    logits = m.forward(canvas)[n_prompt:]                           # (B, V), bidirectional
    masked = r.history[s - 1] == mask
    np.testing.assert_allclose(h[s, masked], entropy(logits[masked]), rtol=1e-4, atol=1e-4)
    assert np.isnan(h[s, ~masked]).all()
    assert np.isfinite(h[0]).all()                              # step 1 sees every position masked
    committed = commit_steps(r, mask)
    assert all(np.isfinite(h[committed[i] - 1, i]) for i in range(len(committed)))


def test_canvas_html_and_plot_show_a_step_and_the_viewer_moves_with_its_slider(
        runs) -> None:  # type: ignore[no-untyped-def]
    from llmnb.widgets import canvas_html, canvas_run, canvas_viewer, plot_canvas

    m, results = runs
    run = canvas_run(m, results["8 steps"], "8 steps")
    for s in range(1, run.steps + 1):
        assert canvas_html(run, s).count("▒") == int((run.committed > s).sum())
    assert canvas_html(run, 99) == canvas_html(run, run.steps)
    fig = plot_canvas(run)
    assert fig.axes[0].images[0].get_array().shape == (run.steps, len(run.texts))
    box = canvas_viewer(m, results)
    assert "llmnb-canvas-viewer" in box._dom_classes
    slider, one, many = box.children[:3]
    assert slider.max == 8 and "▒" not in one.value
    before = many.value
    slider.value = 5
    assert many.value != before and "step 5 of 8" in many.value and "step 1 of 1" in one.value
