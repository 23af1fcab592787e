"""``llmnb.load``: a model file opened, its hyper-parameters read and its tokenizer built.

A ``Model`` holds the memory-mapped ``GGUFFile`` (no tensor data is read at load), the
``ModelConfig`` and the ``Tokenizer``. The tokenizer comes from the file's own metadata, or,
for files without one (diffuse-cpp's convention), from a ``tokenizer.json`` given by
argument or lying beside the file.
"""
from __future__ import annotations

import os
from pathlib import Path

from llmnb.gguf.reader import GGUFFile, open_gguf
from llmnb.hub import resolve
from llmnb.model.config import ModelConfig, ModelError, config_from_gguf
from llmnb.tokenizer import Tokenizer, tokenizer_from_json, tokenizer_from_metadata


class Model:
    """An opened model: ``.path``, ``.file``, ``.metadata``, ``.arch``, ``.config``, ``.tokenizer``."""

    def __init__(self, path: Path, file: GGUFFile, config: ModelConfig, tokenizer: Tokenizer) -> None:
        self.path = path
        self.file = file
        self.config = config
        self.tokenizer = tokenizer

    @property
    def arch(self) -> str:
        return self.config.arch

    @property
    def metadata(self) -> dict[str, object]:
        return self.file.metadata

    def __repr__(self) -> str:
        c = self.config
        return (f"Model({self.path.name!r}, arch={c.arch!r}, layers={c.n_layer}, d={c.n_embd}, "
                f"heads={c.n_head}/{c.n_head_kv}, vocab={c.vocab_size})")


def load_tokenizer(f: GGUFFile, tokenizer_json: str | os.PathLike[str] | None = None) -> Tokenizer:
    """The file's embedded tokenizer, else `tokenizer_json`, else a tokenizer.json beside it."""
    if tokenizer_json is not None:
        return tokenizer_from_json(tokenizer_json)
    if "tokenizer.ggml.tokens" in f.fields:
        return tokenizer_from_metadata(f.metadata, f.path)
    beside = Path(f.path).with_name("tokenizer.json")
    if beside.is_file():
        return tokenizer_from_json(beside)
    raise ModelError(f"{f.path}: no tokenizer in the file (tokenizer.ggml.tokens) and no "
                     f"tokenizer.json beside it: pass tokenizer=PATH")


def load(model: str | os.PathLike[str], tokenizer: str | os.PathLike[str] | None = None) -> Model:
    """Open a model by path or hub name (``llmnb.load``)."""
    path = resolve(os.fspath(model))
    f = open_gguf(path)
    config = config_from_gguf(f)
    return Model(path, f, config, load_tokenizer(f, tokenizer))
