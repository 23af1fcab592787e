"""quantize_file: whole-GGUF quantization with llama.cpp's type rules, written atomically."""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import numpy.typing as npt
import pytest

import llmnb.gguf
from llmnb.gguf.constants import ARRAY, FLOAT32, STRING, UINT32, GGMLType, type_name
from llmnb.gguf.reader import MetadataField
from llmnb.gguf.writer import TensorToWrite, write_gguf
from llmnb.quant import QuantError, dequantize
from llmnb.quant.gguf_file import describe_plan, plan_types, quantize_file, use_more_bits
from real_models import hub_model

T = GGMLType
N_LAYERS = 8
D, D_KV, VOCAB, ODD = 256, 64, 64, 96


def tiny_model_tensors(rng: np.random.Generator) -> dict[str, npt.NDArray[np.float32]]:
    """A llama-shaped set of F32 tensors, small enough to quantize in well under a second."""
    t: dict[str, npt.NDArray[np.float32]] = {
        "token_embd.weight": rng.standard_normal((VOCAB, D)).astype(np.float32)}
    for i in range(N_LAYERS):
        t[f"blk.{i}.attn_norm.weight"] = np.ones(D, np.float32)
        t[f"blk.{i}.attn_q.weight"] = rng.standard_normal((D, D)).astype(np.float32) * 0.05
        t[f"blk.{i}.attn_v.weight"] = rng.standard_normal((D_KV, D)).astype(np.float32) * 0.05
        t[f"blk.{i}.attn_v.bias"] = rng.standard_normal(D_KV).astype(np.float32)
        t[f"blk.{i}.ffn_down.weight"] = rng.standard_normal((D, D)).astype(np.float32) * 0.05
    t["blk.0.ffn_up.weight"] = rng.standard_normal((32, ODD)).astype(np.float32)   # 96-wide rows
    t["output_norm.weight"] = np.ones(D, np.float32)
    t["output.weight"] = rng.standard_normal((VOCAB, D)).astype(np.float32) * 0.05
    return t


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[Path, dict[str, npt.NDArray[np.float32]]]:
    tensors = tiny_model_tensors(np.random.default_rng(0))
    path = tmp_path_factory.mktemp("quant") / "tiny-f32.gguf"
    fields = [MetadataField("general.name", STRING, "tiny"),
              MetadataField("general.file_type", UINT32, 0),
              MetadataField("llama.block_count", UINT32, N_LAYERS),
              MetadataField("llama.rope.freq_base", FLOAT32, 10000.0),
              MetadataField("tokenizer.ggml.tokens", ARRAY, [f"t{i}" for i in range(VOCAB)],
                            STRING)]
    write_gguf(path, "llama", fields,
               [TensorToWrite(n, a, T.F32, a.shape) for n, a in tensors.items()])
    return path, tensors


def test_use_more_bits_picks_first_and_last_eighth_and_every_third_layer() -> None:
    assert [i for i in range(8) if use_more_bits(i, 8)] == [0, 3, 6, 7]
    assert [i for i in range(24) if use_more_bits(i, 24)] == [0, 1, 2, 5, 8, 11, 14, 17, 20, 21,
                                                              22, 23]


def test_q4_k_m_mixture_follows_llama_cpp_rules(
        tiny_gguf: tuple[Path, dict[str, npt.NDArray[np.float32]]],
                                                tmp_path: Path) -> None:
    src, _ = tiny_gguf
    out = tmp_path / "tiny-q4km.gguf"
    plan = quantize_file(src, out, "Q4_K_M")
    bumped = {0, 3, 6, 7}
    with llmnb.gguf.open(out) as f:
        got = {n: type_name(i.ggml_type) for n, i in f.tensors.items()}
        assert f.metadata["general.file_type"] == 15              # LLAMA_FTYPE_MOSTLY_Q4_K_M
    for i in range(N_LAYERS):
        assert got[f"blk.{i}.attn_v.weight"] == ("Q6_K" if i in bumped else "Q4_K")
        assert got[f"blk.{i}.ffn_down.weight"] == ("Q6_K" if i in bumped else "Q4_K")
        assert got[f"blk.{i}.attn_q.weight"] == "Q4_K"
        assert got[f"blk.{i}.attn_norm.weight"] == "F32"
        assert got[f"blk.{i}.attn_v.bias"] == "F32"
    assert got["output.weight"] == "Q6_K"
    assert got["token_embd.weight"] == "Q4_K"
    assert got["blk.0.ffn_up.weight"] == "Q5_0"                  # 96-wide rows: Q4_K -> Q5_0
    assert {n: type_name(t) for n, t in plan.items()} == got


