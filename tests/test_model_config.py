"""ModelConfig from GGUF metadata, on the oracle fixtures and the real models."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import llmnb
from llmnb.gguf.constants import GGMLType
from llmnb.gguf.writer import TensorToWrite, write_gguf
from llmnb.model import ModelError, config_from_gguf
from real_models import hub_model

ORACLE = Path(__file__).parent / "fixtures" / "oracle"
MANIFEST = json.loads((ORACLE / "manifest.json").read_text())
LLAMA_CPP_FIXTURES = [k for k, v in MANIFEST["fixtures"].items() if v["convention"] == "llama.cpp"]


@pytest.mark.parametrize("name", LLAMA_CPP_FIXTURES)
def test_config_matches_the_fixture_manifest(name: str) -> None:
    fx = MANIFEST["fixtures"][name]
    c = config_from_gguf(llmnb.gguf.open(ORACLE / fx["gguf"]))
    want = fx["config"]
    assert (c.arch, c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_ff,
            c.vocab_size) == (fx["arch"], want["layers"], want["hidden"], want["heads"],
                              want["kv_heads"], want["head_dim"], want["ffn"], want["vocab"])
    assert c.rope_base == want["rope_theta"]
    assert c.rms_eps == pytest.approx(want["rms_eps"], rel=1e-6)
    assert c.causal == fx["causal"] and c.shift_logits == fx["shift_logits"]
    assert c.tied_output == fx["tied"] and c.mask_token_id == fx["mask_token_id"]
    assert c.qkv_bias == (fx["arch"] in ("qwen2", "dream"))


def test_smollm2_config_is_the_published_one() -> None:
    c = config_from_gguf(llmnb.gguf.open(hub_model("smollm2-135m")))
    assert (c.arch, c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_ff) == (
        "llama", 30, 576, 9, 3, 64, 1536)
    assert (c.vocab_size, c.n_ctx, c.rope_base, c.tied_output, c.causal) == (49152, 8192, 1e5,
                                                                              True, True)


def test_qwen_config_has_biases_and_an_untied_head() -> None:
    c = config_from_gguf(llmnb.gguf.open(hub_model("qwen2.5-coder-0.5b")))
    assert (c.arch, c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.n_ff, c.vocab_size) == (
        "qwen2", 24, 896, 14, 2, 4864, 151936)
    assert c.qkv_bias and not c.tied_output and c.rope_base == 1e6


def test_unsupported_architecture_is_a_model_error(tmp_path: Path) -> None:
    path = tmp_path / "gemma2.gguf"
    embd = TensorToWrite("token_embd.weight", np.zeros((4, 2), dtype=np.float32), GGMLType.F32,
                         (4, 2))
    write_gguf(path, "gemma2", [], [embd])
    with pytest.raises(ModelError, match="architecture 'gemma2' is not supported"):
        config_from_gguf(llmnb.gguf.open(path))


def test_load_by_hub_name_gives_file_config_and_tokenizer() -> None:
    hub_model("smollm2-135m")
    m = llmnb.load("smollm2-135m")
    assert m.arch == "llama" and m.config.n_layer == 30
    assert m.metadata["general.architecture"] == "llama"
    assert m.tokenizer.decode(m.tokenizer.encode("Hello, world!")) == "Hello, world!"
