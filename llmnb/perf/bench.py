"""``llmnb bench``: ratios against oracles and peers, measured side by side in one run.

Every figure is a warm-up followed by the median of several timed runs, printed after the
machine's facts (CPU, cores, BLAS kernel, thread settings, OpenBLAS overrides), because
these machines are shared and noisy: only ratios taken in the same run are meaningful.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

from llmnb import hub


def median_time(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall time of `fn` over `repeats` runs after `warmup` untimed runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def machine_facts() -> dict[str, object]:
    """What a reader needs to judge a number: CPU, cores, BLAS kernel and threads, overrides."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    blas: list[dict[str, object]] = []
    try:
        from threadpoolctl import threadpool_info

        blas = [{k: info.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
                for info in threadpool_info() if info.get("user_api") == "blas"]
    except ImportError:
        pass
    return {
        "cpu": cpu, "logical_cpus": os.cpu_count(), "python": platform.python_version(),
        "blas": blas,
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE"),
        "compiled": is_compiled(),
    }


def is_compiled() -> bool:
    """True when llmnb's core modules are mypyc-compiled extension modules."""
    from llmnb.gguf import reader

    return not (reader.__file__ or "").endswith(".py")


def bench_gguf(repeats: int) -> list[dict[str, object]]:
    """Opening each pulled real model: llmnb.gguf.open vs gguf.GGUFReader (header + tensor infos)."""
    import gguf

    from llmnb.gguf.reader import open_gguf

    rows: list[dict[str, object]] = []
    for name in ("smollm2-135m", "qwen2.5-coder-0.5b"):
        if not hub.is_pulled(name):
            print(f"bench gguf: {name} not pulled (llmnb pull {name}); skipped", file=sys.stderr)
            continue
        path = hub.path(name)
        ours = median_time(lambda: open_gguf(path).close(), repeats)
        theirs = median_time(lambda: gguf.GGUFReader(path), max(1, min(repeats, 3)))
        f = open_gguf(path)
        tokens = f.metadata.get("tokenizer.ggml.tokens")
        rows.append({"model": name, "vocab": len(tokens) if isinstance(tokens, list) else 0,
                     "tensors": len(f.tensors), "llmnb_s": ours, "gguf_py_s": theirs,
                     "ratio": theirs / ours})
        f.close()
    return rows


def _print_rows(title: str, rows: list[dict[str, object]]) -> None:
    if not rows:
        return
    keys = list(rows[0])
    print(f"\n## {title}")
    print("  ".join(f"{k:>12}" for k in keys))
    for r in rows:
        cells = []
        for k in keys:
            v = r[k]
            cells.append(f"{v:>12.4g}" if isinstance(v, float) else f"{v!s:>12}")
        print("  ".join(cells))


def main(what: str, repeats: int = 5, as_json: bool = False, threads: list[int] | None = None,
         peer: str | None = None) -> int:
    facts = machine_facts()
    results: dict[str, object] = {"machine": facts, "repeats": repeats}
    if not as_json:
        print("# machine")
        for k, v in facts.items():
            print(f"{k:>18}: {v}")
        print(f"{'repeats':>18}: {repeats} (median kept, after one warm-up run)")
    if what in ("gguf", "all"):
        rows = bench_gguf(repeats)
        results["gguf"] = rows
        if not as_json:
            _print_rows("gguf: open a model file, llmnb vs gguf-py GGUFReader (ratio = speed-up)", rows)
    if what in ("quant", "all"):
        from llmnb.perf.bench_quant import bench_quant

        qrows = bench_quant(repeats=repeats)
        results["quant"] = qrows
        if not as_json:
            _print_rows("quant: llmnb vs gguf.quants (ratio = speed-up), 1 thread", qrows)
    if what in ("ar", "all"):
        from llmnb.perf.bench_ar import bench_ar

        if hub.is_pulled("smollm2-135m"):
            arows = bench_ar(repeats=repeats, threads=threads, peer=peer)
            results["ar"] = arows
            if not as_json:
                _print_rows("ar: SmolLM2-135M, prompt 128 + decode 32 tokens; roofline = "
                            "GEMV bandwidth / F32 weight bytes", arows)
        else:
            print("bench ar: smollm2-135m not pulled (llmnb pull smollm2-135m); skipped",
                  file=sys.stderr)
    if what in ("diffusion", "all"):
        from llmnb.perf.bench_diffusion import bench_diffusion

        if hub.is_pulled("smollm2-135m"):
            drows = bench_diffusion(repeats=repeats, threads=threads)
            results["diffusion"] = drows
            if not as_json:
                _print_rows("diffusion: one uncached step of SmolLM2-135M as a llada file, prompt 32 "
                            "+ B masked; MFU = achieved GFLOP/s / sgemm GFLOP/s (same run)", drows)
        else:
            print("bench diffusion: smollm2-135m not pulled; skipped", file=sys.stderr)
    if as_json:
        print(json.dumps(results, indent=2, default=str))
    return 0
