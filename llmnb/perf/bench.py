"""``llmnb bench``: ratios against oracles and peers, measured side by side in one run.

Every figure is a warm-up followed by the median of several timed runs, printed after the
machine's facts (``llmnb.perf.machine``: CPU, cores, caches, BLAS kernel, OpenBLAS overrides,
and the roofs measured at the start of the same run), because these machines are shared and
noisy: only ratios taken in the same run are meaningful. ``BENCHES`` is the registry: each
``llmnb bench WHAT`` is one entry, and ``all`` runs every entry in order.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmnb import hub
from llmnb.errors import UsageError
from llmnb.perf.bench_compiled import TITLE as COMPILED_TITLE, bench_entry as _compiled
from llmnb.perf.machine import default_thread_counts, describe, physical_cores, probe
from llmnb.perf.machine import is_compiled as is_compiled      # re-exported for the benches
from llmnb.perf.machine import median_time as median_time


def run_worker(module: str, call: str, what: str) -> Any:
    """Evaluate `call` (a function of `module`) in a fresh interpreter, so each measurement
    starts with its own thread settings and memory; its JSON result. ``-P`` keeps the current
    folder off the import path: run from the repository root, the worker still imports the
    installed (compiled) llmnb, not the source tree beside it."""
    code = f"import json; from {module} import *; print(json.dumps({call}))"
    r = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"bench {what}: {call} failed: {r.stderr.strip()[-800:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def data_dir() -> Path | None:
    """The repository's data/ folder (tiny models, held-out set, texts): $LLMNB_DATA, else
    ./data; None when neither has the held-out set."""
    for d in (os.environ.get("LLMNB_DATA"), "data"):
        if d and (Path(d) / "eval" / "tiny_heldout.jsonl").is_file():
            return Path(d).resolve()
    return None


NO_DATA = "no data/eval/tiny_heldout.jsonl here (run from the repository root or set LLMNB_DATA)"


def need_data_dir(what: str) -> Path:
    d = data_dir()
    if d is None:
        raise UsageError(f"bench {what}: {NO_DATA}")
    return d


def machine_facts() -> dict[str, Any]:
    """The machine's description (CPU, cores, caches, BLAS kernel, overrides), no roofs."""
    return describe().to_json()


def bench_gguf(repeats: int) -> list[dict[str, object]]:
    """Opening each pulled real model: llmnb.gguf.open vs gguf.GGUFReader (header + tensor infos)."""
    import gguf

    from llmnb.gguf.reader import open_gguf

    rows: list[dict[str, object]] = []
    for name in ("smollm2-135m", "qwen2.5-coder-0.5b"):
        if not hub.is_pulled(name):
            print(f"bench gguf: {name} not pulled (llmnb pull {name}); skipped", file=sys.stderr)
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


def _print_rows(title: str, rows: list[dict[str, object]]) -> None:
    if not rows:
        return
    print(f"\n## {title}")
    keys: list[str] = []
    widths: list[int] = []
    for r in rows:
        if list(r) != keys:           # a bench may return several tables: a header for each
            keys = list(r)
            widths = [max(12, len(k)) for k in keys]
            print("  ".join(f"{k:>{w}}" for k, w in zip(keys, widths)))
        cells = []
        for k, w in zip(keys, widths):
            v = r.get(k)
            cells.append(f"{v:>{w}.4g}" if isinstance(v, float) else f"{v!s:>{w}}")
        print("  ".join(cells))


# --- the registry: every `llmnb bench WHAT`; `all` runs them in this order ---------------
# A bench takes (repeats, threads, peer, weights, models) and returns its rows, or None when it
# was skipped (it says why on stderr). `weights`: the residencies a model bench runs (None: its
# own default, side by side where it compares them). `models`: the hub models or files `ar` runs
# (None: SmolLM2-135M, and Qwen2.5-Coder-0.5B if pulled); the other benches take none.

Weights = list[str] | None
Models = list[str] | None
BenchFn = Callable[[int, list[int] | None, str | None, Weights, Models], list[dict[str, Any]] | None]


