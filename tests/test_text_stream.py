"""TextStream over long generations: the text, the streamed pieces and the stop point are those
of the whole text searched at once, across the folds that keep its growth linear."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from llmnb.ar.text_stream import FOLD, TextStream


class Bytes:
    """A tokenizer stand-in: token i is the UTF-8 of PIECES[i]; token 0 ends generation."""

    PIECES = ["<eos>", "a", "b", "ab", " ", "STOP", "ST", "OP", "é", "\n"]
    eog_ids = [0]

    def token_bytes(self, token: int) -> bytes:
        if token == 100:                                  # "é" split over two tokens
            return "é".encode()[:1]
        if token == 101:
            return "é".encode()[1:]
        return self.PIECES[token].encode()


def run(tokens: list[int], stop: tuple[str, ...], max_new: int = 100_000) -> tuple[TextStream, list[str]]:
    pieces: list[str] = []
    out = TextStream(Bytes(), max_new, stop, pieces.append)  # type: ignore[arg-type]
    for t in tokens:
        if out.push(t):
            break
    out.finish()
    return out, pieces


def reference(tokens: list[int], stop: tuple[str, ...]) -> str:
    """The text by definition: every token's bytes decoded at once, cut at the first stop."""
    b = Bytes()
    body: list[bytes] = []
    for t in tokens:
        if t in b.eog_ids:
            break
        body.append(b.token_bytes(t))
    text = b"".join(body).decode("utf-8", errors="replace")
    cuts = [i for i in (text.find(s) for s in stop) if i >= 0]
    return text[:min(cuts)] if cuts else text


@pytest.mark.parametrize("stop", [(), ("STOP",), ("ab ab ab b", "\né\n"), ("STOP", "b b")])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_long_text_streams_and_stops_as_the_whole_text_would(stop: tuple[str, ...], seed: int) -> None:
    rng = np.random.default_rng(seed)
    tokens = [int(t) for t in rng.choice([1, 2, 3, 4, 9, 100, 101], size=6 * FOLD)]
    at = int(rng.integers(2 * FOLD, 5 * FOLD))
    tokens[at:at] = [6, 7]                                # "STOP" split over two tokens, far in
    out, pieces = run(tokens, stop)
    want = reference(tokens, stop)
    assert out.text == want and "".join(pieces) == want
    whole = reference(tokens, ())
    first = {s: whole.find(s) for s in stop if s in whole}
    assert out.stop_reason == ("stop_string" if first else "")  # else the tokens ran out first
    if first and min(first, key=lambda s: first[s]) == "STOP":
        assert len(out.tokens) == at + 2                      # stopped on the token ending it
    if not stop:
        assert len(out.done) >= 4                         # the text was folded, not rebuilt


def test_max_tokens_and_eos_flush_a_split_character() -> None:
    out, pieces = run([1] * (3 * FOLD) + [100, 101], (), max_new=3 * FOLD + 2)
    assert out.stop_reason == "max_tokens" and out.text.endswith("aé")
    assert "".join(pieces) == out.text
    out, pieces = run([1, 100, 0], ())
    assert out.stop_reason == "eos" and "".join(pieces) == out.text == "a\ufffd"


def test_no_text_handed_out_that_a_stop_string_could_still_claim() -> None:
    seen: list[Any] = []
    out = TextStream(Bytes(), 100, ("STOP",), seen.append)  # type: ignore[arg-type]
    for t in [1, 4, 6]:
        out.push(t)
    assert "".join(seen) == "a "                         # "ST" held back
    out.push(7)
    out.finish()
    assert out.text == "a " and out.stop_reason == "stop_string" and "".join(seen) == "a "
