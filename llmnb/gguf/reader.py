"""A hardened, memory-mapped GGUF reader (versions 2 and 3).

GGUF layout (ggml ``docs/gguf.md``), all little-endian:

    magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
    n_kv x (string key | u32 value_type | value)
    n_tensors x (string name | u32 n_dims | n_dims x u64 ne | u32 ggml_type | u64 offset)
    padding to `general.alignment` (default 32)
    tensor data (each tensor's offset is relative to here, aligned)

A string is a u64 byte length then UTF-8 bytes; an array is u32 item type, u64 count, items.

The file may be untrusted. Every count, length and offset is checked against the file size
before it is used, arithmetic on sizes is checked for overflow, and every failure raises
``GGUFError`` naming the file, the byte offset and the field. Tensor data is never copied:
``GGUFFile.raw`` returns a read-only view of the memory map.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from llmnb.errors import EXIT_INPUT, LLMNBError
from llmnb.gguf.constants import (
    ARRAY, GGML_BLOCK_SIZES, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, SCALAR_DTYPES, SCALAR_FORMATS,
    STRING, SUPPORTED_VERSIONS, UINT32, VALUE_TYPE_NAMES, type_name,
)
from llmnb.gguf.summary import summary_html

MAX_DIMS: Final = 4              # ggml's GGML_MAX_DIMS
MAX_TENSOR_NAME: Final = 64      # bytes, GGML_MAX_NAME (names must fit with their NUL)
MAX_NESTING: Final = 8           # arrays of arrays deeper than this are rejected
MAX_ELEMENTS: Final = 1 << 62    # elements of one tensor (keeps byte sizes within int64)

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_HEADER = struct.Struct("<4sIQQ")
# smallest encoding of one item of each value type, used to cap counts by the bytes left
_MIN_ITEM_SIZE: Final[dict[int, int]] = {STRING: 8, ARRAY: 12}


class GGUFError(LLMNBError):
    """A GGUF file is missing, truncated or malformed (names file, byte offset and field)."""

    exit_code = EXIT_INPUT

    def __init__(self, path: str, offset: int, field: str, expected: str) -> None:
        self.path = path
        self.offset = offset
        self.field = field
        self.expected = expected
        super().__init__(f"{path}: at byte {offset}, {field}: expected {expected}")


@dataclass(frozen=True)
class MetadataField:
    """One key/value pair. ``value`` is int/float/bool/str, a list (string arrays and arrays
    of arrays) or a 1-D numpy array (numeric arrays); ``item_type`` is an array's element type."""

    key: str
    value_type: int
    value: Any  # (mypyc cannot compile a dataclass field annotated `object`)
    item_type: int | None = None


