"""The kernels' thread count, kept without importing numba (``llmnb.threads`` sets it for
every block; numba, loaded later by the first product, picks it up in ``jit.py``)."""
from __future__ import annotations

import sys

_wanted: list[int] = []


def set_threads(n: int | None) -> int | None:
    """Ask for `n` kernel threads (None: numba's default, every core); returns the previous
    request. Applied at once when numba is loaded, else when it loads."""
    previous = _wanted[0] if _wanted else None
    _wanted[:] = [] if n is None else [int(n)]
    if "llmnb.kernels.jit" in sys.modules:
        from llmnb.kernels import jit

        jit.apply_threads(n)
    return previous


def wanted() -> int | None:
    return _wanted[0] if _wanted else None
