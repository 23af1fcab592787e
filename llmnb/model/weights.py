"""Weights: from GGUF tensors to the matrices the forward pass multiplies.

Two kinds of weights (``llmnb.load(..., weights=...)``):

- ``quantized``: every matrix keeps its GGUF blocks, repacked once at load into the
  layout ``llmnb.kernels`` streams (``kernels/layout.py``), and multiplies itself
  (``blocks.Product``). Decoding then reads about the file's bytes per weight per token
  (Q4_1: 0.625 in the integer kernels' layout, whose scales stay float16; 0.75 in the float
  kernels', with float32 scales) instead of 4. A type without a kernel (Q2_K, Q3_K)
  and F32 become float32 copies, named once on stderr when they are not F32. Where the
  integer products run, their arrays are then gathered into a few buffers in the order a
  decode step reads them (``integer.gather``: 2 MB pages).
- ``f32``: every matrix is dequantized to float32 (the reference and teaching path), in
  one of two residencies:
  - ``resident`` (default): every layer dequantized once, at load, stored transposed,
    (in, out), the layout BLAS streams fastest for one token (``blocks.Linear``).
  - ``streaming``: the quantized bytes stay in the memory-mapped file and a layer is
    dequantized when the forward pass reaches it. Slow, but only one layer is ever float32.

Either way Q/K/V are fused into one matrix and gate/up into another (one product each
instead of three and two; quantized parts of different types stay side by side,
``PackedParts``). The token embedding is never expanded whole: a lookup dequantizes just
the rows it needs, from the file, or from the output head when the two are tied (one
quantized copy serves both). A memory preflight (``plan_residency``) estimates what each
mode needs and refuses with needed-vs-available bytes when the chosen one cannot fit.

llama.cpp stores Llama/LLaDA Q and K rows permuted for its interleaved RoPE (``permute_qk``,
which ``llmnb convert`` applies too); ``unpermute_qk`` restores the half-split order used by
``blocks.apply_rope`` (reference/oracle.md §6.1).

The file reads in the order things run: the preflight (before any tensor is read), then loading.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

import numpy as np
import numpy.typing as npt

from llmnb.errors import EXIT_RESOURCES, UsageError
from llmnb.gguf.constants import GGMLType, type_name
from llmnb.gguf.reader import GGUFFile
from llmnb.kernels import KERNEL_TYPES, PackedMatrix, PackedParts, pack, packed_bytes_per_weight
from llmnb.kernels.integer import INTEGER_TYPES, IntMatrix, IntParts, gather
from llmnb.kernels.integer import pack as pack_integer
from llmnb.kernels.isa import integer_isa
from llmnb.kernels.layout import SCRATCH_BYTES, TILE
from llmnb.model.blocks import Product
from llmnb.model.config import ModelConfig, ModelError, shape_problem, tensor_shapes
from llmnb.quant import FORMATS, dequantize

F32 = npt.NDArray[np.float32]
A = TypeVar("A", bound=np.generic)
Matrix = F32 | Product           # float32 (in, out), or a quantized weight that multiplies itself
WEIGHTS = ("quantized", "quantized-float", "f32")
# weights that keep the GGUF blocks: the integer products where the CPU has them, or the
# float-activation kernels (``llmnb.kernels.isa``)
QUANTIZED = ("quantized", "quantized-float")
# a layer's matrices as its products multiply them: Q/K/V side by side, the output, gate/up
# side by side, down (``Weights._load_layer``; the preflight sizes the scratch by them)
FUSED: Final = (("attn_q", "attn_k", "attn_v"), ("attn_output",), ("ffn_gate", "ffn_up"),
                ("ffn_down",))


# --- the memory preflight: runs first (``llmnb.load``), from the file's tensor table alone ---

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
    weights: str = "f32"
    quantized_bytes: int = 0


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


def is_matrix(name: str) -> bool:
    return name.endswith(".weight") and "norm" not in name and name != "rope_freqs.weight"


def scratch_bytes(f: GGUFFile, config: ModelConfig) -> int:
    """The dense products' float32 scratch (``llmnb.kernels.product``): the largest matrix
    one product multiplies (Q/K/V and gate/up fused, or the output head), as W.T with its
    outputs padded to whole tiles, at most ``SCRATCH_BYTES`` (larger ones go in panels)."""
    def padded(names: list[str]) -> int:
        shapes = [f.tensors[n].shape for n in names if n in f.tensors]
        return sum(4 * s[-1] * -(-s[0] // TILE) * TILE for s in shapes if len(s) == 2)

    groups = [[f"blk.{i}.{p}.weight" for p in group]
              for i in range(config.n_layer) for group in FUSED]
    groups.append(["token_embd.weight" if config.tied_output else "output.weight"])
    return min(SCRATCH_BYTES, max((padded(g) for g in groups), default=0))


def estimate_bytes(f: GGUFFile, config: ModelConfig, kv_bytes: int) -> tuple[int, int, int]:
    """(resident, streaming, quantized) bytes needed, each including `kv_bytes` for the KV cache."""
    def f32(name: str) -> int:
        return 4 * f.tensors[name].n_elements

    layer_bytes = [sum(4 * t.n_elements for n, t in f.tensors.items() if n.startswith(f"blk.{i}."))
                   for i in range(config.n_layer)]
    head_name = "token_embd.weight" if config.tied_output else "output.weight"
    head = f32(head_name)
    # resident: every layer + head; building a layer briefly holds its parts twice (concatenate)
    resident = sum(layer_bytes) + head + max(layer_bytes, default=0) + kv_bytes
    # streaming: one layer (plus its fused copies) and the head, dequantized while used
    streaming = 2 * max(layer_bytes, default=0) + head + kv_bytes
    # quantized: every matrix repacked (norms and biases float32), plus the dense scratch;
    # packing one tensor briefly holds a few byte-per-weight temporaries of it
    packed = [int(packed_bytes_per_weight(t.ggml_type) * t.n_elements)
              if is_matrix(n) else 4 * t.n_elements
              for n, t in f.tensors.items() if n.startswith("blk.") or n == head_name]
    largest = max((t.n_elements for t in f.tensors.values()), default=0)
    quantized = sum(packed) + scratch_bytes(f, config) + 4 * largest + kv_bytes
    return resident, streaming, quantized


def default_weights(f: GGUFFile, config: ModelConfig | None = None, kv_bytes: int = 0) -> str:
    """The weights ``llmnb.load(..., weights="auto")`` picks, by what is faster per use:

    - a float file (F32, F16, BF16 matrices): 'f32'; BLAS multiplies the float32 copies at
      least as fast as the half-precision kernels (``llmnb bench quant``);
    - a block-quantized causal model (Q4_0 ... Q6_K): 'quantized'; decoding reads the blocks
      (about the file's bytes per token) and runs ~2x the float32 path (``llmnb bench ar``);
    - a block-quantized diffusion model (bidirectional, every step a pass over the whole
      canvas: compute-bound): 'quantized' where the CPU has integer products (byte dot
      products outrun sgemm on float32 copies: ``llmnb bench quant``'s c(T), ``llmnb bench
      diffusion``), else 'f32' when the float32 copies fit in memory, since sgemm on them
      beats the float kernels' dequantized slices; else 'quantized'."""
    blocks = [t for n, t in f.tensors.items() if n.startswith("blk.") and is_matrix(n)]
    floats = (GGMLType.F32, GGMLType.F16, GGMLType.BF16)
    if all(t.ggml_type in floats for t in blocks):
        return "f32"
    if config is not None and not config.causal and integer_isa() is None:
        resident = estimate_bytes(f, config, kv_bytes)[0]
        return "f32" if resident <= available_memory() else "quantized"
    return "quantized"


def plan_residency(f: GGUFFile, config: ModelConfig, kv_bytes: int = 0,
                   residency: str = "auto", weights: str = "f32") -> ResidencyPlan:
    """Quantized weights, or float32 ones resident when they fit, else streaming; refuse
    when the requested mode cannot fit."""
    if weights not in WEIGHTS:
        raise UsageError(f"weights: expected one of {', '.join(WEIGHTS)}, got {weights!r}")
    resident, streaming, quantized = estimate_bytes(f, config, kv_bytes)
    avail = available_memory()
    choice = residency
    if weights in QUANTIZED:
        choice = "resident"
    elif residency == "auto":
        choice = "resident" if resident <= avail else "streaming"
    elif residency not in ("resident", "streaming"):
        raise ModelError(f"residency: expected 'auto', 'resident' or 'streaming', "
                         f"got {residency!r}")
    needed = quantized if weights in QUANTIZED else resident if choice == "resident" else streaming
    if needed > avail:
        if weights in QUANTIZED:
            hint = (f"float32 streaming (one layer dequantized at a time) needs "
                    f"{format_bytes(streaming)}")
        elif choice == "resident" and quantized <= avail and default_weights(f) == "quantized":
            hint = f"weights='quantized' fits: it needs {format_bytes(quantized)}"
        elif choice == "resident" and streaming <= avail:
            hint = (f"residency='streaming' (one layer dequantized at a time) fits: it needs "
                    f"{format_bytes(streaming)}")
        else:
            hint = (f"resident {format_bytes(resident)}, streaming (one layer dequantized at a "
                    f"time) {format_bytes(streaming)}, quantized {format_bytes(quantized)}")
        mode = weights if weights in QUANTIZED else choice
        raise MemoryPreflightError(
            f"{f.path}: does not fit in memory: {mode} needs {format_bytes(needed)}, "
            f"{format_bytes(avail)} available ({needed:,} > {avail:,} bytes; {hint}; "
            "the limit is $LLMNB_MEMORY_LIMIT if set, else MemAvailable)")
    return ResidencyPlan(choice, needed, avail, resident, streaming, weights, quantized)


# --- loading: the file's tensors as the forward pass multiplies them -----------------

def permute_qk(w: npt.NDArray[A], n_heads: int) -> npt.NDArray[A]:
    """What llama.cpp's converter does to Llama/LLaDA Q and K rows (``llmnb convert`` too):
    HF half-split rows -> ggml's NORM-rope interleaved rows, per head (oracle.md §6.1). New
    row h*d + 2i + j = old row h*d + j*d/2 + i; works on a weight (rows, n_in) or a bias."""
    return np.ascontiguousarray(
        w.reshape(n_heads, 2, -1, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def unpermute_qk(w: npt.NDArray[A], n_heads: int) -> npt.NDArray[A]:
    """Undo llama.cpp's per-head row permutation (interleaved pairs -> half-split); works
    on float rows and on a quantized tensor's rows of raw bytes alike."""
    return np.ascontiguousarray(
        w.reshape(n_heads, -1, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def transposed(w: F32) -> F32:
    """(out, in) -> a contiguous (in, out) copy."""
    return np.ascontiguousarray(w.T)


@dataclass
class LayerWeights:
    """One layer's weights; float32 matrices transposed to (in, out) (suffix ``_t``), or
    quantized ones (``Product``) of the same shapes."""

    attn_norm: F32          # (d,)
    wqkv_t: Matrix          # (d, n_head*hd + 2*n_kv*hd)  Q, K, V output columns side by side
    bqkv: F32 | None        # (n_head*hd + 2*n_kv*hd,)    Qwen2's biases
    wo_t: Matrix            # (n_head*hd, d)
    ffn_norm: F32           # (d,)
    w_gate_up_t: Matrix     # (d, 2*ff)                   gate columns, then up columns
    w_down_t: Matrix        # (ff, d)
    # Gemma 3's extra norms (None for other families)
    q_norm: F32 | None = None          # (hd,)  every q head, before RoPE
    k_norm: F32 | None = None          # (hd,)  every k head, before RoPE
    post_attn_norm: F32 | None = None  # (d,)   the attention output, before the residual add
    post_ffn_norm: F32 | None = None   # (d,)   the FFN output, before the residual add


def matrix_bytes(w: Matrix) -> int:
    nbytes = w.nbytes
    return int(nbytes)


INTEGER = (IntMatrix, IntParts)       # the weights ``integer.gather`` takes


class Weights:
    """The model's tensors as the forward pass wants them (see module docstring)."""

    def __init__(self, f: GGUFFile, config: ModelConfig, residency: str,
                 weights: str = "f32") -> None:
        if residency not in ("resident", "streaming"):
            raise ModelError(f"residency: expected 'resident' or 'streaming', got {residency!r}")
        if weights not in WEIGHTS:
            raise UsageError(f"weights: expected one of {', '.join(WEIGHTS)}, got {weights!r}")
        self.file = f
        self.config = config
        self.kind = weights            # the weights kind: 'f32', 'quantized', 'quantized-float'
        self.residency = "resident" if weights in QUANTIZED else residency
        # the integer products' build (``llmnb.kernels.isa``), or None: the float kernels
        self.integer_isa = integer_isa() if weights == "quantized" else None
        self._check_tensors()
        self.output_norm = self.tensor("output_norm.weight")
        factors = f.tensors.get("rope_freqs.weight")
        self.rope_freq_factors: F32 | None = self.tensor(factors.name) if factors else None
        self._no_kernel: dict[str, list[str]] = {}
        resident = self.residency == "resident"
        self._head: Matrix | None = self._load_head() if resident else None
        self._layers: list[LayerWeights] = []
        for i in range(config.n_layer if resident else 0):
            self._layers.append(self._load_layer(i))
            f.release_pages()  # copies made: don't keep the file's pages resident too
        f.release_pages()
        if resident and self.integer_isa is not None:   # one stream through a few buffers
            gather([w for lw in self._layers for w in (lw.wqkv_t, lw.wo_t, lw.w_gate_up_t,
                                                         lw.w_down_t) if isinstance(w, INTEGER)]
                   + ([self._head] if isinstance(self._head, INTEGER) else []))
        for name, tensors in self._no_kernel.items():
            print(f"llmnb: {f.path}: {len(tensors)} {name} tensor(s) (e.g. {tensors[0]}) have no "
                  "quantized kernel: multiplied as float32 copies", file=sys.stderr)

    # --- tensors -----------------------------------------------------------------------

    def tensor(self, name: str) -> F32:
        """Tensor `name` dequantized to float32, in numpy shape order."""
        info = self.file.tensors[name]
        return dequantize(self.file.raw(name), info.ggml_type, info.shape)

    def _check_tensors(self) -> None:
        c = self.config
        want = tensor_shapes(c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_ff,
                             c.vocab_size, c.qkv_bias, not c.tied_output, c.qk_norm, c.post_norms)
        problem = shape_problem(want, {n: t.shape for n, t in self.file.tensors.items()})
        if problem is not None:
            raise ModelError(f"{self.file.path}: {problem[1]}")
        for name in want:
            info = self.file.tensors[name]
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
        bqkv: F32 | None = None
        if c.qkv_bias:
            bq, bk = self.tensor(p + "attn_q.bias"), self.tensor(p + "attn_k.bias")
            if c.qk_permuted:
                bq, bk = unpermute_qk(bq, c.n_head), unpermute_qk(bk, c.n_head_kv)
            bqkv = np.concatenate([bq, bk, self.tensor(p + "attn_v.bias")])
        heads = (c.n_head, c.n_head_kv, 0) if c.qk_permuted else (0, 0, 0)
        qkv, wo, gate_up, down = ([p + n + ".weight" for n in group] for group in FUSED)
        return LayerWeights(
            attn_norm=self.tensor(p + "attn_norm.weight"),
            wqkv_t=self.matrix(qkv, heads),
            bqkv=bqkv,
            wo_t=self.matrix(wo),
            ffn_norm=self.tensor(p + "ffn_norm.weight"),
            w_gate_up_t=self.matrix(gate_up),
            w_down_t=self.matrix(down),
            **self._gemma_norms(p),
        )

    def _gemma_norms(self, p: str) -> dict[str, F32]:
        """Gemma 3's q/k and post-attention/post-FFN norms of layer prefix `p` (when the config
        has them)."""
        c = self.config
        names = ({"q_norm": "attn_q_norm", "k_norm": "attn_k_norm"} if c.qk_norm else {}) | (
            {"post_attn_norm": "post_attention_norm", "post_ffn_norm": "post_ffw_norm"}
            if c.post_norms else {})
        return {field: self.tensor(f"{p}{name}.weight") for field, name in names.items()}

    def matrix(self, names: list[str], heads: tuple[int, ...] = (0, 0, 0)) -> Matrix:
        """Weights `names` (out_i, in) stacked along the outputs, their rows un-permuted
        where heads[i] > 0: float32 (in, sum out_i), or quantized (``Product``)."""
        if self.kind == "f32":
            mats = [self.tensor(n) for n in names]
            mats = [unpermute_qk(w, h) if h else w for w, h in zip(mats, heads)]
            return transposed(mats[0] if len(mats) == 1 else np.concatenate(mats))
        infos = [self.file.tensors[n] for n in names]
        rows = []
        for info, h in zip(infos, heads):
            raw = self.file.raw(info.name).reshape(info.shape[0], -1)       # (out, row bytes)
            rows.append(unpermute_qk(raw, h) if h else raw)
            if info.ggml_type not in KERNEL_TYPES and info.ggml_type != GGMLType.F32:
                self._no_kernel.setdefault(info.type_name, []).append(info.name)
        n_in = infos[0].shape[1]
        types = {info.ggml_type for info in infos}
        # the integer products where the CPU has them and every part has a kernel, else the
        # float kernels; one format: one matrix and one product, else its parts side by side
        integer = self.integer_isa is not None and types <= set(INTEGER_TYPES)
        packer: Callable[[npt.NDArray[np.uint8], int, int, int], Product] = (
            pack_integer if integer else pack)
        if len(types) == 1:
            raw_all = rows[0] if len(rows) == 1 else np.concatenate(rows)
            packed = packer(raw_all, infos[0].ggml_type, raw_all.shape[0], n_in)
        else:
            parts = tuple(packer(r, info.ggml_type, info.shape[0], n_in)
                          for r, info in zip(rows, infos))
            packed = IntParts(parts) if integer else PackedParts(parts)  # type: ignore[arg-type]
        del rows
        self.file.release_pages()            # the copy is made: drop the file's pages now
        return packed

    # --- embedding and head ------------------------------------------------------------

    def _load_head(self) -> Matrix:
        return self.matrix(["token_embd.weight" if self.config.tied_output else "output.weight"])

    def embed(self, ids: npt.NDArray[np.int64]) -> F32:
        """Rows of the token embedding for `ids`, dequantizing only those rows: (T, d)."""
        head = self._head
        if head is not None and self.config.tied_output:
            if isinstance(head, np.ndarray):
                return np.ascontiguousarray(head[:, ids].T)               # tied: columns of head_t
            if isinstance(head, PackedMatrix):
                from llmnb.kernels import rows as packed_rows

                return packed_rows(head, ids)                             # tied: rows of the head
        info = self.file.tensors["token_embd.weight"]
        rows = self.file.raw(info.name).reshape(info.shape[0], -1)[ids]   # (T, row bytes)
        return dequantize(rows, info.ggml_type, (len(ids), info.shape[1]))

    def head_t(self) -> Matrix:
        """The output matrix transposed, (d, vocab): the token embedding itself when tied."""
        return self._head if self._head is not None else self._load_head()

    @property
    def nbytes(self) -> int:
        """Bytes of weights held (resident) — what decoding streams per token."""
        held = sum(matrix_bytes(w) for lw in self._layers for w in (
            lw.attn_norm, lw.wqkv_t, lw.wo_t, lw.ffn_norm, lw.w_gate_up_t, lw.w_down_t))
        held += sum(a.nbytes for lw in self._layers for a in (
            lw.bqkv, lw.q_norm, lw.k_norm, lw.post_attn_norm, lw.post_ffn_norm) if a is not None)
        head = matrix_bytes(self._head) if self._head is not None else 0
        return held + head + self.output_norm.nbytes
