"""``llmnb.threads(n)``: one setting for every thread pool llmnb's arithmetic uses.

numpy's BLAS (OpenBLAS, via threadpoolctl) and numexpr each keep their own pool, and
numexpr picks its own default; setting both in one place makes thread counts, and so
benchmark figures, deterministic.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numexpr
from threadpoolctl import threadpool_limits

from llmnb.errors import UsageError


@contextmanager
def threads(n: int) -> Iterator[None]:
    """Run the block with `n` BLAS threads and `n` numexpr threads, then restore both."""
    if n < 1:
        raise UsageError(f"threads: expected a positive number of threads, got {n}")
    with threadpool_limits(limits=n):
        previous = numexpr.set_num_threads(n)
        try:
            yield
        finally:
            numexpr.set_num_threads(previous)
