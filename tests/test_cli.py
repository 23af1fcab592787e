"""The `llmnb` command: data on stdout, one line on stderr and the documented exit code on
errors."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llmnb.cli import main, safe_text
from real_models import hub_model

ORACLE = Path(__file__).parent / "fixtures" / "oracle"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse usage errors
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_help_lists_commands_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for word in ("inspect", "tokenize", "quantize", "pull", "models", "bench", "exit codes", "130"):
        assert word in out


def test_inspect_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inspect", str(ORACLE / "qwen2_tied_f32.gguf"))
    assert code == 0 and "architecture  qwen2" in out and "F32" in out
    code, out, _ = run(capsys, "inspect", str(ORACLE / "llada_f32.gguf"), "--json")
    d = json.loads(out)
    assert code == 0 and d["architecture"] == "llada"
    assert d["hyperparameters"]["attention.causal"] is False
    assert sum(r["n_tensors"] for r in d["tensors_by_type"]) == d["n_tensors"]


def test_models_lists_the_hub(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "models", "--json")
    names = [r["name"] for r in json.loads(out)]
    assert code == 0 and {"smollm2-135m", "qwen2.5-coder-0.5b"} <= set(names)


def test_tokenize_prints_ids(capsys: pytest.CaptureFixture[str]) -> None:
    hub_model("smollm2-135m")
    code, out, err = run(capsys, "tokenize", "smollm2-135m", "Hello world", "--json")
    d = json.loads(out)
    assert code == 0 and len(d["ids"]) == 2 and d["tokens"][1] == "Ġworld" and "2 tokens" in err


@pytest.mark.parametrize("argv,code,needle", [
    (["inspect", "/no/such/file.gguf"], 3, "hub name"),
    (["inspect", __file__], 3, "magic"),
    (["tokenize", "no-such-model", "x"], 3, "hub name"),
    (["bench", "--repeats", "0"], 2, "positive"),
    (["bench", "ar", "--models", "/no/such/file.gguf"], 3, "hub name"),
    (["quantize", "a.gguf"], 2, "required"),
    (["frobnicate"], 2, "invalid choice"),
])
def test_bad_input_gets_one_line_and_an_exit_code(
        capsys: pytest.CaptureFixture[str], argv: list[str],
                                                   code: int, needle: str) -> None:
    got, out, err = run(capsys, *argv)
    assert got == code and needle in err and "Traceback" not in err and out == ""


def test_truncated_file_is_an_input_error(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = tmp_path / "cut.gguf"
    p.write_bytes((ORACLE / "llama_f32.gguf").read_bytes()[:5000])
    code, _, err = run(capsys, "inspect", str(p))
    assert code == 3 and err.count("\n") == 1 and "cut.gguf: at byte" in err


def test_terminal_control_sequences_are_neutralised() -> None:
    assert safe_text("a\x1b[2Jb\x07c\rd\u009be\tf\n") == "a\\x1b[2Jb\\x07c\\x0dd\\x9be\tf\n"


def test_console_script_runs_without_traceback(tmp_path: Path) -> None:
    exe = shutil.which("llmnb", path=os.path.dirname(sys.executable))
    if exe is None:
        pytest.skip("the llmnb console script is not installed in this environment")
    r = subprocess.run([exe, "inspect", str(tmp_path / "missing.gguf")], capture_output=True,
                       text=True)
    assert r.returncode == 3 and r.stderr.startswith("llmnb: error:")
    assert "Traceback" not in r.stderr


def test_generate_json_and_streaming(capsys: pytest.CaptureFixture[str]) -> None:
    hub_model("smollm2-135m")
    code, out, err = run(capsys, "generate", "smollm2-135m", "-p", "1, 2, 3,", "-n", "6", "--json")
    d = json.loads(out)
    assert code == 0 and d["ids"] and d["text"].startswith(" 4, 5")
    assert d["stop_reason"] == "max_tokens" and d["stats"]["new_tokens"] == 6 and "decode" in err
    code, out, _ = run(capsys, "generate", "smollm2-135m", "-p", "1, 2, 3,", "-n", "6")
    assert code == 0 and out == d["text"] + "\n"


@pytest.mark.parametrize("argv,needle", [
    (["generate", "smollm2-135m", "-p", "x", "--temp", "-1"], "finite number >= 0"),
    (["generate", "smollm2-135m", "-p", "x", "--top-p", "2"], "0..1"),
    (["generate", "smollm2-135m", "-p", "x", "-n", "0"], "positive"),
    (["perplexity", "smollm2-135m", "x.txt", "--ctx", "zero"], "whole number"),
])
def test_bad_generation_flags_are_usage_errors(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                needle: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and needle in err and out == ""


def test_perplexity_on_a_missing_or_too_short_text(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    hub_model("smollm2-135m")
    code, _, err = run(capsys, "perplexity", "smollm2-135m", str(tmp_path / "none.txt"))
    assert code == 3 and "readable UTF-8 text" in err
    short = tmp_path / "short.txt"
    short.write_text("Only a few words.")
    code, _, err = run(capsys, "perplexity", "smollm2-135m", str(short), "--ctx", "64")
    assert code == 4 and "needs at least 128" in err and err.count("\n") == 1


def test_diffuse_json_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    llada = str(ORACLE / "llada_f32.gguf")
    code, out, err = run(capsys, "diffuse", llada, "--tokens", "3,17,120", "-n", "16", "-s", "4",
                         "--scheduler", "entropy_exit", "--json")
    d = json.loads(out)
    assert code == 0 and len(d["ids"]) == 16 and d["steps_taken"] <= 4 and "tok/s" in err
    code, _, err = run(capsys, "diffuse", str(ORACLE / "llama_f32.gguf"), "--tokens", "3",
                       "-n", "8")
    assert code == 4 and "cannot denoise" in err
    code, _, err = run(capsys, "diffuse", llada, "--tokens", "3", "-n", "10", "--block-length", "3")
    assert code == 2 and "block_length" in err


def test_building_the_parser_imports_no_bench() -> None:
    """`llmnb --help` (and every command's parsing) lists the benches without importing the
    bench registry, the machine probe or any bench."""
    code = ("import sys; from llmnb.cli import build_parser; build_parser().parse_args(['bench']); "
            "print(' '.join(m for m in sys.modules if m.startswith('llmnb.perf')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parent.parent)
    assert r.returncode == 0, r.stderr
    loaded = r.stdout.split()
    assert "llmnb.perf.benches" in loaded                        # the names: it did look
    assert not [m for m in loaded if m.startswith(("llmnb.perf.bench", "llmnb.perf.machine"))
                and m != "llmnb.perf.benches"], loaded
