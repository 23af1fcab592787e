"""``llmnb bench gguf``: opening a real model file, llmnb's reader against gguf-py's.

For each pulled real model (SmolLM2-135M, Qwen2.5-Coder-0.5B), the median time to open it and
read its header and tensor infos with ``llmnb.gguf.open`` (then close it), and with
``gguf.GGUFReader`` (at most 3 timed runs: it parses more and takes longer); ratio = gguf-py's
time / llmnb's (above 1: llmnb faster).
"""
from __future__ import annotations

from typing import Any

from llmnb import hub
from llmnb.gguf.reader import open_gguf
from llmnb.perf.inputs import has_model
from llmnb.perf.timing import median_time

MODELS = ("smollm2-135m", "qwen2.5-coder-0.5b")


def bench_gguf(repeats: int) -> list[dict[str, object]]:
    """Opening each pulled real model: llmnb.gguf.open vs gguf.GGUFReader (header + tensor
    infos)."""
    import gguf  # gguf-py: the peer, imported only when benchmarking

    rows: list[dict[str, object]] = []
    for name in MODELS:
        if not has_model(name, "gguf"):
            continue
        path = hub.path(name)
        ours = median_time(lambda: open_gguf(path).close(), repeats)
        theirs = median_time(lambda: gguf.GGUFReader(path), max(1, min(repeats, 3)))
        f = open_gguf(path)
        tokens = f.metadata.get("tokenizer.ggml.tokens")
        rows.append({"model": name, "vocab": len(tokens) if isinstance(tokens, list) else 0,
                     "tensors": len(f.tensors), "llmnb_s": ours, "gguf_py_s": theirs,
                     "ratio": theirs / ours})
        f.close()
    return rows


def run(repeats: int, threads: list[int] | None, peer: str | None, weights: list[str] | None,
        models: list[str] | None) -> list[dict[str, Any]]:
    """``llmnb bench gguf``: the models that are pulled (none: no rows)."""
    return bench_gguf(repeats)
