"""HF checkpoint (safetensors + config.json) -> GGUF, tensor by tensor (``llmnb convert``).

Reads Llama / Qwen2 checkpoints, LLaDA's own OLMo-style layout and Dream's (Qwen2 names) and
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

Tokenizer: a byte-level BPE ``tokenizer.json`` beside the checkpoint (Llama 3, Qwen2/Dream,
GPT-2 style) is embedded as ``tokenizer.ggml.model = gpt2`` with its tokens, token types,
merges, the pre-tokenizer name, BOS/EOS/PAD ids and the chat template from
``tokenizer_config.json``. Without one (or with another kind) a synthetic ``<tokN>`` vocabulary
keeps strict loaders (llama.cpp) happy, and ``ConvertResult.tokenizer`` says so.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from llmnb.gguf.constants import ARRAY, BOOL, FLOAT32, INT32, STRING, UINT32
from llmnb.gguf.reader import MetadataField
from llmnb.gguf.writer import atomic_path
from llmnb.model.config import tensor_shapes
from llmnb.model.safetensors import CheckpointError, TensorEntry, check_dtype, \
    read_checkpoint_index, read_tensor

import gguf  # gguf-py: the reference writer, used in its incremental (streaming) mode

ARCHS = ("llama", "qwen2", "llada", "dream", "gemma3")
FORMATS = ("llama.cpp", "diffuse")
OUTTYPES = {"f32": 0, "f16": 1}     # general.file_type: ALL_F32, MOSTLY_F16
PERMUTED = ("llama", "llada")       # llama.cpp rotates adjacent pairs for these (NORM rope)
DIFFUSION = ("llada", "dream")

Progress = Callable[[int, int], None]   # (tensors done, tensors in all)


class ConvertError(CheckpointError):
    """A checkpoint that cannot be converted: missing config.json, unknown arch, missing tensors."""


# --- config.json -----------------------------------------------------------------------------

@dataclass(frozen=True)
class HParams:
    """The hyper-parameters a GGUF needs, from any of the config.json dialects."""

    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_ctx: int
    eps: float
    theta: float
    tied: bool
    mask_token_id: int | None
    head_dim: int = 0            # config.json's head_dim; 0: n_embd / n_head
    rope: RopeScaling | None = None
    # Gemma 3 (read_gemma3): sliding-window layers and their RoPE base, final soft-capping
    sliding_window: int = 0
    swa_layers: tuple[bool, ...] = ()
    theta_swa: float = 0.0
    logit_softcap: float = 0.0

    @property
    def d_head(self) -> int:
        return self.head_dim or self.n_embd // self.n_head


@dataclass(frozen=True)
class RopeScaling:
    """``rope_scaling`` / ``rope_parameters`` of config.json, as llama.cpp's converter keeps it:
    linear and YaRN as GGUF keys, Llama 3's as per-frequency divisors (``rope_freqs.weight``)."""

    kind: str                    # linear | yarn | llama3
    factor: float
    orig_ctx: int = 0            # yarn, llama3: the context the model was trained on
    low_freq_factor: float = 1.0     # llama3
    high_freq_factor: float = 4.0    # llama3


def read_config(hf_dir: Path) -> dict[str, Any]:
    path = hf_dir / "config.json"
    try:
        c = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConvertError(f"{path}: expected the checkpoint's config.json, found none") from None
    except (OSError, ValueError) as e:
        raise ConvertError(f"{path}: expected a JSON object ({e})") from None
    if not isinstance(c, dict):
        raise ConvertError(f"{path}: expected a JSON object")
    return c


