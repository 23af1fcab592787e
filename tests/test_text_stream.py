"""TextStream over long generations: the text, the streamed pieces and the stop point are those
of the whole text searched at once, across the folds that keep its growth linear."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmnb.ar.text_stream import FOLD, TextStream
import llmnb.gguf
from llmnb.model import load_tokenizer

TINY = Path(__file__).resolve().parents[1] / "data" / "models" / "tiny-ar.gguf"
TOKENIZER = load_tokenizer(llmnb.gguf.open(TINY))


def ids_of(*pieces: bytes) -> list[int]:
    """Token ids whose bytes are exactly `pieces` (the first such id of each)."""
    first: dict[bytes, int] = {}
    for i in range(TOKENIZER.vocab_size):
        if i not in TOKENIZER.eog_ids:
            first.setdefault(TOKENIZER.token_bytes(i), i)
    return [first[p] for p in pieces]


# a, b, ab, space, newline, and the two bytes of "é" (a character split over two tokens)
A, B, AB, SPACE, NL, E1, E2 = ids_of(b"a", b"b", b"ab", b" ", b"\n", "é".encode()[:1],
                                     "é".encode()[1:])
STOP_IDS = ids_of(b"S", b"T", b"O", b"P")
EOS = TOKENIZER.eog_ids[0]


def run(tokens: list[int], stop: tuple[str, ...],
        max_new: int = 100_000) -> tuple[TextStream, list[str]]:
    pieces: list[str] = []
    out = TextStream(TOKENIZER, max_new, stop, pieces.append)
    for t in tokens:
        if out.push(t):
            break
    out.finish()
    return out, pieces


def reference(tokens: list[int], stop: tuple[str, ...]) -> str:
    """The text by definition: every token's bytes decoded at once, cut at the first stop."""
    body: list[bytes] = []
    for t in tokens:
        if t in TOKENIZER.eog_ids:
            break
        body.append(TOKENIZER.token_bytes(t))
    text = b"".join(body).decode("utf-8", errors="replace")
    cuts = [i for i in (text.find(s) for s in stop) if i >= 0]
    return text[:min(cuts)] if cuts else text


@pytest.mark.parametrize("stop", [(), ("STOP",), ("ab ab ab b", "\né\n"), ("STOP", "b b")])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_long_text_streams_and_stops_as_the_whole_text_would(
        stop: tuple[str, ...], seed: int) -> None:
    rng = np.random.default_rng(seed)
    tokens = [int(t) for t in rng.choice([A, B, AB, SPACE, NL, E1, E2], size=6 * FOLD)]
    at = int(rng.integers(2 * FOLD, 5 * FOLD))
    tokens[at:at] = STOP_IDS                              # "STOP" over four tokens, far in
    out, pieces = run(tokens, stop)
    want = reference(tokens, stop)
    assert out.text == want and "".join(pieces) == want
    whole = reference(tokens, ())
    first = {s: whole.find(s) for s in stop if s in whole}
    assert out.stop_reason == ("stop_string" if first else "")  # else the tokens ran out first
    if first and min(first, key=lambda s: first[s]) == "STOP":
        assert len(out.tokens) == at + 4                      # stopped on the token ending it
    if not stop:
        assert len(out.done) >= 4                         # the text was folded, not rebuilt


def test_max_tokens_and_eos_flush_a_split_character() -> None:
    out, pieces = run([A] * (3 * FOLD) + [E1, E2], (), max_new=3 * FOLD + 2)
    assert out.stop_reason == "max_tokens" and out.text.endswith("aé")
    assert "".join(pieces) == out.text
    out, pieces = run([A, E1, EOS], ())
    assert out.stop_reason == "eos" and "".join(pieces) == out.text == "a\ufffd"


def test_no_text_handed_out_that_a_stop_string_could_still_claim() -> None:
    seen: list[Any] = []
    out = TextStream(TOKENIZER, 100, ("STOP",), seen.append)
    for t in [A, SPACE, *STOP_IDS[:2]]:
        out.push(t)
    assert "".join(seen) == "a "                         # "ST" held back
    for t in STOP_IDS[2:]:
        out.push(t)
    out.finish()
    assert out.text == "a " and out.stop_reason == "stop_string" and "".join(seen) == "a "
