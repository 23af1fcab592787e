"""Output safety: text from a model never drives the terminal, and streamed text is whole
characters.

A model (or a hostile GGUF's metadata) can emit ESC/CSI sequences that clear the screen,
move the cursor or retitle the window. The CLI shows every C0/C1 control character except
newline and tab as a visible escape (``\\x1b``) in streamed text, diffusion text, token
strings, ``inspect`` and error messages; ``--raw`` prints generated text unchanged; ``--json``
stays exact JSON with the controls as ``\\u`` escapes. Byte-level tokens split characters
(U+1F642 is four tokens): streaming emits a character only once all its bytes are in.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import llmnb
import llmnb.cli.ar
from llmnb.ar import Sampler, generate
from llmnb.cli import safe_text
from llmnb.gguf.reader import MetadataField
from llmnb.model import Model
from test_cli import run
from test_cli_errors import LLADA, TINY, tiny_copy
from test_generation import Forced

# clear screen, OSC window title ending in BEL, C1 CSI (U+009B, two UTF-8 bytes), a character
# split over four byte tokens and one split over two, carriage return, DEL, tab and newline kept
HOSTILE = "A\x1b[2J\x1b]0;pwned\x07B\u009b31mC🙂é\rD\x7fE\tF\nG"
ESCAPED = "A\\x1b[2J\\x1b]0;pwned\\x07B\\x9b31mC🙂é\\x0dD\\x7fE\tF\nG"
CONTROLS = [chr(c) for c in range(0x20) if c not in (9, 10)] + [chr(c) for c in range(0x7F, 0xA0)]


@pytest.fixture(scope="module")
def tiny() -> Model:
    return llmnb.load(TINY)


def forced(model: Model, text: str) -> Sampler:
    tok = model.tokenizer
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    return Forced(ids + [tok.eos_id if tok.eos_id is not None else 0])


def test_safe_text_escapes_exactly_the_control_characters() -> None:
    assert safe_text(HOSTILE) == ESCAPED
    every = "".join(chr(c) for c in range(0x250))
    shown = safe_text(every)
    assert not any(c in shown for c in CONTROLS)
    assert "\t" in shown and "\n" in shown and "é" in shown and "\u00a0" in shown


def test_streamed_generation_is_escaped_and_raw_prints_it_unchanged(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tiny: Model) -> None:
    monkeypatch.setattr(llmnb.model, "load", lambda *a, **k: tiny)
    for flags, want in (([], ESCAPED), (["--raw"], HOSTILE)):
        monkeypatch.setattr(llmnb.cli.ar, "sampler_from", lambda a: forced(tiny, HOSTILE))
        code, out, err = run(capsys, "generate", str(TINY), "-p", "x", "-n", "64", *flags)
        assert code == 0 and out == want + "\n", (flags, out)
        assert "stop: eos" in err


def test_json_output_is_exact_and_carries_no_raw_control_bytes(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tiny: Model) -> None:
    monkeypatch.setattr(llmnb.model, "load", lambda *a, **k: tiny)
    monkeypatch.setattr(llmnb.cli.ar, "sampler_from", lambda a: forced(tiny, HOSTILE))
    code, out, _ = run(capsys, "generate", str(TINY), "-p", "x", "-n", "64", "--json")
    assert code == 0 and json.loads(out)["text"] == HOSTILE
    assert not any(c in out for c in CONTROLS + ["\t"]) and out.count("\n") == 1
    assert "🙂" in out   # non-ASCII text stays readable


def test_streaming_emits_whole_characters_split_across_byte_tokens(tiny: Model) -> None:
    text = "🙂é日本\u009b"
    pieces: list[str] = []
    r = generate(tiny, "x", max_new_tokens=32, sampler=forced(tiny, text), on_text=pieces.append)
    assert len(r.tokens) > len(text) + 1          # characters really were split over tokens
    assert r.text == text and "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)
    assert pieces.count("🙂") == 1                 # emitted once, when its 4th byte arrived


def test_diffusion_text_is_escaped_unless_raw(capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import llmnb.diffusion

    stats = SimpleNamespace(seconds=0.1, tok_s=1.0, gen_length=8, content_tokens=8,
                            useful_tok_s=1.0, remasked=[], to_json=lambda: {})
    result = SimpleNamespace(text=HOSTILE, tokens=[1], prompt_ids=[1], steps_taken=1, stats=stats)
    monkeypatch.setattr(llmnb.diffusion, "denoise", lambda *a, **k: result)
    for flags, want in (([], ESCAPED), (["--raw"], HOSTILE)):
        code, out, _ = run(capsys, "diffuse", str(LLADA), "-p", "x", "-n", "8", "-s", "1", *flags)
        assert code == 0 and out == want + "\n"


def test_token_strings_metadata_and_error_messages_are_escaped(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(capsys, "tokenize", str(TINY), "\x1b[2J\u009b")
    assert code == 0 and not any(c in out for c in CONTROLS)
    title = "\x1b]0;owned\x07\u009b2J"
    p = tiny_copy(tmp_path, fields=[MetadataField("general.name", 8, title)])
    for flags in ([], ["--json"]):
        code, out, _ = run(capsys, "inspect", str(p), *flags)
        assert code == 0 and not any(c in out for c in CONTROLS + ["\x1b"]), flags
    assert "\\x1b]0;owned\\x07\\x9b2J" in run(capsys, "inspect", str(p))[1]
    code, _, err = run(capsys, "inspect", str(tmp_path / "\x1b[2Jmissing.gguf"))
    assert code == 3 and "\x1b" not in err and "\\x1b[2Jmissing.gguf" in err
