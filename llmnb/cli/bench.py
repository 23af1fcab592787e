"""``llmnb bench``: the registry's benches, listed without importing any of them."""
from __future__ import annotations

import argparse

from llmnb.cli.flags import positive_int
from llmnb.perf.benches import BENCH_TITLES


def cmd_bench(a: argparse.Namespace) -> int:
    from llmnb.perf import bench

    return bench.main(a.what, repeats=a.repeats, as_json=a.json, threads=a.threads, peer=a.peer,
                      weights=a.weights, models=a.models)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("bench", help="measure llmnb against its oracles and peers (ratios); "
                       "this machine's facts and roofs first")
    s.add_argument("what", choices=[*BENCH_TITLES, "all"], nargs="?", default="all",
                   help="one benchmark, or all of them (default)")
    s.add_argument("--repeats", type=positive_int, default=5, help="timed runs (median is kept)")
    s.add_argument("--threads", type=positive_int, nargs="+", default=None, metavar="N",
                   help="thread counts to measure (default: 1, 2, 4 ... up to the physical "
                        "cores, and their count)")
    s.add_argument("--peer", metavar="PATH",
                   help="a local llama.cpp build folder (or its llama-bench) to compare against")
    s.add_argument("--weights", choices=["quantized", "quantized-float", "f32"], nargs="+",
                   default=None,
                   help="the weights each model bench runs with (default: quantized and f32, "
                        "side by side, where a bench compares them)")
    s.add_argument("--models", nargs="+", default=None, metavar="MODEL",
                   help="bench ar only: the hub models (pulled) or .gguf files to run (default: "
                        "smollm2-135m, and qwen2.5-coder-0.5b if pulled)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_bench)
