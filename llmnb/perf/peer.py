"""llama.cpp, the peer ``llmnb bench --peer PATH`` measures beside llmnb on the same file.

``PATH`` is a llama.cpp build folder (its ``bin/``) or one of its programs. ``peer_bench`` runs
``llama-bench`` (prompt processing and token generation, tokens/s per thread count: the AR
bench's peer); ``peer_step_ms`` runs ``llama-diffusion-cli`` and reads its "time per step"
line (total time / steps: a full forward of the canvas plus sampling; the diffusion bench's
peer). A missing program is a FileNotFoundError, a failing one an error from the run.
"""
from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
from pathlib import Path


def peer_bench(peer: str, path: Path, threads: list[int], repeats: int,
               prompt_tokens: int = 128, decode_tokens: int = 32) -> dict[int, dict[str, float]]:
    """llama-bench's pp/tg tokens/s per thread count on `path`: {threads: {"prefill_tok_s",
    "decode_tok_s"}} (the default sizes are ``llmnb bench ar``'s)."""
    exe = Path(peer)
    if exe.is_dir():
        exe = exe / "llama-bench"
    if not exe.is_file() and shutil.which(str(exe)) is None:
        raise FileNotFoundError(f"--peer: no llama-bench at {exe}")
    cmd = [str(exe), "-m", str(path), "-p", str(prompt_tokens), "-n", str(decode_tokens),
           "-t", ",".join(map(str, threads)), "-r", str(repeats), "-o", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    res: dict[int, dict[str, float]] = {}
    for row in json.loads(out):
        key = "prefill_tok_s" if row.get("n_prompt", 0) > 0 else "decode_tok_s"
        res.setdefault(int(row["n_threads"]), {})[key] = float(row["avg_ts"])
    return res


DIFFUSION_STEPS = 16
DIFFUSION_PROMPT = "Explain in a few sentences why the sky is blue during the day."


def peer_exe(peer: str) -> Path:
    """The llama-diffusion-cli that `peer` names (a build folder, the program, or a name on
    PATH)."""
    exe = Path(peer)
    if exe.is_dir():
        exe = exe / "llama-diffusion-cli"
    if not exe.is_file():
        found = shutil.which(str(exe))
        if found is None:
            raise FileNotFoundError(f"--peer: no llama-diffusion-cli at {exe}")
        exe = Path(found)
    return exe


def peer_step_ms(exe: Path, path: Path, canvas: int, threads: int, repeats: int) -> float:
    """Median of llama-diffusion-cli's "time per step" over `repeats` runs (after a warm-up):
    a canvas of `canvas` positions (``-ub``), 16 steps, one block, temperature 0."""
    cmd = [str(exe), "-m", str(path), "-p", DIFFUSION_PROMPT, "-ub", str(canvas), "-b", str(canvas),
           "-c", str(max(512, canvas)), "--diffusion-steps", str(DIFFUSION_STEPS),
           "--diffusion-block-length", str(canvas), "-t", str(threads), "-tb", str(threads),
           "--temp", "0", "--seed", "42"]
    times = []
    for i in range(repeats + 1):
        r = subprocess.run(cmd, capture_output=True, text=True)
        out = r.stdout + r.stderr
        m = re.search(r"time per step: ([0-9.]+)ms", out)
        if r.returncode != 0 or m is None:
            raise RuntimeError(f"llama-diffusion-cli failed ({' '.join(cmd)}): "
                               f"{out.strip()[-500:]}")
        if i > 0:                                               # the first run is the warm-up
            times.append(float(m.group(1)))
    return statistics.median(times)
