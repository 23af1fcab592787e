"""HF checkpoint (safetensors + config.json) -> GGUF, tensor by tensor (``llmnb convert``).

Reads Llama / Qwen2 / Gemma 3 checkpoints, LLaDA's own OLMo-style layout and Dream's (Qwen2
names) -- their config.json through ``hf_config``, their tensors through ``safetensors`` -- and
writes either of the two conventions the engine reads (DESIGN "Model files"):

- ``llama.cpp``: arch = `arch`, keys under ``{arch}.``; Q/K rows (and biases) permuted per head
  for ``llama``/``llada`` (ggml's NORM rope rotates adjacent pairs: reference/oracle.md §6.1);
  ``{arch}.attention.causal = false``, ``diffusion.shift_logits`` and
  ``tokenizer.ggml.mask_token_id`` for llada/dream; the tokenizer embedded (below).
- ``diffuse`` (llada/dream only; reference/diffuse-cpp.md §2.1): arch ``diffuse``, keys under
  ``diffuse.``, ``diffuse.model_type``, ``diffuse.mask_token_id``, nothing permuted, no
  tokenizer (keep ``tokenizer.json`` beside the GGUF: ``llmnb.load`` looks for it there).

``outtype`` f16 stores 2-D weights as F16 and keeps 1-D norms and biases F32 (ggml's rule). A
tied checkpoint (``tie_word_embeddings`` / ``weight_tying``) gets no ``output.weight``. A
``head_dim`` other than hidden / heads becomes ``attention.key_length``/``value_length`` and
``rope.dimension_count``; ``rope_scaling`` linear and YaRN become ``rope.scaling.*`` keys and
Llama 3's becomes the ``rope_freqs.weight`` divisors, as llama.cpp's converter writes them.

Streaming: only the safetensors headers are read up front, the GGUF header and tensor table
are written from them, then each tensor is read, converted and written before the next one is
touched (gguf-py's ``GGUFWriter`` in its incremental mode) — so memory is a few copies of the
largest tensor, whatever the checkpoint size. The output appears atomically.

Tokenizer: a byte-level BPE ``tokenizer.json`` beside the checkpoint is embedded as
``tokenizer.ggml.*`` (the tokenizer layer's ``llmnb.tokenizer.convert``); without one (or with
another kind) a synthetic ``<tokN>`` vocabulary keeps strict loaders (llama.cpp) happy, and
``ConvertResult.tokenizer`` says so.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from llmnb.gguf.constants import ARRAY, BOOL, FLOAT32, STRING, UINT32
from llmnb.gguf.reader import MetadataField
from llmnb.model.config import DIFFUSION_ARCHS, PERMUTED_ARCHS, SUPPORTED_ARCHS, check_heads, \
    shape_problem, tensor_shapes
from llmnb.model.hf_config import ConvertError, HParams, detect_arch, llama3_rope_factors, \
    read_config, read_gemma3, read_hparams
from llmnb.model.safetensors import TensorEntry, check_dtype, read_checkpoint_index, \
    read_tensor
from llmnb.model.weights import permute_qk
from llmnb.output import atomic_path, check_output
from llmnb.tokenizer.convert import synthetic_vocab, tokenizer_fields
from llmnb.tokenizer.errors import TokenizerError

import gguf  # gguf-py: the reference writer, used in its incremental (streaming) mode

FORMATS = ("llama.cpp", "diffuse")
OUTTYPES = {"f32": 0, "f16": 1}     # general.file_type: ALL_F32, MOSTLY_F16

Progress = Callable[[int, int], None]   # (tensors done, tensors in all)


# --- tensor names: HF / LLaDA -> GGUF ----------------------------------------------------------

_TOP = {
    "model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "model.transformer.wte.weight": "token_embd.weight",        # LLaDA (OLMo style)
    "model.transformer.ln_f.weight": "output_norm.weight",
    "model.transformer.ff_out.weight": "output.weight",
}
_BLOCK = {
    # HF Llama / Qwen2 / Dream
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    # LLaDA: ff_proj is the gate, up_proj the up, and the block's ff_out the down projection
    "attn_norm": "attn_norm", "q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v",
    "attn_out": "attn_output", "ff_norm": "ffn_norm", "ff_proj": "ffn_gate", "up_proj": "ffn_up",
    "ff_out": "ffn_down",
}
# Gemma 3 normalises around both sub-blocks: its post_attention_layernorm is an output norm,
# pre_feedforward_layernorm is the FFN's input norm; q/k norms per head.
_GEMMA3_BLOCK = _BLOCK | {
    "post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffw_norm", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
}
_BLOCK_RE = re.compile(r"^model\.(?:layers|transformer\.blocks)\.(\d+)\.(.+)\.(weight|bias)$")


def gguf_name(src: str, arch: str = "llama") -> str | None:
    """The GGUF name of checkpoint tensor `src`, or None if it has no place in a GGUF."""
    if src in _TOP:
        return _TOP[src]
    m = _BLOCK_RE.match(src)
    block = _GEMMA3_BLOCK if arch == "gemma3" else _BLOCK
    if m is None or m.group(2) not in block:
        return None
    return f"blk.{m.group(1)}.{block[m.group(2)]}.{m.group(3)}"


def gguf_order(name: str) -> tuple[int, int, str]:
    """token_embd, then blocks in order, then output_norm, output."""
    if name.startswith("blk."):
        return (1, int(name.split(".")[1]), name)
    return (0 if name.startswith("token_embd") else 2, 0, name)


def expected_shapes(hp: HParams, n_vocab: int, biases: bool, output: bool,
                    gemma: bool = False) -> dict[str, tuple[int, ...]]:
    """Every tensor a GGUF of these sizes must hold, with its numpy shape."""
    return tensor_shapes(hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv, hp.d_head,
                         hp.n_ff, n_vocab, biases, output, qk_norm=gemma, post_norms=gemma)


@dataclass(frozen=True)
class PlannedTensor:
    """One GGUF tensor: where its data comes from and how it is stored."""

    name: str
    source: TensorEntry
    shape: tuple[int, ...]
    f16: bool
    permute_heads: int        # 0 = no permutation, else the head count to permute with
    shift: float = 0.0        # added to the values (Gemma's norms store w for (1 + w))


def plan_tensors(hf: Path, hp: HParams, table: dict[str, TensorEntry], arch: str, outtype: str,
                 permute: bool) -> list[PlannedTensor]:
    """Map, check and order every tensor from the headers alone (no data read yet)."""
    mapped: dict[str, TensorEntry] = {}
    for src, entry in table.items():
        if src.endswith("rotary_emb.inv_freq"):
            continue
        if hp.tied and src in ("lm_head.weight", "model.transformer.ff_out.weight"):
            continue  # tied: the loader falls back to token_embd.weight
        dst = gguf_name(src, arch)
        if dst is None:
            raise ConvertError(f"{hf}: tensor {src!r}: expected a {arch} checkpoint tensor name "
                               f"(model.layers.N.* / model.transformer.blocks.N.*)")
        if dst in mapped:
            raise ConvertError(f"{hf}: tensors {mapped[dst].name!r} and {src!r} both map to "
                               f"{dst!r}")
        check_dtype(entry)
        mapped[dst] = entry
    emb = mapped.get("token_embd.weight")
    if emb is None or len(emb.shape) != 2:
        raise ConvertError(f"{hf}: expected a 2-D token embedding (model.embed_tokens.weight "
                           f"or model.transformer.wte.weight)")
    biases = "blk.0.attn_q.bias" in mapped
    want = expected_shapes(hp, emb.shape[0], biases, "output.weight" in mapped, arch == "gemma3")
    problem = shape_problem(want, {name: entry.shape for name, entry in mapped.items()})
    if problem is not None:
        name, what = problem
        source = f" (checkpoint tensor {mapped[name].name!r})" if name in mapped else ""
        raise ConvertError(f"{hf}: {what}{source}, as config.json gives the shapes")
    extra = sorted(set(mapped) - set(want))
    if extra:
        raise ConvertError(f"{hf}: tensors {[mapped[n].name for n in extra]}: expected "
                           f"{hp.n_layer} layers as config.json says")
    plan = []
    for name in sorted(mapped, key=gguf_order):
        entry = mapped[name]
        heads = 0
        if permute and (".attn_q." in name or ".attn_k." in name):
            heads = hp.n_head if ".attn_q." in name else hp.n_head_kv
        # Gemma's RMSNorm multiplies by (1 + w); llama.cpp's GGUFs store 1 + w (its converter
        # adds the 1), so the engines run a plain RMSNorm
        shift = 1.0 if arch == "gemma3" and name.endswith("norm.weight") else 0.0
        f16 = outtype == "f16" and len(entry.shape) == 2
        plan.append(PlannedTensor(name, entry, entry.shape, f16, heads, shift))
    return plan


def load_planned(t: PlannedTensor) -> npt.NDArray[Any]:
    """Read, shift, permute and cast one tensor: what goes into the GGUF."""
    if t.shift:
        w = (read_tensor(t.source, np.float32) + np.float32(t.shift)).astype(
            np.float16 if t.f16 else np.float32)
    else:
        w = read_tensor(t.source, np.float16 if t.f16 else np.float32)   # cast while reading
    return permute_qk(w, t.permute_heads) if t.permute_heads else w


# --- metadata ----------------------------------------------------------------------------------

def _u32(key: str, v: int) -> MetadataField:
    return MetadataField(key, UINT32, int(v))


def _f32(key: str, v: float) -> MetadataField:
    return MetadataField(key, FLOAT32, float(v))


def model_fields(hp: HParams, arch: str, convention: str, outtype: str, n_vocab: int,
                 name: str, source: Path) -> list[MetadataField]:
    """``general.*`` and the ``{arch}.`` / ``diffuse.`` hyper-parameter keys."""
    p = ("diffuse" if convention == "diffuse" else arch) + "."
    fields = [MetadataField("general.name", STRING, name)]
    if convention == "llama.cpp":
        fields.append(_u32("general.file_type", OUTTYPES[outtype]))
    fields += [
        _u32(p + "context_length", hp.n_ctx), _u32(p + "embedding_length", hp.n_embd),
        _u32(p + "block_count", hp.n_layer), _u32(p + "feed_forward_length", hp.n_ff),
        _u32(p + "attention.head_count", hp.n_head),
        _u32(p + "attention.head_count_kv", hp.n_head_kv),
        _f32(p + "rope.freq_base", hp.theta), _f32(p + "attention.layer_norm_rms_epsilon", hp.eps),
    ]
    if convention == "llama.cpp":
        fields.append(_u32(p + "rope.dimension_count", hp.d_head))
        if hp.d_head != hp.n_embd // hp.n_head or arch == "gemma3":   # else the loaders' default
            fields += [_u32(p + "attention.key_length", hp.d_head),
                       _u32(p + "attention.value_length", hp.d_head)]
        if arch == "gemma3":
            fields += gemma3_fields(hp, p)
        if hp.rope is not None and hp.rope.kind in ("linear", "yarn"):
            fields += [MetadataField(p + "rope.scaling.type", STRING, hp.rope.kind),
                       _f32(p + "rope.scaling.factor", hp.rope.factor)]
            if hp.rope.kind == "yarn":
                fields.append(_u32(p + "rope.scaling.original_context_length", hp.rope.orig_ctx))
    elif hp.d_head != hp.n_embd // hp.n_head or hp.rope is not None:
        raise ConvertError(f"{source / 'config.json'}: head_dim {hp.d_head} / rope_scaling "
                           f"{hp.rope}: the diffuse format has keys for neither (expected "
                           f"head_dim = hidden_size / heads and no rope scaling)")
    fields.append(_u32(p + "vocab_size", n_vocab))
    if arch in DIFFUSION_ARCHS:
        if hp.mask_token_id is None:
            raise ConvertError(f"{source / 'config.json'}: mask_token_id: expected the mask id "
                               f"of a {arch} checkpoint")
        if convention == "llama.cpp":
            fields += [MetadataField(p + "attention.causal", BOOL, False),
                       MetadataField("diffusion.shift_logits", BOOL, arch == "dream"),
                       _u32("tokenizer.ggml.mask_token_id", hp.mask_token_id)]
        else:
            fields += [_u32(p + "mask_token_id", hp.mask_token_id),
                       MetadataField(p + "model_type", STRING, arch)]
    return fields


def gemma3_fields(hp: HParams, p: str) -> list[MetadataField]:
    """Gemma 3's keys as llama.cpp reads them: the window, which layers slide (an array, so
    any layout round-trips), their RoPE base, and the final soft-capping when there is one."""
    fields = [_u32(p + "attention.sliding_window", hp.sliding_window),
              MetadataField(p + "attention.sliding_window_pattern", ARRAY, list(hp.swa_layers),
                            BOOL),
              _f32(p + "rope.freq_base_swa", hp.theta_swa)]
    if hp.logit_softcap:
        fields.append(_f32(p + "final_logit_softcapping", hp.logit_softcap))
    return fields


# --- the conversion ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ConvertResult:
    arch: str
    convention: str
    n_tensors: int
    tokenizer: str            # what was done about the tokenizer, for the user


def convert_checkpoint(hf_dir: str | os.PathLike[str], out_path: str | os.PathLike[str],
                       arch: str | None = None, outtype: str = "f32",
                       convention: str = "llama.cpp", name: str | None = None,
                       progress: Progress | None = None) -> ConvertResult:
    """Convert an HF checkpoint of `arch` (detected from config.json when None) to GGUF."""
    hf = Path(hf_dir)
    if outtype not in OUTTYPES:
        raise ConvertError(f"{hf}: outtype: expected f32 or f16, got {outtype!r}")
    if convention not in FORMATS:
        raise ConvertError(f"{hf}: format: expected llama.cpp or diffuse, got {convention!r}")
    check_output(out_path)                      # before any work: a device is never replaced
    config = read_config(hf)
    arch = arch or detect_arch(config, hf / "config.json")
    if arch not in SUPPORTED_ARCHS:
        raise ConvertError(f"{hf}: arch: expected one of {', '.join(SUPPORTED_ARCHS)}, "
                           f"got {arch!r}")
    if convention == "diffuse" and arch not in DIFFUSION_ARCHS:
        raise ConvertError(f"{hf}: the diffuse format holds {' or '.join(DIFFUSION_ARCHS)}, "
                           f"got {arch!r}")
    hp = read_hparams(config, hf / "config.json")
    if arch == "gemma3":
        hp = read_gemma3(config, hf / "config.json", hp)
    where = f"{hf / 'config.json'}: attention heads"
    check_heads(hp.n_embd, hp.n_head, hp.n_head_kv, where, f"{where} (key/value)", ConvertError)
    plan = plan_tensors(hf, hp, read_checkpoint_index(hf), arch, outtype,
                        permute=convention == "llama.cpp" and arch in PERMUTED_ARCHS)
    n_vocab = plan[0].shape[0]                                  # token_embd comes first
    fields = model_fields(hp, arch, convention, outtype, n_vocab, name or f"{arch}-{hf.name}", hf)
    note = "none (the diffuse format carries no tokenizer: keep tokenizer.json beside the GGUF)"
    if convention == "llama.cpp":
        try:
            tok, note = tokenizer_fields(hf, n_vocab)
        except TokenizerError as e:     # one of the checkpoint's files: a bad input (EXIT_INPUT)
            raise ConvertError(str(e)) from None
        fields += tok or synthetic_vocab(n_vocab)
    gguf_arch = "diffuse" if convention == "diffuse" else arch
    extra: dict[str, npt.NDArray[np.float32]] = {}
    if hp.rope is not None and hp.rope.kind == "llama3":      # (the diffuse format refused it)
        extra["rope_freqs.weight"] = llama3_rope_factors(hp.rope, hp.theta, hp.d_head)
    with atomic_path(out_path) as tmp:
        w = gguf.GGUFWriter(tmp, gguf_arch)
        for f in fields:
            value: Any = f.value.tolist() if isinstance(f.value, np.ndarray) else f.value
            sub = gguf.GGUFValueType(f.item_type) if f.item_type is not None else None
            w.add_key_value(f.key, value, gguf.GGUFValueType(f.value_type), sub_type=sub)
        for t in plan:
            dtype = np.float16 if t.f16 else np.float32
            n = int(np.prod(t.shape, dtype=np.int64))
            w.add_tensor_info(t.name, t.shape, np.dtype(dtype), n * np.dtype(dtype).itemsize)
        for extra_name, data in extra.items():
            w.add_tensor_info(extra_name, data.shape, data.dtype, data.nbytes)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for i, t in enumerate(plan):
            w.write_tensor_data(load_planned(t))        # one tensor in memory at a time
            if progress is not None:
                progress(i + 1, len(plan))
        for data in extra.values():
            w.write_tensor_data(data)
        w.close()
    return ConvertResult(arch, convention, len(plan) + len(extra), note)
