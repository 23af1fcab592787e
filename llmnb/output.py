"""Writing an output file: which existing paths may be replaced, and the atomic write.

Every file llmnb writes (``quantize``, ``convert``, ``pull``'s cache, the machine probe's
cache) goes through ``atomic_path``: the bytes go to a temp file beside the target, which is
renamed onto it only when complete, so a reader never sees half a file and a failed write
leaves nothing. A rename replaces whatever the name pointed to, so the target is checked
first (``check_output``), and again just before the rename:

    nothing there        created
    a regular file       replaced whole (never truncated or written in place)
    a symbolic link      the link is replaced by the file; the file it pointed to is left alone
    anything else        refused, left as it is: a directory, a device (/dev/full, /dev/null),
                         a FIFO, a socket
"""
from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from llmnb.errors import UsageError

# The rule above in one sentence, for the CLI's --help of every command that writes a file.
OUTPUT_RULE = ("it is written to a temp file beside it and renamed onto it when complete: "
               "an existing file is replaced whole, a symbolic link is replaced by the file (its "
               "target is left alone); a directory, device, FIFO or socket is refused (exit 2)")


class OutputPathError(UsageError):
    """An output path that names something llmnb will not replace, or sits in no folder."""


def _kind(mode: int) -> str:
    """What a non-regular file is, in the words of ``ls -l``'s first letter."""
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISFIFO, "FIFO (named pipe)"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


def check_output(path: str | os.PathLike[str]) -> Path:
    """`path` as a Path if a file may be written there (nothing there, a regular file or a
    symbolic link, in an existing folder); else ``OutputPathError`` naming what is there."""
    p = Path(path)
    try:
        mode = os.lstat(p).st_mode
    except (FileNotFoundError, NotADirectoryError):
        if p.parent.is_dir():
            return p
        deepest = next(q for q in p.parents if os.path.lexists(q))     # "/" at the least
        why = f"{p.parent} does not exist" if deepest.is_dir() else f"{deepest} is not a folder"
        raise OutputPathError(f"{p}: expected a path in an existing folder; {why}") from None
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return p
    kind = _kind(mode)
    raise OutputPathError(f"{p}: is a {kind}, expected a file name to write (an existing "
                          f"{kind} is never replaced)")


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp path beside `path` (checked by ``check_output``); rename it onto `path`
    only if the block succeeds and `path` still may be replaced. An error while writing names
    `path`, not the temp file."""
    target = check_output(path)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        check_output(target)                  # it may have changed while the file was written
        os.replace(tmp, target)
    except OSError as e:
        if e.errno is None and tmp.exists():  # numpy's tofile: "N requested and M written"
            raise short_write_error(tmp, target) from None
        if e.filename is not None and os.fspath(e.filename) == os.fspath(tmp):
            raise OSError(e.errno, e.strerror, str(target)) from None
        raise
    finally:
        if tmp.exists():
            tmp.unlink()


def short_write_error(tmp: Path, target: Path) -> OSError:
    """Why a write came up short (numpy reports no errno): one more byte appended to the
    file gets the kernel's answer (ENOSPC, EDQUOT, EFBIG ...), named after `target`."""
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"\0")
        finally:
            os.close(fd)
    except OSError as e:
        return OSError(e.errno, e.strerror, str(target))
    st = os.statvfs(tmp.parent)
    if st.f_bavail * st.f_frsize < (1 << 20):   # the byte fitted in a last partial block
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))
    return OSError(errno.EIO, "a write came up short", str(target))


__all__ = ["OUTPUT_RULE", "OutputPathError", "atomic_path", "check_output", "short_write_error"]
