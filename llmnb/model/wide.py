"""The wide layout: (out, in) copies of a model's float32 matrices, for products over many rows.

Decoding multiplies one row by each weight, and the (in, out) layout the loader keeps is the
fastest for that (``blocks.linear``). A speculative verify batch multiplies T = 4..64 rows by
each weight, and there the other layout wins: W stored (out, in) and multiplied as
``W @ X.T``, OpenBLAS's matrix-matrix product reads the weight once as it is, where ``X @ W.T``
with the (in, out) layout packs it first. On SmolLM2-135M (1 thread, 150 cached tokens) a
verify batch of 8 rows costs about 2.7 decode steps this way against 4.6 (``python -m
llmnb.perf.bench_spec --paths``, notebook 10 draws both curves).

The price is memory: a second copy of every float32 matrix (the head included), made on
request (``Transformer.use_wide``) and only for float32 weights held in memory (quantized ones
are multiplied by ``llmnb.kernels`` whatever the rows).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]


@dataclass
class WideLayer:
    """One layer's matrices in (out, in) layout (no suffix: W itself, not W.T); None: not
    held (``NARROW``, the layer without copies)."""

    wqkv: F32 | None        # (n_head*hd + 2*n_kv*hd, d)
    wo: F32 | None          # (d, n_head*hd)
    w_gate_up: F32 | None   # (2*ff, d)
    w_down: F32 | None      # (d, ff)


NARROW = WideLayer(None, None, None, None)


def wide(w_t: object) -> F32 | None:
    """A float32 (in, out) matrix -> a contiguous (out, in) copy; None for a quantized one
    (``blocks.Product``: its kernels read its blocks whatever the rows)."""
    return np.ascontiguousarray(w_t.T) if isinstance(w_t, np.ndarray) else None


def wide_bytes(layers: list[WideLayer], head: F32 | None) -> int:
    """Bytes the wide copies hold."""
    return (0 if head is None else head.nbytes) + sum(a.nbytes for lw in layers
                             for a in (lw.wqkv, lw.wo, lw.w_gate_up, lw.w_down) if a is not None)
