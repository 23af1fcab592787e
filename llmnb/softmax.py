"""Softmax, log-softmax and entropy of logits: the one copy that sampling and perplexity (ar)
and the remasking rules (diffusion) share.

Each works along `axis` (default the last: one (V,) row or an (n, V) batch of rows) and
subtracts the row's maximum first, so exp never overflows. The arithmetic is float64 where
a sampler draws from the probabilities or a rule compares them (llama.cpp's samplers; LLaDA
and Fast-dLLM compute their confidences in float64) and float32 for the entropy, which
diffuse-cpp's entropy_exit computes in float32. The attention softmax is not here:
``llmnb.model.blocks.attention_weights`` normalises float32 scores in place, for speed.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from llmnb.errors import UsageError

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


def _softmax(logits: npt.NDArray[np.floating], temperature: float, axis: int,
             dtype: type[np.float32] | type[np.float64]) -> npt.NDArray[Any]:
    """softmax(logits / temperature) along `axis`, computed in `dtype` (a new array)."""
    if not temperature > 0.0:
        raise UsageError(f"softmax: expected a temperature > 0, got {temperature}")
    x: npt.NDArray[Any] = logits.astype(dtype, copy=False)     # (..., V)
    if temperature != 1.0:
        x = x / temperature                             # (..., V), in dtype
    z = x - x.max(axis=axis, keepdims=True)             # (..., V) <= 0
    p: npt.NDArray[Any] = np.exp(z, out=z)
    p /= p.sum(axis=axis, keepdims=True)
    return p


def softmax(logits: npt.NDArray[np.floating], temperature: float = 1.0, axis: int = -1) -> F64:
    """softmax(logits / temperature) along `axis` (default the last), in float64."""
    out: F64 = _softmax(logits, temperature, axis, np.float64)
    return out


def log_softmax(logits: npt.NDArray[np.floating], axis: int = -1) -> F64:
    """log softmax(logits) along `axis` (default the last), in float64: z - log sum exp z with
    z = logits - max."""
    z = logits.astype(np.float64)                       # (..., V)
    z -= z.max(axis=axis, keepdims=True)
    z -= np.log(np.exp(z).sum(axis=axis, keepdims=True))
    out: F64 = z
    return out


def entropy(logits: npt.NDArray[np.floating], temperature: float = 1.0, axis: int = -1) -> F64:
    """H = -sum p log p of softmax(logits / temperature) along `axis` (default the last), in
    nats: a float32 softmax and sum (diffuse-cpp's), terms with p <= 1e-10 skipped, returned
    as float64."""
    p: F32 = _softmax(logits, temperature, axis, np.float32)     # (..., V)
    terms = np.where(p > 1e-10, p * np.log(np.maximum(p, 1e-30)), np.float32(0.0))
    out: F64 = -terms.sum(axis=axis).astype(np.float64)
    return out
