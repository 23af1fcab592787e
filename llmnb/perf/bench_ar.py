"""``llmnb bench ar``: prefill and decode speed against this machine's bandwidth roofline.

Decoding one token multiplies every weight matrix by one vector: it must stream every weight
byte it holds from memory once per token, so tokens/s can never exceed
    read bandwidth / weight bytes read per token      (the roofline),
with the read bandwidth measured here, in the same run (``machine.read_bandwidth``: the best
of a few read-only kernels). Quantized weights read their repacked blocks (about the file's
bytes), f32 weights 4 bytes per weight; both are measured side by side. Prefill multiplies
matrices by many vectors at once and is compute-bound instead. Each (thread count, weights)
runs in a fresh subprocess. Its memory: ``interpreter_rss_bytes`` once llmnb (numpy, BLAS)
is imported, ``baseline_rss_bytes`` once every kernel has also run once (numba, LLVM and the
compiled kernels loaded: the interpreter's baseline), ``rss_bytes`` resident after the
timed runs, ``peak_rss_bytes`` the process's own peak (VmHWM; including a JIT compile, had the cache been
cold), and ``rss_above_baseline_vs_file`` = (rss - baseline) / the file's bytes. With ``peer`` (a
llama.cpp build folder or its ``llama-bench``), llama.cpp's pp/tg on the same file are
measured in the same run and reported as ratios.
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

from llmnb.perf.machine import read_roof

PROMPT_TOKENS = 128
DECODE_TOKENS = 32


def bandwidth_worker(threads: int, repeats: int) -> dict[str, object]:
    """The memory roof at `threads`, as the machine probe measures it (its own process: the
    large arrays stay out of the RSS)."""
    import llmnb

    with llmnb.threads(threads):
        return {"read_bytes_s": read_roof(256 << 20, 128 << 20, repeats, threads)}


def resident_bytes() -> int:
    """This process's resident memory now (Linux /proc; elsewhere its peak so far)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_resident_bytes() -> int:
    """This process's peak resident memory: Linux's high-water mark of its own address space
    (VmHWM). getrusage's ru_maxrss is not that: it carries over a fork and exec, so a worker
    would report the parent's resident memory at the fork when that was larger."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def worker(model: str, threads: int, repeats: int, weights: str = "quantized") -> dict[str, object]:
    """One thread count, measured in this process (run by ``bench_ar`` as a subprocess)."""
    import llmnb
    from llmnb.ar import Greedy
    from llmnb.ar.engine import Generator
    from llmnb.perf.bench_quant import first_calls

    interpreter = resident_bytes()
    with llmnb.threads(threads):
        first_calls()
        baseline = resident_bytes()
        m = llmnb.load(model, weights=weights)
        weights_held = m.transformer.weights
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
        "model": model, "threads": threads, "weights": weights, "weight_bytes": weights_held.nbytes,
        "prefill_tok_s": statistics.median(prefill), "decode_tok_s": statistics.median(decode),
        "interpreter_rss_bytes": interpreter, "baseline_rss_bytes": baseline,
        "rss_bytes": resident_bytes(),
        "peak_rss_bytes": peak_resident_bytes(),
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
             model: str = "smollm2-135m", weights: list[str] | None = None) -> list[dict[str, Any]]:
    """Rows per (thread count, weights): prefill/decode tok/s, bytes read per token, the
    roofline, peak RSS; with `peer`, llama.cpp's pp/tg and the ratios to them."""
    from llmnb import hub

    threads = threads or [1, 2]
    path = hub.resolve(model)
    file_bytes = path.stat().st_size
    rows = []
    for n in threads:
        bw = _subprocess(f"bandwidth_worker({n}, {repeats})")["read_bytes_s"]
        for w in weights or ["quantized", "f32"]:
            row = _subprocess(f"worker({str(path)!r}, {n}, {repeats}, {w!r})")
            roofline = bw / row["weight_bytes"]
            row |= {"model": model, "read_GB_s": bw / 1e9, "roofline_tok_s": roofline,
                    "decode_vs_roofline": row["decode_tok_s"] / roofline,
                    "rss_above_baseline_vs_file": (row["rss_bytes"] - row["baseline_rss_bytes"]) / file_bytes}
            rows.append(row)
    for row in rows:
        f32 = [r for r in rows if r["threads"] == row["threads"] and r["weights"] == "f32"]
        if f32 and row["weights"] != "f32":
            row["vs_f32"] = row["decode_tok_s"] / f32[0]["decode_tok_s"]
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
