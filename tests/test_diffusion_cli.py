"""`llmnb diffuse`'s fast-sampling flags: each method runs from the command line with the
same result as ``llmnb.diffuse``, and a bad value is a usage error (exit 2, one line)."""
from __future__ import annotations

import json

import pytest

import llmnb
from llmnb.diffusion import diffuse
from oracle import ORACLE
from test_cli import run

LLADA = str(ORACLE / "llada_f32.gguf")


@pytest.mark.parametrize("flags,kw", [
    (["--scheduler", "entropy_bound", "--eb-gamma", "0.5", "--eb-temperature", "0", "0"],
     {"scheduler": "entropy_bound", "eb_gamma": 0.5, "eb_temperature": (0.0, 0.0)}),
    (["--scheduler", "klass", "--klass-confidence", "0", "--klass-kl", "5", "--klass-history", "1"],
     {"scheduler": "klass", "klass_confidence": 0.0, "klass_kl": 5.0, "klass_history": 1}),
    (["--scheduler", "wino", "--wino-draft", "0", "--wino-verify", "1"],
     {"scheduler": "wino", "wino_draft": 0.0, "wino_verify": 1.0}),
    (["--cache-policy", "elastic", "--elastic-gamma", "1", "--elastic-window", "3"],
     {"cache_policy": "elastic", "elastic_gamma": 1.0, "elastic_window": 3}),
    (["--block-length", "8", "--suffix-window", "2", "--cache-policy", "dual"],
     {"block_length": 8, "suffix_window": 2, "cache_policy": "dual"}),
])
def test_each_method_runs_from_the_command_line_as_in_python(
        capsys: pytest.CaptureFixture[str], flags: list[str], kw: dict[str, object]) -> None:
    code, out, err = run(capsys, "diffuse", LLADA, "--tokens", "3,17,120", "-n", "16", "-s", "4",
                         "--json", *flags)
    d = json.loads(out)
    want = diffuse(llmnb.load(LLADA), [3, 17, 120], gen_length=16, steps=4, **kw)  # type: ignore[arg-type]
    assert code == 0 and d["ids"] == want.tokens and d["steps_taken"] == want.steps_taken
    assert d["stats"]["remasked"] == want.stats.remasked and "tok/s" in err


def test_wino_reports_its_remasks_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "diffuse", LLADA, "--tokens", "3,17,120", "-n", "16",
                       "--scheduler", "wino", "--wino-draft", "0", "--wino-verify", "1")
    assert code == 0 and " re-masked" in err


@pytest.mark.parametrize("flags,needle", [
    (["--scheduler", "fastest"], "invalid choice"),
    (["--eb-gamma", "-1"], "finite number >= 0"),
    (["--eb-temperature", "0.8"], "expected 2 arguments"),
    (["--klass-confidence", "2"], "0..1"),
    (["--klass-history", "0"], "positive"),
    (["--wino-verify", "nan"], "finite number >= 0"),
    (["--cache-policy", "lru"], "invalid choice"),
    (["--elastic-window", "0"], "positive"),
    (["--suffix-window", "-2"], "0 or more"),
    (["--scheduler", "entropy_bound", "--temp", "0.5"], "entropy_bound anneals its own"),
])
def test_bad_method_flags_are_usage_errors(capsys: pytest.CaptureFixture[str], flags: list[str],
                                           needle: str) -> None:
    code, out, err = run(capsys, "diffuse", LLADA, "--tokens", "3", "-n", "8", "-s", "2", *flags)
    assert code == 2 and needle in err and out == "" and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    if lines[0].startswith("usage:"):                  # argparse: the usage, then the error
        lines = lines[-1:]
    assert len(lines) == 1 and lines[0].startswith("llmnb"), err
