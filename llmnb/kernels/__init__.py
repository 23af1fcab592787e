"""Products that read quantized GGUF blocks directly, compiled by numba.

``pack(raw, ggml_type, n_out, n_in)`` repacks a weight's blocks at load into the tiled
layout of ``layout.py``; ``matmul(x, packed)`` is x @ W.T for any number of rows
(``product.py`` picks the quantized kernels of ``matvec.py`` or a dequantized slice and
BLAS); ``rows(packed, ids)`` and ``to_dense(packed)`` dequantize. The kernels are plain
Python that numba compiles (``jit.py``: cache, threads, vector width); these modules stay
interpreted (mypyc-compiled functions cannot be compiled by numba), so a notebook can print
their source. Importing this package does not import numba: the first product does.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

from llmnb.kernels.layout import (
    KERNEL_TYPES, TILE, F32Tiles, PackedMatrix, PackedParts, f32_tiles, pack,
    packed_bytes_per_weight,
)
from llmnb.kernels.threads import set_threads

F32 = npt.NDArray[np.float32]


def matmul(x: F32, w: PackedMatrix) -> F32:
    """x (T, n_in) float32 @ W.T -> (T, n_out): the quantized kernels for few rows, a
    dequantized slice and BLAS for many (``product.py``)."""
    import llmnb.kernels.product as product

    return product.matmul(x, w)


def rows(w: PackedMatrix, ids: npt.NDArray[np.int64]) -> F32:
    """Rows `ids` of W as float32 (len(ids), n_in), bit-identical to dequantizing them."""
    import llmnb.kernels.product as product

    return product.rows(w, ids)


def to_dense(w: PackedMatrix) -> F32:
    """W.T as float32 (n_in, n_out), bit-identical to ``dequantize(...).T``."""
    import llmnb.kernels.product as product

    return product.to_dense(w)


__all__ = ["KERNEL_TYPES", "TILE", "F32Tiles", "PackedMatrix", "PackedParts", "f32_tiles",
           "matmul", "pack",
           "packed_bytes_per_weight", "rows", "set_threads", "to_dense"]
