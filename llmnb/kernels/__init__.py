"""Products that read quantized GGUF blocks directly, compiled by numba.

``pack(raw, ggml_type, n_out, n_in)`` repacks a weight's blocks at load into the tiled
layout of ``layout.py``; ``matmul(x, packed)`` is x @ W.T for any number of rows
(``product.py`` picks the quantized kernels of ``matvec.py`` or a dequantized slice and
BLAS); ``rows(packed, ids)`` and ``to_dense(packed)`` dequantize. The kernels are plain
Python that numba compiles (``jit.py``: cache, threads, vector width); these modules stay
interpreted (mypyc-compiled functions cannot be compiled by numba), so a notebook can print
their source.
"""
from llmnb.kernels.jit import set_threads
from llmnb.kernels.layout import KERNEL_TYPES, TILE, PackedMatrix, pack, packed_bytes_per_weight
from llmnb.kernels.product import DENSE_ROWS, dense_matmul, matmul, quantized_matmul, rows, to_dense

__all__ = ["DENSE_ROWS", "KERNEL_TYPES", "TILE", "PackedMatrix", "dense_matmul", "matmul", "pack",
           "packed_bytes_per_weight", "quantized_matmul", "rows", "set_threads", "to_dense"]
