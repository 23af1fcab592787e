"""``llmnb bench spec``: speculative decoding's speed-up over plain greedy decoding.

For each model (tiny-ar, and SmolLM2-135M when pulled), weights kind (SmolLM2: ``quantized``,
the default a user gets, and ``f32``; tiny-ar: its file's, float32), thread count, prompt and
drafter set, the prompt is generated greedily by ``llmnb.generate`` and by
``llmnb.ar.speculative.generate_speculative`` on the same loaded model (same weights, same
process); the tokens must be identical (the bench stops otherwise). Column ``verify``: ``kernels``
(the quantized target's default: its blocks, no float32 copy) or ``copies`` (an (out, in) float32
copy: the float32 target's default; for the quantized target the dequantized copy of
``batch_copies=True``, run on the copy+edit+code set beside the default). The speed-up is the ratio
of the median wall times of the whole call (prefill + decode), after one warm-up run of each (the
one checked for identity), timed runs alternating plain / speculative. Each prompt gives a row
(speed-up, tokens per target forward, acceptance per drafter: "n/a" for a drafter never
verified); each set a row with the geometric mean of its prompts' speed-ups.

Prompt sets for SmolLM2. ``copy+edit+code``: copying a paragraph, rewriting it with one word
replaced throughout, renaming an identifier in a function, continuing a module that repeats a
pattern -- output that repeats text of the context, where draft-free drafters shine; ``prose``:
open-ended writing, where they have little to copy and speculation must not cost anything;
``code`` (the rename and module prompts) runs the model drafters: a Q4_0 copy of the target
(``llmnb quantize``) and ``self:N``.
tiny-ar only knows its synthetic tasks (``data/eval/tiny_heldout.jsonl``): its ``copy+edit+code``
set is the held-out *python* and *listing* prompts (its longest fixed answers), its ``prose``
set the *explain* and *poem* prompts. Each (model, thread count) runs in a fresh subprocess.

``python -m llmnb.perf.bench_spec`` prints what a verify batch of T rows costs, c(T) in decode
steps, at the knots of the controller's cost model (``verify_costs``), for each way of
multiplying (``--paths``: float32 as loaded, with the batch copies, quantized kernels, quantized
with a dequantized batch copy).
"""
from __future__ import annotations

import json
import math
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmnb.perf.inputs import need_data_dir
from llmnb.perf.timing import MIN_RUNS, Timing, ratio, timed_rounds

IN_A_ROW = 3         # a verify-cost curve's calls per row count and round (the first untimed)

PARAGRAPH = ("The old lighthouse keeper climbed the stairs every evening to light the lamp. From "
             "the top of the lighthouse he could see the whole bay, the fishing boats coming home "
             "and the gulls circling over the harbour. He had kept the lighthouse for forty years, "
             "and he knew every rock and every current of the bay.")
CODE = '''def area(width, height):
    """Return the area of a rectangle."""
    return width * height


def perimeter(width, height):
    """Return the perimeter of a rectangle."""
    return 2 * (width + height)
'''
MODULE = '''def add(a, b):
    """Return a + b."""
    return a + b


def sub(a, b):
    """Return a - b."""
    return a - b


def mul(a, b):'''

# name -> (prompt, chat)
SMOL_SETS: dict[str, dict[str, tuple[str, bool]]] = {
    "copy+edit+code": {
        "copy": ("Repeat the following paragraph exactly, word for word:\n\n" + PARAGRAPH, True),
        "edit": ('Rewrite the following paragraph, replacing the word "lighthouse" with "tower" '
                 "everywhere. Change nothing else.\n\n" + PARAGRAPH, True),
        "rename": ("Rewrite the code below with `width` renamed to `length`.\n\n```python\n"
                   + CODE + "```", True),
        "module": (MODULE, False),
    },
    "prose": {
        "story": ("Write a short story about a dragon who learns to paint.", True),
        "explain": ("Explain why the sky is blue to a ten-year-old.", True),
        "letter": ("Write a letter to a friend describing your summer holiday.", True),
    },
}
TINY_FAMILIES = {"copy+edit+code": ("python", "listing"), "prose": ("explain", "poem")}
SMOL_SETS["code"] = {k: SMOL_SETS["copy+edit+code"][k] for k in ("rename", "module")}
# (model, set) -> drafter sets
DRAFTERS: dict[tuple[str, str], list[list[str]]] = {
    ("tiny-ar", "copy+edit+code"): [["lookup"], ["self:2"], ["lookup", "self:2"], ["Q8_0"]],
    ("tiny-ar", "prose"): [["lookup"], ["self:2"], ["lookup", "self:2"], ["Q8_0"]],
    ("smollm2-135m", "copy+edit+code"): [["lookup", "ngram"]],
    ("smollm2-135m", "prose"): [["lookup", "ngram"]],
    ("smollm2-135m", "code"): [["Q4_0"], ["self:10"]],
}
MAX_NEW = {"tiny-ar": 64, "smollm2-135m": 128}


