"""The README's benchmark section, from the output of `llmnb bench all --json`.

    llmnb bench all --json > bench.json
    python tools/bench_readme.py bench.json --plot docs/benchmarks.png > bench.md

Prints markdown (the machine and its measured roofs, then one table per benchmark) and
writes one figure: SmolLM2-135M's decode and diffusion steps placed on the 1-thread
roofline, and thread scaling of both. Every number comes from the JSON; nothing is
measured or typed in here. Sections it does not know are printed with all their columns.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from llmnb.output import OutputPathError, atomic_path
from llmnb.perf import bench_cache, bench_ladder
from llmnb.perf.intervals import MARGIN, paired_table, verdict_from_totals

# Columns shown per known section (header, key, format); other keys are left to the JSON.
COLUMNS: dict[str, list[tuple[str, str, str]]] = {
    "gguf": [("model", "model", ""), ("llmnb s", "llmnb_s", ".3f"),
             ("gguf-py s", "gguf_py_s", ".3f"), ("speed-up", "ratio", ".1f")],
    "ar": [("model", "model", ""), ("threads", "threads", ""), ("weights", "weights", ""),
           ("prefill tok/s", "prefill_tok_s", ".0f"), ("decode tok/s", "decode_tok_s", ".1f"),
           ("vs f32", "vs_f32", ".2f"), ("llama.cpp tg", "llama_cpp_tg", ".1f"),
           ("tg ratio", "tg_ratio", ".2f"), ("MB read per token", "weight_bytes", "mb"),
           ("roofline tok/s", "roofline_tok_s", ".1f"),
           ("decode / roofline", "decode_vs_roofline", ".0%"),
           ("RSS above baseline / file", "rss_above_baseline_vs_file", ".2f")],
    "diffusion": [("threads", "threads", ""), ("B", "B", ""), ("weights", "weights", ""),
                  ("step ms", "step_ms", ".0f"),
                  ("llama.cpp F32-copy step ms", "llama_cpp_f32_step_ms", ".0f"),
                  ("ratio vs F32 copy", "f32_step_ratio", ".2f"),
                  ("llama.cpp step ms (file's types)", "llama_cpp_step_ms", ".0f"),
                  ("ratio", "step_ratio", ".2f"), ("GFLOP/s", "gflops", ".1f"),
                  ("of measured sgemm", "mfu", ".0%"), ("products alone ms", "products_ms", ".0f"),
                  ("F32 copy / products alone", "f32_ratio_bound", ".2f")],
    "scaling": [("threads", "threads", ""), ("AR decode tok/s", "ar_decode_tok_s", ".1f"),
                ("AR scaling", "ar_scaling", ".2f"),
                ("diffusion step ms", "diffusion_step_ms", ".0f"),
                ("diffusion tok/s (T=16)", "diffusion_tok_s", ".1f"),
                ("diffusion scaling", "diffusion_scaling", ".2f")],
    "cache": [("model", "model", ""), ("answers", "kind", ""), ("setting", "setting", ""),
              ("n", "prompts", ""), ("valid [95% interval]", "validity_ci", ""),
              ("exact match", "accuracy", ".1%"),
              ("mean steps", "nfe", ".2f"), ("mean steps", "mean_steps", ".2f"),
              ("s per prompt", "seconds", ".3f"), ("speed-up", "speedup", ".2f"),
              ("fidelity", "fidelity", ".1%"), ("validity against the reference", "paired", "")],
    "ladder": [("model", "model", ""), ("answers", "kind", ""), ("method", "method", ""),
               ("n", "prompts", ""), ("valid [95% interval]", "validity_ci", ""),
               ("fidelity", "fidelity", ".1%"),
               ("steps (NFE)", "nfe", ".2f"), ("tokens per forward", "tokens_per_forward", ".1f"),
               ("rows per forward", "rows_per_forward", ".1f"), ("s per prompt", "seconds", ".3f"),
               ("speed-up", "speedup", ".2f"), ("remasked", "remasked", ""),
               ("validity against the reference", "paired", "")],
    "kv": [("policy", "policy", ""), ("scores", "scope", ""), ("budget", "budget", ""),
           ("sinks", "sinks", ""), ("recent", "recent", ""), ("KV MiB", "kv_mib", ".1f"),
           ("perplexity", "ppl", ".2f"), ("vs full", "delta_pct", "+.1f"),
           ("vs full, min", "delta_pct_min", "+.1f"), ("vs full, max", "delta_pct_max", "+.1f")],
    "spec": [("model", "model", ""), ("weights", "weights", ""), ("verify", "verify", ""),
             ("threads", "threads", ""), ("set", "set", ""),
             ("drafters", "drafters", ""), ("prompts", "prompts", ""),
             ("speed-up (geo. mean)", "speedup_geomean", ".2f"), ("min", "speedup_min", ".2f"),
             ("max", "speedup_max", ".2f"), ("plain tok/s", "plain_tok_s", ".1f"),
             ("spec tok/s", "spec_tok_s", ".1f"), ("tokens per target pass", "tok_per_fwd", ".2f"),
             ("acceptance", "acceptance", ".0%")],
}
TITLES = {
    "gguf": "Opening a model file: llmnb's reader vs gguf-py's GGUFReader",
    "quant": "Quantization kernels vs gguf-py (`gguf.quants`), 1 thread; speed-up = gguf-py "
             "time / llmnb time",
    "ar": "AR generation (prompt 128, decode 32), quantized and f32 weights side by side; "
          "roofline = the machine's read roof at that thread count (the table above) / weight "
          "bytes read per token",
    "diffusion": "One uncached diffusion step, SmolLM2-135M relabelled as LLaDA (prompt 32 + B "
                 "masked), against llama.cpp's fastest path, its all-F32 copy, first; GFLOP/s as "
                 "a fraction of sgemm measured in the same run",
    "scaling": "Thread scaling: AR decode vs diffusion step (B = 64), scaling against 1 thread",
    "cache": "Inter-step cache and entropy_exit on the tiny diffusion models (100 held-out "
             "prompts of each kind, or all of a kind with fewer; 48 positions, 16 steps of the "
             "cosine schedule, 1 thread); valid with its 95% interval; speed-up, fidelity and "
             "validity against the uncached run with the same blocks (entropy_exit + cache: "
             "against entropy_exit on the same prompts){paired}",
    "kv": "Perplexity vs KV budget, SmolLM2-135M on data/text/persuasion.txt ({windows}, 1 "
          "thread): Initial-Key Cache (per layer / global scores), StreamingLLM, H2O",
    "spec": "Speculative decoding vs plain greedy decoding on the same weights, identical tokens "
            "asserted; speed-up = plain / speculative wall time of the whole generate call, "
            "geometric mean over the set (one row per set; the JSON has every prompt); verify = "
            "the product a batch of draft rows goes through (kernels: the quantized blocks; "
            "copies: float32 copies multiplied as W @ X.T)",
    "ladder": "Training-free parallel decoding on the tiny diffusion models (every held-out "
              "prompt, 48 positions, 1 thread); reference = 16 steps of the cosine schedule in "
              "probability order without a cache; valid with its 95% interval; fidelity = tokens "
              "equal to the reference's; speed-up = the reference's denoising time over the "
              "method's{paired}",
}


def title(name: str, rows: list[dict[str, Any]]) -> str:
    """The section's title; kv's says how many windows its rows average (records before the
    windows have one, and no `windows` column)."""
    n = int(rows[0].get("windows", 1)) if rows else 1
    windows = ("one 512-token window" if n == 1 else
               f"mean of {n} windows of 512 tokens spread over it, with the min and max change")
    return TITLES.get(name, name).replace("{windows}", windows).replace("{paired}", PAIRED)


PAIRED = (f"; validity against the reference paired prompt by prompt: prompts lost and gained, "
          f"the difference in points with its 95% interval (Newcombe's paired score interval), "
          f"and the verdict at a {100 * MARGIN:g}-point margin: keeps (the interval's low end "
          f"above -{100 * MARGIN:g}), loses (its high end below 0) or cannot tell")


NOT_SECTIONS = {"command", "machine", "repeats"}
AR_CONTEXT = 128 + 16          # bench ar: prompt 128, decode 32 -> keys seen by the middle token
DIFF_PROMPT = 32


def cell(v: Any, fmt: str) -> str:
    if v is None:
        return "–"
    if fmt == "mb":
        return f"{float(v) / 1e6:.0f}"
    if isinstance(v, float) and fmt:
        return format(v, fmt)
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def summary_rows(name: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """spec: the set's geometric-mean row only (per-prompt rows stay in the JSON). Rows with a
    validity interval (cache, ladder) print it beside the validity, and their validity paired
    with their reference's (``paired_cell``)."""
    if name == "spec" and any("prompt" in r for r in rows):
        return [r for r in rows if r.get("prompt") in (None, "geo. mean")]
    if name in ("cache", "ladder"):
        rows = [r | {"paired": paired_cell(r, reference_row(name, r, rows))} for r in rows]
    return [r | {"validity_ci": f"{100 * r['validity']:.1f}% [{100 * r['validity_low']:.1f}, "
                                f"{100 * r['validity_high']:.1f}]"}
            if "validity_low" in r else r for r in rows]


