"""``llmnb bench cache`` and ``llmnb bench ladder``'s pieces that are not timings: the held-out
reader (both formats), validity, the tallies, and the tables on a few real prompts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmnb.errors import UsageError
from llmnb.perf.bench_cache import cache_worker
from llmnb.perf.bench_ladder import REFERENCE, best, ladder_worker, targets
from llmnb.perf.heldout import Prompt, is_valid, read_heldout, spread

ROOT = Path(__file__).parent.parent
MODELS = ROOT / "data" / "models"


def write(tmp_path: Path, rows: list[dict[str, object]]) -> Path:
    path = tmp_path / "heldout.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_heldout_reads_both_formats_and_validity_accepts_any_answer(tmp_path: Path) -> None:
    path = write(tmp_path, [
        {"prompt": "Name a planet.", "family": "planets", "answers": ["Mars", " Venus "],
         "modes": 2, "answer": "Mars"},
        {"family": "capitals", "prompt": "Capital of France?", "answer": "Paris."},
    ])
    multi, single = read_heldout(path)
    assert multi == Prompt("Name a planet.", "planets", ("Mars", " Venus "), 2)
    assert (multi.kind, single.kind, single.answers, single.modes) == ("multi", "single",
                                                                       ("Paris.",), 1)
    assert is_valid(multi, " Venus\n") and is_valid(multi, "Mars")
    assert not is_valid(multi, "Mars and Mars")


def test_a_malformed_heldout_line_names_the_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, [{"prompt": "a", "answer": "b"}, {"prompt": "c", "answers": []}])
    with pytest.raises(UsageError, match=r"heldout.jsonl:2: .*answers"):
        read_heldout(path)


def test_spread_takes_evenly_from_one_kind() -> None:
    ps = [Prompt(str(i), "f", ("x",), 2 if i % 2 else 1) for i in range(20)]
    assert [p.prompt for p in spread(ps, "single", 4)] == ["0", "4", "10", "14"]
    assert len(spread(ps, "single", 7)) == 7                  # exactly n, not n rounded to a stride
    assert len(spread(ps, "multi", 50)) == 10 and spread(ps, "multi", 0) == ps[1::2]


def small_heldout(tmp_path: Path) -> Path:
    """Three real held-out prompts of different families, plus a made-up multi-answer one."""
    rows = [json.loads(line) for line in (ROOT / "data" / "eval" / "tiny_heldout.jsonl").open()]
    keep = [rows[0], rows[60], rows[150]]
    keep.append({"prompt": rows[150]["prompt"], "family": "made-up",
                 "answers": [rows[150].get("answer", ""), "something else"], "modes": 2})
    return write(tmp_path, keep)


def test_cache_table_compares_each_setting_with_its_uncached_run(tmp_path: Path) -> None:
    rows = cache_worker(str(MODELS / "tiny-llada.gguf"), str(small_heldout(tmp_path)), 3)
    by = {(r["kind"], r["setting"]): r for r in rows}
    assert {k for k, _ in by} == {"single", "multi"}
    assert by["single", "no cache"]["prompts"] == 3 and by["multi", "no cache"]["prompts"] == 1
    for kind in ("single", "multi"):
        assert by[kind, "no cache"]["fidelity"] == 1.0
        assert by[kind, "no cache, blocks of 24"]["fidelity"] == 1.0
        assert by[kind, "no cache"]["nfe"] == 16 and by[kind, "entropy_exit"]["nfe"] < 16
        for name in ("diffuse-cpp's cache", "prefix, blocks of 24", "dual, blocks of 24"):
            r = by[kind, name]
            # 1.0 on these prompts (95.9-99.9% on the whole held-out set, data/models/README.md)
            assert 0.95 <= r["fidelity"] <= 1.0 and r["seconds"] > 0 and r["tok_s"] > 0
            assert r["useful_tok_s"] <= r["tok_s"]
    for (_, name), r in by.items():                     # only where the cache could act
        if name.startswith("entropy_exit + cache"):
            assert r["nfe"] >= 2


def test_ladder_rows_are_relative_to_the_reference(tmp_path: Path) -> None:
    rows = ladder_worker(str(MODELS / "tiny-dream.gguf"), str(small_heldout(tmp_path)), 3,
                         ["one step", "wino", "cache: elastic"])
    by = {(r["kind"], r["method"]): r for r in rows}
    ref = by["single", REFERENCE]
    assert (ref["nfe"], ref["fidelity"], ref["nfe_ratio"], ref["validity_delta"]) == (16, 1, 1, 0)
    assert ref["tokens_per_forward"] == 3.0                      # 48 positions / 16 forwards
    one = by["single", "one step"]
    assert one["nfe"] == 1 and one["tokens_per_forward"] == 48 and one["nfe_ratio"] == 16
    assert by["multi", "wino"]["prompts"] == 1 and by["single", "wino"]["nfe"] < 16
    assert by["single", "cache: elastic"]["rows_per_forward"] < ref["rows_per_forward"]


def test_targets_name_the_rows_that_meet_them() -> None:
    def row(method: str, **kw: float) -> dict[str, object]:
        base = {"model": "m", "kind": "multi", "method": method, "nfe_ratio": 1.0,
                "validity_delta": 0.0, "speedup": 1.0, "fidelity": 1.0}
        return base | kw

    rows = [row(REFERENCE), row("cache: dual, blocks of 24", speedup=2.0),
            row("fast", nfe_ratio=3.2, validity_delta=-0.5), row("loose", nfe_ratio=8.0,
                                                                  validity_delta=-4.0),
            row("quick cache", speedup=3.1, fidelity=0.995), row("sloppy", speedup=5.0,
                                                                 fidelity=0.9)]
    (line,) = targets(rows)
    assert "fewer forwards at <= 1 point lower validity: fast (3.2x, -0.5 pt);" in line
    assert "fidelity: quick cache (1.55x dual's, fidelity 0.995)" in line
    assert "loose" not in line and "sloppy" not in line
    assert targets([row(REFERENCE) | {"kind": "single"}]) == [
        "m: no multi-answer prompts in this held-out set"]


def test_best_is_the_most_useful_tokens_per_forward_that_keeps_validity() -> None:
    def row(method: str, kind: str, useful: float, delta: float, nfe: float) -> dict[str, object]:
        return {"kind": kind, "method": method, "useful_per_forward": useful,
                "validity_delta": delta, "nfe": nfe}

    rows = [row(REFERENCE, "multi", 0.5, 0.0, 16), row("one step", "multi", 8.0, -30.0, 1),
            row("edge", "multi", 2.0, -1.0, 4), row("tied", "multi", 2.0, 0.0, 5),
            row("single best", "single", 9.0, 0.0, 1)]
    assert best(rows, "multi")["method"] == "edge"         # -1 point is kept; 4 forwards beat 5
    assert best(rows, "single")["method"] == "single best"
    assert best([row(REFERENCE, "multi", 0.5, 0.0, 16), row("one step", "multi", 8.0, -2.0, 1)],
                "multi")["method"] == REFERENCE
    with pytest.raises(UsageError, match="no rows of kind 'multi'"):
        best(rows[-1:], "multi")
    # a cache-only rung keeps the reference's 16 forwards: never the best, never a target
    cached = [row(REFERENCE, "multi", 0.5, 0.0, 16), row("cache: dual, blocks of 24", "multi",
                                                          0.6, 0.0, 16)]
    assert best(cached, "multi")["method"] == REFERENCE
    assert "cache: dual" not in targets([r | {"model": "m", "nfe_ratio": 3.0, "speedup": 1.0,
                                              "fidelity": 1.0} for r in cached])[0]
