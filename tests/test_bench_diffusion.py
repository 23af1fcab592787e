"""``llmnb bench diffusion``'s pieces that are not timings: the peer driver (``perf/peer.py``)."""
from __future__ import annotations

import stat
from pathlib import Path

import pytest

from llmnb.perf.peer import peer_exe, peer_step_ms


def fake_peer(tmp_path: Path, body: str) -> Path:
    exe = tmp_path / "llama-diffusion-cli"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_peer_step_time_is_the_median_of_its_time_per_step_lines(tmp_path: Path) -> None:
    counter = tmp_path / "n"
    counter.write_text("0")
    # runs print 900 (warm-up, dropped), then 30, 10, 20 ms per step
    exe = fake_peer(tmp_path, f'n=$(cat {counter}); echo $((n+1)) > {counter}\n'
                              'case $n in 0) t=900;; 1) t=30;; 2) t=10;; *) t=20;; esac\n'
                              'echo "total time: 1ms, time per step: $t.00ms, '
                              'sampling time per step: 0.1ms" >&2\n')
    assert peer_exe(str(tmp_path)) == exe
    assert peer_step_ms(exe, tmp_path / "m.gguf", 96, 1, repeats=3) == 20.0


def test_a_failing_or_missing_peer_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="llama-diffusion-cli"):
        peer_exe(str(tmp_path))
    exe = fake_peer(tmp_path, 'echo "GGML_ASSERT failed" >&2; exit 134\n')
    with pytest.raises(RuntimeError, match="GGML_ASSERT"):
        peer_step_ms(exe, tmp_path / "m.gguf", 96, 1, repeats=1)
