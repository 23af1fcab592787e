"""diffuse-cpp's ``diffuse`` files: config (key fallbacks, model type), forward against the
reference logits, and quantization with diffuse-cpp's mixture (reference/diffuse-cpp.md §2)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

import llmnb
from llmnb.gguf.constants import FLOAT32, STRING, UINT32, GGMLType, type_name
from llmnb.gguf.reader import MetadataField
from llmnb.gguf.writer import TensorToWrite, write_gguf
from llmnb.model.config import ModelError, config_from_gguf
from llmnb.model.transformer import Transformer
from llmnb.model.weights import Weights
from llmnb.quant import dequantize
from llmnb.quant.gguf_file import plan_diffuse_types, quantize_file
from oracle import MANIFEST, ORACLE, PROMPT, TOL, forward_case, reference, transformer

T = GGMLType
DIFFUSE = [k for k, v in MANIFEST["fixtures"].items() if v["convention"] == "diffuse"]
CASES = [(name, case) for name in DIFFUSE for case in MANIFEST["fixtures"][name]["cases"]]
TWIN = {"llada_diffuse_f32": "llada_f32", "dream_diffuse_f32": "dream_f32"}


# --- config ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", DIFFUSE)
def test_diffuse_config_reads_model_type_mask_and_layout(name: str) -> None:
    fx = MANIFEST["fixtures"][name]
    c = config_from_gguf(llmnb.gguf.open(ORACLE / fx["gguf"]))
    want = fx["config"]
    assert (c.arch, c.convention, c.qk_permuted) == (fx["model_type"], "diffuse", False)
    assert (c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_ff, c.vocab_size) == (
        want["layers"], want["hidden"], want["heads"], want["kv_heads"], want["head_dim"],
        want["ffn"], want["vocab"])
    assert c.rope_base == want["rope_theta"]
    assert c.rms_eps == pytest.approx(want["rms_eps"], rel=1e-6)
    assert (c.causal, c.shift_logits, c.mask_token_id) == (False, fx["shift_logits"],
                                                           fx["mask_token_id"])
    assert c.qkv_bias == (fx["model_type"] == "dream") and not c.tied_output


def rewrite(src: Path, dst: Path, drop: tuple[str, ...] = (), rename: dict[str, str] | None = None,
            extra: list[MetadataField] | None = None) -> Path:
    """A copy of GGUF `src` with some metadata keys dropped or renamed (tensors unchanged)."""
    rename = rename or {}
    with llmnb.gguf.open(src) as f:
        fields = [MetadataField(rename.get(k, k), v.value_type, v.value, v.item_type)
                  for k, v in f.fields.items() if k not in drop and k != "general.architecture"]
        tensors = [TensorToWrite(n, f.raw(n).view(np.float32).reshape(t.shape).copy(),
                                 t.ggml_type, t.shape) for n, t in f.tensors.items()]
        write_gguf(dst, f.architecture, fields + (extra or []), tensors)
    return dst


def test_diffuse_loader_falls_back_like_diffuse_cpp(tmp_path: Path) -> None:
    # optional keys absent; required ones under qwen2. / llama. (tried after diffuse.)
    src = ORACLE / MANIFEST["fixtures"]["llada_diffuse_f32"]["gguf"]
    out = rewrite(src, tmp_path / "bare.gguf",
                  drop=("diffuse.context_length", "diffuse.rope.freq_base", "diffuse.vocab_size",
                        "diffuse.attention.layer_norm_rms_epsilon", "diffuse.mask_token_id",
                        "diffuse.model_type"),
                  rename={"diffuse.block_count": "qwen2.block_count",
                          "diffuse.attention.head_count": "llama.attention.head_count"})
    c = config_from_gguf(llmnb.gguf.open(out))
    assert (c.arch, c.n_layer, c.n_head, c.n_ctx, c.vocab_size, c.mask_token_id) == (
        "llada", 2, 4, 4096, 128, 0)
    assert (c.rope_base, c.rms_eps, c.shift_logits, c.causal) == (1e6, pytest.approx(1e-6),
                                                                  False, False)


def test_diffuse_prefix_wins_over_the_fallback_prefixes(tmp_path: Path) -> None:
    src = ORACLE / MANIFEST["fixtures"]["dream_diffuse_f32"]["gguf"]
    out = rewrite(src, tmp_path / "both.gguf", extra=[
        MetadataField("qwen2.rope.freq_base", FLOAT32, 123.0),
        MetadataField("llama.context_length", UINT32, 7)])
    c = config_from_gguf(llmnb.gguf.open(out))
    assert (c.rope_base, c.n_ctx, c.arch, c.shift_logits) == (1e6, 64, "dream", True)


def test_diffuse_file_errors_name_the_key(tmp_path: Path) -> None:
    src = ORACLE / MANIFEST["fixtures"]["llada_diffuse_f32"]["gguf"]
    out = rewrite(src, tmp_path / "gpt.gguf", drop=("diffuse.model_type",),
                  extra=[MetadataField("diffuse.model_type", STRING, "gpt2")])
    with pytest.raises(ModelError,
                       match=r"diffuse.model_type: expected one of llada, dream, got 'gpt2'"):
        config_from_gguf(llmnb.gguf.open(out))
    out = rewrite(src, tmp_path / "nolayers.gguf", drop=("diffuse.block_count",))
    with pytest.raises(ModelError, match=r"'diffuse.block_count' is missing"):
        config_from_gguf(llmnb.gguf.open(out))


# --- forward (needs weights.py to un-permute only when config.qk_permuted) --------------------

@pytest.mark.parametrize("name,case", CASES)
def test_diffuse_forward_matches_reference_logits(name: str, case: str) -> None:
    np.testing.assert_allclose(forward_case(transformer(name), name, case),
                               reference(name)[case], **TOL)


@pytest.mark.parametrize("name", DIFFUSE)
def test_diffuse_and_llama_cpp_files_give_the_same_weights(name: str) -> None:
    a, b = transformer(name).weights, transformer(TWIN[name]).weights
    for i in range(a.config.n_layer):
        np.testing.assert_array_equal(a.layer(i).wqkv_t, b.layer(i).wqkv_t)


@pytest.mark.parametrize("name", DIFFUSE)
def test_diffuse_files_are_bidirectional(name: str) -> None:
    got = transformer(name).forward(PROMPT)                 # the config's own attention
    assert np.abs(got - reference(name)["causal_negative_control"]).max() > 0.1


# --- quantization -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["llada_f32", "dream_f32", *DIFFUSE])
@pytest.mark.parametrize("file_type,bound", [("F16", 2e-3), ("Q8_0", 0.04), ("Q4_K_M", 0.25)])
def test_quantized_diffusion_files_stay_close_to_the_reference(
        tmp_path: Path, name: str, file_type: str, bound: float) -> None:
    out = tmp_path / f"{name}-{file_type}.gguf"
    quantize_file(ORACLE / MANIFEST["fixtures"][name]["gguf"], out, file_type)
    f = llmnb.gguf.open(out)
    c = config_from_gguf(f)
    got = Transformer(c, Weights(f, c, "resident")).forward(PROMPT)
    ref = reference(name)["bidirectional"]
    rel = float(np.sqrt(np.mean((got - ref) ** 2) / np.mean(ref ** 2)))
    assert rel < bound, rel


N_LAYERS, D, D_KV, VOCAB = 4, 256, 128, 64


@pytest.fixture(scope="module")
def diffuse_256(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dream-shaped ``diffuse`` file with 256-wide rows (k-quants apply); one F16 norm."""
    rng = np.random.default_rng(5)

    def w(*shape: int) -> npt.NDArray[np.float32]:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    ts = [TensorToWrite("token_embd.weight", w(VOCAB, D), T.F32, (VOCAB, D))]
    for i in range(N_LAYERS):
        p = f"blk.{i}."
        for n, shape in (("attn_q.weight", (D, D)), ("attn_k.weight", (D_KV, D)),
                         ("attn_v.weight", (D_KV, D)), ("attn_output.weight", (D, D)),
                         ("ffn_gate.weight", (D, D)), ("ffn_up.weight", (D, D)),
                         ("ffn_down.weight", (D, D)), ("attn_q.bias", (D,)),
                         ("ffn_norm.weight", (D,))):
            ts.append(TensorToWrite(p + n, w(*shape), T.F32, shape))
        norm = 1 + w(D)
        ts.append(TensorToWrite(p + "attn_norm.weight", norm.astype(np.float16) if i == 0 else norm,
                                T.F16 if i == 0 else T.F32, (D,)))
    ts += [TensorToWrite("output_norm.weight", 1 + w(D), T.F32, (D,)),
           TensorToWrite("output.weight", w(VOCAB, D), T.F32, (VOCAB, D))]
    path = tmp_path_factory.mktemp("diffuse") / "d256.gguf"
    write_gguf(path, "diffuse", [MetadataField("diffuse.block_count", UINT32, N_LAYERS),
                                 MetadataField("diffuse.model_type", STRING, "dream")], ts)
    return path


