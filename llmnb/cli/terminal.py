"""What the ``llmnb`` command prints: text from a model made safe for a terminal, one JSON
document per result, progress bars on stderr."""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

# C0 and C1 control characters other than newline and tab, as visible escapes
_CONTROL = {c: f"\\x{c:02x}" for c in list(range(0x00, 0x20)) + list(range(0x7F, 0xA0))
            if c not in (0x09, 0x0A)}


def safe_text(text: str) -> str:
    """Neutralise terminal control sequences (ESC, BEL, CR, ...) in text from a model file."""
    return text.translate(_CONTROL)


# json.dumps escapes C0 controls itself; DEL and the C1 block (U+009B is CSI) it leaves raw
_JSON_CONTROL = {c: f"\\u{c:04x}" for c in range(0x7F, 0xA0)}


def json_text(obj: object) -> str:
    """One JSON document: non-ASCII text kept readable, no raw control character."""
    return json.dumps(obj, ensure_ascii=False).translate(_JSON_CONTROL)


def progress_bar(desc: str, unit: str = "B") -> Callable[[int, int], None]:
    """A tqdm bar on stderr, shown only on a terminal; returns a (done, total) callback."""
    from tqdm import tqdm

    bar: list[Any] = []

    def update(done: int, total: int) -> None:
        if not bar:
            bar.append(tqdm(total=total, desc=desc, unit=unit, unit_scale=True, file=sys.stderr,
                            disable=not sys.stderr.isatty()))
        bar[0].update(done - bar[0].n)
        if done >= total:
            bar[0].close()

    return update


def stream_out(raw: bool) -> Callable[[str], None]:
    """A callback that writes each piece of text to stdout as it comes (escaped unless `raw`)."""
    def write(text: str) -> None:
        sys.stdout.write(text if raw else safe_text(text))
        sys.stdout.flush()
    return write
