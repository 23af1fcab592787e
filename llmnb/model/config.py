"""Model hyper-parameters read from GGUF metadata.

Keys follow llama.cpp's conventions (``{arch}.block_count``, ``{arch}.attention.head_count``
...), with the defaults llama.cpp's own converter relies on when a key is absent
(reference/oracle.md §6.2): ``rope.dimension_count = n_embd / n_head``, vocab = rows of
``token_embd``, causal unless ``{arch}.attention.causal`` says otherwise, logits shifted
only for ``dream``.
"""
from __future__ import annotations

from dataclasses import dataclass

from llmnb.errors import EXIT_MODEL, LLMNBError
from llmnb.gguf.reader import GGUFFile

SUPPORTED_ARCHS = ("llama", "qwen2", "llada", "dream")


class ModelError(LLMNBError):
    """A valid file llmnb cannot run: unsupported architecture, missing tensor or key."""

    exit_code = EXIT_MODEL


@dataclass(frozen=True)
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
    rope_scaling: str            # "none", or "llama3" (rope_freqs.weight divides the frequencies)
    mask_token_id: int | None

    @property
    def n_params_per_layer(self) -> int:
        attn = self.n_embd * self.head_dim * (self.n_head * 2 + self.n_head_kv * 2)
        return attn + 3 * self.n_embd * self.n_ff + 2 * self.n_embd


def _get(f: GGUFFile, key: str, kind: type, default: object = None) -> object:
    field = f.fields.get(key)
    if field is None:
        if default is None:
            raise ModelError(f"{f.path}: metadata key {key!r} is missing (expected {kind.__name__})")
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
    """Read and check the hyper-parameters of a llama / qwen2 / llada / dream file."""
    arch = f.architecture
    if arch not in SUPPORTED_ARCHS:
        raise ModelError(f"{f.path}: architecture {arch!r} is not supported "
                         f"(expected one of {', '.join(SUPPORTED_ARCHS)})")
    emb = f.tensors.get("token_embd.weight")
    if emb is None or len(emb.shape) != 2:
        raise ModelError(f"{f.path}: tensor 'token_embd.weight' missing or not 2-D")
    n_embd = _int(f, f"{arch}.embedding_length")
    n_head = _int(f, f"{arch}.attention.head_count")
    if n_head <= 0 or n_embd % n_head:
        raise ModelError(f"{f.path}: {arch}.attention.head_count: expected a divisor of "
                         f"{n_embd}, got {n_head}")
    n_head_kv = _int(f, f"{arch}.attention.head_count_kv", n_head)
    if n_head_kv <= 0 or n_head % n_head_kv:
        raise ModelError(f"{f.path}: {arch}.attention.head_count_kv: expected a divisor of "
                         f"{n_head}, got {n_head_kv}")
    head_dim = _int(f, f"{arch}.attention.key_length", n_embd // n_head)
    causal_default = arch in ("llama", "qwen2")
    causal = _get(f, f"{arch}.attention.causal", bool, causal_default)
    shift = _get(f, "diffusion.shift_logits", bool, arch == "dream")
    # Llama-3 RoPE scaling comes as per-frequency divisors in a tensor (llama.cpp's converter)
    scaling = "llama3" if "rope_freqs.weight" in f.tensors else _get(
        f, f"{arch}.rope.scaling.type", str, "none")
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
        mask_token_id=int(mask_id.value) if mask_id is not None and isinstance(mask_id.value, int) else None,
    )
