"""``GenerationError``: the autoregressive layer's one exception type."""
from __future__ import annotations

from llmnb.errors import EXIT_MODEL, LLMNBError


class GenerationError(LLMNBError):
    """A generator or KV cache used out of order or past its capacity, or a prompt or text
    that does not fit the context (the message names the step, what it found and what it
    expected). Errors about the model file itself stay ``ModelError``."""

    exit_code = EXIT_MODEL   # the exit code these cases had as ModelError: `llmnb --help`
