"""llmnb bench compiled: each build's worker really runs that build (the pure one the source
tree's .py files, the compiled one the installed extension modules), on the tiny models at
repeats=1, and the rows pair the same workloads with equal outputs. No timing is asserted."""
from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import pytest

import llmnb
from llmnb.errors import UsageError
from llmnb.perf.bench_compiled import compare, run_build, source_tree
from llmnb.perf.machine import is_compiled

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
MODELS = {"tiny-ar": str(DATA / "models" / "tiny-ar.gguf")}
KINDS = ["open GGUF", "build tokenizer", "encode", "decode", "greedy decoding", "greedy decoding",
         "lookup drafter", "ngram drafter", "diffusion loop",
         "diffusion bookkeeping (loop minus forwards)", "numpy only", "numpy only", "numpy only"]


@pytest.fixture(scope="module")
def pure() -> dict[str, Any]:
    return run_build(ROOT, 1, DATA, MODELS)


def test_the_pure_worker_imports_the_source_trees_py_files_and_runs_every_workload(
        pure: dict[str, Any]) -> None:
    assert pure["compiled"] is False
    assert Path(pure["reader"]).resolve() == ROOT / "llmnb" / "gguf" / "reader.py"
    assert [r["workload"].split(":")[0] for r in pure["rows"]] == KINDS
    for r in pure["rows"]:
        assert r["ms"] > 0 and len(r["output"]) == 12, r
        assert r["compiled"] is False and r["module"].startswith("llmnb."), r
    assert "open GGUF: tiny-ar" in [r["workload"] for r in pure["rows"]]


def test_the_compiled_worker_runs_the_installed_extension_modules_with_the_same_outputs(
        pure: dict[str, Any]) -> None:
    if not is_compiled():
        if os.environ.get("LLMNB_EXPECT_COMPILED") == "1":
            pytest.fail("LLMNB_EXPECT_COMPILED=1 but llmnb here is not compiled")
        pytest.skip("llmnb here is not compiled (make setup builds it)")
    assert source_tree(Path(llmnb.__file__).parent) == ROOT   # found, and the same source
    compiled = run_build(None, 1, DATA, MODELS)
    assert compiled["compiled"] is True and not compiled["reader"].endswith(".py")
    rows = compare([pure], [compiled])            # raises if any output differs
    assert [r["workload"] for r in rows] == [r["workload"] for r in pure["rows"]]
    for r in rows:
        assert set(r) == {"workload", "module", "compiled", "pure_ms", "compiled_ms", "speedup"}
        assert r["pure_ms"] > 0 and r["compiled_ms"] > 0
        assert r["speedup"] == pytest.approx(r["pure_ms"] / r["compiled_ms"])
        module = importlib.import_module(r["module"])        # as this process imports it
        assert r["compiled"] is not (module.__file__ or "").endswith(".py"), r
    compiled_here = {r["module"]: r["compiled"] for r in rows}
    assert compiled_here["llmnb.gguf.reader"] and compiled_here["llmnb.ar.lookup"]  # gains


def test_compare_refuses_builds_whose_outputs_or_workloads_differ() -> None:
    def report(ms: float, output: str = "abc", workload: str = "w",
               compiled: bool = True) -> dict[str, Any]:
        return {"rows": [{"workload": workload, "ms": ms, "output": output, "module": "llmnb.m",
                          "compiled": compiled}]}

    assert compare([report(2.0), report(9.0), report(3.0)], [report(1.0)]) == [
        {"workload": "w", "module": "llmnb.m", "compiled": True, "pure_ms": 3.0,
         "compiled_ms": 1.0, "speedup": 3.0}]                                   # medians
    assert compare([report(2.0)], [report(1.0), report(1.0, compiled=False)])[0]["compiled"] \
        is False
    with pytest.raises(RuntimeError, match="w: the outputs differ"):
        compare([report(2.0)], [report(1.0, output="abd")])
    with pytest.raises(RuntimeError, match="w: the outputs differ"):
        compare([report(2.0), report(2.0, output="abd")], [report(1.0)])
    with pytest.raises(RuntimeError, match="different workloads"):
        compare([report(2.0)], [report(1.0, workload="v")])


def test_a_package_without_its_source_tree_is_one_clear_usage_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "site" / "llmnb"             # an install whose .py files are nowhere
    (package / "gguf").mkdir(parents=True)
    (package / "gguf" / "reader.py").write_text("# not the source tree's\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="no source tree with the installed llmnb's .py files"):
        source_tree(package)


def test_bench_help_lists_compiled(capsys: pytest.CaptureFixture[str]) -> None:
    from llmnb.cli import main

    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    assert "compiled" in capsys.readouterr().out
