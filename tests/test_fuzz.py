"""The GGUF reader under tools/fuzz_gguf.py's mutation fuzzer: a short seeded run, the
harness's own checks, and the saved inputs replayed.

The long run (a million cases and more) is recorded in tests/fixtures/fuzz/README.md; this
run takes a few seconds: structure-aware damage to real headers (the pulled models when
present, the tiny models, the test fixtures) must give a parsed file or one GGUFError, within
the time limit and the memory bound, and nothing else.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

import llmnb
from llmnb.gguf import GGUFError

ROOT = Path(__file__).resolve().parent.parent
FUZZ = ROOT / "tests" / "fixtures" / "fuzz"
sys.path.insert(0, str(ROOT / "tools"))
import fuzz_gguf as fz  # noqa: E402


@pytest.fixture(scope="module")
def corpus() -> list[fz.Seed]:
    return fz.load_corpus()


def test_the_corpus_is_real_headers_whole_and_cut(corpus: list[fz.Seed], tmp_path: Path) -> None:
    names = [s.name for s in corpus]
    assert "tiny-ar.gguf[:16384]" in names and "tiny-ar.gguf:condensed" in names
    assert "synthetic" in names
    assert len(corpus) >= 20 and all(s.fields for s in corpus)
    for seed in corpus:
        if seed.name.endswith(":condensed") or seed.name == "synthetic":   # whole, valid, small
            p = tmp_path / "seed.gguf"
            p.write_bytes(seed.data)
            f = llmnb.gguf.open(p)
            assert len(seed.data) < 16384 and len(seed.spans) == len(f.fields) + len(f.tensors)
            f.close()


def test_a_short_run_gives_only_gguf_errors_within_time_and_memory(corpus: list[fz.Seed]) -> None:
    report = fz.fuzz(2000, seed=2024, corpus=corpus)
    assert report.failures == [], report.failures[:3]
    assert report.executions == 2000 and report.parsed > 50
    assert sum(report.errors.values()) == report.executions - report.parsed
    assert len(report.errors) >= 12 and not any(c.startswith("other") for c in report.errors)
    assert set(report.mutations) == {*fz.MUTATIONS, "seed"}
    assert sum(report.distinct.values()) > 0.9 * report.executions
    assert report.max_peak_ratio < 1.0


def test_the_harness_catches_crashes_hangs_and_allocations(corpus: list[fz.Seed], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks have teeth: a non-GGUFError, a slow case and an allocation over the bound
    are each recorded and the input saved."""
    real = fz.read_through

    def buggy(path: str) -> str | None:
        if Path(path).stat().st_size % 7 == 0:
            raise IndexError("a bug")
        return real(path)

    monkeypatch.setattr(fz, "read_through", buggy)
    report = fz.fuzz(200, seed=1, corpus=corpus, save=tmp_path / "crash")
    crashes = [f for f in report.failures if f["what"] == "exception"]
    assert crashes and all(f["detail"] == "IndexError: a bug" for f in crashes)
    assert {p.name for p in (tmp_path / "crash").iterdir()} == {str(f["file"]) for f in crashes}

    monkeypatch.setattr(fz, "read_through", lambda path: time.sleep(0.2))
    report = fz.fuzz(3, seed=1, corpus=corpus[:3], time_limit=0.05)
    assert [f["what"] for f in report.failures] == ["time"] * 3

    monkeypatch.setattr(fz, "read_through", lambda path: bytearray(4 << 20) and None)
    report = fz.fuzz(3, seed=1, corpus=corpus[:3])
    assert [f["what"] for f in report.failures] == ["memory"] * 3


def test_saved_inputs_replay_with_their_recorded_error(tmp_path: Path) -> None:
    manifest: dict[str, str] = json.loads((FUZZ / "examples.json").read_text())
    assert len(manifest) >= 15
    for name, category in manifest.items():
        with pytest.raises(GGUFError) as e:
            llmnb.gguf.open(FUZZ / name)
        assert fz.error_category(e.value) == category, name
    # inputs that once failed the fuzzer (if any): now a GGUFError or a file, nothing else
    found = [p for p in sorted(FUZZ.glob("*.gguf")) if p.name not in manifest]
    report = fz.Report()
    fz.run_cases(((p.read_bytes(), "saved") for p in found), tmp_path, 2.0, 60.0, report, None)
    assert report.executions == len(found) and report.failures == []