@dataclass(frozen=True)
class TensorInfo:
    """A tensor's description. ``shape`` is in numpy order (the reverse of GGML's ``ne``);
    ``offset`` is the absolute byte offset of its data in the file."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int
    nbytes: int
    n_elements: int

    @property
    def type_name(self) -> str:
        return type_name(self.ggml_type)


class _Cursor:
    """Reads little-endian values from the memory map, checking every read against its end."""

    def __init__(self, buf: mmap.mmap, size: int, path: str) -> None:
        self.buf = buf
        self.size = size
        self.path = path
        self.pos = 0

    def fail(self, field: str, expected: str, at: int | None = None) -> GGUFError:
        return GGUFError(self.path, self.pos if at is None else at, field, expected)

    def need(self, n: int, field: str) -> None:
        if n < 0 or n > self.size - self.pos:
            raise self.fail(field, f"{n} more bytes, but the file ends at byte {self.size}")

    def u32(self, field: str) -> int:
        self.need(4, field)
        v: int = _U32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return v

    def u64(self, field: str) -> int:
        self.need(8, field)
        v: int = _U64.unpack_from(self.buf, self.pos)[0]
        self.pos += 8
        return v

    def string(self, field: str) -> str:
        n = self.u64(field + " (string length)")
        self.need(n, field)
        start = self.pos
        self.pos += n
        try:
            return self.buf[start:self.pos].decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(field, "valid UTF-8 text", at=start) from None

    def count(self, field: str, min_item_size: int) -> int:
        """An element count, refused if that many items could not fit in the bytes left."""
        at = self.pos
        n = self.u64(field)
        if n > (self.size - self.pos) // max(min_item_size, 1):
            raise self.fail(field, f"a count that fits in the file, got {n}", at=at)
        return n


def _read_value(c: _Cursor, vtype: int, field: str, depth: int) -> tuple[object, int | None]:
    """One value of type `vtype` -> (value, item type for arrays)."""
    if vtype == STRING:
        return c.string(field), None
    fmt = SCALAR_FORMATS.get(vtype)
    if fmt is not None:
        size = struct.calcsize(fmt)
        c.need(size, field)
        v: object = struct.unpack_from(fmt, c.buf, c.pos)[0]
        c.pos += size
        return v, None
    if vtype != ARRAY:
        raise c.fail(field, f"a known value type (0..12), got {vtype}", at=c.pos - 4)
    if depth >= MAX_NESTING:
        raise c.fail(field, f"arrays nested at most {MAX_NESTING} deep")
    at = c.pos
    itype = c.u32(field + " (array item type)")
    if itype not in VALUE_TYPE_NAMES:
        raise c.fail(field, f"a known array item type (0..12), got {itype}", at=at)
    dtype = SCALAR_DTYPES.get(itype)
    if dtype is not None:  # numeric array: one bounds check, one copy out of the map
        item = np.dtype(dtype).itemsize
        n = c.count(field + " (array length)", item)
        arr: npt.NDArray[np.generic] = np.frombuffer(c.buf, dtype=dtype, count=n, offset=c.pos)
        c.pos += n * item
        if itype == 7:  # BOOL
            return arr != 0, itype
        return arr.astype(arr.dtype.newbyteorder("="), copy=True), itype
    n = c.count(field + " (array length)", _MIN_ITEM_SIZE[itype])
    if itype == STRING:
        return _read_strings(c, n, field), itype
    items: list[object] = []
    for i in range(n):  # each item is itself an array: item type, count, items
        v, _ = _read_value(c, ARRAY, f"{field}[{i}]", depth + 1)
        items.append(v)
    return items, itype


def _read_strings(c: _Cursor, n: int, field: str) -> list[str]:
    """`n` strings: the hot loop of every vocabulary (49,152 tokens in SmolLM2, 151,936 in Qwen2.5,
    262,144 in Gemma 3)."""
    buf, size, pos = c.buf, c.size, c.pos
    unpack = _U64.unpack_from
    out: list[str] = []
    for i in range(n):
        if size - pos < 8:
            c.pos = pos
            c.need(8, f"{field}[{i}] (string length)")
        length: int = unpack(buf, pos)[0]
        pos += 8
        if length > size - pos:
            c.pos = pos
            c.need(length, f"{field}[{i}]")
        try:
            out.append(buf[pos:pos + length].decode("utf-8"))
        except UnicodeDecodeError:
            raise GGUFError(c.path, pos, f"{field}[{i}]", "valid UTF-8 text") from None
        pos += length
    c.pos = pos
    return out


def _read_tensor_info(c: _Cursor, index: int) -> tuple[str, tuple[int, ...], int, int, int]:
    """(name, shape in numpy order, ggml_type, relative offset, n_elements) of tensor `index`."""
    field = f"tensor {index}"
    at = c.pos
    name = c.string(field + " name")
    if not name or len(name.encode("utf-8")) >= MAX_TENSOR_NAME:
        raise c.fail(field + " name", f"1..{MAX_TENSOR_NAME - 1} bytes, got {name[:80]!r}", at=at)
    field = f"tensor {name!r}"
    at = c.pos
    n_dims = c.u32(field + " n_dims")
    if not 1 <= n_dims <= MAX_DIMS:
        raise c.fail(field + " n_dims", f"1..{MAX_DIMS}, got {n_dims}", at=at)
    ne: list[int] = []
    n_elements = 1
    for d in range(n_dims):
        at = c.pos
        size = c.u64(f"{field} ne[{d}]")
        if size >= (1 << 63):
            raise c.fail(f"{field} ne[{d}]", f"a non-negative int64, got {size}", at=at)
        if size and n_elements > MAX_ELEMENTS // size:
            raise c.fail(f"{field} ne[{d}]", f"at most {MAX_ELEMENTS} elements in all", at=at)
        n_elements *= size
        ne.append(size)
    at = c.pos
    ggml_type = c.u32(field + " type")
    if ggml_type not in GGML_BLOCK_SIZES:
        raise c.fail(field + " type", f"a known ggml type, got {ggml_type}", at=at)
    block, _ = GGML_BLOCK_SIZES[ggml_type]
    if ne[0] % block:
        raise c.fail(field + " ne[0]",
                     f"a multiple of {block} for {type_name(ggml_type)}, got {ne[0]}", at=at)
    offset = c.u64(field + " offset")
    return name, tuple(reversed(ne)), ggml_type, offset, n_elements


class GGUFFile:
    """An open GGUF file: ``.version``, ``.metadata``, ``.fields``, ``.tensors``, ``.raw(name)``.

    Open with ``llmnb.gguf.open(path)``; usable as a context manager.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < _HEADER.size:
                    raise GGUFError(self.path, 0, "header",
                                    f"at least {_HEADER.size} bytes, the file has {size}")
                self._mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise GGUFError(self.path, 0, "file", f"a readable file ({e.strerror})") from None
        self.size = size
        try:
            self._parse()
        except BaseException:
            self._mm.close()
            raise

    def _parse(self) -> None:
        c = _Cursor(self._mm, self.size, self.path)
        magic, version, n_tensors, n_kv = _HEADER.unpack_from(self._mm, 0)
        if magic != GGUF_MAGIC:
            raise c.fail("magic", f"b'GGUF', got {magic!r}")
        if version not in SUPPORTED_VERSIONS:
            hint = " (a big-endian file?)" if version > 0xFFFF else ""
            raise c.fail("version", f"2 or 3, got {version}{hint}", at=4)
        self.version: int = version
        c.pos = _HEADER.size
        left = self.size - c.pos
        if n_kv > left // 13:  # a key/value pair takes at least 13 bytes
            raise c.fail("n_kv", f"a count that fits in the file, got {n_kv}", at=16)
        if n_tensors > left // 24:  # a tensor info takes at least 24 bytes
            raise c.fail("n_tensors", f"a count that fits in the file, got {n_tensors}", at=8)

        self.fields: dict[str, MetadataField] = {}
        for i in range(n_kv):
            at = c.pos
            key = c.string(f"metadata key {i}")
            if not key:
                raise c.fail(f"metadata key {i}", "a non-empty key", at=at)
            if key in self.fields:
                raise c.fail(f"metadata key {key!r}", "each key once (duplicate)", at=at)
            vtype = c.u32(f"{key} (value type)")
            value, item_type = _read_value(c, vtype, key, 0)
            self.fields[key] = MetadataField(key, vtype, value, item_type)

        self.alignment = GGUF_DEFAULT_ALIGNMENT
        align = self.fields.get("general.alignment")
        if align is not None:
            a = align.value
            if align.value_type != UINT32 or not isinstance(a, int) or a <= 0 or a & (a - 1):
                raise c.fail("general.alignment", f"a uint32 power of two, got {a!r}", at=0)
            self.alignment = a

        infos = [_read_tensor_info(c, i) for i in range(n_tensors)]
        self.data_offset = (c.pos + self.alignment - 1) // self.alignment * self.alignment
        self.tensors: dict[str, TensorInfo] = {}
        for name, shape, ggml_type, rel, n_elements in infos:
            field = f"tensor {name!r}"
            if name in self.tensors:
                raise c.fail(field, "each tensor name once (duplicate)", at=c.pos)
            if rel % self.alignment:
                raise c.fail(field + " offset", f"a multiple of {self.alignment}, got {rel}")
            block, bsize = GGML_BLOCK_SIZES[ggml_type]
            nbytes = n_elements // block * bsize
            start = self.data_offset + rel
            if rel > self.size or nbytes > self.size - start:
                raise c.fail(field + " data",
                             f"bytes {start}..{start + nbytes} inside the file of {self.size}")
            self.tensors[name] = TensorInfo(name, shape, ggml_type, start, nbytes, n_elements)
        spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in self.tensors.values())
        for (_, end, a_name), (start, _, b_name) in zip(spans, spans[1:]):
            if start < end:
                raise c.fail(f"tensor {b_name!r} data", f"no overlap with {a_name!r}", at=start)
        self.header_bytes = c.pos

    # --- access -------------------------------------------------------------------------

    @property
    def metadata(self) -> dict[str, object]:
        """Every key -> its value (see ``MetadataField``)."""
        return {k: f.value for k, f in self.fields.items()}

    @property
    def architecture(self) -> str:
        arch = self.fields.get("general.architecture")
        return arch.value if arch is not None and isinstance(arch.value, str) else ""

    def raw(self, name: str) -> npt.NDArray[np.uint8]:
        """The tensor's bytes as a read-only uint8 view of the memory map (no copy)."""
        info = self.tensors.get(name)
        if info is None:
            raise GGUFError(self.path, 0, f"tensor {name!r}", "a tensor of this name in the file")
        return np.frombuffer(self._mm, dtype=np.uint8, count=info.nbytes, offset=info.offset)

    def release_pages(self) -> None:
        """Tell the OS the mapped pages read so far may be dropped from this process's
        memory (they are re-read from the file if touched again): call it after copying
        what is needed out of the map."""
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if advice is not None:
            try:
                self._mm.madvise(advice)
            except (OSError, ValueError):
                pass  # a closed map, or a platform that refuses: nothing to release

    def close(self) -> None:
        """Unmap the file. Views from ``raw`` keep it mapped until they are gone."""
        try:
            self._mm.close()
        except BufferError:
            pass  # views still exported: the map is released when they are collected

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"GGUFFile({self.path!r}, v{self.version}, arch={self.architecture!r}, "
                f"{len(self.fields)} keys, {len(self.tensors)} tensors)")

    def _repr_html_(self) -> str:
        return summary_html(self)


def open_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Open and validate a GGUF file (``llmnb.gguf.open``)."""
    return GGUFFile(path)
