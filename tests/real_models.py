"""Real models for tests: the pulled file, or a skip that says which command pulls it.

`make test` pulls every model first and sets LLMNB_REQUIRE_MODELS=1, so there a missing
model is a failure, not a silent skip.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmnb import hub


def hub_model(name: str) -> Path:
    try:
        return hub.path(name)
    except hub.HubError as e:
        if os.environ.get("LLMNB_REQUIRE_MODELS") == "1":
            pytest.fail(str(e))
        pytest.skip(str(e))


# llama.cpp's vocabulary test files, unpacked by `make vocab` from the llama-cpp-python
# source package (tests/fixtures/llamacpp_vocab/README.md); LLMNB_LLAMA_CPP_MODELS may point
# at a llama.cpp checkout's models/ folder instead.
VOCAB_PACKAGE = "llama-cpp-python-0.3.36"


def llama_cpp_vocab(name: str) -> Path:
    """llama.cpp's ``models/ggml-vocab-NAME.gguf`` (its .inp/.out beside it), or a skip
    (a failure under LLMNB_REQUIRE_MODELS=1) that says how to get it."""
    env = os.environ.get("LLMNB_LLAMA_CPP_MODELS")
    folder = Path(env) if env else hub.cache_dir() / "vocab" / VOCAB_PACKAGE
    path = folder / f"ggml-vocab-{name}.gguf"
    if not path.is_file():
        message = (f"llama.cpp's vocabulary file {path} is missing: run `make vocab` "
                   "(or set LLMNB_LLAMA_CPP_MODELS to llama.cpp's models/ folder)")
        if os.environ.get("LLMNB_REQUIRE_MODELS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path
