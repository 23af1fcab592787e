"""Gemma 3: its config read as llama.cpp reads it, its blocks by hand, and its forward against
a stock ``transformers.Gemma3ForCausalLM`` (tests/fixtures/gemma3, made by
tools/make_gemma3_fixtures.py; atol = rtol = 1e-4)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

import llmnb
from llmnb.gguf.constants import ARRAY, BOOL, UINT32
from llmnb.gguf.reader import MetadataField
from llmnb.model.blocks import (
    apply_rope, attention, gelu_tanh, geglu, head_rms_norm, rms_norm, rope_inv_freq,
    rope_mscale, rope_tables, sliding_window_mask, softcap,
)
from llmnb.model.config import ModelConfig, ModelError, gemma3_config
from llmnb.quant import dequantize
from real_models import hub_model
from test_diffusion_files import rewrite

F32 = npt.NDArray[np.float32]
GEMMA = Path(__file__).parent / "fixtures" / "gemma3"
MANIFEST = json.loads((GEMMA / "manifest.json").read_text())
TINY = GEMMA / "gemma3_f32.gguf"


# --- config ----------------------------------------------------------------------------------

def test_tiny_gemma3_config_has_every_gemma_piece() -> None:
    c = gemma3_config(llmnb.gguf.open(TINY))
    assert (c.arch, c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.rope_dim) == (
        "gemma3", 3, 32, 4, 2, 16, 16)
    assert (c.sliding_window, c.swa_layers, c.rope_base, c.rope_base_swa) == (
        4, (True, True, False), 1e6, 1e4)
    assert (c.qk_norm, c.post_norms, c.ffn_act, c.causal, c.tied_output, c.qk_permuted) == (
        True, True, "gelu", True, True, False)
    assert c.embd_scale == pytest.approx(np.sqrt(32)) and c.attn_scale == pytest.approx(0.25)
    assert (c.logit_softcap, c.rope_scaling, c.rope_factor) == (10.0, "linear", 2.0)
    assert "sliding_window=4" in repr(c) and "qk_norm=True" in repr(c)


def test_gemma3_270m_config_matches_models_md() -> None:
    c = gemma3_config(llmnb.gguf.open(hub_model("gemma3-270m")))
    assert (c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_ff, c.n_ctx) == (
        18, 640, 4, 1, 256, 2048, 32768)
    assert (c.sliding_window, c.rope_base, c.rope_base_swa, c.logit_softcap) == (
        512, 1e6, 1e4, 0.0)
    # no pattern key: llama.cpp's period 6, every sixth layer global
    assert [i for i, slides in enumerate(c.swa_layers) if not slides] == [5, 11, 17]
    assert c.attn_scale == pytest.approx(1 / 16) and c.embd_scale == pytest.approx(np.sqrt(640))
    assert c.rms_eps == pytest.approx(1e-6) and c.tied_output and c.rope_scaling == "none"


@pytest.mark.parametrize("value,want", [
    (MetadataField("gemma3.attention.sliding_window_pattern", UINT32, 2), (True, False, True)),
    (MetadataField("gemma3.attention.sliding_window_pattern", UINT32, 0), (True, True, True)),
    (MetadataField("gemma3.attention.sliding_window_pattern", ARRAY, [False, True, False], BOOL),
     (False, True, False)),
])
def test_sliding_window_pattern_as_period_or_array(tmp_path: Path, value: MetadataField,
                                                    want: tuple[bool, ...]) -> None:
    out = rewrite(TINY, tmp_path / "p.gguf", drop=("gemma3.attention.sliding_window_pattern",),
                  extra=[value])
    assert gemma3_config(llmnb.gguf.open(out)).swa_layers == want


def test_bad_sliding_window_pattern_is_refused(tmp_path: Path) -> None:
    out = rewrite(TINY, tmp_path / "p.gguf", drop=("gemma3.attention.sliding_window_pattern",),
                  extra=[MetadataField("gemma3.attention.sliding_window_pattern", ARRAY,
                                       [True, False], BOOL)])
    with pytest.raises(ModelError, match="sliding_window_pattern: expected 3 entries"):
        gemma3_config(llmnb.gguf.open(out))


# --- blocks by hand ---------------------------------------------------------------------------

def test_gelu_tanh_by_hand() -> None:
    x = np.array([-3.0, -1.0, 0.0, 0.5, 1.0, 4.0], dtype=np.float32)
    want = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(gelu_tanh(x), want, rtol=1e-6, atol=1e-7)   # float32 at -3
    assert gelu_tanh(np.float32([1.0]))[0] == pytest.approx(0.841192, abs=1e-6)
    np.testing.assert_allclose(geglu(x, 2 * x), gelu_tanh(x) * 2 * x, rtol=1e-6)


def test_sliding_window_mask_keeps_the_last_window_keys() -> None:
    m = sliding_window_mask(np.arange(5, 8), np.arange(8), 3)        # queries 5..7, keys 0..7
    assert m.astype(int).tolist() == [[0, 0, 0, 1, 1, 1, 1, 1],      # 5 sees 3.. (then causal)
                                      [0, 0, 0, 0, 1, 1, 1, 1],
                                      [0, 0, 0, 0, 0, 1, 1, 1]]


def test_head_rms_norm_normalises_each_head_vector() -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    w = np.float32([1, 2, 3, 4])
    want = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(head_rms_norm(x, w, 1e-6), want, rtol=1e-5)


def test_softcap_bounds_and_keeps_small_logits() -> None:
    x = np.float32([-1e4, -1.0, 0.0, 0.01, 1e4])
    got = softcap(x, 10.0)
    assert got[0] == pytest.approx(-10.0) and got[-1] == pytest.approx(10.0)
    assert got[3] == pytest.approx(0.01, rel=1e-4) and got[2] == 0.0


# --- the forward against transformers, composed from the blocks -----------------------------

def by_hand_forward(path: Path, ids: list[int], window: int | None = None) -> F32:
    """Gemma 3's forward written out from llmnb's blocks and the file's float32 tensors."""
    f = llmnb.gguf.open(path)
    c: ModelConfig = gemma3_config(f)

    def t(name: str) -> F32:
        info = f.tensors[name]
        return dequantize(f.raw(name), info.ggml_type, info.shape)

    n = len(ids)
    pos = np.arange(n, dtype=np.int64)
    h = t("token_embd.weight")[ids] * np.float32(c.embd_scale)                  # (T, d)
    for i in range(c.n_layer):
        p = f"blk.{i}."
        slides = c.swa_layers[i]
        base = c.rope_base_swa if slides else c.rope_base
        scaling, factor = ("none", 1.0) if slides else (c.rope_scaling, c.rope_factor)
        cos, sin = rope_tables(pos, rope_inv_freq(c.rope_dim, base, None, scaling, factor,
                                                  c.rope_orig_ctx), rope_mscale(scaling, factor))
        x = rms_norm(h, t(p + "attn_norm.weight"), c.rms_eps)
        q = (x @ t(p + "attn_q.weight").T).reshape(n, c.n_head, c.head_dim).transpose(1, 0, 2)
        k = (x @ t(p + "attn_k.weight").T).reshape(n, c.n_head_kv, c.head_dim).transpose(1, 0, 2)
        v = (x @ t(p + "attn_v.weight").T).reshape(n, c.n_head_kv, c.head_dim).transpose(1, 0, 2)
        q = apply_rope(head_rms_norm(q, t(p + "attn_q_norm.weight"), c.rms_eps), cos, sin)
        k = apply_rope(head_rms_norm(k, t(p + "attn_k_norm.weight"), c.rms_eps), cos, sin)
        # attention() scales by 1/sqrt(head_dim); Gemma's scale may differ (27B)
        q = q * np.float32(c.attn_scale * np.sqrt(c.head_dim))
        w = c.sliding_window if window is None else window
        mask = sliding_window_mask(pos, pos, w) if slides else None
        a = attention(q, k, v, causal=True, key_mask=mask)                     # (T, nh*hd)
        h = h + rms_norm(a @ t(p + "attn_output.weight").T, t(p + "post_attention_norm.weight"),
                         c.rms_eps)
        x = rms_norm(h, t(p + "ffn_norm.weight"), c.rms_eps)
        ff = geglu(x @ t(p + "ffn_gate.weight").T, x @ t(p + "ffn_up.weight").T)
        h = h + rms_norm(ff @ t(p + "ffn_down.weight").T, t(p + "post_ffw_norm.weight"), c.rms_eps)
    logits = rms_norm(h, t("output_norm.weight"), c.rms_eps) @ t("token_embd.weight").T
    return softcap(logits, c.logit_softcap) if c.logit_softcap else logits