def test_q4_k_m_on_a_diffuse_file_uses_diffuse_cpps_mixture(
        diffuse_256: Path, tmp_path: Path) -> None:
    out = tmp_path / "q4km.gguf"
    plan = quantize_file(diffuse_256, out, "Q4_K_M")          # the rule for arch diffuse
    with llmnb.gguf.open(out) as f:
        got = {n: type_name(i.ggml_type) for n, i in f.tensors.items()}
        assert f.metadata["general.file_type"] == 15
    assert {n: type_name(t) for n, t in plan.items()} == got
    assert (got["token_embd.weight"], got["output.weight"], got["output_norm.weight"]) == (
        "F16", "Q6_K", "F32")
    for i in range(N_LAYERS):
        p = f"blk.{i}."
        ffn = "Q6_K" if i in (0, N_LAYERS - 1) else "Q4_K"   # first and last layer's FFN
        ffn_names = ("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")
        assert [got[p + n] for n in ffn_names] == [ffn] * 3
        assert [got[p + n] for n in ("attn_q.weight", "attn_k.weight", "attn_v.weight",
                                     "attn_output.weight")] == ["Q4_K"] * 4
        assert (got[p + "attn_norm.weight"], got[p + "ffn_norm.weight"],
                got[p + "attn_q.bias"]) == ("F32", "F32", "F32")   # the F16 norm is widened


