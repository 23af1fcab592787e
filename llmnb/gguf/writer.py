"""Writing GGUF files, on gguf-py's ``GGUFWriter``, never half-written.

llmnb reads GGUF with its own reader (``reader.py``) but writes with gguf-py, the format's
reference writer. ``write_gguf`` adds what every llmnb writer needs: typed metadata copied
field by field, raw quantized blocks, and an atomic write (a temp file in the target's
folder, renamed into place only when complete: ``llmnb.output``).
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from llmnb.gguf.constants import ARRAY, GGML_BLOCK_SIZES, GGMLType
from llmnb.gguf.reader import GGUFError, MetadataField
from llmnb.output import atomic_path

import gguf  # gguf-py: the reference writer


@dataclass(frozen=True)
class TensorToWrite:
    """One tensor for ``write_gguf``.

    ``data`` is float32/float16 values (for F32/F16) or the raw uint8 bytes of any type;
    ``shape`` is the element shape in numpy order (the reverse of GGML's ``ne``).
    """

    name: str
    data: npt.NDArray[Any]
    ggml_type: int
    shape: tuple[int, ...]


def write_gguf(path: str | os.PathLike[str], arch: str, fields: Iterable[MetadataField],
               tensors: Iterable[TensorToWrite]) -> None:
    """Write a GGUF v3 file: `fields` in order (``general.architecture`` is set from `arch`),
    then `tensors` in order. ``general.alignment``, if among the fields, sets the alignment."""
    with atomic_path(path) as tmp:
        w = gguf.GGUFWriter(tmp, arch)
        for f in fields:
            if f.key == "general.architecture":
                continue
            if f.key == "general.alignment":
                w.add_custom_alignment(int(f.value))
                continue
            value: Any = f.value
            if f.value_type == ARRAY and isinstance(value, np.ndarray):
                value = value.tolist()
            sub = gguf.GGUFValueType(f.item_type) if f.item_type is not None else None
            w.add_key_value(f.key, value, gguf.GGUFValueType(f.value_type), sub_type=sub)
        for t in tensors:
            _add_tensor(w, t, str(path))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


def _add_tensor(w: gguf.GGUFWriter, t: TensorToWrite, path: str) -> None:
    for float_type, dtype in ((GGMLType.F32, np.float32), (GGMLType.F16, np.float16)):
        if t.ggml_type == float_type:
            data = t.data.view(dtype) if t.data.dtype == np.uint8 else t.data   # raw bytes as-is
            w.add_tensor(t.name, np.ascontiguousarray(data, dtype=dtype).reshape(t.shape))
            return
    if t.ggml_type not in GGML_BLOCK_SIZES:
        raise GGUFError(path, 0, f"tensor {t.name!r}", f"a known ggml type, got {t.ggml_type}")
    block, size = GGML_BLOCK_SIZES[t.ggml_type]
    if t.shape[-1] % block:
        raise GGUFError(path, 0, f"tensor {t.name!r}",
                        f"a row length divisible by {block}, got shape {t.shape}")
    byte_shape = (*t.shape[:-1], t.shape[-1] // block * size)
    raw = np.ascontiguousarray(t.data, dtype=np.uint8).reshape(byte_shape)
    w.add_tensor(t.name, raw, raw_shape=byte_shape,
                 raw_dtype=gguf.GGMLQuantizationType(t.ggml_type))
