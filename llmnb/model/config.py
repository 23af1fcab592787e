"""Model hyper-parameters read from GGUF metadata.

Keys follow llama.cpp's conventions (``{arch}.block_count``, ``{arch}.attention.head_count``
...), with the defaults llama.cpp's own converter relies on when a key is absent
(reference/oracle.md §6.2): ``rope.dimension_count = n_embd / n_head``, vocab = rows of
``token_embd``, causal unless ``{arch}.attention.causal`` says otherwise, logits shifted
only for ``dream``.

diffuse-cpp's own files (arch ``diffuse``, reference/diffuse-cpp.md §2.3) are read the way its
loader reads them: every key tried under ``diffuse.``, then ``qwen2.``, then ``llama.``; its
fallbacks (context 4096, vocab = rows of ``token_embd``, mask id 0, ``rope.freq_base`` 1e6,
RMS eps 1e-6); the model type (llada | dream) from ``diffuse.model_type`` (llada when absent);
always bidirectional, logits shifted iff dream, and Q/K rows in the HF (half-split) order.
For these files ``config.arch`` is the model type and ``config.convention`` is ``"diffuse"``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

import numpy as np

from llmnb.errors import EXIT_MODEL, LLMNBError
from llmnb.gguf.reader import GGUFFile

# The architectures llmnb runs (the loader reads them, ``llmnb convert`` writes them): the one list.
SUPPORTED_ARCHS = ("llama", "qwen2", "llada", "dream", "gemma3")
FILE_ARCHS = (*SUPPORTED_ARCHS, "diffuse")    # what general.architecture may say
PERMUTED_ARCHS = ("llama", "llada")            # llama.cpp permutes their Q/K rows (NORM rope)
DIFFUSION_ARCHS = ("llada", "dream")           # bidirectional; the diffuse format's model types
DIFFUSE_PREFIXES = ("diffuse.", "qwen2.", "llama.")  # diffuse-cpp's key lookup order
# {arch}.rope.scaling.type values llmnb computes (llama3 comes as a rope_freqs tensor instead)
ROPE_SCALINGS = ("none", "linear", "yarn", "llama3")


class ModelError(LLMNBError):
    """A valid file llmnb cannot run: unsupported architecture, missing tensor or key."""

    exit_code = EXIT_MODEL


@dataclass(frozen=True, repr=False)
class ModelConfig:
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_ctx: int
    vocab_size: int
    rope_base: float
    rope_dim: int
    rms_eps: float
    causal: bool
    shift_logits: bool
    tied_output: bool            # no output.weight: the token embedding is the output head
    qkv_bias: bool
    rope_scaling: str            # "none", "linear", "yarn", or "llama3" (rope_freqs.weight
                                 # divides the frequencies); blocks.rope_inv_freq computes them
    mask_token_id: int | None
    qk_permuted: bool = False    # Q/K rows in llama.cpp's interleaved order (llama/llada files)
    convention: str = "llama.cpp"  # "llama.cpp" or "diffuse" (diffuse-cpp's files)
    # -- fields below are shown by repr only when they differ from their defaults ---------
    rope_factor: float = 1.0     # linear / YaRN: how many times the trained context is stretched
    rope_orig_ctx: int = 0       # YaRN: the context the model was trained on
    rope_attn_factor: float = 1.0  # rope.scaling.attn_factor: multiplies cos and sin
    # Gemma 3 (arch gemma3): local sliding-window layers interleaved with global ones
    sliding_window: int = 0      # a sliding-window layer's query sees this many keys (0: none)
    swa_layers: tuple[bool, ...] = ()  # per layer: True = sliding window (with rope_base_swa)
    rope_base_swa: float = 0.0   # RoPE base of the sliding-window layers (unscaled)
    qk_norm: bool = False        # RMSNorm over each q and k head before RoPE
    post_norms: bool = False     # RMSNorm on the attention and FFN outputs before the residual
    ffn_act: str = "silu"        # the gated FFN's activation: silu (SwiGLU) or gelu (GeGLU)
    embd_scale: float = 1.0      # embeddings times this (Gemma: sqrt(n_embd))
    attn_scale: float = 0.0      # q.k times this (0: 1/sqrt(head_dim))
    logit_softcap: float = 0.0   # logits -> c tanh(logits / c) (0: none)

    def __repr__(self) -> str:
        """Every field up to ``convention``; the later, family-specific ones only when set."""
        parts: list[str] = []
        late = False
        for f in fields(self):
            value = getattr(self, f.name)
            if late and value == f.default:
                continue
            parts.append(f"{f.name}={value!r}")
            late = late or f.name == "convention"
        return f"ModelConfig({', '.join(parts)})"

    @property
    def n_params_per_layer(self) -> int:
        attn = self.n_embd * self.head_dim * (self.n_head * 2 + self.n_head_kv * 2)
        norms = ((4 if self.post_norms else 2) * self.n_embd
                 + (2 * self.head_dim if self.qk_norm else 0))
        return attn + 3 * self.n_embd * self.n_ff + norms

    def kv_bytes(self, tokens: int) -> int:
        """Bytes of a float32 K/V cache of `tokens` positions: keys and values per layer, at
        key/value-head width (n_layer, n_head_kv, tokens, head_dim) each."""
        return 2 * 4 * self.n_layer * self.n_head_kv * tokens * self.head_dim


def check_heads(n_embd: int, n_head: int, n_head_kv: int, where_q: str, where_kv: str,
                error: type[ModelError] = ModelError) -> None:
    """Query heads that split the width evenly and KV heads that split the query heads into
    equal groups (GQA), else `error` naming where each count came from (file and key)."""
    if n_head <= 0 or n_embd % n_head:
        raise error(f"{where_q}: expected a divisor of {n_embd}, got {n_head}")
    if n_head_kv <= 0 or n_head % n_head_kv:
        raise error(f"{where_kv}: expected a divisor of {n_head}, got {n_head_kv}")


def _get(f: GGUFFile, key: str, kind: type, default: object = None) -> object:
    field = f.fields.get(key)
    if field is None:
        if default is None:
            raise ModelError(f"{f.path}: metadata key {key!r} is missing "
                             f"(expected {kind.__name__})")
        return default
    v = field.value
    if kind is float and isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if kind is int and isinstance(v, int) and not isinstance(v, bool):
        return v
    if kind is bool and isinstance(v, bool):
        return v
    if kind is str and isinstance(v, str):
        return v
    raise ModelError(f"{f.path}: metadata key {key!r}: expected {kind.__name__}, got {v!r}")


def _int(f: GGUFFile, key: str, default: int | None = None) -> int:
    v = _get(f, key, int, default)
    assert isinstance(v, int)
    return v


def _float(f: GGUFFile, key: str, default: float | None = None) -> float:
    v = _get(f, key, float, default)
    assert isinstance(v, float)
    return v


def config_from_gguf(f: GGUFFile) -> ModelConfig:
    """Read and check the hyper-parameters of a llama / qwen2 / gemma3 / llada / dream /
    diffuse file."""
    arch = f.architecture
    if arch == "diffuse":
        return _diffuse_config(f)
    if arch == "gemma3":
        return gemma3_config(f)
    if arch not in SUPPORTED_ARCHS:
        raise ModelError(f"{f.path}: architecture {arch!r} is not supported "
                         f"(expected one of {', '.join(FILE_ARCHS)})")
    return _llama_like(f, arch)


def _llama_like(f: GGUFFile, arch: str) -> ModelConfig:
    """The keys every llama.cpp-convention file here shares, under ``{arch}.``."""
    emb = f.tensors.get("token_embd.weight")
    if emb is None or len(emb.shape) != 2:
        raise ModelError(f"{f.path}: tensor 'token_embd.weight' missing or not 2-D")
    n_embd = _int(f, f"{arch}.embedding_length")
    n_head = _int(f, f"{arch}.attention.head_count")
    n_head_kv = _int(f, f"{arch}.attention.head_count_kv", n_head)
    key = f"{f.path}: {arch}.attention.head_count"
    check_heads(n_embd, n_head, n_head_kv, key, key + "_kv")
    head_dim = _int(f, f"{arch}.attention.key_length", n_embd // n_head)
    causal_default = arch not in DIFFUSION_ARCHS
    causal = _get(f, f"{arch}.attention.causal", bool, causal_default)
    shift = _get(f, "diffusion.shift_logits", bool, arch == "dream")
    scaling, factor, orig_ctx, attn_factor = _rope_scaling(f, arch)
    mask_id = f.fields.get("tokenizer.ggml.mask_token_id")
    if emb.shape[1] != n_embd:
        raise ModelError(f"{f.path}: token_embd.weight: expected {n_embd} columns, got {emb.shape}")
    assert isinstance(causal, bool) and isinstance(shift, bool) and isinstance(scaling, str)
    return ModelConfig(
        arch=arch,
        n_layer=_int(f, f"{arch}.block_count"),
        n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
        n_ff=_int(f, f"{arch}.feed_forward_length"),
        n_ctx=_int(f, f"{arch}.context_length"),
        vocab_size=int(emb.shape[0]),
        rope_base=_float(f, f"{arch}.rope.freq_base", 10000.0),
        rope_dim=_int(f, f"{arch}.rope.dimension_count", head_dim),
        rms_eps=_float(f, f"{arch}.attention.layer_norm_rms_epsilon"),
        causal=causal, shift_logits=shift,
        tied_output="output.weight" not in f.tensors,
        qkv_bias="blk.0.attn_q.bias" in f.tensors,
        rope_scaling=scaling,
        mask_token_id=(int(mask_id.value) if mask_id is not None
                       and isinstance(mask_id.value, int) else None),
        qk_permuted=arch in PERMUTED_ARCHS,
        rope_factor=factor, rope_orig_ctx=orig_ctx, rope_attn_factor=attn_factor,
    )


def _rope_scaling(f: GGUFFile, arch: str) -> tuple[str, float, int, float]:
    """(type, factor, original context, attention factor) of the file's RoPE scaling, read as
    llama.cpp reads it: ``rope.scaling.type`` (absent: no scaling), ``rope.scaling.factor``
    (or the older ``rope.scale_linear``; absent or 0: 1), ``rope.scaling.original_context_length``
    (absent: the context length) and ``rope.scaling.attn_factor`` (absent: 1). Llama 3's scaling
    comes as per-frequency divisors in a tensor (``rope_freqs.weight``) instead."""
    kind = _get(f, f"{arch}.rope.scaling.type", str, "none")
    assert isinstance(kind, str)
    if kind not in ("none", "linear", "yarn"):
        raise ModelError(f"{f.path}: {arch}.rope.scaling.type: expected none, linear or yarn "
                         f"(the RoPE scalings llmnb computes), got {kind!r}")
    factor = _float(f, f"{arch}.rope.scaling.factor", _float(f, f"{arch}.rope.scale_linear", 1.0))
    if factor == 0.0:
        factor = 1.0
    if factor < 0.0 or factor != factor:
        raise ModelError(f"{f.path}: {arch}.rope.scaling.factor: expected a positive number, "
                         f"got {factor}")
    orig_ctx = _int(f, f"{arch}.rope.scaling.original_context_length",
                    _int(f, f"{arch}.context_length"))
    if orig_ctx <= 0:
        raise ModelError(f"{f.path}: {arch}.rope.scaling.original_context_length: expected a "
                         f"positive length, got {orig_ctx}")
    attn_factor = _float(f, f"{arch}.rope.scaling.attn_factor", 1.0)
    if kind != "yarn":
        orig_ctx = 0                               # only YaRN's ramp depends on it
    if kind == "none":
        factor = 1.0                               # llama.cpp never scales a 'none' file
        if "rope_freqs.weight" in f.tensors:
            kind = "llama3"
    return kind, factor, orig_ctx, attn_factor


# Gemma 3: every GEMMA3_SWA_PERIOD-th layer is global, the others slide (llama.cpp's pattern 6)
GEMMA3_SWA_PERIOD = 6
GEMMA3_ROPE_BASE_SWA = 10000.0


def gemma3_config(f: GGUFFile) -> ModelConfig:
    """A Gemma 3 file (llama.cpp's ``gemma3``, its graph ``llm_build_gemma3``): the Llama
    keys, plus sliding-window layers (``attention.sliding_window``; which layers slide from
    ``attention.sliding_window_pattern``, an array or a period, else every 6th layer is
    global) whose RoPE base is ``rope.freq_base_swa`` (else 1e4) and which are never RoPE-
    scaled; 256-wide heads (``attention.key_length``); q/k norms, post-attention and post-FFN
    norms; GeGLU; embeddings times sqrt(n_embd); q.k times 1/sqrt(head_dim) (the 62-layer
    27B: 1/sqrt(n_embd/n_head)); ``final_logit_softcapping`` when given. The norm weights in
    the file already hold Gemma's (1 + w) (llama.cpp's converter adds the 1), so the block is
    a plain RMSNorm. Q/K rows are in Hugging Face's order (NEOX rope)."""
    arch = "gemma3"
    base = _llama_like(f, arch)
    n_layer, n_embd, n_head = base.n_layer, base.n_embd, base.n_head
    value_length = _int(f, f"{arch}.attention.value_length", base.head_dim)
    if value_length != base.head_dim:
        raise ModelError(f"{f.path}: {arch}.attention.value_length: expected the key length "
                         f"{base.head_dim}, got {value_length}")
    window = _int(f, f"{arch}.attention.sliding_window", 0)
    swa: tuple[bool, ...] = (False,) * n_layer
    if window > 0:
        swa = _swa_pattern(f, f"{arch}.attention.sliding_window_pattern", n_layer)
    elif window < 0:
        raise ModelError(f"{f.path}: {arch}.attention.sliding_window: expected a window of "
                         f"0 or more tokens, got {window}")
    attn_scale = 1.0 / float(np.sqrt(n_embd / n_head if n_layer == 62 else base.head_dim))
    return replace(
        base, sliding_window=window, swa_layers=swa,
        rope_base_swa=_float(f, f"{arch}.rope.freq_base_swa", GEMMA3_ROPE_BASE_SWA),
        qk_norm=True, post_norms=True, ffn_act="gelu", embd_scale=float(np.sqrt(n_embd)),
        attn_scale=attn_scale,
        logit_softcap=_float(f, f"{arch}.final_logit_softcapping", 0.0))


