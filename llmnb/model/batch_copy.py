"""Batch copies: copies of a model's float32 matrices for products over several rows, in
64-output tiles (the default) or as W (out, in) for ``W @ X.T``.

Decoding multiplies one row by each weight, and the (in, out) layout the loader keeps is the
fastest for that (``blocks.Linear``). A speculative verify batch multiplies T = 2..64 rows by
each weight, and there other layouts win. The default is W in tiles of 64 outputs, input-major
(``llmnb.kernels.F32Tiles``), multiplied by ``llmnb.kernels.floats``' few-row kernel, which
streams each weight once for all rows. The other is W stored (out, in) and multiplied as
``W @ X.T``: OpenBLAS's matrix-matrix product reads the weight as it is, where ``X @ W.T``
with the (in, out) layout packs it first. Only one copy is kept. What a batch of T rows costs
in each layout, in decode steps: ``python -m llmnb.perf.bench_spec --paths X@W W@X.T tiles``
(notebook 10 draws the curves).

The price is memory: a second copy of every float32 matrix (the head included), made on
request (``Transformer.use_batch_copies``) for float32 weights held in memory.

Quantized weights get the copy only when asked (``generate_speculative(..., batch_copies=True)``):
dequantized, it is a float32 copy of the whole model (about 540 MB for SmolLM2-135M beside its
~100 MB of blocks), which undoes what the quantized residency is for. The integer kernels
(``llmnb.kernels.integer``) read a block once for a register block of rows and do every row's
byte arithmetic, so a batch's cost grows slowly with T and the copy is not needed; the float
kernels (``weights="quantized-float"``) grow faster, and take the copy from
COPY_ROWS_QUANTIZED rows on (``--paths quantized quantized-float quantized-float+W@X.T``
measures all three).
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

from llmnb.kernels import F32Tiles, PackedMatrix, PackedParts, f32_tiles, to_dense

F32 = npt.NDArray[np.float32]


Copy = F32 | F32Tiles      # W itself (out, in), or W in 64-output tiles (``F32Tiles``)


def batch_copy(w_t: object, quantized: bool = False, tiles: bool = False) -> Copy | None:
    """A float32 (in, out) matrix -> its copy in tiles (`tiles`) or a contiguous (out, in) copy;
    a quantized one (``llmnb.kernels``' PackedMatrix, or PackedParts side by side) -> its
    dequantized (out, in) copy with `quantized`, else None (its kernels read its blocks
    whatever the rows)."""
    if isinstance(w_t, np.ndarray):
        return f32_tiles(w_t) if tiles else np.ascontiguousarray(w_t.T)
    if not quantized:
        return None
    if isinstance(w_t, PackedParts):
        return np.concatenate([np.ascontiguousarray(to_dense(p).T) for p in w_t.parts])
    if isinstance(w_t, PackedMatrix):
        return np.ascontiguousarray(to_dense(w_t).T)          # (out, in)
    return None


def batch_copy_size(w_t: object) -> int:
    """Bytes the batch copy of one matrix would hold."""
    if isinstance(w_t, np.ndarray):
        return int(w_t.nbytes)
    if isinstance(w_t, PackedParts):
        return sum(4 * p.n_out * p.n_in for p in w_t.parts)
    return 4 * w_t.n_out * w_t.n_in if isinstance(w_t, PackedMatrix) else 0
