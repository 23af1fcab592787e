"""The registry of block formats, and ``dequantize`` / ``quantize`` over it.

One ``QuantFormat`` per ggml type: elements and bytes per block (ggml's ``ggml_type_traits``,
the same table as gguf-py's ``GGML_QUANT_SIZES``) and the numpy kernels that convert it.
``dequantize`` checks the byte count against the shape before touching the data, so a bad
tensor fails with a ``QuantError`` naming the type and the sizes, never with a reshape error.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from llmnb.errors import EXIT_MODEL, LLMNBError
from llmnb.gguf.constants import GGML_BLOCK_SIZES, GGML_TYPE_IDS, GGMLType, type_name
import llmnb.quant.float_types as float_types
import llmnb.quant.kquants_dequant as kquants_dequant
import llmnb.quant.kquants_quant as kquants_quant
import llmnb.quant.legacy_dequant as legacy_dequant
import llmnb.quant.legacy_quant as legacy_quant

U8 = npt.NDArray[np.uint8]
F32 = npt.NDArray[np.float32]
DequantKernel = Callable[[U8, F32], None]     # (blocks (n, type_size), out (n, block_size))
QuantKernel = Callable[[F32, U8], None]       # (x (n, block_size), out (n, type_size))


class QuantError(LLMNBError):
    """A tensor type llmnb cannot convert, or bytes that do not fit the declared shape."""

    exit_code = EXIT_MODEL


@dataclass
class QuantFormat:
    """One ggml tensor type: block geometry and its kernels (None where llmnb has none)."""

    ggml_type: int
    dequant_kernel: DequantKernel | None = None
    quant_kernel: QuantKernel | None = None
    dequant_flat: Callable[[U8], F32] | None = None    # one-element "blocks" (F32, F16, BF16)
    quant_flat: Callable[[F32], U8] | None = None
    scale_offsets: tuple[int, ...] = ()      # byte offsets of the float16 scales in a block
    name: str = field(init=False)
    block_size: int = field(init=False)      # elements per block
    type_size: int = field(init=False)       # bytes per block

    def __post_init__(self) -> None:
        self.name = type_name(self.ggml_type)
        self.block_size, self.type_size = GGML_BLOCK_SIZES[self.ggml_type]

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.type_size / self.block_size

    @property
    def can_dequantize(self) -> bool:
        return self.dequant_kernel is not None or self.dequant_flat is not None

    @property
    def can_quantize(self) -> bool:
        return self.quant_kernel is not None or self.quant_flat is not None


FORMATS: dict[int, QuantFormat] = {
    f.ggml_type: f for f in [
        QuantFormat(GGMLType.F32, dequant_flat=float_types.dequantize_f32,
                    quant_flat=float_types.quantize_f32),
        QuantFormat(GGMLType.F16, dequant_flat=float_types.dequantize_f16,
                    quant_flat=float_types.quantize_f16),
        QuantFormat(GGMLType.BF16, dequant_flat=float_types.dequantize_bf16,
                    quant_flat=float_types.quantize_bf16),
        QuantFormat(GGMLType.Q4_0, legacy_dequant.q4_0_kernel, legacy_quant.q4_0_kernel,
                    scale_offsets=(0,)),
        QuantFormat(GGMLType.Q4_1, legacy_dequant.q4_1_kernel, legacy_quant.q4_1_kernel,
                    scale_offsets=(0, 2)),
        QuantFormat(GGMLType.Q5_0, legacy_dequant.q5_0_kernel, legacy_quant.q5_0_kernel,
                    scale_offsets=(0,)),
        QuantFormat(GGMLType.Q5_1, legacy_dequant.q5_1_kernel, legacy_quant.q5_1_kernel,
                    scale_offsets=(0, 2)),
        QuantFormat(GGMLType.Q8_0, legacy_dequant.q8_0_kernel, legacy_quant.q8_0_kernel,
                    scale_offsets=(0,)),
        QuantFormat(GGMLType.Q2_K, kquants_dequant.q2_k_kernel, scale_offsets=(80, 82)),
        QuantFormat(GGMLType.Q3_K, kquants_dequant.q3_k_kernel, scale_offsets=(108,)),
        QuantFormat(GGMLType.Q4_K, kquants_dequant.q4_k_kernel, kquants_quant.q4_k_kernel,
                    scale_offsets=(0, 2)),
        QuantFormat(GGMLType.Q5_K, kquants_dequant.q5_k_kernel, kquants_quant.q5_k_kernel,
                    scale_offsets=(0, 2)),
        QuantFormat(GGMLType.Q6_K, kquants_dequant.q6_k_kernel, kquants_quant.q6_k_kernel,
                    scale_offsets=(208,)),
    ]
}


def supported(what: str) -> str:
    names = [f.name for f in FORMATS.values()
             if (f.can_dequantize if what == "dequantize" else f.can_quantize)]
    return ", ".join(names)


def type_id(ggml_type: int | str) -> int:
    """A ggml type id, given it or its name ('Q4_K'); -1 for an unknown name."""
    if isinstance(ggml_type, str):
        return GGML_TYPE_IDS.get(ggml_type.upper(), -1)
    return int(ggml_type)


def format_of(ggml_type: int | str, what: str) -> QuantFormat:
    """The registry entry for a type id or name ('Q4_K'), or QuantError naming what is supported."""
    tid = type_id(ggml_type)
    fmt = FORMATS.get(tid)
    ok = fmt is not None and (fmt.can_dequantize if what == "dequantize" else fmt.can_quantize)
    if fmt is None or not ok:
        shown = ggml_type if isinstance(ggml_type, str) else type_name(tid)
        raise QuantError(f"cannot {what} tensor type {shown}: expected one of {supported(what)}")
    return fmt


def bits_per_weight(ggml_type: int | str) -> float:
    """Storage bits per element of a ggml type, scales included (Q4_0: 4.5, Q4_K: 4.5,
    Q6_K: 6.5625)."""
    tid = type_id(ggml_type)
    if tid not in GGML_BLOCK_SIZES:
        raise QuantError(f"unknown tensor type {ggml_type!r}: expected a ggml type name or id")
    block, size = GGML_BLOCK_SIZES[tid]
    return 8.0 * size / block


# --- whole tensors, in chunks ------------------------------------------------------------------
# numpy evaluates one operation at a time over a whole array, so a kernel written as five array
# expressions streams the tensor through memory five times. Cutting the blocks into chunks keeps
# the temporaries near L2 while the Python overhead per chunk stays small.

CHUNK_ELEMENTS = 1 << 16   # elements per chunk: 256 KiB of float32 output
# Dequantizing chunks by blocks: 2048 blocks is 64K elements of a 32-element type but 512K
# of a k-quant, whose kernels make some thirty numpy calls per chunk, so the larger chunk pays
# for them fewer times, though it spills L2.
DEQUANT_CHUNK_BLOCKS = 2048

def dequantize_blocks(kernel: DequantKernel, blocks: npt.NDArray[np.uint8],
                      block_size: int) -> npt.NDArray[np.float32]:
    """Apply `kernel(blocks_chunk, out_chunk)` chunk by chunk; blocks (n, type_size)."""
    n_blocks = blocks.shape[0]
    out = np.empty((n_blocks, block_size), dtype=np.float32)   # (n, block_size)
    step = DEQUANT_CHUNK_BLOCKS
    for start in range(0, n_blocks, step):
        stop = min(n_blocks, start + step)
        kernel(blocks[start:stop], out[start:stop])
    return out


def quantize_blocks(kernel: QuantKernel, x: npt.NDArray[np.float32], block_size: int,
                    type_size: int) -> npt.NDArray[np.uint8]:
    """Apply `kernel(x_chunk, out_chunk)` chunk by chunk; x (n, block_size) float32."""
    n_blocks = x.shape[0]
    out = np.empty((n_blocks, type_size), dtype=np.uint8)      # (n, type_size)
    step = max(1, CHUNK_ELEMENTS // block_size)
    for start in range(0, n_blocks, step):
        stop = min(n_blocks, start + step)
        kernel(x[start:stop], out[start:stop])
    return out


def dequantize(raw: npt.NDArray[np.generic], ggml_type: int | str, shape: Sequence[int]) -> F32:
    """Raw ggml bytes of one tensor -> float32 array of `shape` (numpy order, rows last).

    `raw` is any uint8 array (a memory-mapped view is fine) holding exactly the bytes of
    `shape` in `ggml_type`. NaN, Inf and subnormal scales follow IEEE arithmetic silently
    (NaN/Inf propagate, Inf x 0 is NaN), exactly as in ggml and gguf-py: no warning, no
    error. F32 returns a view of `raw`."""
    fmt = format_of(ggml_type, "dequantize")
    dims = tuple(int(s) for s in shape)
    n = 1
    for s in dims:
        if s < 0:
            raise QuantError(f"{fmt.name} tensor: negative dimension in shape {dims}")
        n *= s
    if dims and dims[-1] % fmt.block_size:
        raise QuantError(f"{fmt.name} tensor of shape {dims}: the row length {dims[-1]} must be "
                         f"a multiple of the block size {fmt.block_size}")
    expected = n // fmt.block_size * fmt.type_size
    data = np.asarray(raw)
    if data.dtype != np.uint8:
        raise QuantError(f"{fmt.name} tensor: expected raw uint8 bytes, got dtype {data.dtype}")
    if data.size != expected:
        raise QuantError(f"{fmt.name} tensor of shape {dims}: expected {expected} bytes "
                         f"({n} elements at {fmt.type_size} bytes per {fmt.block_size}), got "
                         f"{data.size}")
    flat = np.ascontiguousarray(data).reshape(-1)
    if fmt.dequant_flat is not None:
        return fmt.dequant_flat(flat).reshape(dims)
    assert fmt.dequant_kernel is not None
    blocks = flat.reshape(-1, fmt.type_size)                          # (n_blocks, type_size)
    with np.errstate(invalid="ignore", over="ignore"):  # a file's NaN/Inf scale: IEEE, silent
        out = dequantize_blocks(fmt.dequant_kernel, blocks, fmt.block_size)
    return out.reshape(dims)


def quantize(x: npt.NDArray[np.generic], ggml_type: int | str) -> U8:
    """float array -> raw ggml bytes (uint8, shape (*x.shape[:-1], row bytes)).

    Rows (the last axis) must be a multiple of the block size. Block formats refuse NaN/Inf
    (ggml's quantizers have no defined result for them) and values so large that a block's
    float16 scale would overflow (ggml writes an Inf scale: the block decodes to Inf/NaN);
    subnormal and tiny values give a zero scale and decode to zeros, as in ggml. F32, F16
    and BF16 convert each value by IEEE rules (NaN stays NaN, F16 overflow becomes Inf)."""
    fmt = format_of(ggml_type, "quantize")
    data = np.ascontiguousarray(x, dtype=np.float32)
    shape = data.shape if data.ndim else (1,)
    if shape[-1] % fmt.block_size:
        raise QuantError(f"cannot quantize shape {shape} to {fmt.name}: the row length "
                         f"{shape[-1]} must be a multiple of {fmt.block_size}")
    row_bytes = shape[-1] // fmt.block_size * fmt.type_size
    if fmt.quant_flat is not None:
        with np.errstate(over="ignore"):  # F16: beyond 65504 becomes Inf, by IEEE rules
            return fmt.quant_flat(data).reshape(*shape[:-1], row_bytes)
    if not bool(np.isfinite(data).all()):
        raise QuantError(f"cannot quantize to {fmt.name}: the input holds NaN or Inf")
    assert fmt.quant_kernel is not None
    blocks = data.reshape(-1, fmt.block_size)                         # (n_blocks, block_size)
    with np.errstate(all="ignore"):  # tiny values overflow 1/d, as in ggml; the scale is 0
        raw = quantize_blocks(fmt.quant_kernel, blocks, fmt.block_size, fmt.type_size)
    for off in fmt.scale_offsets:
        exponent = raw[:, off + 1] & 0x7C                             # (n_blocks,) exponents
        bad = np.flatnonzero(exponent == 0x7C)
        if bad.size:
            i = int(bad[0])
            top = float(np.abs(blocks[i]).max())
            raise QuantError(f"cannot quantize to {fmt.name}: block {i} (values up to {top:.4g} in "
                             "magnitude) needs a scale beyond float16's range (65504)")
    return raw.reshape(*shape[:-1], row_bytes)