@pytest.mark.parametrize("file_type,bound", [("Q8_0", 0.006), ("Q4_0", 0.095), ("Q6_K", 0.02),
                                             ("Q5_K_M", 0.04), ("F16", 3e-4)])
def test_quantized_file_is_readable_and_close_to_the_input(
        tiny_gguf: tuple[Path, dict[str, npt.NDArray[np.float32]]], tmp_path: Path,
        file_type: str, bound: float) -> None:
    src, tensors = tiny_gguf
    out = tmp_path / f"tiny-{file_type}.gguf"
    quantize_file(src, out, file_type)
    reader = gguf.GGUFReader(out)                                  # the reference reader agrees
    assert len(reader.tensors) == len(tensors)
    with llmnb.gguf.open(out) as f:
        assert f.metadata["general.name"] == "tiny"
        assert f.metadata["llama.block_count"] == N_LAYERS
        assert f.metadata["tokenizer.ggml.tokens"] == [f"t{i}" for i in range(VOCAB)]
        for name, x in tensors.items():
            info = f.tensors[name]
            assert info.shape == x.shape, name
            y = dequantize(f.raw(name), info.ggml_type, info.shape)
            rel = float(np.sqrt(np.mean((y - x) ** 2)) / np.sqrt(np.mean(x ** 2)))
            assert rel <= bound, (name, info.type_name, rel)


def test_plain_type_keeps_output_in_q6_k_and_falls_back_on_odd_rows(
        tiny_gguf: tuple[Path, dict[str, npt.NDArray[np.float32]]], tmp_path: Path) -> None:
    src, _ = tiny_gguf
    plan = quantize_file(src, tmp_path / "q6k.gguf", "q6_k")       # case-insensitive
    assert type_name(plan["blk.0.ffn_up.weight"]) == "Q8_0"        # Q6_K -> Q8_0 on 96-wide rows
    plan = quantize_file(src, tmp_path / "q4_0.gguf", "Q4_0")
    assert type_name(plan["output.weight"]) == "Q6_K"
    assert describe_plan(plan) == {"Q4_0": 3 * N_LAYERS + 2, "Q6_K": 1, "F32": 2 * N_LAYERS + 1}


def test_progress_reports_every_tensor(tiny_gguf: tuple[Path, dict[str, npt.NDArray[np.float32]]],
                                       tmp_path: Path) -> None:
    src, tensors = tiny_gguf
    calls: list[tuple[int, int]] = []
    quantize_file(src, tmp_path / "p.gguf", "Q8_0", progress=lambda i, n: calls.append((i, n)))
    assert calls == [(i + 1, len(tensors)) for i in range(len(tensors))]


def test_bad_type_raises_and_leaves_no_file(
        tiny_gguf: tuple[Path, dict[str, npt.NDArray[np.float32]]],
                                            tmp_path: Path) -> None:
    src, _ = tiny_gguf
    out = tmp_path / "bad.gguf"
    with pytest.raises(QuantError,
                       match=r"unknown quantization type 'Q3_K_M': expected one of .*Q4_K_M"):
        quantize_file(src, out, "Q3_K_M")
    assert list(tmp_path.iterdir()) == []


def test_failure_while_writing_leaves_no_file(tmp_path: Path) -> None:
    # an IQ2_XXS tensor cannot be dequantized: the error comes mid-way, after other tensors
    src = tmp_path / "iq.gguf"
    write_gguf(src, "llama", [], [
        TensorToWrite("a.weight", np.zeros((2, 256), np.float32), T.F32, (2, 256)),
        TensorToWrite("b.weight", np.zeros((2, 66), np.uint8), T.IQ2_XXS, (2, 256))])
    out = tmp_path / "out.gguf"
    with pytest.raises(QuantError, match="IQ2_XXS"):
        quantize_file(src, out, "Q8_0")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iq.gguf"]


@pytest.mark.parametrize("model,file_type", [("smollm2-135m", "Q4_1"),
                                             ("qwen2.5-coder-0.5b", "Q4_K_M")])
def test_type_plan_reproduces_the_real_files(model: str, file_type: str) -> None:
    # both files were made by llama-quantize: the plan must give every tensor its actual type
    with llmnb.gguf.open(hub_model(model)) as f:
        tensors = list(f.tensors.values())
        plan = plan_types(tensors, file_type)
        assert ({t.name: type_name(plan[t.name]) for t in tensors}
                == {t.name: t.type_name for t in tensors})