def reference_row(name: str, row: dict[str, Any], rows: list[dict[str, Any]]
                  ) -> dict[str, Any] | None:
    """The row `row`'s validity is compared with: the ladder's reference method, or the cache
    setting's uncached run, of the same model and kind."""
    if name == "ladder":
        key, ref = "method", bench_ladder.REFERENCE
    else:
        refs = {n: r for n, (_, r) in bench_cache.SETTINGS.items()}
        refs |= {bench_cache.PLAIN: bench_cache.PLAIN, bench_cache.CACHED: bench_cache.PLAIN}
        key, ref = "setting", refs.get(row["setting"], "")
    return next((r for r in rows if r["model"] == row["model"] and r["kind"] == row["kind"]
                 and r[key] == ref), None)


def paired_cell(row: dict[str, Any], ref: dict[str, Any] | None) -> str:
    """"3 lost, 2 gained: -1.0 [-6.2, 4.1] cannot tell" from the per-prompt outcomes. A row
    saved without them (older runs) shows the difference its counts give, and a verdict only
    where every way of pairing those counts gives the same one (``NO_OUTCOMES``)."""
    if ref is None or ref is row or ref.get("prompts") != row["prompts"]:
        return "reference" if ref is row else "–"
    n, valid, ref_valid = row["prompts"], row["valid"], ref["valid"]
    diff = f"{100 * (valid - ref_valid) / n:+.1f}" if valid != ref_valid else "0.0"
    if "only_ref" in row:
        p = paired_table(ref_valid - row["only_ref"], row["only_ref"], row["only_other"],
                         n - ref_valid - row["only_other"])
        return (f"{p.only_ref} lost, {p.only_other} gained: {diff} [{100 * p.low:.1f}, "
                f"{100 * p.high:.1f}] {p.verdict}")
    verdict = verdict_from_totals(n, ref_valid, valid)
    return f"{diff}: " + (f"{verdict} (from the counts)" if verdict else "needs the outcomes")


