"""``llmnb bench``: ratios against oracles and peers, measured side by side in one run.

Every figure is a warm-up followed by the median of several timed runs (``timing.py``),
printed after the machine's facts (``llmnb.perf.machine``: CPU, cores, caches, BLAS kernel,
OpenBLAS overrides, and the roofs measured at the start of the same run), because these
machines are shared and noisy: only ratios taken in the same run are meaningful.
``BENCHES`` is the registry: each ``llmnb bench WHAT`` is one entry (its title in
``benches.py``), and ``all`` runs every entry in order; each bench is a module ``bench_WHAT.py``
with a ``run`` function.
"""
from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from typing import Any

from llmnb import hub
from llmnb.errors import UsageError
from llmnb.perf.benches import BENCH_TITLES
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
    name: (title, _spec if name == "spec" else bench_module(f"bench_{name}"))
    for name, title in BENCH_TITLES.items()}


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
