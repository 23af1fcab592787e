"""The machine lock: one timing run at a time (``llmnb bench``, ``make notebooks``), a clear
refusal naming the holder, nothing left locked by a run that ended, and a holder's own child
processes (a notebook's kernel) inside its lock."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from llmnb.errors import EXIT_RESOURCES
from llmnb.perf.lock import MachineBusyError, hold_machine, holder, lock_path

HOLD = textwrap.dedent("""
    import sys, time
    from llmnb.perf.lock import hold_machine
    with hold_machine("test holder"):
        print("held", flush=True)
        sys.stdin.readline()                  # until the test lets go
""")


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLMNB_HOME", str(tmp_path))
    monkeypatch.delenv("LLMNB_MACHINE_LOCK", raising=False)
    return tmp_path


def _holding() -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", HOLD], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def test_a_second_run_is_refused_with_the_holder_named_and_runs_once_the_first_ends(home: Path) -> None:
    p = _holding()
    try:
        assert holder() is not None and f"pid {p.pid}: test holder" in (holder() or "")
        with pytest.raises(MachineBusyError, match=f"pid {p.pid}: test holder"):
            with hold_machine("second"):
                pass
    finally:
        p.communicate("\n", timeout=30)
    assert holder() is None
    with hold_machine("second"):
        assert "second" in lock_path().read_text()
    assert holder() is None and lock_path().read_text() == ""


def test_a_killed_holder_leaves_the_machine_free(home: Path) -> None:
    p = _holding()
    p.kill()
    p.wait(timeout=30)
    assert holder() is None
    with hold_machine("after a crash"):
        pass


def test_a_process_the_holder_starts_runs_inside_its_lock(home: Path) -> None:
    child = ("from llmnb.perf.lock import hold_machine\n"
             "with hold_machine('child'):\n    print('inside')")
    with hold_machine("parent"):
        r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                           env=os.environ.copy(), timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "inside", r.stderr
    r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                       env={**os.environ, "LLMNB_MACHINE_LOCK": "1"}, timeout=60)
    assert r.returncode == 0                      # free: a stale variable changes nothing


def test_llmnb_bench_refuses_while_another_run_holds_the_machine(home: Path) -> None:
    p = _holding()
    try:
        r = subprocess.run([sys.executable, "-m", "llmnb.cli", "bench", "gguf"],
                           capture_output=True, text=True, env=os.environ.copy(), timeout=60)
    finally:
        p.communicate("\n", timeout=30)
    assert r.returncode == EXIT_RESOURCES
    assert r.stderr.count("\n") == 1 and "another timing run holds this machine" in r.stderr
    assert f"pid {p.pid}: test holder" in r.stderr and r.stdout == ""