def test_gemma3_blocks_composed_by_hand_equal_transformers() -> None:
    with np.load(GEMMA / "gemma3_f32.npz") as z:
        ref, control = z["causal"], z["no_window_negative_control"]
    got = by_hand_forward(TINY, MANIFEST["prompt_ids"])
    np.testing.assert_allclose(got, ref, atol=MANIFEST["atol"], rtol=MANIFEST["rtol"])
    assert np.abs(got - control).max() > 0.1
    wide = by_hand_forward(TINY, MANIFEST["prompt_ids"], window=len(MANIFEST["prompt_ids"]) + 1)
    np.testing.assert_allclose(wide, control, atol=MANIFEST["atol"], rtol=MANIFEST["rtol"])


# --- the model's own forward -----------------------------------------------------------------

def test_gemma3_model_forward_equals_transformers() -> None:
    m = llmnb.load(TINY)
    with np.load(GEMMA / "gemma3_f32.npz") as z:
        ref, control = z["causal"], z["no_window_negative_control"]
    got = m.forward(MANIFEST["prompt_ids"])
    np.testing.assert_allclose(got, ref, atol=MANIFEST["atol"], rtol=MANIFEST["rtol"])
    assert np.abs(got - control).max() > 0.1


def test_gemma3_cached_decode_equals_full_forward() -> None:
    """Prefill 5 ids, then one id at a time through the KV cache: past the window of 4 the
    sliding layers must drop the oldest keys exactly as the full forward does."""
    from llmnb.ar.kv_cache import KVCache

    m = llmnb.load(TINY)
    ids = np.array(MANIFEST["prompt_ids"], dtype=np.int64)
    cache = KVCache(m.config, len(ids))
    rows = [m.transformer.forward(ids[:5], cache=cache)]
    cache.commit()
    for j in range(5, len(ids)):
        rows.append(m.transformer.forward(ids[j:j + 1], start=j, cache=cache))
        cache.commit()
    with np.load(GEMMA / "gemma3_f32.npz") as z:
        np.testing.assert_allclose(np.concatenate(rows), z["causal"], atol=MANIFEST["atol"],
                                   rtol=MANIFEST["rtol"])


def test_sliding_window_masks_by_the_evicting_caches_positions(tmp_path: Path) -> None:
    """Every layer sliding (window 4) and a StreamingLLM cache of the last 6 positions (no
    sinks): the evicted keys are all outside every window, so decoding through the cache must
    equal the full forward, which holds only if the mask uses the keys' true positions, not
    their slots."""
    from llmnb.ar.kv_eviction import EvictingKVCache

    path = rewrite(TINY, tmp_path / "all_slide.gguf",
                   drop=("gemma3.attention.sliding_window_pattern",),
                   extra=[MetadataField("gemma3.attention.sliding_window_pattern", UINT32, 0)])
    m = llmnb.load(path)
    ids = np.array(MANIFEST["prompt_ids"], dtype=np.int64)
    cache = EvictingKVCache(m.config, len(ids), budget=6, sinks=0, policy="streaming", chunk=1)
    rows = []
    for j in range(len(ids)):
        rows.append(m.transformer.forward(ids[j:j + 1], start=j, cache=cache))
        cache.commit()
    assert cache.evicted == len(ids) - 6
    np.testing.assert_allclose(np.concatenate(rows), m.forward(ids), atol=1e-5, rtol=1e-5)
