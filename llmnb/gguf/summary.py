"""A model file at a glance: architecture, hyper-parameters, tensors by type.

Used by ``llmnb inspect`` (text and ``--json``) and as the notebook HTML view of a
``GGUFFile`` (``reader.py`` imports this module; this one reads the file through the
``FileHeader`` protocol). Only the header is read; no tensor data is touched.
"""
from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from llmnb.gguf.constants import type_name

_HIDDEN_ARRAYS = 8  # arrays longer than this are summarised as "[n x type]"


# What a summary reads of a file: the header, as ``reader.GGUFFile`` holds it (said here as a
# protocol, so that this module needs no import of the reader, whose HTML view it draws).

class TensorHeader(Protocol):
    @property
    def ggml_type(self) -> int: ...
    @property
    def n_elements(self) -> int: ...
    @property
    def nbytes(self) -> int: ...


class FileHeader(Protocol):
    @property
    def path(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def architecture(self) -> str: ...
    @property
    def metadata(self) -> Mapping[str, object]: ...
    @property
    def tensors(self) -> Mapping[str, TensorHeader]: ...


@dataclass
class TypeRow:
    """Tensors of one ggml type: how many, their elements and their bytes."""

    ggml_type: str
    n_tensors: int = 0
    n_elements: int = 0
    nbytes: int = 0


@dataclass
class Summary:
    path: str
    version: int
    architecture: str
    name: str
    n_tensors: int
    n_parameters: int
    tensor_bytes: int
    file_bytes: int
    hyperparameters: dict[str, object] = field(default_factory=dict)
    tokenizer: dict[str, object] = field(default_factory=dict)
    by_type: list[TypeRow] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path, "version": self.version, "architecture": self.architecture,
            "name": self.name, "n_tensors": self.n_tensors, "n_parameters": self.n_parameters,
            "tensor_bytes": self.tensor_bytes, "file_bytes": self.file_bytes,
            "hyperparameters": self.hyperparameters, "tokenizer": self.tokenizer,
            "tensors_by_type": [{"type": r.ggml_type, "n_tensors": r.n_tensors,
                                 "n_elements": r.n_elements, "bytes": r.nbytes}
                                for r in self.by_type],
        }


def plain_value(v: object) -> object:
    """A metadata value made JSON-friendly; long arrays become a short description."""
    if isinstance(v, np.ndarray):
        if v.size > _HIDDEN_ARRAYS:
            return f"[{v.size} x {v.dtype}]"
        return [x.item() for x in v]
    if isinstance(v, list):
        if len(v) > _HIDDEN_ARRAYS:
            kind = type(v[0]).__name__ if v else "?"
            return f"[{len(v)} x {kind}]"
        return [plain_value(x) for x in v]
    return v


def summarize(f: FileHeader) -> Summary:
    arch = f.architecture
    meta = f.metadata
    hyper = {k[len(arch) + 1:]: plain_value(v) for k, v in meta.items()
             if arch and k.startswith(arch + ".")}
    tok = {k[len("tokenizer."):]: plain_value(v) for k, v in meta.items()
           if k.startswith("tokenizer.") and k != "tokenizer.chat_template"}
    tokens = meta.get("tokenizer.ggml.tokens")
    if isinstance(tokens, list):
        tok["vocab_size"] = len(tokens)
    if "tokenizer.chat_template" in meta:
        tok["chat_template"] = f"({len(str(meta['tokenizer.chat_template']))} chars)"
    rows: dict[int, TypeRow] = {}
    for t in f.tensors.values():
        row = rows.setdefault(t.ggml_type, TypeRow(type_name(t.ggml_type)))
        row.n_tensors += 1
        row.n_elements += t.n_elements
        row.nbytes += t.nbytes
    by_type = sorted(rows.values(), key=lambda r: -r.nbytes)
    name = meta.get("general.name")
    return Summary(
        path=f.path, version=f.version, architecture=arch,
        name=name if isinstance(name, str) else "",
        n_tensors=len(f.tensors), n_parameters=sum(r.n_elements for r in by_type),
        tensor_bytes=sum(r.nbytes for r in by_type), file_bytes=f.size,
        hyperparameters=hyper, tokenizer=tok, by_type=by_type,
    )


def summary_text(f: FileHeader) -> str:
    s = summarize(f)
    lines = [
        f"file          {s.path}",
        f"format        GGUF v{s.version}, {s.file_bytes:,} bytes",
        f"architecture  {s.architecture}   name: {s.name}",
        f"parameters    {s.n_parameters:,} in {s.n_tensors} tensors ({s.tensor_bytes:,} bytes)",
        "",
        "hyper-parameters",
    ]
    lines += [f"  {k:<36} {v}" for k, v in s.hyperparameters.items()]
    lines += ["", "tokenizer"]
    lines += [f"  {k:<36} {v}" for k, v in s.tokenizer.items()]
    lines += ["", f"  {'type':<8} {'tensors':>8} {'elements':>14} {'bytes':>14} "
                  f"{'bits/weight':>12}"]
    for r in s.by_type:
        bpw = 8 * r.nbytes / r.n_elements if r.n_elements else 0.0
        lines.append(f"  {r.ggml_type:<8} {r.n_tensors:>8} {r.n_elements:>14,} {r.nbytes:>14,} "
                     f"{bpw:>12.2f}")
    return "\n".join(lines)


def summary_html(f: FileHeader) -> str:
    s = summarize(f)
    e = html.escape

    def table(rows: list[tuple[str, str]]) -> str:
        body = "".join(f"<tr><td>{e(k)}</td><td>{e(v)}</td></tr>" for k, v in rows)
        return f"<table>{body}</table>"

    head = (f"<b>{e(s.architecture)}</b> &mdash; {e(s.name)}<br>"
            f"GGUF v{s.version}, {s.file_bytes:,} bytes, {s.n_parameters:,} parameters "
            f"in {s.n_tensors} tensors")
    hyper = table([(k, str(v)) for k, v in s.hyperparameters.items()])
    tok = table([(k, str(v)) for k, v in s.tokenizer.items()])
    type_rows = "".join(
        f"<tr><td>{e(r.ggml_type)}</td><td>{r.n_tensors}</td><td>{r.n_elements:,}</td>"
        f"<td>{r.nbytes:,}</td><td>{8 * r.nbytes / max(r.n_elements, 1):.2f}</td></tr>"
        for r in s.by_type)
    types = ("<table><tr><th>type</th><th>tensors</th><th>elements</th><th>bytes</th>"
             f"<th>bits/weight</th></tr>{type_rows}</table>")
    return (f"<div>{head}<h4>hyper-parameters</h4>{hyper}<h4>tokenizer</h4>{tok}"
            f"<h4>tensors by type</h4>{types}</div>")
