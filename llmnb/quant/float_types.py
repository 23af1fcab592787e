"""Plain float tensor types: F32, F16 (IEEE binary16) and BF16 (bfloat16).

ggml stores them as little-endian scalars with a "block" of one element. BF16 is the top
16 bits of a float32, so widening is a shift; narrowing rounds to nearest even and keeps
NaNs quiet, like ggml's ``ggml_compute_fp32_to_bf16`` (ggml-impl.h) and gguf-py.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

U8 = npt.NDArray[np.uint8]
F32 = npt.NDArray[np.float32]


def dequantize_f32(raw: U8) -> F32:
    """F32 bytes -> float32: a view of `raw`, no copy (read-only if `raw` is)."""
    return raw.reshape(-1).view(np.dtype("<f4"))


def dequantize_f16(raw: U8) -> F32:
    """F16 bytes -> float32 (exact: every binary16 is a float32)."""
    return raw.reshape(-1).view(np.dtype("<f2")).astype(np.float32)


def dequantize_bf16(raw: U8) -> F32:
    """BF16 bytes -> float32: the 16 stored bits become the high half of a float32."""
    halves = raw.reshape(-1).view(np.dtype("<u2"))             # (n,)
    out = np.empty(halves.shape[0], dtype=np.uint32)           # (n,)
    np.copyto(out, halves)                                     # widen (one contiguous cast) ...
    out <<= np.uint32(16)                                      # ... then shift in place: ~3x
    return out.view(np.float32)                                # faster than a mixed-type shift


def quantize_f32(x: F32) -> U8:
    """float32 -> F32 bytes."""
    return np.ascontiguousarray(x, dtype=np.float32).reshape(-1).view(np.uint8)


def quantize_f16(x: F32) -> U8:
    """float32 -> F16 bytes (round to nearest even; out-of-range values become +-inf)."""
    return np.ascontiguousarray(x, dtype=np.float32).reshape(-1).astype(np.float16).view(np.uint8)


def quantize_bf16(x: F32) -> U8:
    """float32 -> BF16 bytes: round the low 16 bits away to nearest even; NaN stays NaN."""
    bits = np.ascontiguousarray(x, dtype=np.float32).reshape(-1).view(np.uint32).copy()   # (n,)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    # a NaN keeps its sign and top payload bits and gets the quiet bit, so rounding
    # below can never carry it into an infinity
    bits[nan] = (bits[nan] & np.uint32(0xFFFF0000)) | np.uint32(0x00400000)
    # round half to even: add 0x7FFF plus the lowest kept bit, then drop 16 bits
    # (cannot overflow uint32: the largest non-NaN pattern is 0xFF800000)
    bits += np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (bits >> np.uint32(16)).astype(np.uint16).view(np.uint8)
