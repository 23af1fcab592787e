"""One timing run at a time: the lock that ``llmnb bench`` and ``make notebooks`` hold.

A timing taken while another benchmark runs measures both of them. So every run that reports
timings holds an exclusive ``flock`` on ``<cache>/machine/bench.lock`` (``cache`` is
``$LLMNB_HOME`` or ``~/.cache/llmnb``) from start to end, and refuses to start while another
process holds it. The kernel drops a ``flock`` when its process ends, so a killed run never
leaves the machine locked. The file names its holder (pid, command, start time) for the
refusal message. A process the holder starts (a notebook's kernel) sees ``LLMNB_MACHINE_LOCK``
and runs inside its parent's lock instead of refusing.
"""
from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from llmnb.errors import EXIT_RESOURCES, LLMNBError
from llmnb.hub import cache_dir

ENV = "LLMNB_MACHINE_LOCK"   # "<pid>" of the holder, set for the processes it starts


class MachineBusyError(LLMNBError):
    """Another timing run holds the machine."""

    exit_code = EXIT_RESOURCES


def lock_path() -> Path:
    return cache_dir() / "machine" / "bench.lock"


def holder(path: Path | None = None) -> str | None:
    """Who holds the lock now ("pid N: command, since ..."), or None when it is free."""
    path = path or lock_path()
    if not path.is_file():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


@contextmanager
def hold_machine(what: str) -> Iterator[None]:
    """Hold the machine for `what` (a command line, for the message), or raise
    ``MachineBusyError`` at once if another run holds it."""
    path = lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = False
        except BlockingIOError:
            held = True
        if held:
            text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
            if not (os.environ.get(ENV) and text.startswith(f"pid {os.environ[ENV]}:")):
                raise MachineBusyError(
                    f"{what}: another timing run holds this machine ({text or 'pid unknown'}; "
                    f"lock {path}): wait until it ends, so that neither measures the other")
            yield                              # started by the holder: inside its lock
            return
        since = time.strftime("%Y-%m-%d %H:%M:%S")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}: {what}, since {since}\n".encode(), 0)
        before = os.environ.get(ENV)
        os.environ[ENV] = str(os.getpid())
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(ENV, None)
            else:
                os.environ[ENV] = before
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)                           # closing the file releases the lock