def _swa_pattern(f: GGUFFile, key: str, n_layer: int) -> tuple[bool, ...]:
    """Which layers slide: an array of n_layer bools as given, or a period p (layer i slides
    unless i % p == p - 1; p = 0: all slide), default GEMMA3_SWA_PERIOD (llama.cpp's
    ``set_swa_pattern``)."""
    field = f.fields.get(key)
    value = GEMMA3_SWA_PERIOD if field is None else field.value
    if isinstance(value, (list, np.ndarray)):
        flags = [bool(v) for v in value]
        if len(flags) != n_layer:
            raise ModelError(f"{f.path}: {key}: expected {n_layer} entries (one per layer), "
                             f"got {len(flags)}")
        return tuple(flags)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelError(f"{f.path}: {key}: expected a layer period or an array of bools, "
                         f"got {value!r}")
    return tuple(value == 0 or i % value < value - 1 for i in range(n_layer))


def _diffuse_key(f: GGUFFile, name: str) -> str:
    """The first of ``diffuse.name``, ``qwen2.name``, ``llama.name`` the file has (else the
    first)."""
    for prefix in DIFFUSE_PREFIXES:
        if prefix + name in f.fields:
            return prefix + name
    return DIFFUSE_PREFIXES[0] + name


def _diffuse_config(f: GGUFFile) -> ModelConfig:
    """diffuse-cpp's loader (diffuse-cpp.md §2.3): prefixed lookups and its fallbacks."""
    emb = f.tensors.get("token_embd.weight")
    if emb is None or len(emb.shape) != 2:
        raise ModelError(f"{f.path}: tensor 'token_embd.weight' missing or not 2-D")
    model_type = _get(f, _diffuse_key(f, "model_type"), str, "llada")
    if model_type not in DIFFUSION_ARCHS:
        raise ModelError(f"{f.path}: diffuse.model_type: expected one of "
                         f"{', '.join(DIFFUSION_ARCHS)}, got {model_type!r}")
    assert isinstance(model_type, str)
    n_embd = _int(f, _diffuse_key(f, "embedding_length"))
    n_head = _int(f, _diffuse_key(f, "attention.head_count"))
    n_head_kv = _int(f, _diffuse_key(f, "attention.head_count_kv"))   # required by diffuse-cpp
    check_heads(n_embd, n_head, n_head_kv, f"{f.path}: {_diffuse_key(f, 'attention.head_count')}",
                f"{f.path}: {_diffuse_key(f, 'attention.head_count_kv')}")
    if emb.shape[1] != n_embd:
        raise ModelError(f"{f.path}: token_embd.weight: expected {n_embd} columns, got {emb.shape}")
    head_dim = n_embd // n_head                     # diffuse-cpp stores no head-dim key
    return ModelConfig(
        arch=model_type,
        n_layer=_int(f, _diffuse_key(f, "block_count")),
        n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
        n_ff=_int(f, _diffuse_key(f, "feed_forward_length")),
        n_ctx=_int(f, _diffuse_key(f, "context_length"), 4096),
        vocab_size=int(emb.shape[0]),               # diffuse.vocab_size is informative only
        rope_base=_float(f, _diffuse_key(f, "rope.freq_base"), 1e6),
        rope_dim=head_dim,
        rms_eps=_float(f, _diffuse_key(f, "attention.layer_norm_rms_epsilon"), 1e-6),
        causal=False,                               # diffuse-cpp attends with no mask at all
        shift_logits=model_type == "dream",
        tied_output="output.weight" not in f.tensors,
        qkv_bias="blk.0.attn_q.bias" in f.tensors,
        rope_scaling="none",
        mask_token_id=_int(f, _diffuse_key(f, "mask_token_id"), 0),
        qk_permuted=False,
        convention="diffuse",
    )


