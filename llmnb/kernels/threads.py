"""The kernels' thread count, kept without importing numba (``llmnb.threads`` sets it for
every block; numba, loaded later by the first product, picks it up in ``jit.py``).

Where nothing asked for a count, the kernels run on ``$LLMNB_THREADS`` threads if it is set,
else on every core (numba's default): the environment's say over llmnb's pools for a whole
process, e.g. for several processes that share one machine's cores."""
from __future__ import annotations

import os
from collections.abc import Callable

from llmnb.errors import UsageError

_wanted: list[int] = []
_apply: list[Callable[[int | None], None]] = []      # numba's setter, once jit.py has loaded it


def from_environment() -> int | None:
    """``$LLMNB_THREADS`` as a thread count (None: unset or empty)."""
    raw = os.environ.get("LLMNB_THREADS", "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise UsageError(f"LLMNB_THREADS: expected a positive whole number of threads, got {raw!r}")
    return int(raw)


def environment_default() -> int | None:
    """``from_environment``, with a bad value read as unset: importing llmnb never fails on
    it, and ``llmnb.load`` reports it (``from_environment``)."""
    try:
        return from_environment()
    except UsageError:
        return None


def _or_environment(n: int | None) -> int | None:
    """The count to apply for a request `n` (None: the environment's, if any)."""
    return n if n is not None else environment_default()


def set_threads(n: int | None) -> int | None:
    """Ask for `n` kernel threads (None: ``$LLMNB_THREADS``, else numba's default, every
    core); returns the previous request. Applied at once when numba is loaded, else when it
    loads."""
    previous = _wanted[0] if _wanted else None
    _wanted[:] = [] if n is None else [int(n)]
    for apply in _apply:
        apply(_or_environment(n))
    return previous


def wanted() -> int | None:
    return _wanted[0] if _wanted else None


def on_load(apply: Callable[[int | None], None]) -> None:
    """``jit.py``, having loaded numba, hands over its thread setter: applied now to the count
    asked for so far and to every later request (this module never imports numba)."""
    _apply[:] = [apply]
    apply(_or_environment(wanted()))
