"""RoPE scaling: linear and YaRN computed as llama.cpp computes them (and Llama 3's divisors),
checked against transformers' RoPE initialisation functions and against tiny stock models
whose RoPE is scaled; any other ``rope.scaling.type`` is refused; ``llmnb convert`` carries
``rope_scaling`` and ``head_dim`` into the GGUF. References: tools/make_rope_fixtures.py
(tests/fixtures/rope/README.md)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import llmnb
from llmnb.gguf.constants import FLOAT32, STRING
from llmnb.gguf.reader import MetadataField
from llmnb.model.blocks import rope_inv_freq, rope_mscale, yarn_correction_range
from llmnb.model.config import ModelError, config_from_gguf
from llmnb.model.convert import ConvertError, convert_checkpoint
from llmnb.model.hf_config import RopeScaling, llama3_rope_factors
from test_convert import write_checkpoint
from test_diffusion_files import rewrite

ROPE = Path(__file__).parent / "fixtures" / "rope"
INIT = json.loads((ROPE / "rope_init.json").read_text())
MANIFEST = json.loads((ROPE / "manifest.json").read_text())


# --- the frequencies, against transformers' initialisation functions -------------------------

@pytest.mark.parametrize("name", sorted(INIT))
def test_inv_freq_and_attention_factor_equal_transformers_rope_init(name: str) -> None:
    case: dict[str, Any] = INIT[name]
    p, dim = case["rope_parameters"], case["head_dim"]
    kind, factor = p["rope_type"], float(p.get("factor", 1.0))
    factors = None
    if kind == "llama3":     # llama.cpp's converter turns llama3 into per-frequency divisors
        scaling = RopeScaling(kind, factor, p["original_max_position_embeddings"],
                              p["low_freq_factor"], p["high_freq_factor"])
        factors = llama3_rope_factors(scaling, p["rope_theta"], dim)
    scaling = "none" if kind == "default" else kind
    got = rope_inv_freq(dim, p["rope_theta"], factors, scaling, factor,
                        p.get("original_max_position_embeddings", 0))
    np.testing.assert_allclose(got, case["inv_freq"], rtol=2e-6, atol=0)
    assert rope_mscale(scaling, factor) == pytest.approx(case["attention_factor"], rel=1e-7)


def test_yarn_ramp_by_hand() -> None:
    """head_dim 16, base 1e4, trained on 4096: dims 2.6 and 5.6 turn 32 and once over the
    context, so pairs 0-2 keep their frequency, 6-7 are divided by the factor, 3-5 blend."""
    low, high = yarn_correction_range(16, 4096, 10000.0)
    assert (low, high) == (2.0, 6.0)
    plain = rope_inv_freq(16, 10000.0)
    yarn = rope_inv_freq(16, 10000.0, scaling="yarn", factor=4.0, orig_ctx=4096)
    keep = 1.0 - np.clip((np.arange(8) - 2.0) / 4.0, 0.0, 1.0)       # 1 1 1 .75 .5 .25 0 0
    np.testing.assert_allclose(yarn, plain * keep + plain / 4.0 * (1.0 - keep), rtol=1e-12)
    np.testing.assert_allclose(rope_inv_freq(16, 10000.0, scaling="linear", factor=4.0), plain / 4)
    assert rope_mscale("yarn", 4.0) == pytest.approx(1.0 + 0.1 * np.log(4.0))
    assert rope_mscale("linear", 4.0) == 1.0 and rope_mscale("yarn", 1.0) == 1.0


# --- tiny stock models with scaled RoPE -------------------------------------------------------

@pytest.mark.parametrize("name", sorted(MANIFEST["models"]))
def test_scaled_rope_logits_equal_transformers(name: str) -> None:
    m = MANIFEST["models"][name]
    model = llmnb.load(ROPE / f"{name}.gguf")
    c = model.config
    kind = m["rope_parameters"]["rope_type"]
    assert (c.rope_scaling, c.head_dim, c.rope_dim) == (kind, m["head_dim"], m["head_dim"])
    if kind != "llama3":
        assert c.rope_factor == m["rope_parameters"]["factor"]
    if kind == "yarn":
        assert c.rope_orig_ctx == m["rope_parameters"]["original_max_position_embeddings"]
    with np.load(ROPE / f"{name}.npz") as z:
        ref, control = z["causal"], z["unscaled_negative_control"]
    got = model.forward(np.array(MANIFEST["prompt_ids"], dtype=np.int64))
    np.testing.assert_allclose(got, ref, atol=MANIFEST["atol"], rtol=MANIFEST["rtol"])
    assert np.abs(got - control).max() > 0.1     # the scaling is really applied


def test_unscaled_copy_of_a_scaled_file_gives_the_negative_control(tmp_path: Path) -> None:
    src = ROPE / "llama_yarn.gguf"
    out = rewrite(src, tmp_path / "plain.gguf", drop=("llama.rope.scaling.type",))
    with np.load(ROPE / "llama_yarn.npz") as z:
        control = z["unscaled_negative_control"]
    got = llmnb.load(out).forward(np.array(MANIFEST["prompt_ids"], dtype=np.int64))
    np.testing.assert_allclose(got, control, atol=MANIFEST["atol"], rtol=MANIFEST["rtol"])


# --- refusals ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["longrope", "dynamic", "su", "llama3"])
def test_other_rope_scaling_types_are_refused_by_name(tmp_path: Path, kind: str) -> None:
    out = rewrite(ROPE / "llama_yarn.gguf", tmp_path / "other.gguf",
                  drop=("llama.rope.scaling.type",),
                  extra=[MetadataField("llama.rope.scaling.type", STRING, kind)])
    with pytest.raises(ModelError, match=rf"llama\.rope\.scaling\.type: expected none, linear or "
                                         rf"yarn .*got '{kind}'"):
        config_from_gguf(llmnb.gguf.open(out))


def test_none_type_ignores_a_factor_and_the_old_linear_key_is_read(tmp_path: Path) -> None:
    src = ROPE / "qwen2_linear.gguf"
    none = rewrite(src, tmp_path / "none.gguf", drop=("qwen2.rope.scaling.type",),
                   extra=[MetadataField("qwen2.rope.scaling.type", STRING, "none")])
    assert (config_from_gguf(llmnb.gguf.open(none)).rope_factor) == 1.0
    old = rewrite(src, tmp_path / "old.gguf", drop=("qwen2.rope.scaling.factor",),
                  extra=[MetadataField("qwen2.rope.scale_linear", FLOAT32, 2.0)])
    c = config_from_gguf(llmnb.gguf.open(old))
    assert (c.rope_scaling, c.rope_factor) == ("linear", 2.0)
    bad = rewrite(src, tmp_path / "bad.gguf", drop=("qwen2.rope.scaling.factor",),
                  extra=[MetadataField("qwen2.rope.scaling.factor", FLOAT32, -2.0)])
    with pytest.raises(ModelError, match="rope.scaling.factor: expected a positive number"):
        config_from_gguf(llmnb.gguf.open(bad))


# --- llmnb convert carries rope_scaling and head_dim -------------------------------------------

def qwen2_checkpoint(folder: Path, **config: Any) -> Path:
    """The converter tests' tiny Qwen2-style (Dream) checkpoint, as a causal qwen2, with
    extra config.json keys."""
    write_checkpoint(folder, "dream")
    c = json.loads((folder / "config.json").read_text())
    c.update(model_type="qwen2", architectures=["Qwen2ForCausalLM"], **config)
    (folder / "config.json").write_text(json.dumps(c))
    return folder


@pytest.mark.parametrize("rope,keys", [
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
     {"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
      "rope.scaling.original_context_length": 16}),
    ({"type": "linear", "factor": 2.0},
     {"rope.scaling.type": "linear", "rope.scaling.factor": 2.0}),
])
def test_convert_writes_rope_scaling_keys(tmp_path: Path, rope: dict[str, Any],
                                          keys: dict[str, Any]) -> None:
    hf = qwen2_checkpoint(tmp_path / "hf", rope_scaling=rope)
    convert_checkpoint(hf, tmp_path / "out.gguf", "qwen2")
    md = llmnb.gguf.open(tmp_path / "out.gguf").metadata
    assert {k: md["qwen2." + k] for k in keys} == keys
    c = config_from_gguf(llmnb.gguf.open(tmp_path / "out.gguf"))
    assert (c.rope_scaling, c.rope_factor) == (keys["rope.scaling.type"], rope["factor"])


def test_convert_refuses_rope_scalings_llama_cpp_would_run_otherwise(tmp_path: Path) -> None:
    hf = qwen2_checkpoint(tmp_path / "a", rope_scaling={"rope_type": "longrope", "factor": 2.0})
    with pytest.raises(ConvertError, match="rope_scaling type 'longrope': expected linear, yarn"):
        convert_checkpoint(hf, tmp_path / "a.gguf", "qwen2")
    hf = qwen2_checkpoint(tmp_path / "b", rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
        "attention_factor": 0.5})
    with pytest.raises(ConvertError, match="attention_factor = 0.5"):
        convert_checkpoint(hf, tmp_path / "b.gguf", "qwen2")
    assert not list(tmp_path.glob("*.gguf"))


def test_convert_carries_head_dim_into_key_length_and_shapes() -> None:
    md = llmnb.gguf.open(ROPE / "llama_yarn.gguf").metadata
    assert (md["llama.attention.key_length"], md["llama.attention.value_length"],
            md["llama.rope.dimension_count"], md["llama.embedding_length"]) == (16, 16, 16, 32)
    f = llmnb.gguf.open(ROPE / "llama_yarn.gguf")
    assert f.tensors["blk.0.attn_q.weight"].shape == (4 * 16, 32)
    assert f.tensors["blk.0.attn_k.weight"].shape == (2 * 16, 32)


def test_convert_writes_llama3_divisors_as_rope_freqs() -> None:
    f = llmnb.gguf.open(ROPE / "llama_llama3.gguf")
    info = f.tensors["rope_freqs.weight"]
    assert info.shape == (4,)
    got = f.raw("rope_freqs.weight").view(np.float32)
    # head_dim 8, base 5e5, trained on 512: wavelengths 6.3 (< 512/4: kept), 167 (blended),
    # then 4443 and 118k (> 512: divided by 8)
    smooth = (512 / (2 * np.pi * 500000.0 ** (2 / 8)) - 1.0) / (4.0 - 1.0)
    np.testing.assert_allclose(got, [1.0, 1.0 / ((1 - smooth) / 8 + smooth), 8.0, 8.0], rtol=1e-6)
    assert config_from_gguf(f).rope_scaling == "llama3"
    assert "llama.rope.scaling.type" not in f.metadata
