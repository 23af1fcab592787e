"""Run a block kernel over a tensor in cache-sized chunks.

numpy evaluates one operation at a time over a whole array, so a dequantizer written
as five array expressions streams the tensor through memory five times. Cutting the
blocks into chunks of 64K elements keeps every temporary inside L2 (1 MiB per core on
the reference machine) while the Python overhead per chunk stays small.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

CHUNK_ELEMENTS = 1 << 16   # elements per chunk: 256 KiB of float32 output

DequantKernel = Callable[[npt.NDArray[np.uint8], npt.NDArray[np.float32]], None]
QuantKernel = Callable[[npt.NDArray[np.float32], npt.NDArray[np.uint8]], None]


def dequantize_blocks(kernel: DequantKernel, blocks: npt.NDArray[np.uint8],
                      block_size: int) -> npt.NDArray[np.float32]:
    """Apply `kernel(blocks_chunk, out_chunk)` chunk by chunk; blocks (n, type_size)."""
    n_blocks = blocks.shape[0]
    out = np.empty((n_blocks, block_size), dtype=np.float32)   # (n, block_size)
    step = max(1, CHUNK_ELEMENTS // block_size)
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


def f16_column(blocks: npt.NDArray[np.uint8], offset: int) -> npt.NDArray[np.float32]:
    """The little-endian float16 at (even) byte `offset` of every block, as (n, 1) float32.

    Every block size and scale offset in ggml is even, so the rows can be read as uint16:
    one strided gather instead of copying a 2-byte-wide column."""
    halves = blocks.view(np.uint16)[:, offset // 2]             # (n,) strided
    return halves.view(np.float16).astype(np.float32).reshape(-1, 1)   # (n, 1)


def put_f16_column(out: npt.NDArray[np.uint8], offset: int, values: npt.NDArray[np.float32]) -> None:
    """Store (n, 1) float32 `values` as float16 (round to nearest even) at byte `offset`."""
    out[:, offset:offset + 2] = values.astype(np.float16).view(np.uint8)   # (n, 2)


def where32(cond: npt.NDArray[np.bool_], a: npt.NDArray[np.float32] | np.float32,
            b: npt.NDArray[np.float32] | np.float32) -> npt.NDArray[np.float32]:
    """np.where typed as float32 (both branches are float32 here)."""
    out: npt.NDArray[np.float32] = np.where(cond, a, b).astype(np.float32, copy=False)
    return out