def tiny_sets(per_family: int = 3) -> dict[str, dict[str, tuple[str, bool]]]:
    heldout = need_data_dir("spec") / "eval" / "tiny_heldout.jsonl"
    rows = [json.loads(line) for line in heldout.open()]
    return {name: {f"{fam} {i + 1}": (r["prompt"], True) for fam in fams
                   for i, r in enumerate([x for x in rows if x["family"] == fam][:per_family])}
            for name, fams in TINY_FAMILIES.items()}


KEYS = ("model", "weights", "verify", "threads", "set", "prompt", "drafters", "prompts",
        "speedup_geomean", "speedup_min", "speedup_max", "plain_tok_s", "spec_tok_s",
        "tok_per_fwd", "acceptance", "acceptance_by_drafter", "verified_rounds", "rounds",
        "mean_tokens", "identical")


def acceptance_text(accepted: dict[str, int], proposed: dict[str, int]) -> str:
    """"lookup 93%, self:24 n/a": accepted / verified draft tokens per drafter."""
    return ", ".join(f"{name} {accepted[name] / n:.0%}" if n else f"{name} n/a"
                     for name, n in proposed.items())


def summary(rows: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """A set's row from its prompts' rows: the geometric mean of the speed-ups."""
    acc = {k: sum(r["accepted"][k] for r in rows) for k in rows[0]["accepted"]}
    prop = {k: sum(r["proposed"][k] for r in rows) for k in rows[0]["proposed"]}
    verified = sum(prop.values())
    return {**{k: rows[0][k] for k in ("model", "weights", "verify", "threads", "set", "drafters")},
            "prompt": name,
            "prompts": len(rows),
            "speedup_geomean": math.exp(statistics.fmean(math.log(r["speedup_geomean"])
                                                         for r in rows)),
            "speedup_min": min(r["speedup_geomean"] for r in rows),
            "speedup_max": max(r["speedup_geomean"] for r in rows),
            "plain_tok_s": statistics.fmean(r["plain_tok_s"] for r in rows),
            "spec_tok_s": statistics.fmean(r["spec_tok_s"] for r in rows),
            "tok_per_fwd": statistics.fmean(r["tok_per_fwd"] for r in rows),
            "acceptance": sum(acc.values()) / verified if verified else None,
            "acceptance_by_drafter": acceptance_text(acc, prop),
            "verified_rounds": sum(r["verified_rounds"] for r in rows),
            "rounds": sum(r["rounds"] for r in rows),
            "mean_tokens": statistics.fmean(r["mean_tokens"] for r in rows),
            "identical": all(r["identical"] for r in rows), "accepted": acc, "proposed": prop}


def time_prompt(m: Any, prompt: str, drafters: list[Any], n: int, chat: bool = True,
                repeats: int = 3, batch_copies: bool | None = None) -> dict[str, Any]:
    """One prompt on a loaded model: ``llmnb.generate`` (greedy) and ``generate_speculative``
    with `drafters`, one warm-up run of each (the tokens and text must be identical, else a
    RuntimeError), then `repeats` timed rounds alternating plain / speculative
    (``timing.timed_rounds``). A row: the ratio of the median wall times of the whole calls
    (prefill + decode) and, from ``MIN_RUNS`` rounds on, its range from the quartiles
    (``timing.ratio``: speedup_low, speedup_high), both ``Timing``s, tokens per target
    forward, accepted and verified draft tokens per drafter, the last speculative result
    ("result") and the plain one ("reference")."""
    import llmnb
    from llmnb.ar.speculative import generate_speculative

    ref = llmnb.generate(m, prompt, max_new_tokens=n, chat=chat)                 # warm-up
    r = generate_speculative(m, prompt, drafters, max_new_tokens=n, chat=chat,
                             batch_copies=batch_copies)
    if (r.tokens, r.text) != (ref.tokens, ref.text):
        raise RuntimeError(f"bench spec: {[d.name for d in drafters]} changed the output of "
                           f"{prompt[:40]!r}")
    last = [r]

    def plain() -> None:
        llmnb.generate(m, prompt, max_new_tokens=n, chat=chat)

    def speculative() -> None:
        last[0] = generate_speculative(m, prompt, drafters, max_new_tokens=n, chat=chat,
                                       batch_copies=batch_copies)

    plain_t, spec_t = (Timing(tuple(t)) for t in timed_rounds([plain, speculative], repeats,
                                                              warmup=0))  # warmed up above
    plain_s, spec_s = plain_t.median, spec_t.median
    spread = ratio(plain_t, spec_t) if repeats >= MIN_RUNS else None
    r = last[0]
    acc = {d.name: sum(x.accepted[j] for x in r.rounds) for j, d in enumerate(drafters)}
    prop = {d.name: sum(x.proposed[j] for x in r.rounds) for j, d in enumerate(drafters)}
    verified = sum(prop.values())
    speedup = plain_s / spec_s
    return {"prompts": 1, "speedup_geomean": speedup, "speedup_min": speedup,
            "speedup_max": speedup,
            "speedup_low": spread.low if spread else speedup,      # from the quartiles
            "speedup_high": spread.high if spread else speedup,
            "plain_timing": plain_t, "spec_timing": spec_t,
            "plain_tok_s": len(ref.tokens) / plain_s,
            "spec_tok_s": len(ref.tokens) / spec_s,
            "tok_per_fwd": r.tokens_per_forward,
            "acceptance": sum(acc.values()) / verified if verified else None,
            "acceptance_by_drafter": acceptance_text(acc, prop),
            "verified_rounds": sum(1 for x in r.rounds if x.rows > 1),
            "rounds": len(r.rounds), "mean_tokens": float(len(ref.tokens)),
            "identical": True, "accepted": acc, "proposed": prop, "result": r, "reference": ref}


def worker(model: str, threads: int, repeats: int, weights: str = "quantized",
           only: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """One model at one thread count on one weights kind (run by ``bench_spec`` in a fresh
    process); `only`: these prompt sets (default: all)."""
    import llmnb
    from llmnb.ar.drafters import Drafter, make_drafter
    from llmnb.quant.gguf_file import quantize_file

    rows: list[dict[str, Any]] = []
    with llmnb.threads(threads), tempfile.TemporaryDirectory() as tmp:
        path = (need_data_dir("spec") / "models" / "tiny-ar.gguf" if model == "tiny-ar"
                else llmnb.hub.resolve(model))
        m = llmnb.load(path, weights=weights)                   # plain and speculative alike
        weights = m.transformer.weights.kind                  # weights ready before timing
        sets = {name: v for name, v in (tiny_sets() if model == "tiny-ar" else SMOL_SETS).items()
                if not only or name in only}
        n = MAX_NEW[model]
        pool: dict[str, Drafter] = {}
        for names in (x for set_name in sets for x in DRAFTERS[model, set_name]):
            for name in names:
                if name in ("Q8_0", "Q4_0") and name not in pool:   # a quantized copy
                    copy = Path(tmp) / f"{Path(path).stem}.{name}.gguf"
                    quantize_file(path, copy, name)
                    pool[name] = make_drafter(str(copy), m)
                elif name not in pool:
                    pool[name] = make_drafter(name, m)
        for set_name, prompts in sets.items():
            copies = ([None, True] if weights == "quantized-float" and set_name == "copy+edit+code"
                     else [None])
            for names, batch_copy in ((x, c) for x in DRAFTERS[model, set_name] for c in copies):
                drafters = [pool[x] for x in names]
                verify = ("copies" if batch_copy or weights == "f32" else "kernels")
                per_prompt: list[dict[str, Any]] = []
                for label, (prompt, chat) in prompts.items():
                    one = time_prompt(m, prompt, drafters, n, chat, repeats, batch_copy)
                    one.pop("result")
                    one.pop("reference")
                    one.update({"model": model, "weights": weights, "verify": verify,
                                "threads": threads, "set": set_name, "drafters": "+".join(names),
                                "prompt": label})
                    per_prompt.append(one)
                rows.extend(per_prompt)
                rows.append(summary(per_prompt, "geo. mean"))
                m.transformer.use_batch_copies(False)
    return [{k: r[k] for k in KEYS} for r in rows]                # one key order for every row


def bench_spec(repeats: int = 3, threads: list[int] | None = None,
               weights: list[str] | None = None) -> list[dict[str, Any]]:
    """Rows for every model, weights kind (default: quantized and f32), thread count, set,
    drafter set and prompt (module docstring)."""
    from llmnb import hub
    from llmnb.perf.worker import run_worker

    models = ["tiny-ar"]
    if hub.is_pulled("smollm2-135m"):
        models.append("smollm2-135m")
    else:
        print("bench spec: smollm2-135m not pulled (llmnb pull smollm2-135m); tiny-ar only",
              file=sys.stderr)
    rows: list[dict[str, Any]] = []
    for model in models:
        kinds = ["auto"] if model == "tiny-ar" else weights or ["quantized", "f32"]
        for kind in kinds:                      # tiny-ar: its file's default (float32)
            for n in threads or [1, 2]:
                print(f"bench spec: {model}, {kind} weights, {n} thread(s)", file=sys.stderr)
                rows.extend(run_worker("llmnb.perf.bench_spec",
                                       f"worker({model!r}, {n}, {repeats}, {kind!r})", "spec"))
    return rows


# float32 (in, out); with the (out, in) copy; with the copy in tiles; GGUF blocks (the integer
# kernels where the CPU has them), and with a dequantized batch copy; the float kernels on GGUF
# blocks, and with a dequantized batch copy
PATHS = ("X@W", "W@X.T", "tiles", "quantized", "quantized+W@X.T", "quantized-float",
         "quantized-float+W@X.T")


def verify_costs(model: str = "smollm2-135m", threads: int = 1,
                 rows: tuple[int, ...] | None = None, repeats: int = 5,
                 context: int = 150, paths: tuple[str, ...] = ("W@X.T",)) -> list[dict[str, Any]]:
    """What a verify batch of T rows costs after `context` cached tokens: median seconds of
    ``llmnb.ar.speculative_verify.verify`` (T = 1 is a plain decode step on the same weights,
    as ``generate`` runs it)
    and the ratio to T = 1, c(T) / t_1, at the cost model's knots unless `rows` says otherwise,
    for each of `paths`: "X@W" (float32 weights as loaded: few-row products, then X @ W.T),
    "W@X.T" (with the (out, in) copies, ``Transformer.use_batch_copies(tiles=False)``: W @ X.T from
    COPY_ROWS rows on), "tiles" (with the copies in 64-output tiles, ``use_batch_copies``'s default:
    ``llmnb.kernels.floats``' few-row kernel from TILED_ROWS up to TILED_MAX rows, X @ W.T
    beyond), "quantized" (``weights="quantized"``: the integer products, ``llmnb.kernels.integer``,
    where the CPU has them; "quantized+W@X.T" with a dequantized batch copy, W @ X.T from
    COPY_ROWS_QUANTIZED rows on), "quantized-float" (the float kernels' few-row products, then
    dequantize + sgemm from DENSE_ROWS rows on) and "quantized-float+W@X.T" (the same with a
    dequantized batch copy, W @ X.T from COPY_ROWS_QUANTIZED rows on; T = 1 is the quantized
    decode step)."""
    import llmnb
    from llmnb.ar.speculative_control import KNOTS

    rows = KNOTS if rows is None else rows
    out: list[dict[str, Any]] = []
    with llmnb.threads(threads):
        loaded: dict[str, llmnb.Model] = {}
        for path in paths:
            kind = path.split("+")[0] if path.startswith("quantized") else "f32"
            if kind not in loaded:
                loaded[kind] = llmnb.load(model, weights=kind)
            ts = rows if rows[0] == 1 else (1, *rows)          # T = 1: the unit
            secs = verify_cost_curve(loaded[kind], ts, path.endswith("W@X.T") or path == "tiles",
                                     repeats, context, tiles=path == "tiles")
            out += [{"model": model, "threads": threads, "path": path, "rows": t, "ms": 1e3 * s,
                     "decode_steps": s / secs[0]} for t, s in zip(ts, secs) if t in rows]
    return out


def verify_cost_curve(m: Any, rows: tuple[int, ...], batch_copies: bool, repeats: int = 5,
                      context: int = 150, tiles: bool = False) -> list[float]:
    """Median seconds of ``llmnb.ar.speculative_verify.verify`` over `rows[i]` rows (the root
    and one branch) after `context` cached tokens on a loaded model (for one row, a plain
    decode step: the forward ``generate`` runs per token, at the same context), with its batch
    copy (``Transformer.use_batch_copies``: (out, in), or with `tiles` float32 weights in tiles;
    a dequantized (out, in) one for quantized weights) or without; rows[0] should be 1, a plain
    step on the same weights (``verify_cost_timings`` measures them)."""
    step, batches = verify_cost_timings({"": (m, batch_copies, tiles)}, rows, repeats,
                                        context)[""]
    return [step.median if t == 1 else b.median for t, b in zip(rows, batches)]


def batch_pass(tr: Any, cache: Any, t: int) -> None:
    """A verify batch of `t` rows, the root and one branch of t - 1 drafted tokens, through
    ``verify``'s batch path (the tree's mask and positions, logits for every row) for every
    `t`, one row included: ``verify`` sends a lone root through the plain decode step instead,
    another path, so a curve in units of that step mixes two paths at T = 1 and 2."""
    import numpy as np

    from llmnb.ar.speculative_verify import token_tree

    tree = token_tree([list(range(2, 1 + t))] if t > 1 else [])
    tree.tokens[0] = 1
    positions, mask = tree.layout(cache.length)
    h = tr.hidden(np.asarray(tree.tokens, dtype=np.int64), start=cache.length, cache=cache,
                  causal=False, key_mask=mask, positions=positions)         # (t, d)
    tr.logits(h)                                                            # (t, vocab)
    cache.commit()


def verify_cost_timings(ways: dict[str, tuple[Any, bool, bool]], rows: tuple[int, ...],
                        repeats: int = 5, context: int = 150,
                        in_a_row: int = IN_A_ROW) -> dict[str, tuple[Timing, list[Timing]]]:
    """What a verify batch costs, each way of multiplying timed in the same rounds: `ways` maps
    a name to (a loaded model, its batch copies on, in tiles); each model gets that copy
    (``Transformer.use_batch_copies``; give each way its own model object). Per way: the
    ``Timing`` of a plain decode step (the forward ``generate`` runs per token) and of a
    ``batch_pass`` of each of `rows` rows, all after `context` cached tokens. Every round runs
    every way and row count in turn, each as `in_a_row` calls of which the first is not timed
    (a batch timed right after a batch of its kind): a slow stretch of a shared machine falls on
    all of them alike. The models are left without their batch copies."""
    import numpy as np

    from llmnb.ar.kv_cache import KVCache

    caches = {}
    for name, (m, copies, tiles) in ways.items():
        m.transformer.use_batch_copies(copies, quantized=True, tiles=tiles)
        cache = KVCache(m.config, context + max(rows))
        m.transformer.forward(np.arange(context, dtype=np.int64) % m.config.vocab_size,
                              cache=cache, last_only=True)
        cache.commit()
        caches[name] = cache

    def call(name: str, t: int) -> Callable[[], None]:
        tr, cache = ways[name][0].transformer, caches[name]

        def run() -> None:
            if t == 0:            # what ``generate`` spends per token: one decode step's forward
                tr.forward(np.ones(1, dtype=np.int64), start=context, cache=cache,
                           last_only=True)
                cache.commit()
            else:
                batch_pass(tr, cache, t)
            cache.truncate(context)
        return run

    order = [(name, t) for name in ways for t in (0, *rows)]     # t = 0: the plain step
    secs = timed_rounds([call(name, t) for name, t in order], repeats, in_a_row=in_a_row)
    for m, _, _ in ways.values():
        m.transformer.use_batch_copies(False)
    out: dict[str, tuple[Timing, list[Timing]]] = {}
    for name in ways:
        got = [Timing(tuple(s)) for (n, _), s in zip(order, secs) if n == name]
        out[name] = got[0], got[1:]
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    from llmnb.perf.table import print_rows as _print_rows

    p = argparse.ArgumentParser(prog="python -m llmnb.perf.bench_spec",
                                description="the cost of a verify batch of T rows in decode steps "
                                            "(llmnb bench spec measures the speed-ups)")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rows", type=int, nargs="+", default=None,
                   help="batch sizes T (default: the cost model's knots)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--paths", nargs="*", choices=PATHS, default=None,
                   help=f"products to measure (default: W@X.T, the speculative default; "
                        f"--paths alone: all of {', '.join(PATHS)})")
    a = p.parse_args(argv)
    paths = ("W@X.T",) if a.paths is None else tuple(a.paths) or PATHS
    for n in a.threads:
        _print_rows(f"verify batch cost, {a.model}, {n} thread(s), 150 cached tokens, "
                    f"median of {a.repeats}",
                    verify_costs(a.model, n, None if a.rows is None else tuple(a.rows), a.repeats,
                                 paths=paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
