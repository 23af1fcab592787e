"""``llmnb bench kv``: perplexity against KV budget, Initial-Key Cache vs StreamingLLM and H2O.

Every row is one policy at one budget: the streaming perplexity (``llmnb.perplexity`` with
``kv_budget``: one token per pass once the cache is full, evicting after each) of
SmolLM2-135M on the first windows of ``data/text/persuasion.txt``, scored by the "half" rule
(positions ctx/2 .. ctx-2, each with at least ctx/2 tokens of history, so a budget below
ctx/2 evicts before every scored token), next to full attention on the same windows.

    policy                     sinks  recent              the rest of the budget
    initial_key (layer/global)   4    (budget - 4) / 2    top Score Sum, last `window` rows
    streaming                    4    budget - 4          -
    h2o                          0    budget / 2          top accumulated attention

``kv_mib`` is the evicting cache's key/value arrays (``budget + 1`` slots here) against the
full cache's ``ctx``. Quality is deterministic; ``tok_s`` (one BLAS thread) is provisional
on a shared machine. The full table of the notes:

    python -m llmnb.perf.bench_kv --ctx 1024 --budgets 64 128 256 512
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

POLICIES: list[tuple[str, str, int, int | None]] = [      # (policy, scope, sinks, recent)
    ("initial_key", "layer", 4, None),
    ("initial_key", "global", 4, None),
    ("streaming", "layer", 4, None),
    ("h2o", "layer", 0, None),
]


def bench_kv(ctx: int = 512, budgets: tuple[int, ...] = (32, 64, 128, 256), chunks: int = 1,
             model: str = "smollm2-135m", text: Path | None = None, window: int = 8,
             threads: int = 1) -> list[dict[str, Any]]:
    import llmnb
    from llmnb.ar.kv_cache import KVCache
    from llmnb.ar.kv_eviction import check_budget

    from llmnb.perf.bench import need_data_dir

    m = llmnb.load(model)
    path = text if text is not None else need_data_dir("kv") / "text" / "persuasion.txt"
    body = path.read_text(encoding="utf-8")
    rows: list[dict[str, Any]] = []
    mib = 1 << 20
    with llmnb.threads(threads):
        m.transformer                                     # dequantize before timing
        t0 = time.perf_counter()
        full = llmnb.perplexity(m, body, ctx=ctx, max_chunks=chunks)
        rows.append({"policy": "full", "scope": "-", "budget": ctx, "sinks": "-", "recent": "-",
                     "ppl": full.ppl, "delta_pct": 0.0,
                     "kv_mib": KVCache.bytes_for(m.config, ctx) / mib,
                     "seconds": time.perf_counter() - t0})
        print(f"bench kv: full attention ppl {full.ppl:.4f}", file=sys.stderr)
        for budget in budgets:
            for policy, scope, sinks, recent in POLICIES:
                t0 = time.perf_counter()
                r = llmnb.perplexity(m, body, ctx=ctx, max_chunks=chunks, kv_budget=budget,
                                     kv_recent=recent, kv_sinks=sinks, kv_policy=policy,
                                     kv_scope=scope, kv_window=window)
                sec = time.perf_counter() - t0
                _, rec, _ = check_budget(budget, recent, sinks, policy, scope)
                rows.append({"policy": policy, "scope": scope, "budget": budget, "sinks": sinks,
                             "recent": rec, "ppl": r.ppl, "delta_pct": 100 * (r.ppl / full.ppl - 1),
                             "kv_mib": KVCache.bytes_for(m.config, budget + 1) / mib,
                             "seconds": sec})
                print(f"bench kv: {policy}/{scope} budget {budget}: ppl {r.ppl:.4f} ({sec:.0f} s)",
                      file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llmnb.perf.bench_kv",
                                description="perplexity vs KV budget (see the module docstring)")
    p.add_argument("--ctx", type=int, default=512)
    p.add_argument("--budgets", type=int, nargs="+", default=[32, 64, 128, 256])
    p.add_argument("--chunks", type=int, default=1, help="windows of ctx tokens (1)")
    p.add_argument("--window", type=int, default=8, help="Score Sum rows (8)")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    rows = bench_kv(ctx=a.ctx, budgets=tuple(a.budgets), chunks=a.chunks, model=a.model,
                    window=a.window)
    if a.json:
        import json

        print(json.dumps({"command": "python -m llmnb.perf.bench_kv " + " ".join(argv or sys.argv[1:]),
                          "rows": rows}, indent=2))
    else:
        from llmnb.perf.bench import _print_rows

        _print_rows(f"kv: streaming perplexity vs KV budget, SmolLM2-135M, {a.chunks} window(s) of "
                    f"{a.ctx} tokens of persuasion.txt, half rule, 1 thread", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
