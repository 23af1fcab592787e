"""The kernels' thread count, kept without importing numba (``llmnb.threads`` sets it for
every block; numba, loaded later by the first product, picks it up in ``jit.py``)."""
from __future__ import annotations

from collections.abc import Callable

_wanted: list[int] = []
_apply: list[Callable[[int | None], None]] = []      # numba's setter, once jit.py has loaded it


def set_threads(n: int | None) -> int | None:
    """Ask for `n` kernel threads (None: numba's default, every core); returns the previous
    request. Applied at once when numba is loaded, else when it loads."""
    previous = _wanted[0] if _wanted else None
    _wanted[:] = [] if n is None else [int(n)]
    for apply in _apply:
        apply(n)
    return previous


def wanted() -> int | None:
    return _wanted[0] if _wanted else None


def on_load(apply: Callable[[int | None], None]) -> None:
    """``jit.py``, having loaded numba, hands over its thread setter: applied now to the count
    asked for so far and to every later request (this module never imports numba)."""
    _apply[:] = [apply]
    apply(wanted())
