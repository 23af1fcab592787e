"""``llmnb bench ar``: prefill and decode speed against this machine's bandwidth roofline.

Decoding one token multiplies every weight matrix by one vector: it must stream every weight
byte it holds from memory once per token, so tokens/s can never exceed
    read bandwidth / weight bytes read per token      (the roofline),
with the read bandwidth the machine probe's memory roof (``machine.probe``: the DRAM plateau of
its read-bandwidth curve; ``llmnb bench`` measures it at the start of the run, a bench called
alone reads the stored measurement). Weights small enough to sit in what the curve shows as
cache are read from cache, not memory, so such a decode can pass "100% of the roof": each row
says where its weights are read from (``weights_in``), and a sentence on stderr says why for
the cache-resident ones (``MachineFacts.residency``). Quantized weights read
their repacked blocks (about the file's bytes), f32 weights 4 bytes per weight; both are
measured side by side. Prefill multiplies matrices by many vectors at once and is
compute-bound instead. Each (thread count, weights) runs in a fresh subprocess. Its memory:
``interpreter_rss_bytes`` once llmnb (numpy, BLAS) is imported, ``baseline_rss_bytes`` once
every kernel has also run once (numba, LLVM and the compiled kernels loaded: the interpreter's
baseline), ``rss_bytes`` resident after the timed runs, ``peak_rss_bytes`` the process's own
peak (VmHWM; including a JIT compile, had the cache been cold), and
``rss_above_baseline_vs_file`` = (rss - baseline) / the file's bytes. With ``peer`` (a
llama.cpp build folder or its ``llama-bench``; ``peer.py``), llama.cpp's pp/tg on the same
file are measured in the same run and reported as ratios. The timing is
``scaling.decode_timings``, the thread sweep's.
"""
from __future__ import annotations

import resource
from typing import Any

import sys

from llmnb import hub
from llmnb.perf.inputs import has_model
from llmnb.perf.machine import probe
from llmnb.perf.peer import peer_bench
from llmnb.perf.worker import run_worker

PROMPT_TOKENS = 128
DECODE_TOKENS = 32


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
    from llmnb.perf.bench_quant import first_calls
    from llmnb.perf.scaling import decode_timings

    interpreter = resident_bytes()
    with llmnb.threads(threads):
        first_calls()
        baseline = resident_bytes()
        m = llmnb.load(model, weights=weights)
        weights_held = m.transformer.weights
        prefill_s, decode_s = decode_timings(m, PROMPT_TOKENS, DECODE_TOKENS, repeats)
    return {
        "model": model, "threads": threads, "weights": weights, "weight_bytes": weights_held.nbytes,
        "prefill_tok_s": PROMPT_TOKENS / prefill_s, "decode_tok_s": DECODE_TOKENS / decode_s,
        "interpreter_rss_bytes": interpreter, "baseline_rss_bytes": baseline,
        "rss_bytes": resident_bytes(),
        "peak_rss_bytes": peak_resident_bytes(),
    }


def _subprocess(call: str) -> dict[str, Any]:
    out: dict[str, Any] = run_worker("llmnb.perf.bench_ar", call, "ar")
    return out


def bench_ar(repeats: int = 5, threads: list[int] | None = None, peer: str | None = None,
             model: str = "smollm2-135m", weights: list[str] | None = None) -> list[dict[str, Any]]:
    """Rows per (thread count, weights): prefill/decode tok/s, bytes read per token, the
    roofline, peak RSS; with `peer`, llama.cpp's pp/tg and the ratios to them."""
    threads = threads or [1, 2]
    path = hub.resolve(model)
    file_bytes = path.stat().st_size
    rows = []
    ref: dict[int, dict[str, float]] = {}
    facts = probe(threads=threads)
    for n in threads:
        bw = facts.read_gbs[n] * 1e9
        if peer:        # beside ours at the same thread count: a slow minute hits both
            ref |= peer_bench(peer, path, [n], repeats, PROMPT_TOKENS, DECODE_TOKENS)
        for w in weights or ["quantized", "f32"]:
            row = _subprocess(f"worker({str(path)!r}, {n}, {repeats}, {w!r})")
            roofline = bw / row["weight_bytes"]
            held = float(row["weight_bytes"])
            row |= {"model": model, "read_GB_s": bw / 1e9, "roofline_tok_s": roofline,
                    "decode_vs_roofline": row["decode_tok_s"] / roofline,
                    "weights_in": facts.where(held, n),
                    "rss_above_baseline_vs_file":
                        (row["rss_bytes"] - row["baseline_rss_bytes"]) / file_bytes}
            rows.append(row)
            if row["weights_in"] == "cache":
                print(f"bench ar: {model}, {w} weights, {n} thread{'s' if n > 1 else ''}: "
                      f"{facts.residency(held, n)}", file=sys.stderr)
    for row in rows:
        f32 = [r for r in rows if r["threads"] == row["threads"] and r["weights"] == "f32"]
        if f32 and row["weights"] != "f32":
            row["vs_f32"] = row["decode_tok_s"] / f32[0]["decode_tok_s"]
    if peer:
        for row in rows:
            p = ref.get(int(row["threads"]), {})
            if "decode_tok_s" in p:
                row["llama_cpp_tg"] = p["decode_tok_s"]
                row["tg_ratio"] = float(row["decode_tok_s"]) / p["decode_tok_s"]
            if "prefill_tok_s" in p:
                row["llama_cpp_pp"] = p["prefill_tok_s"]
                row["pp_ratio"] = float(row["prefill_tok_s"]) / p["prefill_tok_s"]
    return rows


def run(repeats: int, threads: list[int] | None, peer: str | None, weights: list[str] | None,
        models: list[str] | None) -> list[dict[str, Any]] | None:
    """``llmnb bench ar``: the `models` asked for by name (each must be there), else
    SmolLM2-135M (skipped when not pulled) and Qwen2.5-Coder-0.5B when pulled."""
    if models:
        rows: list[dict[str, Any]] = []
        for name in models:
            rows += bench_ar(repeats=repeats, threads=threads, peer=peer, model=name,
                             weights=weights)
        return rows
    if not has_model("smollm2-135m", "ar"):
        return None
    rows = bench_ar(repeats=repeats, threads=threads, peer=peer, weights=weights)
    if hub.is_pulled("qwen2.5-coder-0.5b"):
        rows += bench_ar(repeats=max(1, min(repeats, 3)), threads=threads, peer=peer,
                         model="qwen2.5-coder-0.5b", weights=weights)
    return rows