def read_hparams(c: dict[str, Any], source: Path) -> HParams:
    """HF (``hidden_size`` ...) or LLaDA/OLMo (``d_model`` ...) keys; ``rope_theta`` at top
    level (transformers 4, LLaDA, Dream) or in ``rope_parameters`` (transformers >= 5)."""
    def get(*keys: str, default: Any = None) -> Any:
        for k in keys:
            if c.get(k) is not None:
                return c[k]
        if default is None:
            raise ConvertError(f"{source}: expected one of {', '.join(keys)}")
        return default

    theta = c.get("rope_theta")
    if theta is None:
        params = c.get("rope_parameters")
        if isinstance(params, dict):                     # Gemma 3 keeps one per layer type
            params = params.get("full_attention", params)
        theta = params.get("rope_theta", 10000.0) if isinstance(params, dict) else 10000.0
    try:
        n_head = int(get("num_attention_heads", "n_heads"))
        head_dim = c.get("head_dim")
        return HParams(
            n_layer=int(get("num_hidden_layers", "n_layers")),
            n_embd=int(get("hidden_size", "d_model")),
            n_head=n_head,
            n_head_kv=int(get("num_key_value_heads", "n_kv_heads", default=n_head)),
            n_ff=int(get("intermediate_size", "mlp_hidden_size")),
            n_ctx=int(get("max_position_embeddings", "max_sequence_length", default=4096)),
            eps=float(get("rms_norm_eps", "layer_norm_eps", default=1e-5)),
            theta=float(theta),
            tied=bool(get("tie_word_embeddings", "weight_tying", default=False)),
            mask_token_id=None if c.get("mask_token_id") is None else int(c["mask_token_id"]),
            head_dim=0 if head_dim is None else int(head_dim),
            rope=read_rope_scaling(c, source),
        )
    except (TypeError, ValueError) as e:
        raise ConvertError(f"{source}: expected numbers for the model's sizes ({e})") from None


# YaRN parameters llama.cpp reads for none of the archs here: a checkpoint that sets them
# would run differently there, so it is refused rather than converted with them dropped.
YARN_FIXED = {"beta_fast": 32.0, "beta_slow": 1.0, "attention_factor": None, "mscale": None,
              "mscale_all_dim": None, "extrapolation_factor": None}


def read_rope_scaling(c: dict[str, Any], source: Path) -> RopeScaling | None:
    """The RoPE scaling of config.json (``rope_scaling``, or transformers >= 5's
    ``rope_parameters``; ``type`` or ``rope_type``): None for the default rotary embedding,
    linear / yarn / llama3 as llama.cpp's converter reads them, any other kind refused."""
    params = c.get("rope_scaling") or c.get("rope_parameters") or {}
    if not isinstance(params, dict):
        raise ConvertError(f"{source}: rope_scaling: expected an object, got {params!r}")
    params = params.get("full_attention", params)       # Gemma 3: the global layers' RoPE
    kind = str(params.get("rope_type", params.get("type", "default"))).lower()
    if kind == "default":
        return None
    if kind not in ("linear", "yarn", "llama3"):
        raise ConvertError(f"{source}: rope_scaling type {kind!r}: expected linear, yarn or "
                           f"llama3 (the RoPE scalings llmnb computes)")
    factor = float(params.get("factor") or (8.0 if kind == "llama3" else 0.0))
    if not factor > 0.0:
        raise ConvertError(f"{source}: rope_scaling.factor: expected a positive number for "
                           f"{kind} scaling, got {params.get('factor')!r}")
    orig = params.get("original_max_position_embeddings", c.get("original_max_position_embeddings"))
    if kind == "linear":
        return RopeScaling(kind, factor)
    if kind == "llama3":
        return RopeScaling(kind, factor, int(orig or 8192), float(params.get("low_freq_factor", 1.0)),
                           float(params.get("high_freq_factor", 4.0)))
    if orig is None:
        raise ConvertError(f"{source}: rope_scaling.original_max_position_embeddings: expected "
                           f"the trained context length for yarn scaling")
    for key, default in YARN_FIXED.items():
        value = params.get(key)
        if value is not None and (default is None or float(value) != default):
            raise ConvertError(f"{source}: rope_scaling.{key} = {value!r}: llama.cpp computes YaRN "
                               f"for these architectures with its defaults only (beta_fast 32, "
                               f"beta_slow 1, the attention factor from the factor)")
    return RopeScaling(kind, factor, int(orig))


