"""Hand-assembled GGUF bytes for reader tests (so malformed files can be made on purpose)."""
from __future__ import annotations

import struct


def s(text: str | bytes) -> bytes:
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def kv_u32(key: str, v: int) -> bytes:
    return s(key) + struct.pack("<II", 4, v)


def kv_str(key: str, v: str) -> bytes:
    return s(key) + struct.pack("<I", 8) + s(v)


def kv_f32_array(key: str, vals: list[float]) -> bytes:
    return s(key) + struct.pack("<IIQ", 9, 6, len(vals)) + struct.pack(f"<{len(vals)}f", *vals)


def tensor_info(name: str, ne: list[int], ggml_type: int, offset: int) -> bytes:
    return (s(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
            + struct.pack("<IQ", ggml_type, offset))


def gguf(kvs: list[bytes], infos: list[bytes], data: bytes = b"", version: int = 3,
         n_kv: int | None = None, n_tensors: int | None = None, align: int = 32) -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", version, len(infos) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(infos)
    pad = (-len(body)) % align
    return body + b"\0" * pad + data


def valid() -> bytes:
    """Two F32 tensors (2x32 and 32) and a few keys: a well-formed file."""
    kvs = [kv_str("general.architecture", "llama"), kv_u32("llama.block_count", 1),
           kv_f32_array("tokenizer.ggml.scores", [0.5, -1.0, 2.0])]
    infos = [tensor_info("a.weight", [32, 2], 0, 0), tensor_info("b.weight", [32], 0, 256)]
    data = struct.pack("<64f", *range(64)) + struct.pack("<32f", *range(32))
    return gguf(kvs, infos, data)
