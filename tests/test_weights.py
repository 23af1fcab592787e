"""Weights: tensor checks with clear errors, and the memory preflight."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import llmnb
from llmnb.gguf.writer import TensorToWrite, write_gguf
from llmnb.model import ModelError, config_from_gguf
from llmnb.model.weights import MemoryPreflightError, Weights, plan_residency
from oracle import ORACLE


def copy_fixture(tmp_path: Path, drop: str = "", reshape: str = "", retype: str = "") -> Path:
    """The llama_f32 fixture rewritten with one tensor dropped, reshaped or stored as F16."""
    f = llmnb.gguf.open(ORACLE / "llama_f32.gguf")
    tensors = []
    for name, info in f.tensors.items():
        if name == drop:
            continue
        data = llmnb.quant.dequantize(f.raw(name), info.ggml_type, info.shape)
        if name == reshape:
            data = data.reshape(-1)[: data.size // 2].reshape(info.shape[0] // 2, -1)
        ggml_type = 1 if name == retype else 0
        tensors.append(TensorToWrite(name, data, ggml_type, data.shape))
    out = tmp_path / "copy.gguf"
    write_gguf(out, "llama", list(f.fields.values()), tensors)
    return out


def weights(path: Path) -> Weights:
    f = llmnb.gguf.open(path)
    return Weights(f, config_from_gguf(f), "resident")


def test_a_missing_tensor_is_named(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"tensor 'blk.1.ffn_up.weight' is missing "
                                         r"\(expected shape \(64, 32\)\)"):
        weights(copy_fixture(tmp_path, drop="blk.1.ffn_up.weight"))


def test_a_wrong_shape_is_named(tmp_path: Path) -> None:
    with pytest.raises(ModelError,
                       match=r"'blk.0.attn_q.weight': expected shape \(32, 32\), got \(16, 32\)"):
        weights(copy_fixture(tmp_path, reshape="blk.0.attn_q.weight"))


def test_other_supported_types_load(tmp_path: Path) -> None:
    w = weights(copy_fixture(tmp_path, retype="blk.0.ffn_down.weight"))
    assert w.layer(0).w_down_t.dtype == np.float32


def test_preflight_picks_streaming_when_resident_does_not_fit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    f = llmnb.gguf.open(ORACLE / "llama_f32.gguf")
    c = config_from_gguf(f)
    plan = plan_residency(f, c)
    assert plan.residency == "resident" and plan.streaming_bytes < plan.resident_bytes
    monkeypatch.setenv("LLMNB_MEMORY_LIMIT", str(plan.streaming_bytes))
    assert plan_residency(f, c).residency == "streaming"
    with pytest.raises(MemoryPreflightError, match="resident needs"):
        plan_residency(f, c, residency="resident")


def test_a_model_that_fits_neither_way_is_refused_before_loading(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMNB_MEMORY_LIMIT", "10000")
    with pytest.raises(MemoryPreflightError, match=r"does not fit in memory: streaming needs "
                                                   r".* KiB, 9.8 KiB available") as e:
        llmnb.load(ORACLE / "llama_f32.gguf")
    assert e.value.exit_code == 5


def test_the_refusal_comes_before_any_tensor_is_dequantized(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import llmnb.model.weights as weights_module

    def no_dequantize(*args: object, **kwargs: object) -> None:
        raise AssertionError("dequantized before the preflight refused")

    monkeypatch.setattr(weights_module, "dequantize", no_dequantize)
    monkeypatch.setenv("LLMNB_MEMORY_LIMIT", "10000")
    with pytest.raises(MemoryPreflightError,
                       match=r"\(\d[\d,]* > 10,000 bytes; resident .*, "
                             r"streaming \(one layer dequantized at a time\)"):
        llmnb.load(ORACLE / "llama_f32.gguf")


def test_resident_that_does_not_fit_names_the_streaming_option(
        monkeypatch: pytest.MonkeyPatch) -> None:
    plan = llmnb.load(ORACLE / "llama_f32.gguf").plan   # what load asks for, KV cache included
    monkeypatch.setenv("LLMNB_MEMORY_LIMIT", str(plan.streaming_bytes))
    with pytest.raises(MemoryPreflightError) as e:
        llmnb.load(ORACLE / "llama_f32.gguf", residency="resident")
    needed, avail = plan.resident_bytes, plan.streaming_bytes
    assert "resident needs" in str(e.value) and f"({needed:,} > {avail:,} bytes;" in str(e.value)
    assert "residency='streaming' (one layer dequantized at a time) fits" in str(e.value)
    assert llmnb.load(ORACLE / "llama_f32.gguf").plan.residency == "streaming"   # auto picks it
