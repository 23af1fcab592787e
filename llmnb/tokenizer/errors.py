"""``TokenizerError``: the tokenizer layer's one exception type."""
from __future__ import annotations

from llmnb.errors import EXIT_MODEL, LLMNBError


class TokenizerError(LLMNBError):
    """A vocabulary or chat template llmnb cannot use (names the file, the key and what was
    expected)."""

    exit_code = EXIT_MODEL

    def __init__(self, source: str, key: str, expected: str) -> None:
        self.source = source
        self.key = key
        self.expected = expected
        super().__init__(f"{source}: {key}: expected {expected}")
