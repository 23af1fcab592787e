"""The plain-text tables ``llmnb bench`` prints: one column per key, right-aligned, floats to
4 significant digits. A list of rows may hold several tables (a bench that measures two
things): each change of keys starts a new header."""
from __future__ import annotations

from collections.abc import Mapping, Sequence


def table_lines(rows: Sequence[Mapping[str, object]]) -> list[str]:
    """The rows as aligned text lines, a header line before each run of rows with the same keys."""
    lines: list[str] = []
    keys: list[str] = []
    widths: list[int] = []
    for r in rows:
        if list(r) != keys:
            keys = list(r)
            widths = [max(12, len(k)) for k in keys]
            lines.append("  ".join(f"{k:>{w}}" for k, w in zip(keys, widths)))
        cells = []
        for k, w in zip(keys, widths):
            v = r.get(k)
            cells.append(f"{v:>{w}.4g}" if isinstance(v, float) else f"{v!s:>{w}}")
        lines.append("  ".join(cells))
    return lines


def print_rows(title: str, rows: Sequence[Mapping[str, object]]) -> None:
    """``## title`` after a blank line, then the table; nothing for no rows."""
    if not rows:
        return
    print(f"\n## {title}")
    for line in table_lines(rows):
        print(line)
