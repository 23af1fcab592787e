"""llmnb convert: tiny random checkpoints in LLaDA's and Dream's own layouts -> GGUF, checked
tensor by tensor (reference/diffuse-cpp.md §2, reference/oracle.md §3 and §6)."""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

import llmnb
import llmnb.model.convert as convert_module
from llmnb.cli import main as cli_main
from llmnb.errors import EXIT_INPUT, EXIT_OK
from llmnb.gguf.constants import GGMLType
from llmnb.model.config import SUPPORTED_ARCHS, ModelError, config_from_gguf
from llmnb.model.convert import ConvertError, convert_checkpoint
from llmnb.model.safetensors import read_checkpoint_index, read_tensor
from llmnb.model.weights import unpermute_qk
from llmnb.tokenizer.pretokenizers import PRE_TOKENIZERS, detect_pre

F32 = npt.NDArray[np.float32]
D, LAYERS, HEADS, FF, VOCAB, MASK = 32, 2, 4, 64, 96, 95
KV = {"llada": 4, "dream": 2}


# --- a safetensors writer of our own (the format: 8-byte header length, JSON header, data) -----

def write_safetensors(path: Path, tensors: dict[str, F32], dtype: str = "F32") -> None:
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for name, a in tensors.items():
        if dtype == "BF16":
            data = (a.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
        else:
            data = a.astype({"F32": "<f4", "F16": "<f2"}[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)                    # the header is padded to 8 bytes
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def bf16_round(a: F32) -> F32:
    """What a BF16 checkpoint stores: the top 16 bits of each float32."""
    return (a.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def random_checkpoint(arch: str, seed: int) -> dict[str, F32]:
    """HF tensors of a tiny model, named as LLaDA (OLMo style) or Dream (Qwen2) name them."""
    rng = np.random.default_rng(seed)
    kv, hd = KV[arch], D // HEADS

    def w(*shape: int) -> F32:
        return bf16_round((rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32))

    t: dict[str, F32] = {}
    if arch == "llada":
        t["model.transformer.wte.weight"] = w(VOCAB, D)
        for i in range(LAYERS):
            p = f"model.transformer.blocks.{i}."
            t |= {p + "attn_norm.weight": w(D), p + "q_proj.weight": w(HEADS * hd, D),
                  p + "k_proj.weight": w(kv * hd, D), p + "v_proj.weight": w(kv * hd, D),
                  p + "attn_out.weight": w(D, HEADS * hd), p + "ff_norm.weight": w(D),
                  p + "ff_proj.weight": w(FF, D), p + "up_proj.weight": w(FF, D),
                  p + "ff_out.weight": w(D, FF)}
        t["model.transformer.ln_f.weight"] = w(D)
        t["model.transformer.ff_out.weight"] = w(VOCAB, D)
    else:
        t["model.embed_tokens.weight"] = w(VOCAB, D)
        for i in range(LAYERS):
            p = f"model.layers.{i}."
            t |= {p + "input_layernorm.weight": w(D),
                  p + "self_attn.q_proj.weight": w(HEADS * hd, D),
                  p + "self_attn.q_proj.bias": w(HEADS * hd),
                  p + "self_attn.k_proj.weight": w(kv * hd, D),
                  p + "self_attn.k_proj.bias": w(kv * hd),
                  p + "self_attn.v_proj.weight": w(kv * hd, D),
                  p + "self_attn.v_proj.bias": w(kv * hd),
                  p + "self_attn.o_proj.weight": w(D, HEADS * hd),
                  p + "post_attention_layernorm.weight": w(D), p + "mlp.gate_proj.weight": w(FF, D),
                  p + "mlp.up_proj.weight": w(FF, D), p + "mlp.down_proj.weight": w(D, FF)}
        t["model.norm.weight"] = w(D)
        t["lm_head.weight"] = w(VOCAB, D)
    return t


def checkpoint_config(arch: str) -> dict[str, Any]:
    """config.json as LLaDA-8B-Instruct / Dream-v0-Instruct-7B write it (keys that matter)."""
    if arch == "llada":
        return {"architectures": ["LLaDAModelLM"], "model_type": "llada", "d_model": D,
                "n_layers": LAYERS, "n_heads": HEADS, "n_kv_heads": KV[arch],
                "mlp_hidden_size": FF, "max_sequence_length": 64, "vocab_size": VOCAB,
                "embedding_size": VOCAB, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
                "weight_tying": False, "mask_token_id": MASK}
    return {"architectures": ["DreamModel"], "model_type": "Dream", "hidden_size": D,
            "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
            "num_key_value_heads": KV[arch], "intermediate_size": FF,
            "max_position_embeddings": 64, "vocab_size": VOCAB, "rms_norm_eps": 1e-6,
            "rope_theta": 1e6, "tie_word_embeddings": False, "mask_token_id": MASK}


def write_checkpoint(folder: Path, arch: str, dtype: str = "BF16", shards: int = 1,
                     seed: int = 0) -> dict[str, F32]:
    folder.mkdir(parents=True, exist_ok=True)
    tensors = random_checkpoint(arch, seed)
    (folder / "config.json").write_text(json.dumps(checkpoint_config(arch)))
    if shards == 1:
        write_safetensors(folder / "model.safetensors", tensors, dtype)
        return tensors
    names = list(tensors)
    weight_map = {}
    for s in range(shards):
        part = names[s::shards]
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(folder / fname, {n: tensors[n] for n in part}, dtype)
        weight_map |= {n: fname for n in part}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return tensors


LLADA_TO_GGUF = {"attn_norm": "attn_norm", "q_proj": "attn_q", "k_proj": "attn_k",
                 "v_proj": "attn_v", "attn_out": "attn_output", "ff_norm": "ffn_norm",
                 "ff_proj": "ffn_gate", "up_proj": "ffn_up", "ff_out": "ffn_down"}
DREAM_TO_GGUF = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
                 "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
                 "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def expected_name(arch: str, src: str) -> str:
    """Written out independently of the converter's table (diffuse-cpp.md §2.2)."""
    top = {"model.transformer.wte.weight": "token_embd.weight", "model.embed_tokens.weight":
           "token_embd.weight", "model.transformer.ln_f.weight": "output_norm.weight",
           "model.norm.weight": "output_norm.weight", "model.transformer.ff_out.weight":
           "output.weight", "lm_head.weight": "output.weight"}
    if src in top:
        return top[src]
    parts = src.split(".")
    if arch == "llada":                  # model.transformer.blocks.N.module.param
        return f"blk.{parts[3]}.{LLADA_TO_GGUF[parts[4]]}.{parts[5]}"
    layer, module, param = parts[2], ".".join(parts[3:-1]), parts[-1]
    return f"blk.{layer}.{DREAM_TO_GGUF[module]}.{param}"


def read_gguf_tensors(path: Path) -> tuple[dict[str, F32], dict[str, int], dict[str, object]]:
    with llmnb.gguf.open(path) as f:
        data: dict[str, F32] = {}
        types: dict[str, int] = {}
        for n, t in f.tensors.items():
            dt = np.float16 if t.ggml_type == GGMLType.F16 else np.float32
            data[n] = f.raw(n).view(dt).astype(np.float32).reshape(t.shape)
            types[n] = t.ggml_type
        return data, types, dict(f.metadata)


# --- conversions -----------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["llada", "dream"])
@pytest.mark.parametrize("fmt", ["llama.cpp", "diffuse"])
def test_checkpoint_converts_tensor_for_tensor(tmp_path: Path, arch: str, fmt: str) -> None:
    src = write_checkpoint(tmp_path / "hf", arch)
    out = tmp_path / "out.gguf"
    r = convert_checkpoint(tmp_path / "hf", out, arch=None, convention=fmt)   # arch from config
    assert (r.arch, r.convention, r.n_tensors) == (arch, fmt, len(src))
    data, types, md = read_gguf_tensors(out)
    assert set(data) == {expected_name(arch, n) for n in src}
    assert all(t == GGMLType.F32 for t in types.values())
    permuted = fmt == "llama.cpp" and arch == "llada"
    for name, want in src.items():
        got = data[expected_name(arch, name)]
        if permuted and (".q_proj." in name or ".k_proj." in name):
            got = unpermute_qk(got, HEADS if ".q_proj." in name else KV[arch])
        np.testing.assert_array_equal(got, want, err_msg=name)   # BF16 widens exactly
    p = "diffuse." if fmt == "diffuse" else f"{arch}."
    assert md["general.architecture"] == ("diffuse" if fmt == "diffuse" else arch)
    assert (md[p + "block_count"], md[p + "embedding_length"], md[p + "attention.head_count_kv"],
            md[p + "feed_forward_length"]) == (LAYERS, D, KV[arch], FF)
    if fmt == "diffuse":
        assert (md["diffuse.model_type"], md["diffuse.mask_token_id"]) == (arch, MASK)
        assert not any(k.startswith("tokenizer.") for k in md)
    else:
        assert md[f"{arch}.attention.causal"] is False
        assert md["diffusion.shift_logits"] is (arch == "dream")
        assert md["tokenizer.ggml.mask_token_id"] == MASK
    c = config_from_gguf(llmnb.gguf.open(out))
    assert (c.arch, c.causal, c.shift_logits, c.mask_token_id, c.qk_permuted, c.qkv_bias) == (
        arch, False, arch == "dream", MASK, permuted, arch == "dream")


def test_f16_outtype_stores_matrices_f16_and_keeps_norms_and_biases_f32(tmp_path: Path) -> None:
    src = write_checkpoint(tmp_path / "hf", "dream", dtype="F32")
    out = tmp_path / "f16.gguf"
    convert_checkpoint(tmp_path / "hf", out, "dream", outtype="f16")
    data, types, md = read_gguf_tensors(out)
    assert md["general.file_type"] == 1
    for name, want in src.items():
        dst = expected_name("dream", name)
        assert types[dst] == (GGMLType.F16 if want.ndim == 2 else GGMLType.F32), dst
        np.testing.assert_array_equal(data[dst], want.astype(np.float16).astype(np.float32)
                                      if want.ndim == 2 else want)


def test_sharded_checkpoint_gives_the_same_file_as_a_single_one(tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "one", "llada", dtype="F16")
    write_checkpoint(tmp_path / "three", "llada", dtype="F16", shards=3)
    convert_checkpoint(tmp_path / "one", tmp_path / "a.gguf", "llada", name="x")
    convert_checkpoint(tmp_path / "three", tmp_path / "b.gguf", "llada", name="x")
    assert (tmp_path / "a.gguf").read_bytes() == (tmp_path / "b.gguf").read_bytes()


def test_safetensors_reader_reads_each_dtype_exactly(tmp_path: Path) -> None:
    a = np.random.default_rng(3).standard_normal((5, 7)).astype(np.float32)
    for dtype, want in (("F32", a), ("F16", a.astype(np.float16).astype(np.float32)),
                        ("BF16", bf16_round(a))):
        write_safetensors(tmp_path / f"{dtype}.safetensors", {"x": a}, dtype)
        single = tmp_path / "model.safetensors"
        single.write_bytes((tmp_path / f"{dtype}.safetensors").read_bytes())
        entry = read_checkpoint_index(tmp_path)["x"]
        assert entry.shape == (5, 7)
        np.testing.assert_array_equal(read_tensor(entry), want)
        np.testing.assert_array_equal(read_tensor(entry, np.float16), want.astype(np.float16))


def test_conversion_reads_one_tensor_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # streaming: every tensor is written before the next is read (nothing else is kept alive)
    src = write_checkpoint(tmp_path / "hf", "dream")
    events: list[str] = []
    real_read = convert_module.read_tensor
    monkeypatch.setattr(convert_module, "read_tensor",
                        lambda e, *a: (events.append("read"), real_read(e, *a))[1])
    import gguf
    real_write = gguf.GGUFWriter.write_tensor_data
    monkeypatch.setattr(gguf.GGUFWriter, "write_tensor_data",
                        lambda self, t, *a: (events.append("write"), real_write(self, t, *a))[1])
    convert_checkpoint(tmp_path / "hf", tmp_path / "out.gguf", "dream")
    assert events == ["read", "write"] * len(src)


# --- tokenizer.json -> GGUF tokenizer -------------------------------------------------------------

QWEN2_HF_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEXT = "The mask fills in: 12 tokens at once, then 3 more.\nDream and LLaDA denoise! "


def train_qwen2_style_tokenizer(path: Path) -> Any:
    """A small byte-level BPE with Qwen2's pre-tokenizer, as Dream's tokenizer.json is built."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_HF_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<|mask|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TEXT * 20, "masked diffusion language models on the CPU"], trainer)
    tok.save(str(path))
    return tok


def test_tokenizer_json_is_embedded_and_encodes_like_tokenizers(tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    write_checkpoint(hf, "dream")
    cfg = checkpoint_config("dream") | {"vocab_size": 320}
    src = random_checkpoint("dream", 0)
    rng = np.random.default_rng(1)
    for n in ("model.embed_tokens.weight", "lm_head.weight"):     # room for the 300 tokens
        src[n] = rng.standard_normal((320, D)).astype(np.float32)
    write_safetensors(hf / "model.safetensors", src)
    (hf / "config.json").write_text(json.dumps(cfg))
    ref = train_qwen2_style_tokenizer(hf / "tokenizer.json")
    (hf / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": "<|endoftext|>", "pad_token": {"content": "<|endoftext|>"},
        "add_bos_token": False,
        "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}))
    out = tmp_path / "dream.gguf"
    r = convert_checkpoint(hf, out, "dream")
    assert r.tokenizer.startswith("embedded (gpt2 BPE, pre 'qwen2'")
    m = llmnb.load(out)
    md = m.metadata
    assert (md["tokenizer.ggml.model"], md["tokenizer.ggml.pre"]) == ("gpt2", "qwen2")
    assert md["tokenizer.ggml.eos_token_id"] == md["tokenizer.ggml.padding_token_id"] == 0
    assert md["tokenizer.chat_template"].startswith("{% for m in messages %}")
    tokens = md["tokenizer.ggml.tokens"]
    assert isinstance(tokens, list) and len(tokens) == 320 and tokens[-1] == "[PAD319]"
    assert md["tokenizer.ggml.token_type"][:2].tolist() == [3, 3]           # CONTROL specials
    assert m.tokenizer.encode(TEXT) == ref.encode(TEXT).ids
    assert m.tokenizer.decode(m.tokenizer.encode(TEXT)) == TEXT


def test_pre_tokenizer_names_follow_llama_cpp() -> None:
    def split(rx: str) -> dict[str, Any]:
        return {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": rx}, "behavior": "Isolated"},
            {"type": "ByteLevel", "use_regex": False}]}
    assert detect_pre(split(QWEN2_HF_REGEX)) == "qwen2"
    assert detect_pre(split(QWEN2_HF_REGEX.replace(r"|\p{N}|", r"|\p{N}{1,3}|"))) == "llama-bpe"
    assert detect_pre({"type": "ByteLevel", "use_regex": True}) == "gpt2"
    assert detect_pre({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\p{N}"}, "behavior": "Isolated"},
        {"type": "ByteLevel", "use_regex": True}]}) == "smollm"
    assert detect_pre({"type": "Metaspace"}) is None
    # the guess answers with names from the one table the tokenizer is built from
    assert {"qwen2", "llama-bpe", "gpt2", "smollm"} <= set(PRE_TOKENIZERS)


def test_an_unreadable_tokenizer_json_is_a_convert_error(tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "hf", "llada")
    (tmp_path / "hf" / "tokenizer.json").write_text("{")
    with pytest.raises(ConvertError, match=r"tokenizer.json: model.vocab: expected a tokenizers "
                                           r"JSON with model.vocab") as e:
        convert_checkpoint(tmp_path / "hf", tmp_path / "o.gguf")
    assert e.value.exit_code == EXIT_INPUT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def test_without_tokenizer_json_a_synthetic_vocabulary_is_written(tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "hf", "llada")
    r = convert_checkpoint(tmp_path / "hf", tmp_path / "o.gguf", "llada")
    assert r.tokenizer.startswith("none")
    _, _, md = read_gguf_tensors(tmp_path / "o.gguf")
    assert md["tokenizer.ggml.tokens"][:2] == ["<tok0>", "<tok1>"]


# --- errors ---------------------------------------------------------------------------------

def test_missing_config_json_is_an_input_error(tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "hf", "llada")
    (tmp_path / "hf" / "config.json").unlink()
    with pytest.raises(ConvertError, match=r"config.json: expected the checkpoint's config.json"):
        convert_checkpoint(tmp_path / "hf", tmp_path / "o.gguf")
    assert ConvertError.exit_code == EXIT_INPUT


def test_unknown_architecture_is_refused(tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "hf", "llada")
    (tmp_path / "hf" / "config.json").write_text(json.dumps(
        checkpoint_config("llada")
        | {"architectures": ["MambaForCausalLM"], "model_type": "mamba"}))
    with pytest.raises(ConvertError,
                       match=r"expected a Llama, Qwen2, LLaDA, Dream or Gemma 3 checkpoint"):
        convert_checkpoint(tmp_path / "hf", tmp_path / "o.gguf")
    with pytest.raises(ConvertError, match=r"arch: expected one of llama, qwen2, llada, dream"):
        convert_checkpoint(tmp_path / "hf", tmp_path / "o.gguf", arch="gpt2")


def test_missing_tensor_is_named(tmp_path: Path) -> None:
    src = random_checkpoint("dream", 0)
    del src["model.layers.1.mlp.up_proj.weight"]
    (tmp_path / "config.json").write_text(json.dumps(checkpoint_config("dream")))
    write_safetensors(tmp_path / "model.safetensors", src)
    with pytest.raises(ConvertError, match=r"tensor 'blk.1.ffn_up.weight' is missing"):
        convert_checkpoint(tmp_path, tmp_path / "o.gguf")
    assert not (tmp_path / "o.gguf").exists()


def test_unsupported_dtype_is_a_model_error(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, "llada")
    path = tmp_path / "model.safetensors"
    blob = path.read_bytes()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    header["model.transformer.ln_f.weight"]["dtype"] = "I16"          # same byte count as BF16
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + blob[8 + n:])
    with pytest.raises(ModelError,
                       match=r"'model.transformer.ln_f.weight': expected dtype .*got I16"):
        convert_checkpoint(tmp_path, tmp_path / "o.gguf")


def test_failure_mid_way_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_checkpoint(tmp_path / "hf", "dream")
    calls: list[int] = []
    real_read = convert_module.read_tensor

    def failing(e: Any, *a: Any) -> F32:
        calls.append(1)
        if len(calls) == 5:
            raise ConvertError("disk on fire")
        return real_read(e, *a)
    monkeypatch.setattr(convert_module, "read_tensor", failing)
    with pytest.raises(ConvertError, match="disk on fire"):
        convert_checkpoint(tmp_path / "hf", tmp_path / "o.gguf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def test_cli_convert_writes_a_loadable_file_and_reports_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_checkpoint(tmp_path / "hf", "llada")
    out = tmp_path / "llada.gguf"
    assert cli_main(["convert", str(tmp_path / "hf"), str(out), "--arch", "llada",
                     "--outtype", "f16", "--format", "diffuse"]) == EXIT_OK
    err = capsys.readouterr().err
    assert "llada, diffuse format, 21 tensors" in err
    c = config_from_gguf(llmnb.gguf.open(out))
    assert (c.arch, c.convention, c.qk_permuted) == ("llada", "diffuse", False)
    assert cli_main(["convert", str(tmp_path / "nothing"), str(out)]) == EXIT_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("llmnb: error:") and "config.json" in err[0]


@pytest.mark.parametrize("arch", SUPPORTED_ARCHS)
def test_cli_convert_takes_every_supported_arch(arch: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """--arch offers what convert_checkpoint converts (gemma3 included), no other list: each is
    taken by the parser, so a missing checkpoint is the error reported, not the flag."""
    assert cli_main(["convert", str(tmp_path / "nothing"), str(tmp_path / "o.gguf"),
                     "--arch", arch]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert "config.json" in err and "invalid choice" not in err


def test_wrong_shape_names_both_tensors(tmp_path: Path) -> None:
    src = random_checkpoint("dream", 0)
    w = src["model.layers.0.mlp.down_proj.weight"]
    src["model.layers.0.mlp.down_proj.weight"] = w[:, :-1].copy()
    (tmp_path / "config.json").write_text(json.dumps(checkpoint_config("dream")))
    write_safetensors(tmp_path / "model.safetensors", src)
    with pytest.raises(ConvertError, match=r"tensor 'blk.0.ffn_down.weight': expected shape "
                       r"\(\d+, \d+\), got \(\d+, \d+\) \(checkpoint tensor "
                       r"'model.layers.0.mlp.down_proj.weight'\), as config.json gives"):
        convert_checkpoint(tmp_path, tmp_path / "o.gguf")
    assert not (tmp_path / "o.gguf").exists()
