"""The ``llmnb`` command.

One module per family of subcommands, each defining its handlers and the parsers that call
them (``add_parsers``): ``files`` (inspect, tokenize, quantize, convert, pull, models), ``ar``
(generate, perplexity), ``diffusion`` (diffuse) and ``bench``; shared flag types in ``flags``,
what reaches the terminal in ``terminal``. A handler parses, calls the package and prints; it
imports what it runs when it runs, so building the parser stays light.

stdout carries data (text, ids, JSON); stderr carries progress, stats and errors. Bad input
gets one line on stderr and a non-zero exit code (see EXIT_CODES): a handler raises the
package's error (an ``LLMNBError``) and ``main`` prints it; a traceback only with ``--debug``.
Text from a model file is made safe for a terminal before it is printed.
"""
from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Sequence

from llmnb.cli import ar, bench, diffusion, files
from llmnb.cli.terminal import json_text, safe_text
from llmnb.errors import (
    EXIT_ERROR, EXIT_INPUT, EXIT_INTERRUPTED, EXIT_MODEL, EXIT_OK, EXIT_RESOURCES, EXIT_USAGE,
    LLMNBError,
)

EXIT_CODES = f"""exit codes:
  {EXIT_OK}    success
  {EXIT_ERROR}    internal error (a bug; rerun with --debug for the traceback)
  {EXIT_USAGE}    usage: bad flags or argument values; an output path that is a directory,
       device, FIFO or socket
  {EXIT_INPUT}    input file: missing, unreadable, not a GGUF, truncated or malformed
  {EXIT_MODEL}    model/format: a valid file llmnb cannot run (architecture, tensor type, tokenizer,
       chat template), or a prompt longer than the model's context
  {EXIT_RESOURCES}    resources: not enough memory, no space to write (disk full, file too large),
       model not pulled (or its cached file incomplete), download or checksum failed
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)"""

# errno values that mean "no room to write": ENOSPC, EDQUOT, EFBIG (over RLIMIT_FSIZE or the
# file system's largest file)
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llmnb", description="CPU LLM inference on GGUF models, from the llmnb notebooks.",
        epilog="MODEL is a path to a .gguf file or a hub name (see `llmnb models`).\n\n"
               + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for family in (files, ar, diffusion, bench):      # in the order `llmnb --help` lists them
        family.add_parsers(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)  # exits 2 with a usage message on bad flags
    try:
        code: int = a.func(a)
        sys.stdout.flush()  # a full disk under stdout fails here, not at exit with a traceback
        return code
    except KeyboardInterrupt:
        print("llmnb: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except LLMNBError as e:
        if a.debug:
            raise
        print(f"llmnb: error: {safe_text(str(e))}", file=sys.stderr)
        return e.exit_code
    except MemoryError:
        if a.debug:
            raise
        print("llmnb: error: out of memory", file=sys.stderr)
        return EXIT_RESOURCES
    except OSError as e:
        if a.debug:
            raise
        where = (f"{e.filename}: " if e.filename else
                 "writing output: " if e.errno in _NO_SPACE else "")
        print(f"llmnb: error: {safe_text(where + (e.strerror or str(e)))}", file=sys.stderr)
        if e.errno not in _NO_SPACE:
            return EXIT_INPUT
        if e.filename is None:  # stdout: drop what it still buffers, or exiting fails on it again
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except (OSError, ValueError):
                pass
        return EXIT_RESOURCES
    except Exception as e:  # noqa: BLE001 - the last line of defence: no traceback for users
        if a.debug:
            raise
        print(f"llmnb: internal error: {type(e).__name__}: {safe_text(str(e))} "
              "(rerun with --debug for the traceback)", file=sys.stderr)
        return EXIT_ERROR


__all__ = ["EXIT_CODES", "build_parser", "json_text", "main", "safe_text"]
