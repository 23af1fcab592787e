"""``llmnb bench kv``: perplexity against KV budget, Initial-Key Cache vs StreamingLLM and H2O.

Every row is one policy at one budget: the streaming perplexity (``llmnb.perplexity`` with
``kv_budget``: one token per pass once the cache is full, evicting after each) of
SmolLM2-135M on `windows` windows of ctx tokens spread evenly over
``data/text/persuasion.txt`` (window i: the first ctx tokens from the start of the line that
holds the character (i + 1/2) / windows of the way into the text), scored by the "half" rule
(positions ctx/2 .. ctx-2, each with at least ctx/2 tokens of history, so a budget below
ctx/2 evicts before every scored token), next to full attention on the same windows. ``ppl`` is the
mean of the windows' perplexities and ``delta_pct`` the mean of each window's change against full
attention on that window; ``*_min`` / ``*_max`` are their extremes over the windows: a ranking
between two policies holds where their delta ranges do not overlap.

    policy                     sinks  recent              the rest of the budget
    initial_key (layer/global)   4    (budget - 4) / 2    top Score Sum, last `window` rows
    streaming                    4    budget - 4          -
    h2o                          0    budget / 2          top accumulated attention

``kv_mib`` is the evicting cache's key/value arrays (``budget + 1`` slots here) against the
full cache's ``ctx``. Quality is deterministic; ``seconds`` (all windows, one BLAS thread) is
provisional on a shared machine. Each window costs one streamed pass per policy and budget,
so the run time grows with `windows` (``seconds`` says how). The longer contexts and budgets:

    python -m llmnb.perf.bench_kv --ctx 1024 --budgets 64 128 256 512
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from llmnb.errors import UsageError
from llmnb.perf.inputs import has_data, has_model, need_data_dir
from llmnb.perf.table import print_rows
from llmnb.perf.timing import median_time

POLICIES: list[tuple[str, str, int, int | None]] = [      # (policy, scope, sinks, recent)
    ("initial_key", "layer", 4, None),
    ("initial_key", "global", 4, None),
    ("streaming", "layer", 4, None),
    ("h2o", "layer", 0, None),
]


def spread_windows(body: str, windows: int, chars: int) -> list[str]:
    """`windows` pieces of `body`, `chars` characters each, piece i from the start of the line
    that holds the character (i + 1/2) / windows of the way in: the same text for every policy."""
    if windows < 1:
        raise UsageError(f"bench kv: expected at least one window, got {windows}")
    pieces: list[str] = []
    for i in range(windows):
        at = (2 * i + 1) * len(body) // (2 * windows)
        start = body.rfind("\n", 0, at) + 1            # the line's start (0 before any newline)
        pieces.append(body[start:start + chars])
    return pieces


def bench_kv(ctx: int = 512, budgets: tuple[int, ...] = (32, 64, 128, 256), windows: int = 4,
             model: str = "smollm2-135m", text: Path | None = None, window: int = 8,
             threads: int = 1) -> list[dict[str, Any]]:
    import llmnb
    from llmnb.ar.kv_cache import KVCache
    from llmnb.ar.kv_eviction import check_budget

    m = llmnb.load(model)
    path = text if text is not None else need_data_dir("kv") / "text" / "persuasion.txt"
    # 16 characters per token of the window: English prose runs about 4 per token, so each
    # piece holds the 2 ctx tokens the half rule asks for with room to spare
    pieces = spread_windows(path.read_text(encoding="utf-8"), windows, 16 * ctx)
    rows: list[dict[str, Any]] = []
    mib = 1 << 20

    def ppls(**kv: Any) -> tuple[list[float], float]:
        out: list[float] = []

        def each_window() -> None:
            out.extend(llmnb.perplexity(m, piece, ctx=ctx, max_chunks=1, **kv).ppl
                       for piece in pieces)

        return out, median_time(each_window, repeats=1, warmup=0)

    def spread(name: str, values: list[float]) -> dict[str, float]:
        return {name: statistics.fmean(values), f"{name}_min": min(values),
                f"{name}_max": max(values)}

    with llmnb.threads(threads):
        _ = m.transformer                                 # dequantize before timing
        full, sec = ppls()
        zero = [0.0] * len(full)
        rows.append({"policy": "full", "scope": "-", "budget": ctx, "sinks": "-", "recent": "-",
                     "windows": len(full)} | spread("ppl", full) | spread("delta_pct", zero)
                    | {"kv_mib": KVCache.bytes_for(m.config, ctx) / mib, "seconds": sec})
        print(f"bench kv: full attention ppl {statistics.fmean(full):.4f} over {len(full)} "
              f"windows ({min(full):.2f} .. {max(full):.2f})", file=sys.stderr)
        for budget in budgets:
            for policy, scope, sinks, recent in POLICIES:
                got, sec = ppls(kv_budget=budget, kv_recent=recent, kv_sinks=sinks,
                                kv_policy=policy, kv_scope=scope, kv_window=window)
                delta = [100 * (p / f - 1) for p, f in zip(got, full)]
                _, rec, _ = check_budget(budget, recent, sinks, policy, scope)
                rows.append({"policy": policy, "scope": scope, "budget": budget, "sinks": sinks,
                             "recent": rec, "windows": len(got)} | spread("ppl", got)
                            | spread("delta_pct", delta)
                            | {"kv_mib": KVCache.bytes_for(m.config, budget + 1) / mib,
                               "seconds": sec})
                print(f"bench kv: {policy}/{scope} budget {budget}: delta "
                      f"{statistics.fmean(delta):+.1f}% ({min(delta):+.1f} .. {max(delta):+.1f}) "
                      f"({sec:.0f} s)", file=sys.stderr)
    return rows


def run(repeats: int, threads: list[int] | None, peer: str | None, weights: list[str] | None,
        models: list[str] | None) -> list[dict[str, Any]] | None:
    """``llmnb bench kv``: the defaults above; skipped without data/ or SmolLM2-135M."""
    return bench_kv() if has_data("kv") and has_model("smollm2-135m", "kv") else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llmnb.perf.bench_kv",
                                description="perplexity vs KV budget (see the module docstring)")
    p.add_argument("--ctx", type=int, default=512)
    p.add_argument("--budgets", type=int, nargs="+", default=[32, 64, 128, 256])
    p.add_argument("--windows", type=int, default=4,
                   help="windows of ctx tokens, spread over the text (4)")
    p.add_argument("--window", type=int, default=8, help="Score Sum rows (8)")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    rows = bench_kv(ctx=a.ctx, budgets=tuple(a.budgets), windows=a.windows, model=a.model,
                    window=a.window)
    if a.json:
        import json

        command = "python -m llmnb.perf.bench_kv " + " ".join(argv or sys.argv[1:])
        print(json.dumps({"command": command,
                          "rows": rows}, indent=2))
    else:
        print_rows(f"kv: streaming perplexity vs KV budget, SmolLM2-135M, {a.windows} window(s) "
                   f"of {a.ctx} tokens spread over persuasion.txt (mean, min, max), half rule, "
                   f"1 thread", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
