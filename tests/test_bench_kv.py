"""llmnb bench kv: the windows it spreads over the text and the rows it makes of them (on
tiny-ar and a short ctx, so it runs in seconds; the figures themselves are SmolLM2's bench)."""
from __future__ import annotations

from pathlib import Path

import pytest

import llmnb
from llmnb.errors import UsageError
from llmnb.perf.bench_kv import POLICIES, bench_kv, spread_windows

ROOT = Path(__file__).resolve().parents[1]
TEXT = ROOT / "data" / "text" / "persuasion.txt"
TINY_AR = str(ROOT / "data" / "models" / "tiny-ar.gguf")


def test_spread_windows_start_at_lines_through_the_whole_text() -> None:
    body = "".join(f"line {i:03d}\n" for i in range(100))          # 9 characters a line
    pieces = spread_windows(body, 4, 18)
    assert pieces == [body[body.index(f"line {n:03d}"):][:18] for n in (12, 37, 62, 87)]
    assert spread_windows("no newline at all", 1, 5) == ["no ne"]
    with pytest.raises(UsageError, match="at least one window"):
        spread_windows(body, 0, 18)


def test_bench_kv_rows_are_each_policy_over_the_same_windows_with_their_extremes() -> None:
    rows = bench_kv(ctx=32, budgets=(12,), windows=3, model=TINY_AR, text=TEXT)
    assert [(r["policy"], r["scope"]) for r in rows] == [("full", "-")] + [
        (p, s) for p, s, _, _ in POLICIES]
    full = rows[0]
    assert full["delta_pct"] == full["delta_pct_min"] == full["delta_pct_max"] == 0.0
    for r in rows:
        assert r["windows"] == 3
        assert r["ppl_min"] <= r["ppl"] <= r["ppl_max"]
        assert r["delta_pct_min"] <= r["delta_pct"] <= r["delta_pct_max"]
    # each window scored on its own: the mean and extremes of llmnb.perplexity per piece
    m = llmnb.load(TINY_AR)
    pieces = spread_windows(TEXT.read_text(encoding="utf-8"), 3, 16 * 32)
    with llmnb.threads(1):
        plain = [llmnb.perplexity(m, p, ctx=32, max_chunks=1).ppl for p in pieces]
        h2o = [llmnb.perplexity(m, p, ctx=32, max_chunks=1, kv_budget=12, kv_sinks=0,
                                kv_policy="h2o").ppl for p in pieces]
    assert (full["ppl"], full["ppl_min"], full["ppl_max"]) == pytest.approx(
        (sum(plain) / 3, min(plain), max(plain)))
    deltas = [100 * (h / p - 1) for h, p in zip(h2o, plain)]
    row = rows[-1]
    assert row["policy"] == "h2o" and row["ppl"] == pytest.approx(sum(h2o) / 3)
    assert (row["delta_pct"], row["delta_pct_min"], row["delta_pct_max"]) == pytest.approx(
        (sum(deltas) / 3, min(deltas), max(deltas)))
    assert len(set(plain)) == 3                         # three different stretches of the novel
