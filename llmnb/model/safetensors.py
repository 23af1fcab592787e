"""Reading HF ``.safetensors`` checkpoints with numpy alone, one tensor at a time.

The format (huggingface/safetensors, "format" in its README): an 8-byte little-endian header
length N, N bytes of JSON ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, ...}``
(plus an optional ``__metadata__`` of strings), then the raw little-endian tensor bytes, each
tensor at ``8 + N + begin``. A sharded checkpoint lists its files in
``model.safetensors.index.json`` (``weight_map``: tensor name -> shard file).

Only headers are parsed up front; ``read_tensor`` reads one tensor's bytes straight into the
array it returns, converting a chunk at a time when the stored type differs (not a memory map:
a mapped 16 GB checkpoint would count in the process's resident memory as it is read; here the
process holds the tensor being converted and nothing else, and the page cache does the caching).
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from llmnb.errors import EXIT_INPUT
from llmnb.model.config import ModelError

# safetensors dtype -> (numpy dtype of the stored bits, bytes per element)
DTYPES: dict[str, tuple[str, int]] = {
    "F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2), "F64": ("<f8", 8),
}
MAX_HEADER = 100 * 1024 * 1024   # safetensors itself refuses headers above 100 MB
CHUNK = 1 << 24                  # elements converted at a time (a 64 MiB float32 scratch)


class CheckpointError(ModelError):
    """An HF checkpoint that cannot be read (names the file, the tensor and what was expected)."""

    exit_code = EXIT_INPUT


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lives: its file, stored dtype, numpy shape and absolute byte range."""

    name: str
    path: Path
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def read_header(path: Path) -> dict[str, TensorEntry]:
    """The tensor table of one ``.safetensors`` file, checked against the file size."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            if size < 8 or n > MAX_HEADER or 8 + n > size:
                raise CheckpointError(f"{path}: expected a safetensors header length below "
                                      f"{size - 8} bytes, got {n}")
            header = json.loads(fh.read(n))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: expected a readable safetensors file ({e})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: expected a JSON object as safetensors header")
    base = 8 + n
    out: dict[str, TensorEntry] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict) or "dtype" not in info or "data_offsets" not in info:
            raise CheckpointError(f"{path}: tensor {name!r}: expected dtype, shape and "
                                  "data_offsets")
        dtype = str(info["dtype"])
        shape = tuple(int(d) for d in info.get("shape", []))
        begin, end = (int(x) for x in info["data_offsets"])
        if dtype in DTYPES:
            want = int(np.prod(shape, dtype=np.int64)) * DTYPES[dtype][1]
            if end - begin != want or begin < 0 or base + end > size:
                raise CheckpointError(f"{path}: tensor {name!r}: expected {want} bytes inside "
                                      f"the file for {dtype} {list(shape)}, got offsets "
                                      f"[{begin}, {end}] of {size - base}")
        out[name] = TensorEntry(name, path, dtype, shape, base + begin, base + end)
    return out


def checkpoint_files(hf_dir: Path) -> list[Path]:
    """``model.safetensors``, or the shards named by ``model.safetensors.index.json``."""
    index = hf_dir / "model.safetensors.index.json"
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            names = sorted({str(v) for v in weight_map.values()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise CheckpointError(f"{index}: expected a JSON object with a 'weight_map' "
                                  f"({e})") from None
        return [hf_dir / n for n in names]
    single = hf_dir / "model.safetensors"
    if single.exists():
        return [single]
    raise CheckpointError(f"{hf_dir}: expected model.safetensors or model.safetensors.index.json")


def read_checkpoint_index(hf_dir: Path) -> dict[str, TensorEntry]:
    """Every tensor of a (possibly sharded) checkpoint: name -> where it lives. No data read."""
    table: dict[str, TensorEntry] = {}
    for path in checkpoint_files(hf_dir):
        if not path.exists():
            raise CheckpointError(f"{path}: shard listed in model.safetensors.index.json is "
                                  "missing")
        for name, entry in read_header(path).items():
            if name in table:
                raise CheckpointError(f"{path}: tensor {name!r} also appears in {table[name].path}")
            table[name] = entry
    return table


def check_dtype(entry: TensorEntry) -> None:
    """Refuse (ModelError: a valid file llmnb cannot use) a dtype other than F32/F16/BF16/F64."""
    if entry.dtype not in DTYPES:
        raise ModelError(f"{entry.path}: tensor {entry.name!r}: expected dtype "
                         f"{', '.join(DTYPES)}, got {entry.dtype}")


def _read_into(fh: io.BufferedReader, buf: memoryview, entry: TensorEntry) -> None:
    if fh.readinto(buf) != len(buf):
        raise CheckpointError(f"{entry.path}: tensor {entry.name!r}: file ends early")


def read_tensor(entry: TensorEntry, dtype: type[np.floating[Any]] = np.float32) -> npt.NDArray[Any]:
    """One tensor in its numpy shape as `dtype` (float32, or float16 for F16 output).

    F16 and BF16 widen exactly. When the stored bytes already are `dtype` they are read straight
    into the result; otherwise CHUNK elements at a time are read and converted, so the only
    memory beyond the result is one chunk."""
    check_dtype(entry)
    stored, size = DTYPES[entry.dtype]
    n = (entry.end - entry.begin) // size
    out = np.empty(n, dtype=dtype)                                   # (n,) the result
    try:
        with open(entry.path, "rb") as fh:
            fh.seek(entry.begin)
            if np.dtype(stored) == out.dtype:
                _read_into(fh, out.data.cast("B"), entry)
            else:
                raw_buf = bytearray(min(n, CHUNK) * size)
                for start in range(0, n, CHUNK):
                    k = min(CHUNK, n - start)
                    view = memoryview(raw_buf)[:k * size]
                    _read_into(fh, view, entry)
                    raw = np.frombuffer(view, dtype=stored)
                    if entry.dtype == "BF16":     # bfloat16 = the top 16 bits of a float32
                        wide = raw.astype(np.uint32)
                        wide <<= 16
                        out[start:start + k] = wide.view(np.float32)
                    else:
                        out[start:start + k] = raw
                    del raw
    except OSError as e:
        raise CheckpointError(f"{entry.path}: tensor {entry.name!r}: expected a readable file "
                              f"({e})") from None
    return out.reshape(entry.shape)
