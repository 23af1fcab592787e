"""A Hugging Face checkpoint's ``config.json`` -> the hyper-parameters a GGUF needs
(``llmnb convert``'s first step, before any tensor is read).

Reads the dialects of the checkpoints ``llmnb convert`` takes: HF Llama / Qwen2 / Dream /
Gemma 3 keys (``hidden_size`` ...) and LLaDA's OLMo-style ones (``d_model`` ...); RoPE scaling
(``rope_scaling`` or transformers >= 5's ``rope_parameters``) as llama.cpp's converter keeps it;
the architecture from ``model_type`` / ``architectures``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from llmnb.model.safetensors import CheckpointError


class ConvertError(CheckpointError):
    """A checkpoint that cannot be converted: missing config.json, unknown arch, missing tensors."""


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
        return RopeScaling(kind, factor, int(orig or 8192),
                           float(params.get("low_freq_factor", 1.0)),
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