NO_OUTCOMES = ("This run saved each method's count of valid answers but not which prompts they "
               "were: the difference is exact, and a verdict is shown only where every way of "
               "pairing the two counts gives the same one (\"from the counts\"); elsewhere it "
               "needs the per-prompt outcomes, which the next run of the benchmark saves.")


def with_roofline(rows: list[dict[str, Any]], machine: dict[str, Any]) -> list[dict[str, Any]]:
    """ar: the roofline from the machine's read roof at the row's thread count (the roofs table
    printed above it), so that every decode is placed under the same roof as the plot's."""
    read = machine.get("read_gbs") or {}
    out = []
    for r in rows:
        bw = read.get(str(r.get("threads")))
        if bw and r.get("weight_bytes"):
            roof = float(bw) * 1e9 / float(r["weight_bytes"])
            r = {**r, "roofline_tok_s": roof, "decode_vs_roofline": float(r["decode_tok_s"]) / roof}
        out.append(r)
    return out


def present(cols: list[tuple[str, str, str]], rows: list[dict[str, Any]]
            ) -> list[tuple[str, str, str]]:
    """The columns some row has a value for (a peer or a kernel build this run had)."""
    return [c for c in cols if any(r.get(c[1]) is not None for r in rows)]


def section_table(name: str, rows: list[dict[str, Any]]) -> list[str]:
    if name == "quant":
        return quant_table(rows)
    rows = summary_rows(name, rows)
    cols = COLUMNS.get(name)
    if cols is None:
        keys = list(dict.fromkeys(k for r in rows for k in r))
        cols = [(k, k, "") for k in keys]
    cols = present(cols, rows)                                           # drop absent peers
    out = table([h for h, _, _ in cols], [[cell(r.get(k), f) for _, k, f in cols] for r in rows])
    if name in ("cache", "ladder") and not all("only_ref" in r for r in rows):
        out += ["", NO_OUTCOMES]
    return out


