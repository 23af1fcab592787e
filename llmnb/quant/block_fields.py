"""Reading and writing the fields of GGUF blocks as long numpy loops.

numpy's cost is per inner loop: an operation on a (n, 16) slice of (n, 18) blocks, or a
(n, 32) array times a (n, 1) scale, runs n loops of 16 or 32 elements, and the loop set-up
costs more than the arithmetic. The block kernels (``legacy_*``, ``kquants_*``,
``llmnb.kernels.layout``) therefore only do arithmetic on contiguous arrays (one long loop):
``byte_columns`` copies a field out of every block as one wide item per block, ``bit_planes``
splits packed bits with the plane axis outermost, ``per_element`` repeats each scale over its
run of elements, and ``f16_column`` / ``put_f16_column`` read and write the float16 scales.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

# every float16 bit pattern -> its float32 value (numpy's own conversion, so NaN payloads
# match gguf-py); a gather from this 256 KiB table is faster than numpy's float16 cast
F16_TO_F32 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)   # (65536,)


def f16_column(blocks: npt.NDArray[np.uint8], offset: int) -> npt.NDArray[np.float32]:
    """The little-endian float16 at (even) byte `offset` of every block, as (n, 1) float32.

    Every block size and scale offset in ggml is even, so the rows can be read as uint16:
    one strided gather instead of copying a 2-byte-wide column."""
    halves = blocks.view(np.uint16)[:, offset // 2]             # (n,) strided
    return np.take(F16_TO_F32, halves).reshape(-1, 1)           # (n, 1)


def put_f16_column(out: npt.NDArray[np.uint8], offset: int,
                   values: npt.NDArray[np.float32]) -> None:
    """Store (n, 1) float32 `values` as float16 (round to nearest even) at byte `offset`."""
    out[:, offset:offset + 2] = values.astype(np.float16).view(np.uint8)   # (n, 2)


def where32(cond: npt.NDArray[np.bool_], a: npt.NDArray[np.float32] | np.float32,
            b: npt.NDArray[np.float32] | np.float32) -> npt.NDArray[np.float32]:
    """np.where typed as float32 (both branches are float32 here)."""
    out: npt.NDArray[np.float32] = np.where(cond, a, b).astype(np.float32, copy=False)
    return out


def byte_columns(blocks: npt.NDArray[np.uint8], start: int, stop: int) -> npt.NDArray[np.uint8]:
    """blocks[:, start:stop] as a contiguous (n, stop - start) copy.

    Viewing the field as one void item of stop - start bytes makes the copy a single loop
    of n items instead of n loops of stop - start single bytes."""
    width = stop - start
    field = blocks[:, start:stop].view(np.dtype(f"V{width}"))      # (n, 1) one item per block
    return np.ascontiguousarray(field).view(np.uint8).reshape(-1, width)


def bit_planes(packed: npt.NDArray[np.uint8], bits: int, planes: int,
               to_bit: int = 0) -> npt.NDArray[np.uint8]:
    """Packed bytes (rows, w) -> (rows, planes, w): plane p holds bits bits*p .. bits*p+bits-1
    of each byte, moved to bit `to_bit` (ready to OR onto lower bits).

    The shift and mask run on uint64 words (eight bytes at once; the mask drops the bits
    that slide in from the neighbouring byte) and plane-major, (planes, rows * w / 8), in
    long loops; one copy of w-byte items then puts each row's planes side by side."""
    rows, width = packed.shape
    words = np.ascontiguousarray(packed).reshape(1, -1).view(np.uint64)   # (1, rows * w / 8)
    shifts = np.arange(0, bits * planes, bits, dtype=np.uint64).reshape(planes, 1)
    mask = np.uint64(((1 << bits) - 1) * 0x0101010101010101)
    split = (words >> shifts) & mask                                # (planes, rows * w / 8)
    if to_bit:
        split <<= np.uint64(to_bit)
    out = np.empty((rows, planes, width), dtype=np.uint8)           # (rows, planes, w)
    item = np.dtype(f"V{width}")
    out.view(item).reshape(rows, planes)[...] = split.view(item).reshape(planes, rows).T
    return out


def per_element(scales: npt.NDArray[np.float32], run: int) -> npt.NDArray[np.float32]:
    """Scales (n, k) -> (n, k * run): each scale repeated over its run of elements, so the
    multiply that applies them is one contiguous loop (np.repeat copies fast)."""
    n = scales.shape[0]
    return np.repeat(scales.reshape(-1), run).reshape(n, -1)       # (n, k * run)