def _needs(name: str, what: str) -> bool:
    if hub.is_pulled(name):
        return True
    print(f"bench {what}: {name} not pulled (llmnb pull {name}); skipped", file=sys.stderr)
    return False


def _has_data(what: str) -> bool:
    if data_dir() is not None:
        return True
    print(f"bench {what}: {NO_DATA}; skipped", file=sys.stderr)
    return False


def _gguf(repeats: int, threads: list[int] | None, peer: str | None, weights: Weights,
          models: Models) -> list[dict[str, Any]]:
    return bench_gguf(repeats)


def _quant(repeats: int, threads: list[int] | None, peer: str | None, weights: Weights,
           models: Models) -> list[dict[str, Any]]:
    from llmnb.perf.bench_quant import bench_kernels, bench_quant, compile_time
    from llmnb.perf.threads import threads as use_threads

    with use_threads(1):
        return bench_quant(repeats=repeats) + bench_kernels(repeats=repeats) + compile_time()


def _ar(repeats: int, threads: list[int] | None, peer: str | None, weights: Weights,
        models: Models) -> list[dict[str, Any]] | None:
    from llmnb.perf.bench_ar import bench_ar

    if models:                    # asked for by name: each must be there (hub.resolve says why not)
        rows: list[dict[str, Any]] = []
        for name in models:
            rows += bench_ar(repeats=repeats, threads=threads, peer=peer, model=name,
                             weights=weights)
        return rows
    if not _needs("smollm2-135m", "ar"):
        return None
    rows = bench_ar(repeats=repeats, threads=threads, peer=peer, weights=weights)
    if hub.is_pulled("qwen2.5-coder-0.5b"):
        rows += bench_ar(repeats=max(1, min(repeats, 3)), threads=threads, peer=peer,
                         model="qwen2.5-coder-0.5b", weights=weights)
    return rows


def _diffusion(repeats: int, threads: list[int] | None,
               peer: str | None, weights: Weights, models: Models) -> list[dict[str, Any]] | None:
    from llmnb.perf.bench_diffusion import bench_diffusion

    return (bench_diffusion(repeats=repeats, threads=threads, peer=peer, weights=weights)
            if _needs("smollm2-135m", "diffusion") else None)


def _cache(repeats: int, threads: list[int] | None, peer: str | None,
           weights: Weights, models: Models) -> list[dict[str, Any]] | None:
    from llmnb.perf.bench_cache import cache_rows

    return cache_rows() if _has_data("cache") else None


def _ladder(repeats: int, threads: list[int] | None, peer: str | None,
            weights: Weights, models: Models) -> list[dict[str, Any]] | None:
    from llmnb.perf.bench_ladder import ladder_rows

    return ladder_rows() if _has_data("ladder") else None


def _scaling(repeats: int, threads: list[int] | None,
             peer: str | None, weights: Weights, models: Models) -> list[dict[str, Any]] | None:
    from llmnb.perf.bench_scaling import bench_scaling

    return bench_scaling(repeats=repeats, threads=threads) if _needs("smollm2-135m", "scaling") else None


def _kv(repeats: int, threads: list[int] | None, peer: str | None, weights: Weights,
        models: Models) -> list[dict[str, Any]] | None:
    from llmnb.perf.bench_kv import bench_kv

    return bench_kv() if _has_data("kv") and _needs("smollm2-135m", "kv") else None


def _spec(repeats: int, threads: list[int] | None, peer: str | None, weights: Weights,
          models: Models) -> list[dict[str, Any]] | None:
    from llmnb.perf.bench_spec import bench_spec

    # tiny-ar (from data/) always; SmolLM2 if pulled
    return (bench_spec(repeats=min(repeats, 3), threads=threads, weights=weights)
            if _has_data("spec") else None)