KERNEL_COLUMNS = [("type", "type", ""), ("in the file", "file_bytes_per_weight", ".3f"),
                  ("float kernels: bytes/weight read", "bytes_per_weight", ".3f"),
                  ("float MB read", "MB_read", ".0f"),
                  ("float kernels ms", "kernel_ms", ".1f"), ("float GB/s", "GB_s", ".1f"),
                  ("integer kernels: bytes/weight read", "integer_bytes_per_weight", ".3f"),
                  ("integer kernels ms", "integer_ms", ".1f"),
                  ("integer GB/s", "integer_GB_s", ".1f"),
                  ("integer build", "integer_isa", ""),
                  ("numpy f32 GEMV ms", "numpy_f32_ms", ".1f"),
                  ("float vs numpy f32", "vs_numpy_f32", ".2f"),
                  ("integer vs float", "integer_vs_float", ".2f")]
CURVE_COLUMNS = [("rows T", "rows", ""), ("type", "type", ""),
                 ("float kernels, one-row products", "quantized_steps", ".2f"),
                 ("integer kernels, one-row products", "integer_steps", ".2f"),
                 ("dequantize + sgemm, float one-row products", "dense_steps", ".2f"),
                 ("float kernels ms", "float_ms", ".2f"),
                 ("integer kernels ms", "integer_ms", ".2f"),
                 ("fastest", "faster", "")]


def quant_table(rows: list[dict[str, Any]]) -> list[str]:
    """One line per type: dequantize and quantize speed-ups, llmnb's dequantize rate; then the
    kernels' matrix-vector table, the cost curve c(T) and numba's compile time, when the JSON
    has them."""
    out = convert_table([r for r in rows if "op" in r])
    for cols, key, title in ((KERNEL_COLUMNS, "GB_s", "Products on quantized blocks "
                              "(llmnb.kernels), one decode step's matrices (SmolLM2 shapes, 30 "
                              "layers): the float kernels (quants converted to float32) and the "
                              "integer ones (8-bit activations, byte dot products), GB/s of the "
                              "bytes each reads, against numpy's float32 GEMV in the same run"),
                             (CURVE_COLUMNS, "rows", "c(T): T rows through 4 layers' matrices "
                              "(SmolLM2 shapes) per format, in products of one row through the "
                              "same kernel (dequantize + sgemm: of one row through the float "
                              "kernels)")):
        part = [r for r in rows if key in r]
        if part:
            out += ["", title + ":", ""]
            shown = present(cols, part)
            out += table([h for h, _, _ in shown],
                         [[cell(r.get(k), f) for _, k, f in shown] for r in part])
    for r in rows:
        if "cold_s" in r:
            out += ["", f"{r['kernels'].capitalize()}, once per machine: {r['cold_s']:.1f} s on "
                        f"an empty cache, {r['cached_s']:.2f} s loading them from the cache."]
    return out


