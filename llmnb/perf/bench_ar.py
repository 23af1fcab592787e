"""``llmnb bench ar``: prefill and decode speed against this machine's bandwidth roofline.

Decoding one token multiplies every weight matrix by one vector: it must stream all float32
weight bytes from memory once per token, so tokens/s can never exceed
    bandwidth / weight bytes      (the F32 roofline),
with bandwidth measured here, in the same run, by a large matrix-vector product (the very
operation decoding repeats). Prefill multiplies matrices by many vectors at once and is
compute-bound instead. Each thread count runs in a fresh subprocess, so its peak RSS is its own.
With ``peer`` (a llama.cpp build folder or its ``llama-bench``), llama.cpp's pp/tg on the same
file are measured in the same run and reported as ratios.
"""
from __future__ import annotations

import json
import resource
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np

from llmnb.perf.machine import gemv_bandwidth

PROMPT_TOKENS = 128
DECODE_TOKENS = 32


def bandwidth_worker(threads: int, repeats: int) -> dict[str, object]:
    """GEMV bandwidth at `threads` (its own process: the 256 MiB matrix stays out of the RSS)."""
    import llmnb

    with llmnb.threads(threads):
        return {"gemv_bytes_s": gemv_bandwidth(repeats=repeats)}


def worker(model: str, threads: int, repeats: int) -> dict[str, object]:
    """One thread count, measured in this process (run by ``bench_ar`` as a subprocess)."""
    import llmnb
    from llmnb.ar import Greedy
    from llmnb.ar.engine import Generator

    with llmnb.threads(threads):
        m = llmnb.load(model)
        weights = m.transformer.weights
        rng = np.random.default_rng(0)
        prompt = rng.integers(100, m.config.vocab_size - 100, PROMPT_TOKENS).tolist()
        prefill, decode = [], []
        for r in range(repeats + 1):                     # the first round is the warm-up
            g = Generator(m, Greedy(), capacity=PROMPT_TOKENS + DECODE_TOKENS + 1)
            t0 = time.perf_counter()
            g.prefill(prompt)
            t1 = time.perf_counter()
            for _ in range(DECODE_TOKENS):
                g.feed(g.next_token())
            t2 = time.perf_counter()
            if r:
                prefill.append(PROMPT_TOKENS / (t1 - t0))
                decode.append(DECODE_TOKENS / (t2 - t1))
    return {
        "model": model, "threads": threads, "weights_f32_bytes": weights.nbytes,
        "prefill_tok_s": statistics.median(prefill), "decode_tok_s": statistics.median(decode),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def _subprocess(call: str) -> dict[str, Any]:
    from llmnb.perf.bench import run_worker

    out: dict[str, Any] = run_worker("llmnb.perf.bench_ar", call, "ar")
    return out


def peer_bench(peer: str, path: Path, threads: list[int], repeats: int) -> dict[int, dict[str, float]]:
    """llama.cpp's llama-bench pp/tg tokens/s per thread count on the same file."""
    exe = Path(peer)
    if exe.is_dir():
        exe = exe / "llama-bench"
    if not exe.is_file() and shutil.which(str(exe)) is None:
        raise FileNotFoundError(f"--peer: no llama-bench at {exe}")
    cmd = [str(exe), "-m", str(path), "-p", str(PROMPT_TOKENS), "-n", str(DECODE_TOKENS),
           "-t", ",".join(map(str, threads)), "-r", str(repeats), "-o", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    res: dict[int, dict[str, float]] = {}
    for row in json.loads(out):
        key = "prefill_tok_s" if row.get("n_prompt", 0) > 0 else "decode_tok_s"
        res.setdefault(int(row["n_threads"]), {})[key] = float(row["avg_ts"])
    return res


def bench_ar(repeats: int = 5, threads: list[int] | None = None, peer: str | None = None,
             model: str = "smollm2-135m") -> list[dict[str, Any]]:
    from llmnb import hub

    threads = threads or [1, 2]
    path = hub.resolve(model)
    rows = []
    for n in threads:
        row = _subprocess(f"worker({str(path)!r}, {n}, {repeats})")
        bw = _subprocess(f"bandwidth_worker({n}, {repeats})")["gemv_bytes_s"]
        roofline = bw / row["weights_f32_bytes"]
        row |= {"model": model, "gemv_GB_s": bw / 1e9, "roofline_tok_s": roofline,
                "decode_vs_roofline": row["decode_tok_s"] / roofline,
                "rss_vs_weights": row["peak_rss_bytes"] / row["weights_f32_bytes"]}
        rows.append(row)
    if peer:
        ref = peer_bench(peer, path, threads, repeats)
        for row in rows:
            p = ref.get(int(row["threads"]), {})
            if "decode_tok_s" in p:
                row["llama_cpp_tg"] = p["decode_tok_s"]
                row["tg_ratio"] = float(row["decode_tok_s"]) / p["decode_tok_s"]
            if "prefill_tok_s" in p:
                row["llama_cpp_pp"] = p["prefill_tok_s"]
                row["pp_ratio"] = float(row["prefill_tok_s"]) / p["prefill_tok_s"]
    return rows
