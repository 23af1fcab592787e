"""Generated tokens -> text: UTF-8 across token boundaries, stop strings, streaming, stop reasons.

Plain decoding (``llmnb.generate``) and speculative decoding both commit tokens one at a time
into a ``TextStream``, so both stop at the same token with the same text:

    push(token)  ->  an end-of-generation token?          stop "eos" (the token is kept, no text)
                 ->  its bytes through an incremental UTF-8 decoder (a character split across
                     tokens waits for its last byte)
                 ->  a stop string in the text?            stop "stop_string", cut the text there
                 ->  max_new_tokens reached?               stop "max_tokens"
                 ->  no room left in the context?          stop "context_full"
                 ->  hand the text that is final to `on_text`: a tail that might still grow
                     into a stop string is held back until it resolves (``hold_back``)
"""
from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence

from llmnb.tokenizer import Tokenizer

FOLD = 1024          # characters moved from the tail into the done pieces at a time


def hold_back(text: str, stops: Sequence[str]) -> int:
    """How many trailing characters might still grow into a stop string (not safe to emit)."""
    hold = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:n]):
                hold = max(hold, n)
                break
    return hold


class TextStream:
    """The new tokens of one generation, their text and why it stopped (module docstring).

    The text grows in two parts so a long generation costs O(n), not a copy of the whole text
    per token: ``tail``, the characters a stop string or the next emit can still touch (those
    not yet handed to `on_text` and the ``window`` before them), and ``done``, the pieces
    before it, joined once by ``text``."""

    def __init__(self, tokenizer: Tokenizer, max_new_tokens: int, stop: Sequence[str] = (),
                 on_text: Callable[[str], None] | None = None) -> None:
        self.tokenizer = tokenizer
        self.eog = set(tokenizer.eog_ids)
        self.utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.max_new_tokens = max_new_tokens
        self.stop = tuple(stop)
        self.on_text = on_text
        self.tokens: list[int] = []       # new tokens (an end-of-generation token included)
        self.done: list[str] = []         # text before `tail`, final
        self.start = 0                    # characters in `done`
        self.tail = ""                    # text from `start` on, cut at a stop string
        self.window = max((len(s) for s in self.stop), default=0)
        self.emitted = 0                  # characters already handed to on_text
        self.stop_reason = ""             # "" while generation goes on

    @property
    def text(self) -> str:
        """The text so far (cut at a stop string)."""
        return "".join(self.done) + self.tail

    def push(self, token: int, context_full: bool = False) -> bool:
        """Take the next token; True when generation stops with it. `context_full`: the
        context has no room to feed this token to the model."""
        self.tokens.append(token)
        if token in self.eog:
            self.stop_reason = "eos"
            return True
        self.tail += self.utf8.decode(self.tokenizer.token_bytes(token))
        since = self.emitted - self.start                  # in `tail`: no stop ends before it
        hit = min((i for i in (self.tail.find(s, max(0, since - len(s))) for s in self.stop)
                   if i >= 0), default=-1)
        if hit >= 0:
            self.tail = self.tail[:hit]
            self.stop_reason = "stop_string"
        elif len(self.tokens) >= self.max_new_tokens:
            self.stop_reason = "max_tokens"
        elif context_full:
            self.stop_reason = "context_full"
        stopped = self.stop_reason != ""
        if stopped and hit < 0:
            self.tail += self.utf8.decode(b"", final=True)
        safe = len(self.tail) if stopped else len(self.tail) - hold_back(self.tail, self.stop)
        if self.on_text is not None and safe > since:
            self.on_text(self.tail[since:safe])
        self.emitted = self.start + max(since, safe)
        keep = self.emitted - self.start - self.window     # characters no stop can reach
        if keep >= FOLD:
            self.done.append(self.tail[:keep])
            self.tail = self.tail[keep:]
            self.start += keep
        return stopped

    def finish(self) -> None:
        """Generation is over: flush a character left incomplete before an end-of-generation
        token, and hand whatever is left to `on_text`."""
        if self.stop_reason == "eos":
            self.tail += self.utf8.decode(b"", final=True)
        since = self.emitted - self.start
        if self.on_text is not None and len(self.tail) > since:
            self.on_text(self.tail[since:])
            self.emitted = self.start + len(self.tail)