def convert_table(rows: list[dict[str, Any]]) -> list[str]:
    by_type: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_type.setdefault(str(r["type"]), {})[str(r["op"])] = r
    out = []
    for t, ops in by_type.items():
        d, q = ops.get("dequantize"), ops.get("quantize")
        rate = d["n_elements"] / d["llmnb_s"] / 1e6 if d else None
        out.append([t, cell(d and d.get("ratio"), ".1f"), cell(q and q.get("ratio"), ".1f"),
                    cell(rate, ".0f")])
    return table(["type", "dequantize speed-up", "quantize speed-up",
                  "llmnb dequantize Melem/s"], out)


def machine_lines(m: dict[str, Any], repeats: Any) -> list[str]:
    blas = ", ".join(f"{b.get('internal_api')} {b.get('version')} ({b.get('architecture')} kernel)"
                     for b in m.get("blas", [])) or "unknown"
    env = (f"OPENBLAS_CORETYPE={m.get('OPENBLAS_CORETYPE') or 'unset'}, "
           f"OPENBLAS_L2_SIZE={m.get('OPENBLAS_L2_SIZE') or 'unset'}")
    caches = ", ".join(f"{k} {v >> 10} KiB" for k, v in m.get("caches", {}).items())
    lines = [f"Machine: {m['cpu']}, {m['physical_cores']} physical cores "
             f"({m['logical_cpus']} logical); caches {caches}; {blas}; {env}; "
             f"Python {m['python']}, numpy {m['numpy']}, llmnb compiled: {m['compiled']}. "
             f"Measured {m['measured_at']}; every figure is the median of {repeats} runs after "
             "a warm-up.", ""]
    read = m.get("read_gbs") or m["gemv_gbs"]        # older JSON: no read roof, GEMV's
    rows = [[t, cell(m["sgemm_gflops"][t], ".0f"), cell(read[t], ".1f"),
             cell(m["gemv_gbs"][t], ".1f"), cell(m["triad_gbs"][t], ".1f"),
             cell(m["copy_gbs"][t], ".1f"),
             cell(m["sgemm_gflops"][t] / read[t], ".1f")] for t in m["sgemm_gflops"]]
    return lines + table(["threads", "sgemm GFLOP/s (measured: the compute roof)",
                          "read GB/s (the memory roof)", "GEMV GB/s", "triad GB/s", "copy GB/s",
                          "ridge FLOP/byte"], rows)


def markdown(data: dict[str, Any], plot: Path | None, command: str | None = None) -> str:
    cmd = command or data.get("command", "llmnb bench all")
    out = ["## Benchmarks", "",
           f"Produced by `{cmd} --json > bench.json` and `python tools/bench_readme.py bench.json"
           + (f" --plot {plot.as_posix()}" if plot is not None else "")
           + "`; run both to reproduce on your machine.", ""]
    out += machine_lines(data["machine"], data.get("repeats"))
    for name, rows in data.items():
        if name in NOT_SECTIONS or not isinstance(rows, list) or not rows:
            continue
        if name == "ar":
            rows = with_roofline(rows, data["machine"])
        out += ["", f"### {name}: {title(name, rows)}", ""] + section_table(name, rows)
    if plot is not None:
        alt = "decode and diffusion steps on this machine's roofline; thread scaling"
        out += ["", f"![{alt}]({plot.as_posix()})"]
    return "\n".join(out) + "\n"