def read_gemma3(c: dict[str, Any], source: Path, hp: HParams) -> HParams:
    """Gemma 3's extra keys: ``layer_types`` (or every ``sliding_window_pattern``-th layer
    global), ``sliding_window``, the sliding layers' RoPE base, ``final_logit_softcapping``.
    llama.cpp scales q.k by 1/sqrt(head_dim) (1/sqrt(hidden/heads) for the 62-layer 27B) and
    has no key for another ``query_pre_attn_scalar``, nor for attention soft-capping, so a
    checkpoint that needs either is refused."""
    types = c.get("layer_types")
    if types is None:
        period = int(c.get("sliding_window_pattern") or c.get("_sliding_window_pattern") or 6)
        types = ["full_attention" if (i + 1) % period == 0 else "sliding_attention"
                 for i in range(hp.n_layer)]
    if len(types) != hp.n_layer or not set(types) <= {"full_attention", "sliding_attention"}:
        raise ConvertError(f"{source}: layer_types: expected {hp.n_layer} of full_attention / "
                           f"sliding_attention, got {types!r}")
    scalar = c.get("query_pre_attn_scalar", hp.d_head)
    want = hp.n_embd // hp.n_head if hp.n_layer == 62 else hp.d_head
    if scalar != want:
        raise ConvertError(f"{source}: query_pre_attn_scalar {scalar}: expected {want} (the "
                           f"attention scale llama.cpp gives Gemma 3)")
    if c.get("attn_logit_softcapping") is not None:
        raise ConvertError(f"{source}: attn_logit_softcapping: expected none (Gemma 3 has none)")
    params = c.get("rope_parameters") or {}
    local = params.get("sliding_attention", {}) if isinstance(params, dict) else {}
    theta_swa = float(local.get("rope_theta", c.get("rope_local_base_freq", 10000.0)))
    if str(local.get("rope_type", "default")) != "default":
        raise ConvertError(f"{source}: rope_parameters.sliding_attention: expected the default "
                           f"RoPE (llama.cpp never scales Gemma 3's sliding layers)")
    return replace(hp, sliding_window=int(c.get("sliding_window") or 0),
                   swa_layers=tuple(t == "sliding_attention" for t in types), theta_swa=theta_swa,
                   logit_softcap=float(c.get("final_logit_softcapping") or 0.0))


def llama3_rope_factors(rope: RopeScaling, theta: float, head_dim: int) -> npt.NDArray[np.float32]:
    """Llama 3's per-frequency divisors (``rope_freqs.weight``), as llama.cpp's converter
    computes them: 1 for wavelengths below orig_ctx / high_freq_factor, `factor` above
    orig_ctx / low_freq_factor, and a smooth blend between."""
    freqs = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim))
    out = np.empty(len(freqs), dtype=np.float32)
    low_wavelen = rope.orig_ctx / rope.low_freq_factor
    high_wavelen = rope.orig_ctx / rope.high_freq_factor
    for i, freq in enumerate(freqs.astype(np.float64)):
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out[i] = 1.0
        elif wavelen > low_wavelen:
            out[i] = rope.factor
        else:
            smooth = ((rope.orig_ctx / wavelen - rope.low_freq_factor)
                      / (rope.high_freq_factor - rope.low_freq_factor))
            out[i] = 1.0 / ((1.0 - smooth) / rope.factor + smooth)
    return out


def detect_arch(c: dict[str, Any], source: Path) -> str:
    """llama | qwen2 | llada | dream | gemma3 from ``model_type`` / ``architectures``."""
    kinds = [str(c.get("model_type", ""))] + [str(a) for a in c.get("architectures") or []]
    text = " ".join(kinds).lower()
    for arch, marks in (("llada", ("llada",)), ("dream", ("dream",)), ("qwen2", ("qwen2",)),
                        ("gemma3", ("gemma3",)), ("llama", ("llama",))):
        if any(m in text for m in marks):
            return arch
    raise ConvertError(f"{source}: model_type/architectures {kinds}: expected a Llama, Qwen2, "
                       f"LLaDA, Dream or Gemma 3 checkpoint (or give --arch)")


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


