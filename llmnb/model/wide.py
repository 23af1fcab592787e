"""The wide layout: copies of a model's float32 matrices for products over several rows, in
64-output tiles (the default) or as W (out, in) for ``W @ X.T``.

Decoding multiplies one row by each weight, and the (in, out) layout the loader keeps is the
fastest for that (``blocks.linear``). A speculative verify batch multiplies T = 2..64 rows by
each weight, and there other layouts win. The default is W in tiles of 64 outputs, input-major
(``llmnb.kernels.F32Tiles``), multiplied by ``llmnb.kernels.floats``' few-row kernel, which
streams each weight once for all rows. The other is W stored (out, in) and multiplied as
``W @ X.T``: OpenBLAS's matrix-matrix product reads the weight as it is, where ``X @ W.T``
with the (in, out) layout packs it first. On SmolLM2-135M (1 thread, 150 cached tokens, one
session, ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m llmnb.perf.bench_spec
--threads 1 --repeats 5 --paths X@W W@X.T tiles``) a verify batch of 2 / 4 / 8 / 16 / 32 / 48
/ 64 rows costs 1.11 / 1.57 / 1.87 / 3.00 / 5.24 / 7.0 / 10.3 decode steps in tiles, 1.52 /
2.97 / 4.37 / 3.99 / 5.47 / 7.2 / 8.7 as W @ X.T and 1.44 / 2.18 / 3.85 / 4.36 / 5.25 / 6.96 /
8.2 as loaded (notebook 10 draws the curves). Only one copy is kept: the tiles lose only at 64
rows (305 against 264 ms), beyond what a verify batch usually holds.

The price is memory: a second copy of every float32 matrix (the head included), made on
request (``Transformer.use_wide``) for float32 weights held in memory.

Quantized weights get the copy only when asked (``generate_speculative(..., wide=True)``):
dequantized, it is a float32 copy of the whole model (about 540 MB for SmolLM2-135M beside its
98 MB of blocks), which undoes what the quantized residency is for. The kernels' few-row
products (``llmnb.kernels``) read and convert the blocks once per block of up to 8 rows and do
every row's arithmetic, so their cost still grows with T, but slowly enough that the copy only
pays from WIDE_ROWS_QUANTIZED rows on: on SmolLM2-135M's Q4_1 blocks (1 thread, 150 cached
tokens, one session, ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m
llmnb.perf.bench_spec --threads 1 --paths quantized quantized+W@X.T``) a batch of 4 / 8 / 16 /
24 rows cost 27 / 49 / 93 / 141 ms through the kernels against a quantized decode step of
9.6 ms (2.8 / 5.1 / 9.7 / 14.8 steps), and 99 / 129 / 164 ms at 8 / 16 / 24 rows through the
dequantized wide copy.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from llmnb.kernels import F32Tiles, PackedMatrix, PackedParts, f32_tiles, to_dense

F32 = npt.NDArray[np.float32]


Copy = F32 | F32Tiles      # W itself (out, in), or W in 64-output tiles (``F32Tiles``)


@dataclass
class WideLayer:
    """One layer's matrices as W itself (no suffix, not W.T): (out, in), or in tiles; None:
    not held (``NARROW``, the layer without copies)."""

    wqkv: Copy | None       # (n_head*hd + 2*n_kv*hd, d)
    wo: Copy | None         # (d, n_head*hd)
    w_gate_up: Copy | None  # (2*ff, d)
    w_down: Copy | None     # (d, ff)


NARROW = WideLayer(None, None, None, None)


def wide(w_t: object, quantized: bool = False, tiles: bool = False) -> Copy | None:
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


def wide_size(w_t: object) -> int:
    """Bytes the wide copy of one matrix would hold."""
    if isinstance(w_t, np.ndarray):
        return int(w_t.nbytes)
    if isinstance(w_t, PackedParts):
        return sum(4 * p.n_out * p.n_in for p in w_t.parts)
    return 4 * w_t.n_out * w_t.n_in if isinstance(w_t, PackedMatrix) else 0


def wide_bytes(layers: list[WideLayer], head: Copy | None) -> int:
    """Bytes the wide copies hold."""
    return (0 if head is None else head.nbytes) + sum(a.nbytes for lw in layers
                             for a in (lw.wqkv, lw.wo, lw.w_gate_up, lw.w_down) if a is not None)
