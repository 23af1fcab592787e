"""``llmnb bench``: ratios against oracles and peers, measured side by side in one run.

Every figure is a warm-up followed by the median of several timed runs (``timing.py``),
printed after the machine's facts (``llmnb.perf.machine``: CPU, cores, caches, BLAS kernel,
OpenBLAS overrides, and the roofs measured at the start of the same run), because these
machines are shared and noisy: only ratios taken in the same run are meaningful.
``BENCHES`` is the registry: each ``llmnb bench WHAT`` is one entry, and ``all`` runs every
entry in order; each bench is a module ``bench_WHAT.py`` with a ``run`` function.
"""
from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from typing import Any

from llmnb import hub
from llmnb.errors import UsageError
from llmnb.perf.inputs import has_data
from llmnb.perf.lock import hold_machine
from llmnb.perf.machine import default_thread_counts, physical_cores, probe
from llmnb.perf.table import print_rows

# A bench's `run` takes (repeats, threads, peer, weights, models) and returns its rows, or None
# when it was skipped (it says why on stderr). `weights`: the residencies a model bench runs
# (None: its own default, side by side where it compares them). `models`: the hub models or
# files `ar` runs (None: SmolLM2-135M, and Qwen2.5-Coder-0.5B if pulled); the others take none.
Weights = list[str] | None
Models = list[str] | None
Rows = list[dict[str, Any]]
BenchFn = Callable[[int, list[int] | None, str | None, Weights, Models], Rows | None]


def bench_module(name: str) -> BenchFn:
    """The ``run`` of ``llmnb.perf.<name>``, imported when the bench runs (so that the CLI's
    parser, which lists the benches, imports none of them)."""
    def run(repeats: int, threads: list[int] | None, peer: str | None, weights: Weights,
            models: Models) -> Rows | None:
        fn: BenchFn = getattr(importlib.import_module(f"llmnb.perf.{name}"), "run")
        return fn(repeats, threads, peer, weights, models)
    return run


def _spec(repeats: int, threads: list[int] | None, peer: str | None, weights: Weights,
          models: Models) -> Rows | None:
    from llmnb.perf.bench_spec import bench_spec

    # tiny-ar (from data/) always; SmolLM2 if pulled
    return (bench_spec(repeats=min(repeats, 3), threads=threads, weights=weights)
            if has_data("spec") else None)


BENCHES: dict[str, tuple[str, BenchFn]] = {
    "gguf": ("gguf: open a model file, llmnb vs gguf-py GGUFReader (ratio = speed-up)",
             bench_module("bench_gguf")),
    "quant": ("quant: llmnb vs gguf.quants (ratio = speed-up), 1 thread; then the kernels: "
              "matrix-vector product per type, GB/s of the bytes read, ratio to numpy's float32 "
              "GEMV (same shape, same run)", bench_module("bench_quant")),
    "ar": ("ar: SmolLM2-135M (and Qwen2.5-Coder-0.5B if pulled), prompt 128 + decode 32 tokens, "
           "quantized and f32 weights; roofline = read bandwidth / weight bytes read per token",
           bench_module("bench_ar")),
    "diffusion": ("diffusion: one uncached step of SmolLM2-135M as a llada file, prompt 32 + B "
                  "masked; mfu = achieved GFLOP/s / sgemm GFLOP/s measured in the same run "
                  "(a fraction of measured sgemm, not of a theoretical peak)",
                  bench_module("bench_diffusion")),
    "cache": ("cache: inter-step K/V cache on the tiny diffusion models, up to 40 held-out "
              "prompts of each kind (single-, multi-answer), 48 positions, 16 steps, 1 thread; "
              "speed-up, fidelity (tokens equal) and validity against the uncached run with "
              "the same blocks; entropy_exit's mean steps; canvas and useful tok/s",
              bench_module("bench_cache")),
    "ladder": ("ladder: training-free parallel decoding on the tiny diffusion models, up to 32 "
               "held-out prompts of each kind, 48 positions, 1 thread; per method forwards per "
               "answer (NFE), tokens per forward, wall time, validity and fidelity against "
               "16 steps of low_confidence", bench_module("bench_ladder")),
    "scaling": ("scaling: AR decode vs diffusion step (B=64, prompt 32) per thread count; "
                "scaling = tok/s over tok/s at the first thread count",
                bench_module("bench_scaling")),
    "kv": ("kv: streaming perplexity vs KV budget (Initial-Key Cache, StreamingLLM, H2O), "
           "SmolLM2-135M, 4 windows of 512 tokens spread over persuasion.txt: per policy the mean "
           "perplexity and change against full attention with their min and max over the "
           "windows, half rule, 1 thread", bench_module("bench_kv")),
    "spec": ("spec: speculative vs plain greedy decoding, same tokens asserted; speed-up = plain / "
             "speculative wall time of the whole generate call (median of at most 3 runs after a "
             "warm-up), geometric mean over a set's prompts", _spec),
    "compiled": ("compiled: what mypyc buys, the installed compiled llmnb against the same source "
                 "interpreted, in the same run, 1 thread; speedup = pure / compiled ms, each "
                 "workload's output equal in both builds (checked)",
                 bench_module("bench_compiled")),
}


def main(what: str, repeats: int = 5, as_json: bool = False, threads: list[int] | None = None,
         peer: str | None = None, weights: Weights = None, models: Models = None) -> int:
    """Machine facts (the roofs measured now, at `threads`), then each bench `what` names,
    holding the machine (``lock.hold_machine``) from the first measurement to the last."""
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
    with hold_machine(command):              # no other timing run while this one measures
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
                print_rows(title, rows)
        if as_json:
            print(json.dumps(results, indent=2, default=str))
    return 0