def figure(data: dict[str, Any], path: Path) -> None:
    """Top: the 1-thread roofline with decode and diffusion steps placed; bottom: scaling."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    import llmnb
    from llmnb.perf import roofline as rl
    from llmnb.perf.machine import facts_from_json
    from llmnb.perf.scaling import AR, DIFFUSION, ScalingPoint
    from llmnb.widgets import plot_roofline, plot_scaling

    facts = facts_from_json(data["machine"])
    fig = Figure(figsize=(9, 7.6), layout="constrained")
    grid = fig.add_gridspec(2, 2, height_ratios=[1.15, 1])
    top = fig.add_subplot(grid[0, :])
    roof = facts.roof(1)
    placed, workloads = [], []
    if llmnb.hub.is_pulled("smollm2-135m"):
        config = llmnb.load("smollm2-135m").config       # shapes only: nothing is dequantized
        weights = rl.streamed_weights(config)
        per_weight = {"f32": 4.0}                        # bytes per weight of each residency
        for r in data.get("ar", []):                     # each residency at its own bytes/weight
            if r["threads"] != 1 or r.get("model", "smollm2-135m") != "smollm2-135m":
                continue
            kind = r.get("weights", "f32")
            b = per_weight[kind] = r["weight_bytes"] / weights if "weight_bytes" in r else 4.0
            name = f"decode, {kind} ({b:.2f} B/weight)"
            decode = dataclasses.replace(rl.ar_decode(config, b, AR_CONTEXT), name=name)
            workloads.append(decode)
            placed.append(rl.place(decode, 1 / r["decode_tok_s"], roof))
        for r in data.get("diffusion", []):              # the same file, relabelled as LLaDA
            if r["threads"] == 1:
                kind = r.get("weights", "f32")
                b = per_weight.get(kind, 4.0)
                step = dataclasses.replace(rl.diffusion_step(config, b, r["B"], DIFF_PROMPT),
                                           name=f"diffusion step B={r['B']}, {kind}")
                workloads.append(step)
                placed.append(rl.place(step, r["step_ms"] / 1e3, roof))
    plot_roofline(roof, workloads, placed, ax=top,
                  title="SmolLM2-135M, 1 thread, on float32's roofs (integer products on "
                        "quantized blocks can pass sgemm's)")
    points = []
    for r in data.get("scaling", []):
        points.append(ScalingPoint(AR, r["threads"], 1 / r["ar_decode_tok_s"],
                                   r["ar_decode_tok_s"], 1, r["ar_scaling"]))
        points.append(ScalingPoint(DIFFUSION, r["threads"], r["diffusion_step_ms"] / 1e3,
                                   r["diffusion_tok_s"], DIFF_PROMPT + 64, r["diffusion_scaling"]))
    plot_scaling(points, facts.threads,
                 axes=(fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])))
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=72, format="png")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("json", type=Path, help="the output of `llmnb bench all --json` (- for stdin)")
    p.add_argument("--plot", type=Path, default=None, help="write the figure here (PNG)")
    p.add_argument("--command", default=None, help="the exact command that made the JSON, "
                   "environment included, when it says more than the JSON's own record")
    a = p.parse_args(argv)
    text = sys.stdin.read() if str(a.json) == "-" else a.json.read_text()
    try:
        data = json.loads(text)
        data["machine"]["sgemm_gflops"]
    except (ValueError, KeyError, TypeError) as e:
        print(f"bench_readme: {a.json}: expected the JSON of `llmnb bench all --json` ({e})",
              file=sys.stderr)
        return 3
    if a.plot is not None:
        try:
            figure(data, a.plot)
        except OutputPathError as e:
            print(f"bench_readme: --plot {e}", file=sys.stderr)
            return 2
    sys.stdout.write(markdown(data, a.plot, a.command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
