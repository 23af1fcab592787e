"""Weights: from GGUF tensors to the float32 matrices the forward pass multiplies.

Two residencies:

- ``resident`` (default): every layer is dequantized once, at load, to float32, with Q/K/V
  fused into one matrix and gate/up into another (one matrix product each instead of three
  and two), each stored transposed, (in, out), the layout BLAS streams fastest for one
  token (``blocks.linear``). Decoding then streams 4 bytes per weight per token.
- ``streaming``: the quantized bytes stay in the memory-mapped file and a layer is
  dequantized when the forward pass reaches it. Slow, but only one layer is ever float32.

The token embedding is never expanded whole unless it doubles as the output head: a lookup
dequantizes just the rows it needs. A memory preflight (``plan_residency``) estimates what
each mode needs, picks one, and refuses with needed-vs-available bytes when neither fits.

llama.cpp stores Llama/LLaDA Q and K rows permuted for its interleaved RoPE; ``unpermute_qk``
restores the half-split order used by ``blocks.apply_rope`` (reference/oracle.md §6.1).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from llmnb.errors import EXIT_RESOURCES, UsageError
from llmnb.gguf.reader import GGUFFile
from llmnb.model.config import ModelConfig, ModelError, tensor_shapes
from llmnb.gguf.constants import type_name
from llmnb.quant import FORMATS, dequantize

F32 = npt.NDArray[np.float32]


def unpermute_qk(w: F32, n_heads: int) -> F32:
    """Undo llama.cpp's per-head row permutation (interleaved pairs -> half-split)."""
    return np.ascontiguousarray(
        w.reshape(n_heads, -1, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def transposed(w: F32) -> F32:
    """(out, in) -> a contiguous (in, out) copy."""
    return np.ascontiguousarray(w.T)


@dataclass
class LayerWeights:
    """One layer's float32 weights; matrices transposed to (in, out) (suffix ``_t``)."""

    attn_norm: F32          # (d,)
    wqkv_t: F32             # (d, n_head*hd + 2*n_kv*hd)  Q, K, V output columns side by side
    bqkv: F32 | None        # (n_head*hd + 2*n_kv*hd,)    Qwen2's biases
    wo_t: F32               # (n_head*hd, d)
    ffn_norm: F32           # (d,)
    w_gate_up_t: F32        # (d, 2*ff)                   gate columns, then up columns
    w_down_t: F32           # (ff, d)
    # Gemma 3's extra norms (None for other families)
    q_norm: F32 | None = None          # (hd,)  every q head, before RoPE
    k_norm: F32 | None = None          # (hd,)  every k head, before RoPE
    post_attn_norm: F32 | None = None  # (d,)   the attention output, before the residual add
    post_ffn_norm: F32 | None = None   # (d,)   the FFN output, before the residual add


class Weights:
    """The model's tensors as the forward pass wants them (see module docstring)."""

    def __init__(self, f: GGUFFile, config: ModelConfig, residency: str) -> None:
        if residency not in ("resident", "streaming"):
            raise ModelError(f"residency: expected 'resident' or 'streaming', got {residency!r}")
        self.file = f
        self.config = config
        self.residency = residency
        self._check_tensors()
        self.output_norm = self.tensor("output_norm.weight")
        factors = f.tensors.get("rope_freqs.weight")
        self.rope_freq_factors: F32 | None = self.tensor(factors.name) if factors else None
        self._head_t: F32 | None = self._load_head_t() if residency == "resident" else None
        self._layers: list[LayerWeights] = (
            [self._load_layer(i) for i in range(config.n_layer)] if residency == "resident" else [])
        if residency == "resident":
            f.release_pages()  # everything is float32 copies now: don't keep the file resident too

    # --- tensors -----------------------------------------------------------------------

    def tensor(self, name: str) -> F32:
        """Tensor `name` dequantized to float32, in numpy shape order."""
        info = self.file.tensors[name]
        return dequantize(self.file.raw(name), info.ggml_type, info.shape)

    def _check_tensors(self) -> None:
        c = self.config
        want = tensor_shapes(c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_ff,
                             c.vocab_size, c.qkv_bias, not c.tied_output, c.qk_norm, c.post_norms)
        for name, shape in want.items():
            info = self.file.tensors.get(name)
            if info is None:
                raise ModelError(f"{self.file.path}: tensor {name!r} is missing "
                                 f"(expected shape {shape})")
            if info.shape != shape:
                raise ModelError(f"{self.file.path}: tensor {name!r}: expected shape {shape}, "
                                 f"got {info.shape}")
            fmt = FORMATS.get(info.ggml_type)
            if fmt is None or not fmt.can_dequantize:
                supported = ", ".join(type_name(t) for t, q in FORMATS.items() if q.can_dequantize)
                raise ModelError(f"{self.file.path}: tensor {name!r} is stored as "
                                 f"{type_name(info.ggml_type)}, which llmnb cannot read "
                                 f"(supported: {supported})")

    # --- layers ------------------------------------------------------------------------

    def layer(self, i: int) -> LayerWeights:
        """Layer i's weights: kept (resident) or dequantized now (streaming)."""
        return self._layers[i] if self.residency == "resident" else self._load_layer(i)

    def _load_layer(self, i: int) -> LayerWeights:
        c = self.config
        p = f"blk.{i}."
        wq, wk = self.tensor(p + "attn_q.weight"), self.tensor(p + "attn_k.weight")
        bqkv: F32 | None = None
        if c.qkv_bias:
            bq, bk = self.tensor(p + "attn_q.bias"), self.tensor(p + "attn_k.bias")
            if c.qk_permuted:
                bq, bk = unpermute_qk(bq, c.n_head), unpermute_qk(bk, c.n_head_kv)
            bqkv = np.concatenate([bq, bk, self.tensor(p + "attn_v.bias")])
        if c.qk_permuted:
            wq, wk = unpermute_qk(wq, c.n_head), unpermute_qk(wk, c.n_head_kv)
        return LayerWeights(
            attn_norm=self.tensor(p + "attn_norm.weight"),
            wqkv_t=transposed(np.concatenate([wq, wk, self.tensor(p + "attn_v.weight")])),
            bqkv=bqkv,
            wo_t=transposed(self.tensor(p + "attn_output.weight")),
            ffn_norm=self.tensor(p + "ffn_norm.weight"),
            w_gate_up_t=transposed(np.concatenate([self.tensor(p + "ffn_gate.weight"),
                                                   self.tensor(p + "ffn_up.weight")])),
            w_down_t=transposed(self.tensor(p + "ffn_down.weight")),
            **self._gemma_norms(p),
        )

    def _gemma_norms(self, p: str) -> dict[str, F32]:
        """Gemma 3's q/k and post-attention/post-FFN norms of layer prefix `p` (when the config has them)."""
        c = self.config
        names = ({"q_norm": "attn_q_norm", "k_norm": "attn_k_norm"} if c.qk_norm else {}) | (
            {"post_attn_norm": "post_attention_norm", "post_ffn_norm": "post_ffw_norm"}
            if c.post_norms else {})
        return {field: self.tensor(f"{p}{name}.weight") for field, name in names.items()}

    # --- embedding and head ------------------------------------------------------------

    def _load_head_t(self) -> F32:
        return transposed(self.tensor(
            "token_embd.weight" if self.config.tied_output else "output.weight"))

    def embed(self, ids: npt.NDArray[np.int64]) -> F32:
        """Rows of the token embedding for `ids`, dequantizing only those rows: (T, d)."""
        if self._head_t is not None and self.config.tied_output:
            return np.ascontiguousarray(self._head_t[:, ids].T)           # tied: columns of head_t
        info = self.file.tensors["token_embd.weight"]
        rows = self.file.raw(info.name).reshape(info.shape[0], -1)[ids]   # (T, row bytes)
        return dequantize(rows, info.ggml_type, (len(ids), info.shape[1]))

    def head_t(self) -> F32:
        """The output matrix transposed, (d, vocab): the token embedding itself when tied."""
        return self._head_t if self._head_t is not None else self._load_head_t()

    @property
    def nbytes(self) -> int:
        """Bytes of float32 arrays held (resident) — what decoding streams per token."""
        held = sum(a.nbytes for lw in self._layers for a in (
            lw.attn_norm, lw.wqkv_t, lw.wo_t, lw.ffn_norm, lw.w_gate_up_t, lw.w_down_t))
        held += sum(a.nbytes for lw in self._layers for a in (
            lw.bqkv, lw.q_norm, lw.k_norm, lw.post_attn_norm, lw.post_ffn_norm) if a is not None)
        head = self._head_t.nbytes if self._head_t is not None else 0
        return held + head + self.output_norm.nbytes


# --- memory preflight --------------------------------------------------------------------

class MemoryPreflightError(ModelError):
    """The model needs more memory than is available (needed vs available in the message)."""

    exit_code = EXIT_RESOURCES


@dataclass(frozen=True)
class ResidencyPlan:
    residency: str
    needed_bytes: int
    available_bytes: int
    resident_bytes: int
    streaming_bytes: int


def format_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{size:,.1f} GiB"


def available_memory() -> int:
    """Bytes this process may still use: ``$LLMNB_MEMORY_LIMIT`` if set, else MemAvailable."""
    limit = os.environ.get("LLMNB_MEMORY_LIMIT")
    if limit:
        try:
            n = float(limit)
        except ValueError:
            n = -1.0
        if not 0 <= n < 2.0**63:
            raise UsageError(f"LLMNB_MEMORY_LIMIT: expected a number of bytes, got {limit!r}")
        return int(n)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def estimate_bytes(f: GGUFFile, config: ModelConfig, kv_bytes: int) -> tuple[int, int]:
    """(resident, streaming) bytes needed, each including `kv_bytes` for the KV cache."""
    def f32(name: str) -> int:
        return 4 * f.tensors[name].n_elements

    layer_bytes = [sum(4 * t.n_elements for n, t in f.tensors.items() if n.startswith(f"blk.{i}."))
                   for i in range(config.n_layer)]
    head = f32("token_embd.weight" if config.tied_output else "output.weight")
    # resident: every layer + head; building a layer briefly holds its parts twice (concatenate)
    resident = sum(layer_bytes) + head + max(layer_bytes, default=0) + kv_bytes
    # streaming: one layer (plus its fused copies) and the head, dequantized while used
    streaming = 2 * max(layer_bytes, default=0) + head + kv_bytes
    return resident, streaming


def plan_residency(f: GGUFFile, config: ModelConfig, kv_bytes: int = 0,
                   residency: str = "auto") -> ResidencyPlan:
    """Pick resident when it fits, else streaming; refuse when the requested mode cannot fit."""
    resident, streaming = estimate_bytes(f, config, kv_bytes)
    avail = available_memory()
    choice = residency
    if residency == "auto":
        choice = "resident" if resident <= avail else "streaming"
    elif residency not in ("resident", "streaming"):
        raise ModelError(f"residency: expected 'auto', 'resident' or 'streaming', got {residency!r}")
    needed = resident if choice == "resident" else streaming
    if needed > avail:
        if choice == "resident" and streaming <= avail:
            hint = (f"residency='streaming' (one layer dequantized at a time) fits: it needs "
                    f"{format_bytes(streaming)}")
        else:
            hint = (f"resident {format_bytes(resident)}, streaming (one layer dequantized at a "
                    f"time) {format_bytes(streaming)}")
        raise MemoryPreflightError(
            f"{f.path}: does not fit in memory: {choice} needs {format_bytes(needed)}, "
            f"{format_bytes(avail)} available ({needed:,} > {avail:,} bytes; {hint}; "
            "the limit is $LLMNB_MEMORY_LIMIT if set, else MemAvailable)")
    return ResidencyPlan(choice, needed, avail, resident, streaming)
