"""``llmnb.threads(n)``: one setting for every thread pool llmnb's arithmetic uses.

numpy's BLAS (OpenBLAS, via threadpoolctl), numexpr and numba (``llmnb.kernels``) each
keep their own pool, and each picks its own default; setting all three in one place makes
thread counts, and so benchmark figures, deterministic. They never run at once: a numba
kernel calls no BLAS, and numpy calls happen between kernels, so n threads each is not
oversubscription, except that OpenBLAS's idle threads go on spinning after a call unless
their timeout was set before numpy loaded OpenBLAS: a pass that alternates small BLAS calls
with parallel kernels runs BLAS on one thread (``one_blas_thread``), and one whose products run
in BLAS runs numba's kernels on one thread (``one_kernel_thread``).

``$LLMNB_THREADS`` (a positive whole number) sets where the three start, for the whole process:
BLAS and numexpr when llmnb is imported (``start_from_environment``), numba when the first
kernel loads (``llmnb.kernels.threads``); ``threads(n)`` still sets any count for its block.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numexpr
from threadpoolctl import ThreadpoolController, threadpool_limits

from llmnb.errors import UsageError
from llmnb.kernels.threads import environment_default
from llmnb.kernels.threads import set_threads as set_kernel_threads


@contextmanager
def threads(n: int) -> Iterator[None]:
    """Run the block with `n` BLAS, numexpr and numba threads, then restore all three."""
    if n < 1:
        raise UsageError(f"threads: expected a positive number of threads, got {n}")
    with threadpool_limits(limits=n):
        previous = numexpr.set_num_threads(n)
        previous_kernels = set_kernel_threads(n)
        try:
            yield
        finally:
            set_kernel_threads(previous_kernels)
            numexpr.set_num_threads(previous)


def start_from_environment() -> None:
    """BLAS and numexpr on ``$LLMNB_THREADS`` threads from now on, when it is set. A bad value
    does not fail the import: ``llmnb.load`` raises it as a ``UsageError`` (the command line
    prints it, exit code 2)."""
    n = environment_default()
    if n is not None:
        threadpool_limits(limits=n)
        numexpr.set_num_threads(n)


_CONTROLLER: list[Any] = []      # threadpoolctl's view of the loaded BLAS, found once


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the block with BLAS on one thread (numba's and numexpr's counts unchanged): for a
    pass whose products run in numba kernels and whose few BLAS calls are small (the attention
    of a quantized prefill). OpenBLAS's idle threads spin after each call, for about 0.1 s
    unless ``OPENBLAS_THREAD_TIMEOUT`` was set before numpy loaded OpenBLAS (``import llmnb``
    sets it, too late when numpy came first), and the kernel threads that follow wait for the
    cores they hold: such a prefill then runs several times slower at 2 threads than at 1."""
    if not _CONTROLLER:
        _CONTROLLER.append(ThreadpoolController())
    with _CONTROLLER[0].limit(limits=1, user_api="blas"):
        yield


@contextmanager
def one_kernel_thread() -> Iterator[None]:
    """Run the block with numba's kernels on one thread (BLAS's and numexpr's counts
    unchanged): for a pass whose products run in BLAS (float32 weights). A parallel kernel's
    threads go on spinning after its loop, and the BLAS call that follows waits for the cores
    they hold: SmolLM2-135M's float32 decode took 75 to 220 ms a token at 2 threads that way,
    25 ms with its attention kernel on one thread."""
    from numba import get_num_threads, set_num_threads

    n = get_num_threads()
    set_num_threads(1)
    try:
        yield
    finally:
        set_num_threads(n)