def permute_qk(w: npt.NDArray[Any], n_head: int) -> npt.NDArray[Any]:
    """HF half-split rows -> ggml NORM-rope interleaved rows, per head (oracle.md §6.1).

    New row h*d + 2i + j = old row h*d + j*d/2 + i. Works on a weight (rows, n_in) or a bias."""
    return np.ascontiguousarray(
        w.reshape(n_head, 2, -1, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


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
            raise ConvertError(f"{hf}: tensors {mapped[dst].name!r} and {src!r} both map to {dst!r}")
        check_dtype(entry)
        mapped[dst] = entry
    emb = mapped.get("token_embd.weight")
    if emb is None or len(emb.shape) != 2:
        raise ConvertError(f"{hf}: expected a 2-D token embedding (model.embed_tokens.weight "
                           f"or model.transformer.wte.weight)")
    biases = "blk.0.attn_q.bias" in mapped
    want = expected_shapes(hp, emb.shape[0], biases, "output.weight" in mapped, arch == "gemma3")
    for name, shape in want.items():
        found = mapped.get(name)
        if found is None:
            raise ConvertError(f"{hf}: tensor for {name!r} is missing (expected shape {shape} "
                               f"from config.json)")
        if found.shape != shape:
            raise ConvertError(f"{hf}: tensor {found.name!r}: expected shape {shape} from "
                               f"config.json, got {found.shape}")
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
        plan.append(PlannedTensor(name, entry, entry.shape, outtype == "f16" and len(entry.shape) == 2,
                                  heads, shift))
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
    if arch in DIFFUSION:
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
              MetadataField(p + "attention.sliding_window_pattern", ARRAY, list(hp.swa_layers), BOOL),
              _f32(p + "rope.freq_base_swa", hp.theta_swa)]
    if hp.logit_softcap:
        fields.append(_f32(p + "final_logit_softcapping", hp.logit_softcap))
    return fields


def synthetic_vocab(n_vocab: int) -> list[MetadataField]:
    """``<tok0>`` ... : a vocabulary that keeps strict loaders (llama.cpp) happy."""
    return [
        MetadataField("tokenizer.ggml.model", STRING, "llama"),
        MetadataField("tokenizer.ggml.tokens", ARRAY, [f"<tok{i}>" for i in range(n_vocab)],
                      STRING),
        MetadataField("tokenizer.ggml.scores", ARRAY, np.zeros(n_vocab, np.float32), FLOAT32),
        MetadataField("tokenizer.ggml.token_type", ARRAY, np.ones(n_vocab, np.int32), INT32),
    ]


# --- tokenizer.json -> tokenizer.ggml.* -----------------------------------------------------------

TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5


def _split_patterns(pre: Any) -> tuple[list[str], bool]:
    """The Split regexes of a tokenizer.json pre-tokenizer, and whether ByteLevel splits too."""
    steps = pre.get("pretokenizers", [pre]) if isinstance(pre, dict) else []
    regexes: list[str] = []
    byte_level_regex = False
    for s in steps:
        if not isinstance(s, dict):
            continue
        if s.get("type") == "Split" and isinstance(s.get("pattern"), dict):
            regexes.append(str(s["pattern"].get("Regex", s["pattern"].get("String", ""))))
        if s.get("type") == "ByteLevel" and s.get("use_regex", True):
            byte_level_regex = True
    return regexes, byte_level_regex


def detect_pre(pre: Any) -> str | None:
    """llama.cpp's ``tokenizer.ggml.pre`` name for a tokenizer.json pre-tokenizer, if known."""
    regexes, gpt2 = _split_patterns(pre)
    joined = " ".join(regexes)
    if "\\p{N}{1,3}" in joined and "\\p{L}+" in joined:
        return "llama-bpe"                                   # Llama 3 (and LLaDA's tokenizer)
    if "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+" in joined and "|\\p{N}|" in joined:
        return "qwen2"                                       # Qwen2 / Dream
    if regexes == ["\\p{N}"] and gpt2:
        return "smollm"
    if not regexes and gpt2:
        return "gpt2"
    return None


def _token_id(spec: Any, ids: dict[str, int]) -> int | None:
    text = spec.get("content") if isinstance(spec, dict) else spec
    return ids.get(text) if isinstance(text, str) else None


def tokenizer_fields(hf: Path, n_vocab: int) -> tuple[list[MetadataField], str]:
    """GGUF tokenizer metadata from ``tokenizer.json`` (+ ``tokenizer_config.json``), and a note.

    Empty list when there is no byte-level BPE tokenizer.json to embed (the note says why)."""
    path = hf / "tokenizer.json"
    if not path.exists():
        return [], "none (no tokenizer.json beside the checkpoint)"
    try:
        tj = json.loads(path.read_text(encoding="utf-8"))
        model = tj["model"]
        vocab: dict[str, int] = {str(k): int(v) for k, v in model["vocab"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConvertError(f"{path}: expected a tokenizers JSON with model.vocab ({e})") from None
    if model.get("type") != "BPE" or not isinstance(model.get("merges"), list):
        return [], f"none ({path.name}: model type {model.get('type')!r} is not byte-level BPE)"
    pre = detect_pre(tj.get("pre_tokenizer"))
    if pre is None:
        return [], f"none ({path.name}: pre-tokenizer not recognised)"
    added = {int(a["id"]): a for a in tj.get("added_tokens") or [] if isinstance(a, dict)}
    for i, a in added.items():
        vocab[str(a["content"])] = i
    size = max(n_vocab, max(vocab.values()) + 1)
    if size > n_vocab:
        raise ConvertError(f"{path}: {size} tokens, expected at most the {n_vocab} rows of the "
                           f"token embedding")
    tokens = [f"[PAD{i}]" for i in range(n_vocab)]
    types = [TOKEN_UNUSED] * n_vocab
    for text, i in vocab.items():
        tokens[i] = text
        types[i] = TOKEN_NORMAL
    for i, a in added.items():
        types[i] = TOKEN_CONTROL if a.get("special") else TOKEN_USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    fields = [MetadataField("tokenizer.ggml.model", STRING, "gpt2"),
              MetadataField("tokenizer.ggml.pre", STRING, pre),
              MetadataField("tokenizer.ggml.tokens", ARRAY, tokens, STRING),
              MetadataField("tokenizer.ggml.token_type", ARRAY, np.array(types, np.int32), INT32),
              MetadataField("tokenizer.ggml.merges", ARRAY, merges, STRING)]
    cfg_path = hf / "tokenizer_config.json"
    cfg: dict[str, Any] = {}
    if cfg_path.exists():
        try:
            loaded = json.loads(cfg_path.read_text(encoding="utf-8"))
            cfg = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError) as e:
            raise ConvertError(f"{cfg_path}: expected a JSON object ({e})") from None
    for role, key in (("bos", "bos_token"), ("eos", "eos_token"), ("padding", "pad_token"),
                      ("unknown", "unk_token")):
        tid = _token_id(cfg.get(key), vocab)
        if tid is not None:
            fields.append(_u32(f"tokenizer.ggml.{role}_token_id", tid))
    if isinstance(cfg.get("add_bos_token"), bool):
        fields.append(MetadataField("tokenizer.ggml.add_bos_token", BOOL, cfg["add_bos_token"]))
    if isinstance(cfg.get("chat_template"), str):
        fields.append(MetadataField("tokenizer.chat_template", STRING, cfg["chat_template"]))
    return fields, f"embedded (gpt2 BPE, pre {pre!r}, {len(vocab)} tokens, {len(merges)} merges)"


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
    config = read_config(hf)
    arch = arch or detect_arch(config, hf / "config.json")
    if arch not in ARCHS:
        raise ConvertError(f"{hf}: arch: expected one of {', '.join(ARCHS)}, got {arch!r}")
    if convention == "diffuse" and arch not in DIFFUSION:
        raise ConvertError(f"{hf}: the diffuse format holds llada or dream, got {arch!r}")
    hp = read_hparams(config, hf / "config.json")
    if arch == "gemma3":
        hp = read_gemma3(config, hf / "config.json", hp)
    if hp.n_head <= 0 or hp.n_embd % hp.n_head or hp.n_head_kv <= 0 or hp.n_head % hp.n_head_kv:
        raise ConvertError(f"{hf / 'config.json'}: heads {hp.n_head}/{hp.n_head_kv}: expected "
                           f"divisors of {hp.n_embd} and {hp.n_head}")
    plan = plan_tensors(hf, hp, read_checkpoint_index(hf), arch, outtype,
                        permute=convention == "llama.cpp" and arch in PERMUTED)
    n_vocab = plan[0].shape[0]                                  # token_embd comes first
    fields = model_fields(hp, arch, convention, outtype, n_vocab, name or f"{arch}-{hf.name}", hf)
    note = "none (the diffuse format carries no tokenizer: keep tokenizer.json beside the GGUF)"
    if convention == "llama.cpp":
        tok, note = tokenizer_fields(hf, n_vocab)
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
