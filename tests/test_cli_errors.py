"""The CLI's error taxonomy: every error path gets one line on stderr, its documented exit code
(2 usage, 3 input file, 4 model/format, 5 resources, 130 interrupted) and no traceback unless
``--debug``. test_cli.py has the first few paths (missing file, bad magic, truncated header,
bad generation flags); this file covers the rest on the tiny models.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

import llmnb
from llmnb.cli import EXIT_CODES, main
from llmnb.errors import (
    EXIT_ERROR, EXIT_INPUT, EXIT_INTERRUPTED, EXIT_MODEL, EXIT_RESOURCES, EXIT_USAGE, UsageError,
)
from llmnb.gguf.constants import GGML_BLOCK_SIZES, STRING, GGMLType
from llmnb.gguf.reader import MetadataField
from llmnb.gguf.writer import TensorToWrite, write_gguf
from test_cli import run

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "data" / "models" / "tiny-ar.gguf"
LLADA = ROOT / "data" / "models" / "tiny-llada.gguf"


def one_error_line(code: int, out: str, err: str, want: int, needle: str) -> None:
    assert code == want, (code, err)
    assert needle in err, err
    assert "Traceback" not in err and out == ""
    lines = [line for line in err.splitlines() if line.strip()]
    if want == EXIT_USAGE and lines[0].startswith("usage:"):   # argparse: usage, then the error
        lines = lines[-1:]
    assert len(lines) == 1 and lines[0].startswith("llmnb"), err


def tiny_copy(tmp_path: Path, arch: str = "llama", retype: str = "",
              fields: Sequence[MetadataField] = ()) -> Path:
    """tiny-ar rewritten: another architecture name, one tensor stored in a type llmnb cannot
    dequantize (Q8_1, zero bytes), or metadata `fields` added or replaced."""
    f = llmnb.gguf.open(TINY)
    new = {fld.key: fld for fld in fields}
    kept = [new.pop(k, fld) for k, fld in f.fields.items()]
    tensors = []
    for name, info in f.tensors.items():
        if name == retype:
            block, size = GGML_BLOCK_SIZES[GGMLType.Q8_1]
            raw = np.zeros((*info.shape[:-1], info.shape[-1] // block * size), np.uint8)
            tensors.append(TensorToWrite(name, raw, GGMLType.Q8_1, info.shape))
        else:
            tensors.append(TensorToWrite(name, f.raw(name), info.ggml_type, info.shape))
    out = tmp_path / f"{arch}-{retype or 'same'}-{len(fields)}.gguf"
    write_gguf(out, arch, [*kept, *new.values()], tensors)
    return out


# --- the table ------------------------------------------------------------------------------

def test_help_epilog_documents_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0 and EXIT_CODES in out
    starts = [line.split(None, 1) for line in out.splitlines() if line[:3].strip().isdigit()]
    table = {int(n): text for n, text in starts}
    assert table[EXIT_USAGE].startswith("usage") and table[EXIT_INPUT].startswith("input file")
    assert table[EXIT_MODEL].startswith("model/format")
    assert table[EXIT_RESOURCES].startswith("resources")
    assert table[EXIT_INTERRUPTED].startswith("interrupted")
    assert table[EXIT_ERROR].startswith("internal")


def test_readme_has_the_same_exit_codes() -> None:
    readme = (ROOT / "README.md").read_text()
    for n in (EXIT_ERROR, EXIT_USAGE, EXIT_INPUT, EXIT_MODEL, EXIT_RESOURCES, EXIT_INTERRUPTED):
        assert f"| {n} " in readme, n


# --- input files (3) ------------------------------------------------------------------------

@pytest.mark.parametrize("what,needle", [
    ("missing", "an existing .gguf file or a hub name"),
    ("text", "header: expected at least 24 bytes"),
    ("empty", "the file has 0"),
    ("directory", "a readable file"),
    ("not_gguf", "magic: expected b'GGUF'"),
    ("truncated_data", "data: expected bytes"),
])
def test_bad_model_files_are_input_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          what: str, needle: str) -> None:
    p = tmp_path / f"{what}.gguf"
    if what == "text":
        p.write_text("not a model\n")
    elif what == "empty":
        p.write_bytes(b"")
    elif what == "directory":
        p.mkdir()
    elif what == "not_gguf":
        p.write_bytes(b"PK\x03\x04" + bytes(100))
    elif what == "truncated_data":   # a whole header, tensor data cut short
        p.write_bytes(TINY.read_bytes()[:100_000])
    for argv in (["generate", str(p), "-p", "x"], ["tokenize", str(p), "x"],
                 ["quantize", str(p), str(tmp_path / "o.gguf"), "Q8_0"]):
        one_error_line(*run(capsys, *argv), EXIT_INPUT, needle)
    assert not (tmp_path / "o.gguf").exists()


def test_unreadable_text_and_tokenizer_files(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\xa4\xff\x00" * 100)
    one_error_line(*run(capsys, "perplexity", str(TINY), str(binary)), EXIT_INPUT,
                   "UTF-8 text file")
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    one_error_line(*run(capsys, "generate", str(TINY), "-p", "x", "--tokenizer", str(bad)),
                   EXIT_MODEL, "tokenizer.json: expected a readable Hugging Face tokenizer file")
    one_error_line(*run(capsys, "convert", str(tmp_path), str(tmp_path / "o.gguf")),
                   EXIT_INPUT, "config.json")


def test_text_that_is_not_utf8_is_refused_naming_where_it_came_from(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Each way text comes in: command-line text (Python decodes the bytes with surrogateescape,
    as os.fsdecode does here), a text file, a tokenizer file whose bytes are not UTF-8, one whose
    JSON escapes a lone surrogate, and text handed to the Python API."""
    bad = os.fsdecode(b"\xff\xfe not utf-8")
    for argv, flag in ((["generate", str(TINY), "-p", bad], "-p/--prompt"),
                       (["generate", str(TINY), "-p", "x", "--chat", "--system", bad], "--system"),
                       (["generate", str(TINY), "-p", "x", "--stop", bad], "--stop"),
                       (["tokenize", str(TINY), bad], "TEXT"),
                       (["diffuse", str(LLADA), "-p", bad], "-p/--prompt"),
                       (["diffuse", str(LLADA), "-p", "x", "--chat", "--system", bad], "--system")):
        one_error_line(*run(capsys, *argv), EXIT_USAGE,
                       f"argument {flag}: expected UTF-8 text; byte 0xff at offset 0 is not UTF-8")
    cut = os.fsdecode("naïve".encode()[:3])                 # a character cut in half
    one_error_line(*run(capsys, "tokenize", str(TINY), cut), EXIT_USAGE,
                   "byte 0xc3 at offset 2 is not UTF-8 (unexpected end of data)")
    text = tmp_path / "latin1.txt"
    text.write_bytes("café au lait".encode("latin-1"))
    one_error_line(*run(capsys, "perplexity", str(TINY), str(text)), EXIT_INPUT,
                   "latin1.txt: expected a readable UTF-8 text file")
    good = (ROOT / "data" / "models" / "tiny-tokenizer.json").read_bytes()
    (tmp_path / "bytes.json").write_bytes(good.replace(b'"model"', b'"mo\xffdel"', 1))
    (tmp_path / "escape.json").write_bytes(good.replace(b'"model"', b'"mo\\udcffdel"', 1))
    for name, why in (("bytes.json", "did not contain valid UTF-8"),
                      ("escape.json", "lone leading surrogate")):
        one_error_line(*run(capsys, "tokenize", str(TINY), "x", "--tokenizer",
                            str(tmp_path / name)), EXIT_MODEL, why)
    with pytest.raises(UsageError, match=r"character 2 is a lone surrogate U\+DCFF"):
        llmnb.load(TINY).tokenizer.encode("ab\udcff")


