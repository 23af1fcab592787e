"""``llmnb bench cache`` and ``llmnb bench ladder``'s pieces that are not timings: the held-out
reader (both formats), validity, the tallies, and the tables on a few real prompts."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any, cast

import pytest

from llmnb.diffusion.engine import DiffusionResult, DiffusionStats
from llmnb.errors import UsageError
from llmnb.model.model import Model
from llmnb.perf.bench_cache import cache_worker
from llmnb.perf.bench_ladder import REFERENCE, best, ladder_worker, targets
from llmnb.perf.heldout import Prompt, Tally, is_valid, read_heldout, run_settings, spread
from llmnb.perf.intervals import paired_table

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
    for (kind, name), r in by.items():                  # only where the cache could act
        if name.startswith("entropy_exit + cache"):
            assert r["nfe"] >= 2
        if name in ("no cache", "diffuse-cpp's cache"):     # validity paired with the uncached
            base = by[kind, "no cache"]["outcomes"]
            lost = sum(a == "1" and b == "0" for a, b in zip(base, r["outcomes"]))
            assert r["only_ref"] == lost and r["verdict"] in ("keeps", "loses", "cannot tell")


def test_ladder_rows_are_relative_to_the_reference(tmp_path: Path) -> None:
    rows = ladder_worker(str(MODELS / "tiny-dream.gguf"), str(small_heldout(tmp_path)), 3,
                         ["one step", "wino", "cache: elastic"])
    by = {(r["kind"], r["method"]): r for r in rows}
    ref = by["single", REFERENCE]
    assert (ref["nfe"], ref["fidelity"], ref["nfe_ratio"], ref["validity_delta"]) == (16, 1, 1, 0)
    assert (ref["only_ref"], ref["only_other"], ref["p_value"]) == (0, 0, 1.0)
    assert ref["tokens_per_forward"] == 3.0                      # 48 positions / 16 forwards
    one = by["single", "one step"]
    assert one["nfe"] == 1 and one["tokens_per_forward"] == 48 and one["nfe_ratio"] == 16
    assert by["multi", "wino"]["prompts"] == 1 and by["single", "wino"]["nfe"] < 16
    assert by["single", "cache: elastic"]["rows_per_forward"] < ref["rows_per_forward"]
    for r in rows:                                    # paired with the reference, prompt by prompt
        base = by[r["kind"], REFERENCE]
        assert len(r["outcomes"]) == r["prompts"] and r["outcomes"].count("1") == r["valid"]
        lost = sum(a == "1" and b == "0" for a, b in zip(base["outcomes"], r["outcomes"]))
        assert (r["only_ref"], r["valid"] - base["valid"] + lost) == (lost, r["only_other"])
        assert r["delta_low"] <= r["validity_delta"] <= r["delta_high"]
        assert r["verdict"] in ("keeps", "loses", "cannot tell") and r["margin"] == 5


def test_ladder_can_keep_the_answer_families_or_the_rule_families(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in (ROOT / "data" / "eval" / "tiny_heldout.jsonl").open()]
    answer = [r for r in rows if "answers" in r or "answer" in r][:2]
    rule = [r for r in rows if "rule" in r][:3]
    path = write(tmp_path, answer + rule)
    groups = {p.checked_by for p in read_heldout(path)}
    assert groups == {"answers", "rule"}
    counts = {}
    for checked_by in (None, "answers", "rule"):
        out = ladder_worker(str(MODELS / "tiny-dream.gguf"), str(path), 0, ["one step"],
                            checked_by=checked_by)
        counts[checked_by] = sum(r["prompts"] for r in out if r["method"] == REFERENCE)
    assert counts == {None: 5, "answers": 2, "rule": 3}
    with pytest.raises(UsageError, match="checked_by"):
        ladder_worker(str(MODELS / "tiny-dream.gguf"), str(path), 0, ["one step"],
                      checked_by="answer")


def paired_row(method: str, lost: int, gained: int, **kw: object) -> dict[str, object]:
    """A ladder row on 100 multi-answer prompts paired with a reference valid on 80."""
    p = paired_table(80 - lost, lost, gained, 20 - gained)
    return {"model": "m", "kind": "multi", "method": method, "nfe_ratio": 1.0, "speedup": 1.0,
            "fidelity": 1.0, "only_ref": lost, "only_other": gained,
            "delta_low": 100 * p.low, "delta_high": 100 * p.high, "verdict": p.verdict,
            "margin": 100 * p.margin} | kw


def test_targets_name_the_rows_that_meet_them() -> None:
    rows = [paired_row(REFERENCE, 0, 0), paired_row("cache: dual, blocks of 24", 0, 0, speedup=2.0),
            paired_row("fast", 1, 0, nfe_ratio=3.2), paired_row("loose", 6, 0, nfe_ratio=8.0),
            paired_row("unsure", 4, 0, nfe_ratio=8.0),
            paired_row("cache: quick", 0, 0, speedup=3.1, fidelity=0.995),
            paired_row("cache: sloppy", 0, 0, speedup=5.0, fidelity=0.9)]
    (line,) = targets(rows)
    assert ("fewer forwards, validity kept (paired, margin 5 points): fast (3.2x, 1 lost, "
            "0 gained, [-4.6, 2.4] pt);") in line
    assert "fidelity: cache: quick (1.55x dual's, fidelity 0.995)" in line
    assert "loose" not in line and "sloppy" not in line and "unsure" not in line
    assert targets([paired_row(REFERENCE, 0, 0) | {"kind": "single"}]) == [
        "m: no multi-answer prompts in this held-out set"]
    # without the dual cache, or without another cache rung, the cache target is not judged
    (alone,) = targets(rows[:1] + rows[2:4])
    assert alone.endswith("not judged ('cache: dual, blocks of 24' was not run)")
    (dual_only,) = targets(rows[:4])
    assert dual_only.endswith("not judged (no other cache rung was run)")
    assert "none" not in alone and "none" not in dual_only


def test_best_is_the_most_useful_tokens_per_forward_that_keeps_validity() -> None:
    def row(method: str, kind: str, useful: float, lost: int, nfe: float) -> dict[str, object]:
        return paired_row(method, lost, 0, kind=kind, useful_per_forward=useful, nfe=nfe)

    rows = [row(REFERENCE, "multi", 0.5, 0, 16), row("one step", "multi", 8.0, 30, 1),
            row("edge", "multi", 2.0, 1, 4), row("tied", "multi", 2.0, 0, 5),
            row("single best", "single", 9.0, 0, 1)]
    assert best(rows, "multi")["method"] == "edge"     # one prompt lost is kept; 4 forwards beat 5
    assert best(rows, "single")["method"] == "single best"
    assert best([row(REFERENCE, "multi", 0.5, 0, 16), row("one step", "multi", 8.0, 6, 1)],
                "multi")["method"] == REFERENCE                   # six lost of 80: loses
    assert best([row(REFERENCE, "multi", 0.5, 0, 16), row("one step", "multi", 8.0, 4, 1)],
                "multi")["method"] == REFERENCE                   # four lost: cannot tell
    with pytest.raises(UsageError, match="no rows of kind 'multi'"):
        best(rows[-1:], "multi")
    with pytest.raises(UsageError, match="rows of edge have no paired verdict"):
        best([r if r["method"] != "edge" else {k: v for k, v in r.items() if k != "verdict"}
              for r in rows], "multi")
    # a cache-only rung keeps the reference's 16 forwards: never the best, never a target
    cached = [row(REFERENCE, "multi", 0.5, 0, 16), row("cache: dual, blocks of 24", "multi",
                                                        0.6, 0, 16)]
    assert best(cached, "multi")["method"] == REFERENCE
    assert "cache: dual" not in targets([r | {"nfe_ratio": 3.0} for r in cached])[0].split(";")[0]


def test_one_prompt_below_the_reference_is_not_dropped_by_float_rounding() -> None:
    # 79/100 against 80/100: 100 * (0.79 - 0.80) is -1.0000000000000009, which a "-1 point"
    # bar on floats dropped; the paired verdict counts the prompts.
    rows = [paired_row(REFERENCE, 0, 0, useful_per_forward=0.5, nfe=16),
            paired_row("one below", 1, 0, useful_per_forward=2.0, nfe=4, nfe_ratio=4.0)]
    assert best(rows, "multi")["method"] == "one below"
    assert "one below (4.0x" in targets(rows)[0]


def test_tally_keeps_each_prompts_outcome_in_order_and_pairs_two_settings() -> None:
    ps = [Prompt(str(i), "f", ("yes",), 1) for i in range(6)]
    ref, other = Tally(), Tally()
    for p, a, b in zip(ps, "yyynnn", "ynyynn"):
        ref.add(fake_result("yes" if a == "y" else "no"), p, None)
        other.add(fake_result("yes" if b == "y" else "no"), p, None)
    assert ref.outcomes == [True, True, True, False, False, False]
    assert other.row()["outcomes"] == "101100" and other.row()["valid"] == 3
    got = other.paired_with(ref)
    assert (got["only_ref"], got["only_other"], got["validity_delta"]) == (1, 1, 0.0)
    assert got["verdict"] == "cannot tell" and got["p_value"] == 1.0      # 6 prompts: too few


def fake_result(text: str) -> DiffusionResult:
    """A one-step run that decoded `text`, for the tally alone."""
    stats = DiffusionStats(seconds=0.01, content_tokens=1, active_positions=[4], remasked=[0])
    return DiffusionResult(prompt_ids=[0], tokens=[1, 2, 3, 4], text=text, steps_taken=1,
                           history=[], stats=stats)


def bench_readme() -> Any:
    """tools/bench_readme.py, which is a script, not a module of the package."""
    path = ROOT / "tools" / "bench_readme.py"
    spec = importlib.util.spec_from_file_location("bench_readme", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_tables_print_the_paired_verdict_or_what_the_counts_allow() -> None:
    mod = bench_readme()

    def row(method: str, valid: int, **kw: object) -> dict[str, object]:
        return {"model": "m", "kind": "multi", "method": method, "prompts": 100, "valid": valid,
                "validity": valid / 100, "validity_low": 0.0, "validity_high": 1.0} | kw

    ref = row(REFERENCE, 80, only_ref=0, only_other=0)
    paired_rows = [ref, row("close", 79, only_ref=3, only_other=2),
                   row("near", 79, only_ref=1, only_other=0)]
    cells = [r["paired"] for r in mod.summary_rows("ladder", paired_rows)]
    assert cells == ["reference", "3 lost, 2 gained: -1.0 [-6.2, 4.1] cannot tell",
                     "1 lost, 0 gained: -1.0 [-4.6, 2.4] keeps"]
    # saved without per-prompt outcomes: a verdict only where every pairing gives it
    counted = [row(REFERENCE, 80), row("far", 20), row("close", 79)]
    lines = mod.section_table("ladder", counted)
    assert "| -60.0: loses (from the counts) |" in lines[3]
    assert "| -1.0: needs the outcomes |" in lines[4]
    assert lines[-1] == mod.NO_OUTCOMES
    assert mod.section_table("ladder", paired_rows)[-1].endswith("| 1 lost, 0 gained: -1.0 "
                                                                 "[-4.6, 2.4] keeps |")


def test_run_settings_wants_each_reference_listed_before_the_settings_it_serves() -> None:
    with pytest.raises(UsageError, match="the reference of cached is listed after it"):
        run_settings(cast(Model, None), [], {"cached": {}, "plain": {}},
                     {"cached": "plain", "plain": "plain"})