BENCHES: dict[str, tuple[str, BenchFn]] = {
    "gguf": ("gguf: open a model file, llmnb vs gguf-py GGUFReader (ratio = speed-up)", _gguf),
    "quant": ("quant: llmnb vs gguf.quants (ratio = speed-up), 1 thread; then the kernels: "
              "matrix-vector product per type, GB/s of the bytes read, ratio to numpy's float32 "
              "GEMV (same shape, same run)", _quant),
    "ar": ("ar: SmolLM2-135M (and Qwen2.5-Coder-0.5B if pulled), prompt 128 + decode 32 tokens, "
           "quantized and f32 weights; roofline = read bandwidth / weight bytes read per token",
           _ar),
    "diffusion": ("diffusion: one uncached step of SmolLM2-135M as a llada file, prompt 32 + B "
                  "masked; mfu = achieved GFLOP/s / sgemm GFLOP/s measured in the same run "
                  "(a fraction of measured sgemm, not of a theoretical peak)", _diffusion),
    "cache": ("cache: inter-step K/V cache on the tiny diffusion models, up to 40 held-out "
              "prompts of each kind (single-, multi-answer), 48 positions, 16 steps, 1 thread; "
              "speed-up, fidelity (tokens equal) and validity against the uncached run with "
              "the same blocks; entropy_exit's mean steps; canvas and useful tok/s", _cache),
    "ladder": ("ladder: training-free parallel decoding on the tiny diffusion models, up to 32 "
               "held-out prompts of each kind, 48 positions, 1 thread; per method forwards per "
               "answer (NFE), tokens per forward, wall time, validity and fidelity against "
               "16 steps of low_confidence", _ladder),
    "scaling": ("scaling: AR decode vs diffusion step (B=64, prompt 32) per thread count; "
                "scaling = tok/s over tok/s at the first thread count", _scaling),
    "kv": ("kv: streaming perplexity vs KV budget (Initial-Key Cache, StreamingLLM, H2O), "
           "SmolLM2-135M, 4 windows of 512 tokens spread over persuasion.txt: per policy the mean "
           "perplexity and change against full attention with their min and max over the "
           "windows, half rule, 1 thread", _kv),
    "spec": ("spec: speculative vs plain greedy decoding, same tokens asserted; speed-up = plain / "
             "speculative wall time of the whole generate call (median of at most 3 runs after a "
             "warm-up), geometric mean over a set's prompts", _spec),
    "compiled": (COMPILED_TITLE, _compiled),
}


def main(what: str, repeats: int = 5, as_json: bool = False, threads: list[int] | None = None,
         peer: str | None = None, weights: Weights = None, models: Models = None) -> int:
    """Machine facts (the roofs measured now, at `threads`), then each bench `what` names."""
    if models and what != "ar":
        raise UsageError(f"bench {what}: --models applies to `llmnb bench ar` only")
    for name in models or []:
        hub.resolve(name)            # before the roofs are measured: a missing model says so now
    names = list(BENCHES) if what == "all" else [what]
    command = " ".join(["llmnb bench", what]
                       + ([f"--repeats {repeats}"] if repeats != 5 else [])
                       + ([f"--threads {' '.join(map(str, threads))}"] if threads else [])
                       + ([f"--peer {peer}"] if peer else [])
                       + ([f"--weights {' '.join(weights)}"] if weights else [])
                       + ([f"--models {' '.join(models)}"] if models else []))
    threads = threads or default_thread_counts(physical_cores())
    facts = probe(threads=threads, refresh=True,
                  progress=lambda m: print(f"bench: {m}", file=sys.stderr))
    results: dict[str, Any] = {"command": command, "machine": facts.to_json(),
                               "repeats": repeats}
    if not as_json:
        print("# machine")
        for line in facts.lines():
            print(line)
        print(f"repeats: {repeats} (median kept, after one warm-up run)")
    for name in names:
        title, run = BENCHES[name]
        rows = run(repeats, threads, peer, weights, models)
        if rows is None:
            continue
        results[name] = rows
        if not as_json:
            _print_rows(title, rows)
    if as_json:
        print(json.dumps(results, indent=2, default=str))
    return 0
