"""What the benches read besides this package: the repository's data/ folder (the tiny models,
the held-out prompts, the texts; ``$LLMNB_DATA``, else ``./data``) and the pulled hub models.
A bench without its inputs is skipped, saying why on stderr, or refused when asked by name."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Final

from llmnb import hub
from llmnb.errors import UsageError

NO_DATA: Final = ("no data/eval/tiny_heldout.jsonl here (run from the repository root or set "
                  "LLMNB_DATA)")


def data_dir() -> Path | None:
    """$LLMNB_DATA, else ./data; None when neither has the held-out set."""
    for d in (os.environ.get("LLMNB_DATA"), "data"):
        if d and (Path(d) / "eval" / "tiny_heldout.jsonl").is_file():
            return Path(d).resolve()
    return None


def need_data_dir(what: str) -> Path:
    """``data_dir()``, or a UsageError that names bench `what`."""
    d = data_dir()
    if d is None:
        raise UsageError(f"bench {what}: {NO_DATA}")
    return d


def has_data(what: str) -> bool:
    """Whether the data/ folder is there; if not, bench `what` says it is skipped."""
    if data_dir() is not None:
        return True
    print(f"bench {what}: {NO_DATA}; skipped", file=sys.stderr)
    return False


def has_model(name: str, what: str) -> bool:
    """Whether hub model `name` is pulled; if not, bench `what` says it is skipped."""
    if hub.is_pulled(name):
        return True
    print(f"bench {what}: {name} not pulled (llmnb pull {name}); skipped", file=sys.stderr)
    return False
