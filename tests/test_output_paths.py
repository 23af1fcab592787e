"""Where a command writes a file (quantize, convert, pull's cache, the machine probe's cache):
nothing there is created, a regular file is replaced whole, a symbolic link is replaced by the
file (its target left alone), and a directory, device, FIFO or socket is refused with one line
and exit 2, left as it was (``llmnb.output``)."""
from __future__ import annotations

import errno
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import llmnb
from llmnb.errors import EXIT_OK, EXIT_USAGE
from llmnb.output import OutputPathError, atomic_path, check_output
from llmnb.perf.machine import _write_cache
from test_cli import run
from test_cli_errors import TINY, one_error_line
from test_convert import write_checkpoint


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    yield path
    s.close()


def special_files(tmp_path: Path, unix_socket: Path) -> list[tuple[Path, str]]:
    """A directory, a FIFO, a socket and, where present, /dev/full: each with its kind."""
    folder = tmp_path / "folder.gguf"
    folder.mkdir()
    fifo = tmp_path / "fifo.gguf"
    os.mkfifo(fifo)
    out = [(folder, "is a directory"), (fifo, "is a FIFO (named pipe)"),
           (unix_socket, "is a socket")]
    if os.path.exists("/dev/full"):
        out.append((Path("/dev/full"), "is a character device"))
    return out


def kind_of(path: Path) -> int:
    return stat.S_IFMT(os.lstat(path).st_mode)


def temp_files(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if ".tmp-" in p.name]


# --- quantize and convert --------------------------------------------------------------------

def test_quantize_refuses_a_directory_device_fifo_or_socket_and_leaves_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, unix_socket: Path) -> None:
    for path, says in special_files(tmp_path, unix_socket):
        before = kind_of(path)
        code, out, err = run(capsys, "quantize", str(TINY), str(path), "Q8_0")
        one_error_line(code, out, err, EXIT_USAGE, f"{path}: {says}, expected a file name")
        assert ".tmp-" not in err                  # the message names OUT, not a temp file
        assert kind_of(path) == before             # never replaced
    assert temp_files(tmp_path) == []


def test_convert_refuses_a_device_fifo_or_directory_before_reading_the_checkpoint(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, unix_socket: Path) -> None:
    write_checkpoint(tmp_path / "hf", "llada")
    for path, says in special_files(tmp_path, unix_socket):
        code, out, err = run(capsys, "convert", str(tmp_path / "hf"), str(path))
        one_error_line(code, out, err, EXIT_USAGE, f"{path}: {says}")
        assert kind_of(path) in (stat.S_IFDIR, stat.S_IFIFO, stat.S_IFSOCK, stat.S_IFCHR)
    assert temp_files(tmp_path) == []


def test_an_existing_file_is_replaced_whole(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    out_path = tmp_path / "q.gguf"
    out_path.write_bytes(b"old" * 10_000_000)       # longer than the new file: not overwritten
    code, _, err = run(capsys, "quantize", str(TINY), str(out_path), "Q8_0")
    assert code == EXIT_OK, err
    with llmnb.gguf.open(out_path) as f:              # a whole GGUF, no old bytes after it
        assert f.metadata["general.file_type"] == 7
    assert out_path.stat().st_size < 30_000_000 and temp_files(tmp_path) == []


def test_a_symbolic_link_is_replaced_by_the_file_and_its_target_left_alone(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "target.gguf"
    target.write_bytes(b"keep me")
    link = tmp_path / "link.gguf"
    link.symlink_to(target)
    code, _, err = run(capsys, "quantize", str(TINY), str(link), "Q8_0")
    assert code == EXIT_OK, err
    assert not link.is_symlink() and link.is_file() and target.read_bytes() == b"keep me"
    dangling = tmp_path / "dangling.gguf"
    dangling.symlink_to(tmp_path / "nowhere" / "x.gguf")
    code, _, err = run(capsys, "quantize", str(TINY), str(dangling), "Q8_0")
    assert code == EXIT_OK and dangling.is_file() and not dangling.is_symlink(), err


def test_a_missing_folder_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "q.gguf"
    code, out, err = run(capsys, "quantize", str(TINY), str(missing), "Q8_0")
    one_error_line(code, out, err, EXIT_USAGE, f"{missing.parent} does not exist")
    plain = tmp_path / "file"
    plain.write_text("x")
    code, out, err = run(capsys, "quantize", str(TINY), str(plain / "q.gguf"), "Q8_0")
    one_error_line(code, out, err, EXIT_USAGE, f"{plain} is not a folder")


@pytest.mark.parametrize("command", ["quantize", "convert"])
def test_help_says_what_happens_to_a_file_a_link_and_anything_else(
        capsys: pytest.CaptureFixture[str], command: str) -> None:
    code, out, _ = run(capsys, command, "--help")
    text = " ".join(out.split())                    # argparse wraps the help
    assert code == 0
    for words in ("an existing file is replaced whole",
                  "a symbolic link is replaced by the file (its target is left alone)",
                  "a directory, device, FIFO or socket is refused (exit 2)"):
        assert words in text, text


# --- the shared helper -----------------------------------------------------------------------

def test_a_target_that_turns_into_a_fifo_while_written_is_not_replaced(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    with pytest.raises(OutputPathError, match="is a FIFO"):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"data")
            os.mkfifo(target)                       # another process, in the meantime
    assert kind_of(target) == stat.S_IFIFO and temp_files(tmp_path) == []


def test_a_write_error_names_the_output_not_the_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    with pytest.raises(OSError) as e:
        with atomic_path(target) as tmp:
            raise OSError(errno.EACCES, "Permission denied", str(tmp))
    assert e.value.filename == str(target) and e.value.errno == errno.EACCES
    assert check_output(target) == target and temp_files(tmp_path) == []


def test_the_machine_cache_is_written_by_the_same_rule(tmp_path: Path) -> None:
    fifo = tmp_path / "machine" / "cpu.json"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    with pytest.raises(OutputPathError, match="is a FIFO"):
        _write_cache(fifo, {"version": 1})
    assert kind_of(fifo) == stat.S_IFIFO
    plain = tmp_path / "machine" / "other.json"
    _write_cache(plain, {"version": 1})
    assert plain.read_text().startswith("{") and temp_files(plain.parent) == []
