"""Determinism: greedy generation (tiny-ar) and temperature-0 diffusion (tiny-llada,
tiny-dream) give the same token ids at 1 and 2 threads, across runs and processes, and in the
compiled and pure-Python builds.

The expected ids (tests/fixtures/determinism.json) were made with the pure-Python build by
tools/make_determinism_fixture.py, keeping only cases whose ids survive a 1e-5 relative
perturbation of every logit; under ``make test`` this file runs on the mypyc-compiled build,
so matching the fixture is the compiled-vs-pure agreement check.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import llmnb
import llmnb.gguf.reader
from llmnb.model import Model

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "determinism.json").read_text())
CASES: list[dict[str, Any]] = FIXTURE["cases"]
sys.path.insert(0, str(ROOT / "tools"))
from make_determinism_fixture import model_sha256, run_case  # noqa: E402  (the tool's own code)


def case_id(case: dict[str, Any]) -> str:
    extra = "-".join(f"{k}={v}" for k, v in case["args"].items() if k in ("scheduler", "cache"))
    return f"{case['model']}-{case['prompt'][:24]}{'-' + extra if extra else ''}"


@pytest.fixture(scope="module")
def models() -> dict[str, Model]:
    return {name: llmnb.load(ROOT / "data" / "models" / f"{name}.gguf")
            for name in sorted({c["model"] for c in CASES})}


def test_the_fixture_covers_ar_and_both_diffusion_models_as_they_are_now() -> None:
    kinds = {(c["model"], c["kind"]) for c in CASES}
    assert kinds == {("tiny-ar", "generate"), ("tiny-llada", "diffuse"), ("tiny-dream", "diffuse")}
    assert len(CASES) >= 12 and "pure-Python" in FIXTURE["made_with"]
    for name, digest in FIXTURE["model_sha256"].items():
        assert model_sha256(name) == digest, (
            f"data/models/{name}.gguf changed since the fixture was made: rerun "
            "tools/make_determinism_fixture.py in the pure-Python build")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_ids_match_the_pure_python_fixture_at_one_and_two_threads(case: dict[str, Any],
                                                                  models: dict[str, Model]) -> None:
    model = models[case["model"]]
    for n_threads in (1, 2):
        with llmnb.threads(n_threads):
            ids = run_case(model, case["kind"], case["prompt"], case["args"])
        assert ids == case["ids"], (n_threads, model.tokenizer.decode(ids))


CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
import llmnb, llmnb.gguf.reader
from make_determinism_fixture import run_case
cases = json.loads(open(sys.argv[2]).read())["cases"]
models = {}
def model(name):
    return models.setdefault(name, llmnb.load(sys.argv[3] + "/" + name + ".gguf"))
with llmnb.threads(2):
    ids = [run_case(model(c["model"]), c["kind"], c["prompt"], c["args"]) for c in cases]
print(json.dumps({"reader": llmnb.gguf.reader.__file__, "ids": ids}))
"""


def test_a_fresh_process_at_two_threads_gives_the_same_ids(tmp_path: Path) -> None:
    # -P and a neutral cwd: the child imports the same installed llmnb (compiled under
    # `make test`), never the source tree; another hash seed varies set and dict layouts
    env = {**os.environ, "PYTHONHASHSEED": "20251130"}
    r = subprocess.run([sys.executable, "-P", "-c", CHILD, str(ROOT / "tools"),
                        str(ROOT / "tests" / "fixtures" / "determinism.json"),
                        str(ROOT / "data" / "models")],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    child = json.loads(r.stdout)
    assert child["reader"] == llmnb.gguf.reader.__file__   # the same build as this process
    assert child["ids"] == [c["ids"] for c in CASES]
