"""Quantization formats: ggml's block layouts, dequantized and quantized with numpy.

``dequantize(raw, ggml_type, shape)`` and ``quantize(x, ggml_type)`` cover F32, F16, BF16,
Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and (dequantize only) Q2_K, Q3_K, plus Q4_K, Q5_K, Q6_K both
ways. ``FORMATS`` is the registry (block geometry and kernels per type). Families:
``float_types``, ``legacy_dequant``/``legacy_quant`` (32-element blocks),
``kquants_dequant``/``kquants_quant``/``kquants_search`` (256-element super-blocks);
``gguf_file`` quantizes whole GGUF files.
"""
from __future__ import annotations

from llmnb.quant.formats import (
    FORMATS,
    QuantError,
    QuantFormat,
    bits_per_weight,
    dequantize,
    quantize,
)

__all__ = ["FORMATS", "QuantError", "QuantFormat", "bits_per_weight", "dequantize", "quantize"]