def tensor_shapes(n_layer: int, n_embd: int, n_head: int, n_head_kv: int, head_dim: int,
                  n_ff: int, n_vocab: int, qkv_bias: bool, output: bool, qk_norm: bool = False,
                  post_norms: bool = False) -> dict[str, tuple[int, ...]]:
    """Every tensor a Llama/Qwen2-family GGUF of these sizes holds, with its numpy shape
    (llama.cpp's names; Gemma 3 adds per-head q/k norms and post-attention/post-FFN norms).
    The loader checks files against it; the converter checks checkpoints."""
    want: dict[str, tuple[int, ...]] = {"token_embd.weight": (n_vocab, n_embd),
                                        "output_norm.weight": (n_embd,)}
    if output:
        want["output.weight"] = (n_vocab, n_embd)
    nq, nkv = n_head * head_dim, n_head_kv * head_dim
    for i in range(n_layer):
        p = f"blk.{i}."
        want |= {p + "attn_norm.weight": (n_embd,), p + "ffn_norm.weight": (n_embd,),
                 p + "attn_q.weight": (nq, n_embd), p + "attn_k.weight": (nkv, n_embd),
                 p + "attn_v.weight": (nkv, n_embd), p + "attn_output.weight": (n_embd, nq),
                 p + "ffn_gate.weight": (n_ff, n_embd), p + "ffn_up.weight": (n_ff, n_embd),
                 p + "ffn_down.weight": (n_embd, n_ff)}
        if qkv_bias:
            want |= {p + "attn_q.bias": (nq,), p + "attn_k.bias": (nkv,), p + "attn_v.bias": (nkv,)}
        if qk_norm:
            want |= {p + "attn_q_norm.weight": (head_dim,), p + "attn_k_norm.weight": (head_dim,)}
        if post_norms:
            want |= {p + "post_attention_norm.weight": (n_embd,),
                     p + "post_ffw_norm.weight": (n_embd,)}
    return want


def shape_problem(want: dict[str, tuple[int, ...]],
                  found: Mapping[str, tuple[int, ...]]) -> tuple[str, str] | None:
    """The first tensor of `want` (``tensor_shapes``) that `found` (name -> shape) lacks or
    holds with another shape: its name and what is wrong, said as "tensor 'name' ..."; None
    when every one matches. The loader and the converter each raise their own error with it,
    saying where they looked."""
    for name, shape in want.items():
        have = found.get(name)
        if have is None:
            return name, f"tensor {name!r} is missing (expected shape {shape})"
        if tuple(have) != shape:
            return name, f"tensor {name!r}: expected shape {shape}, got {tuple(have)}"
    return None