def test_a_command_line_in_bytes_that_are_not_utf8_exits_2_in_one_line(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "llmnb.cli", "generate", str(TINY), "-p",
                        b"\xff\xfe not utf-8", "-n", "2"], capture_output=True, cwd=tmp_path)
    err = r.stderr.decode("utf-8", "backslashreplace")
    assert r.returncode == EXIT_USAGE and r.stdout == b"" and "Traceback" not in err, err
    assert err.splitlines()[-1] == ("llmnb generate: error: argument -p/--prompt: expected UTF-8 "
                                    "text; byte 0xff at offset 0 is not UTF-8 (invalid start byte)")


# --- model/format (4) -----------------------------------------------------------------------

def test_unsupported_architecture(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = tiny_copy(tmp_path, arch="mamba")
    one_error_line(*run(capsys, "generate", str(p), "-p", "x"), EXIT_MODEL,
                   "architecture 'mamba' is not supported")
    code, out, _ = run(capsys, "inspect", str(p))   # the header alone is still readable
    assert code == 0 and "mamba" in out


def test_unsupported_tensor_type(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = tiny_copy(tmp_path, retype="blk.0.ffn_down.weight")
    one_error_line(*run(capsys, "generate", str(p), "-p", "x", "-n", "1"), EXIT_MODEL, "Q8_1")


def test_hostile_chat_template_in_the_file(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    hostile = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    p = tiny_copy(tmp_path, fields=[MetadataField("tokenizer.chat_template", STRING, hostile)])
    one_error_line(*run(capsys, "generate", str(p), "-p", "x", "--chat"), EXIT_MODEL,
                   "tokenizer.chat_template")


def test_prompt_longer_than_the_context(capsys: pytest.CaptureFixture[str]) -> None:
    n_ctx = llmnb.gguf.open(TINY).metadata["llama.context_length"]
    long_prompt = " ".join(["12+34=46"] * int(n_ctx))   # several tokens per word
    one_error_line(*run(capsys, "generate", str(TINY), "-p", long_prompt), EXIT_MODEL,
                   f"leaves no room to generate in a context of {n_ctx}")
    one_error_line(*run(capsys, "diffuse", str(LLADA), "-p", long_prompt, "-n", "8", "-s", "2"),
                   EXIT_MODEL, "exceed the context")


def test_token_ids_outside_the_vocabulary(capsys: pytest.CaptureFixture[str]) -> None:
    vocab = len(llmnb.gguf.open(LLADA).metadata["tokenizer.ggml.tokens"])
    for ids in ("1,99999", "-5"):
        one_error_line(*run(capsys, "diffuse", str(LLADA), f"--tokens={ids}", "-n", "8", "-s", "2"),
                       EXIT_MODEL, f"token ids must be in 0..{vocab - 1}")


# --- usage (2) ------------------------------------------------------------------------------

@pytest.mark.parametrize("argv,needle", [
    (["generate", "M", "-p", "x", "--threads", "0"], "positive"),
    (["generate", "M", "-p", "x", "--temp", "nan"], "finite number >= 0"),
    (["generate", "M", "-p", "x", "--temp", "inf"], "finite number >= 0"),
    (["generate", "M", "-p", "x", "--min-p", "1.5"], "0..1"),
    (["generate", "M", "-p", "x", "--top-k", "-1"], "0 or more"),
    (["generate", "M", "-p", "x", "--seed", "abc"], "invalid int value"),
    (["generate", "M"], "required: -p/--prompt"),
    (["generate", "M", "-p", "x", "--system", "terse"], "only with chat"),
    (["diffuse", "L", "-p", "x", "-s", "0"], "positive"),
    (["diffuse", "L", "-p", "x", "--scheduler", "fastest"], "invalid choice"),
    (["diffuse", "L", "--tokens", "1,a"], "comma-separated token ids"),
    (["diffuse", "L", "-p", "x", "--entropy-threshold", "-1"], "finite number >= 0"),
    (["diffuse", "L", "-p", "x", "--threshold", "2"], "0..1"),
    (["perplexity", "M", "f.txt", "--ctx", "0"], "positive"),
    (["quantize", "M", "out.gguf", "Q3_X"], "TYPE: expected one of"),
    (["convert", "d", "out.gguf", "--arch", "gpt2"], "invalid choice"),
    (["pull", "no-such-model"], "unknown model 'no-such-model'"),
    (["bench", "everything"], "invalid choice"),
    (["bench", "kv", "--models", "M"], "--models applies to `llmnb bench ar` only"),
])
def test_bad_flag_values_are_usage_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          argv: list[str], needle: str) -> None:
    argv = [str(TINY) if x == "M" else str(LLADA) if x == "L" else x for x in argv]
    argv = [str(tmp_path / x) if x.endswith((".gguf", ".txt")) else x for x in argv]
    one_error_line(*run(capsys, *argv), EXIT_USAGE, needle)
    assert not list(tmp_path.iterdir())


def test_a_bad_memory_limit_is_a_usage_error(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("lots", "-1", "nan"):
        monkeypatch.setenv("LLMNB_MEMORY_LIMIT", value)
        one_error_line(*run(capsys, "generate", str(TINY), "-p", "x"), EXIT_USAGE,
                       f"LLMNB_MEMORY_LIMIT: expected a number of bytes, got {value!r}")


# --- resources (5) --------------------------------------------------------------------------

def test_model_not_pulled(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMNB_HOME", str(tmp_path))
    for argv in (["generate", "smollm2-135m", "-p", "x"], ["inspect", "qwen2.5-coder-0.5b"]):
        one_error_line(*run(capsys, *argv), EXIT_RESOURCES, "is not pulled: run `llmnb pull")


def test_a_model_cut_short_in_the_cache_says_incomplete_and_how_to_fetch_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMNB_HOME", str(tmp_path))
    cached = tmp_path / "models" / llmnb.hub.MODELS["smollm2-135m"].filename
    cached.parent.mkdir()
    cached.write_bytes(b"GGUF" + bytes(996))
    one_error_line(*run(capsys, "generate", "smollm2-135m", "-p", "x"), EXIT_RESOURCES,
                   f"the cached file {cached} is incomplete (1,000 bytes, expected 98,362,432): "
                   "`llmnb pull smollm2-135m` fetches it again")


def test_model_that_does_not_fit_is_refused_naming_needed_and_available(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMNB_MEMORY_LIMIT", "100000")
    code, out, err = run(capsys, "generate", str(TINY), "-p", "x")
    one_error_line(code, out, err, EXIT_RESOURCES, "does not fit in memory: streaming needs")
    assert "97.7 KiB available" in err and "> 100,000 bytes" in err
    assert "resident 9.2 MiB, streaming (one layer dequantized at a time) 4.8 MiB" in err


def llmnb_command(*argv: str) -> list[str]:
    """The CLI in a child process (-P: the installed llmnb, not the source tree in the cwd)."""
    return [sys.executable, "-P", "-c", "import sys; from llmnb.cli import main; sys.exit(main())",
            *argv]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [["tokenize", str(TINY), "hello world"],
                                  ["inspect", str(TINY), "--json"],
                                  ["generate", str(TINY), "-p", "1+1=", "-n", "3"]])
def test_stdout_on_a_full_device(argv: list[str]) -> None:
    with open("/dev/full", "w") as full:
        r = subprocess.run(llmnb_command(*argv), stdout=full, stderr=subprocess.PIPE, text=True)
    assert r.returncode == EXIT_RESOURCES, r.stderr
    assert "llmnb: error: writing output: No space left on device" in r.stderr
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr


def test_output_file_over_the_size_limit_leaves_nothing(tmp_path: Path) -> None:
    """A real EFBIG: the child may write at most 256 KiB (RLIMIT_FSIZE; Python ignores SIGXFSZ)."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))

    out = tmp_path / "q.gguf"
    r = subprocess.run(llmnb_command("quantize", str(TINY), str(out), "Q8_0"),
                       capture_output=True, text=True, preexec_fn=limit)
    assert r.returncode == EXIT_RESOURCES, r.stderr
    assert "File too large" in r.stderr and "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []            # no output, no temp file


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Path:
    """A 256 KiB tmpfs (needs mount rights, e.g. root in a container; skipped otherwise)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=True)


def test_quantize_onto_a_full_file_system_leaves_nothing(capsys: pytest.CaptureFixture[str],
                                                         tiny_tmpfs: Path) -> None:
    out = tiny_tmpfs / "q.gguf"
    code, stdout, err = run(capsys, "quantize", str(TINY), str(out), "Q8_0")
    one_error_line(code, stdout, err, EXIT_RESOURCES, "No space left on device")
    assert list(tiny_tmpfs.iterdir()) == []


# --- interrupted (130), internal errors (1) and --debug ---------------------------------------

def test_ctrl_c_exits_130_without_a_traceback(capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import llmnb.model

    def interrupted(*args: object, **kwargs: object) -> None:
        # a real SIGINT, raised in this thread (os.kill may hand it to another thread, and the
        # main thread could then pass the next line before Python sees it)
        signal.raise_signal(signal.SIGINT)
        raise AssertionError("SIGINT was not delivered")

    monkeypatch.setattr(llmnb.model, "load", interrupted)
    # a shell starts background jobs with SIGINT ignored, and Python then keeps it ignored:
    # give this test the handler an interactive `llmnb` has (KeyboardInterrupt)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code, out, err = run(capsys, "generate", str(TINY), "-p", "x")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == EXIT_INTERRUPTED and err == "llmnb: interrupted\n" and out == ""


def test_a_bug_is_one_line_naming_debug_and_debug_shows_the_traceback(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import llmnb.model

    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(llmnb.model, "load", broken)
    one_error_line(*run(capsys, "generate", str(TINY), "-p", "x"), EXIT_ERROR,
                   "internal error: ZeroDivisionError: division by zero (rerun with --debug")
    with pytest.raises(ZeroDivisionError):
        main(["--debug", "generate", str(TINY), "-p", "x"])
    with pytest.raises(llmnb.gguf.GGUFError):
        main(["--debug", "inspect", str(ROOT / "README.md")])

