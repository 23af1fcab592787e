"""The exception hierarchy: one type per layer, each mapped to a CLI exit code.

Every error llmnb raises on bad input is an ``LLMNBError``; its message names the
file, the field and what was expected. ``exit_code`` is what ``llmnb`` exits with.
"""
from __future__ import annotations

from typing import ClassVar

# Exit codes of the `llmnb` command (also listed in `llmnb --help` and README.md).
EXIT_OK = 0
EXIT_ERROR = 1          # an unexpected internal error (a bug: please report it)
EXIT_USAGE = 2          # bad flags or arguments
EXIT_INPUT = 3          # an input file is missing, unreadable or malformed
EXIT_MODEL = 4          # a valid file llmnb cannot run (architecture, tensor type, tokenizer)
EXIT_RESOURCES = 5      # not enough memory or disk, a model not pulled, a failed download
EXIT_INTERRUPTED = 130  # Ctrl-C


class LLMNBError(Exception):
    """Base of every error llmnb raises on purpose."""

    exit_code: ClassVar[int] = EXIT_ERROR  # ClassVar: compiled subclasses must see overrides


class UsageError(LLMNBError):
    """A bad argument value (a flag out of range, an unknown name)."""

    exit_code = EXIT_USAGE
