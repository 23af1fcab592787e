"""GGUF and GGML constants: value types, tensor types and their block sizes.

Values follow the GGUF specification (ggml's ``docs/gguf.md``) and agree with gguf-py's
``GGUFValueType`` and ``GGMLQuantizationType`` (tests check the agreement).
"""
from __future__ import annotations

from typing import Final

GGUF_MAGIC: Final = b"GGUF"
GGUF_DEFAULT_ALIGNMENT: Final = 32
SUPPORTED_VERSIONS: Final = (2, 3)

# --- metadata value types -------------------------------------------------------------
UINT8: Final = 0
INT8: Final = 1
UINT16: Final = 2
INT16: Final = 3
UINT32: Final = 4
INT32: Final = 5
FLOAT32: Final = 6
BOOL: Final = 7
STRING: Final = 8
ARRAY: Final = 9
UINT64: Final = 10
INT64: Final = 11
FLOAT64: Final = 12

VALUE_TYPE_NAMES: Final[dict[int, str]] = {
    UINT8: "uint8", INT8: "int8", UINT16: "uint16", INT16: "int16", UINT32: "uint32",
    INT32: "int32", FLOAT32: "float32", BOOL: "bool", STRING: "string", ARRAY: "array",
    UINT64: "uint64", INT64: "int64", FLOAT64: "float64",
}

# struct format and numpy dtype string (little-endian) of each fixed-size scalar type
SCALAR_FORMATS: Final[dict[int, str]] = {
    UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
    FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d",
}
SCALAR_DTYPES: Final[dict[int, str]] = {
    UINT8: "<u1", INT8: "<i1", UINT16: "<u2", INT16: "<i2", UINT32: "<u4", INT32: "<i4",
    FLOAT32: "<f4", BOOL: "<u1", UINT64: "<u8", INT64: "<i8", FLOAT64: "<f8",
}

# --- tensor types (ggml_type) ---------------------------------------------------------


class GGMLType:
    """ggml tensor type ids, as stored in a GGUF tensor info (gguf-py's GGMLQuantizationType)."""

    F32: Final = 0
    F16: Final = 1
    Q4_0: Final = 2
    Q4_1: Final = 3
    Q5_0: Final = 6
    Q5_1: Final = 7
    Q8_0: Final = 8
    Q8_1: Final = 9
    Q2_K: Final = 10
    Q3_K: Final = 11
    Q4_K: Final = 12
    Q5_K: Final = 13
    Q6_K: Final = 14
    Q8_K: Final = 15
    IQ2_XXS: Final = 16
    IQ2_XS: Final = 17
    IQ3_XXS: Final = 18
    IQ1_S: Final = 19
    IQ4_NL: Final = 20
    IQ3_S: Final = 21
    IQ2_S: Final = 22
    IQ4_XS: Final = 23
    I8: Final = 24
    I16: Final = 25
    I32: Final = 26
    I64: Final = 27
    F64: Final = 28
    IQ1_M: Final = 29
    BF16: Final = 30
    TQ1_0: Final = 34
    TQ2_0: Final = 35
    MXFP4: Final = 39


# (elements per block, bytes per block) for every type a GGUF may hold
GGML_BLOCK_SIZES: Final[dict[int, tuple[int, int]]] = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 40), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
    14: (256, 210), 15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98),
    19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82), 23: (256, 136),
    24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56),
    30: (1, 2), 34: (256, 54), 35: (256, 66), 39: (32, 17),
}

GGML_TYPE_NAMES: Final[dict[int, str]] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
    10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS",
    17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S",
    23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M",
    30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
}
GGML_TYPE_IDS: Final[dict[str, int]] = {name: tid for tid, name in GGML_TYPE_NAMES.items()}


def type_name(ggml_type: int) -> str:
    """The ggml name of a tensor type id ('Q4_K'), or 'type<N>' for an unknown id."""
    return GGML_TYPE_NAMES.get(ggml_type, f"type{ggml_type}")