def test_q8_0_diffuse_mixture_and_the_llama_cpp_rule_as_an_option(diffuse_256: Path,
                                                                  tmp_path: Path) -> None:
    chosen = quantize_file(diffuse_256, tmp_path / "q8.gguf", "Q8_0")
    plan = {n: type_name(t) for n, t in chosen.items()}
    assert (plan["token_embd.weight"], plan["output.weight"], plan["blk.0.ffn_up.weight"],
            plan["blk.0.attn_norm.weight"]) == ("F16", "Q8_0", "Q8_0", "F32")
    plan = {n: type_name(t) for n, t in quantize_file(diffuse_256, tmp_path / "l.gguf", "Q4_K_M",
                                                      mixture="llama.cpp").items()}
    assert (plan["token_embd.weight"], plan["blk.0.attn_norm.weight"]) == ("Q4_K", "F16")
    with llmnb.gguf.open(tmp_path / "q8.gguf") as f, llmnb.gguf.open(diffuse_256) as g:
        x = dequantize(g.raw("blk.1.ffn_up.weight"), T.F32, (D, D))
        y = dequantize(f.raw("blk.1.ffn_up.weight"), T.Q8_0, (D, D))
        assert float(np.abs(x - y).max()) < 0.01


def test_diffuse_mixture_keeps_the_type_of_rows_no_block_divides() -> None:
    # the 32-wide oracle rows: diffuse-cpp has no fallback type, so they stay F32
    with llmnb.gguf.open(ORACLE / MANIFEST["fixtures"]["dream_diffuse_f32"]["gguf"]) as f:
        plan = plan_diffuse_types(list(f.tensors.values()), "Q4_K_M")
    assert type_name(plan["blk.0.ffn_up.weight"]) == "F32"
    assert type_name(plan["output.weight"]) == "F32"          # Q6_K needs 256-wide rows
    assert type_name(plan["token_embd.weight"]) == "F16"
