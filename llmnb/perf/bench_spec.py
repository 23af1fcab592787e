"""``llmnb bench spec``: speculative decoding's speed-up over plain greedy decoding.

For each model (tiny-ar, and SmolLM2-135M when pulled), thread count, prompt set and drafter
set, every prompt is generated greedily by ``llmnb.generate`` and by
``llmnb.ar.speculative.generate_speculative``; the tokens must be identical (the bench stops
otherwise), and the speed-up is the ratio of the median wall times of the whole call (prefill
+ decode), one warm-up run first (it is the one checked for identity), timed runs alternating
plain / speculative. A set's figure is the geometric mean over its prompts.

The verify batch's cost depends on the BLAS kernel: numpy's OpenBLAS picks its kernel at run time
(``OPENBLAS_CORETYPE`` overrides it, and the machine facts printed first name it); on the AMD EPYC
machines here a T-row pass of SmolLM2 cost 3.4 decode steps at T = 8 with the SkylakeX kernel
and 2.2 with the Haswell one (1 thread), and every speed-up follows that ratio.
``python -m llmnb.perf.bench_spec`` prints that cost, c(T) in decode steps, for T = 1 ... 33
rows (``verify_costs``).

Prompt sets. ``copy+code``: copying and editing tasks (text the answer repeats from the
prompt, where prompt lookup shines) and code (where it does not); ``prose``: open-ended
writing. tiny-ar only knows its synthetic tasks (``data/eval/tiny_heldout.jsonl``): its
``copy+code`` set is the held-out *python* and *listing* prompts (its longest fixed answers),
its ``prose`` set the *explain* and *poem* prompts. Each (model, thread count) runs in a fresh
subprocess.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmnb.perf.bench import need_data_dir


PARAGRAPH = ("The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins "
             "with a single step. All that glitters is not gold. Actions speak louder than words, "
             "and the early bird catches the worm.")
TYPOS = ("Yesterday I went to the libary to borow a book about astronmy. The librarian was very "
         "helpfull and showed me were the science section was. I found a book about the planits "
         "and the stars, and I red it all evening.")
CODE = '''def area(width, height):
    """Return the area of a rectangle."""
    return width * height


def perimeter(width, height):
    """Return the perimeter of a rectangle."""
    return 2 * (width + height)
'''
ARITH = '''def add(a, b):
    """Return a + b."""
    return a + b


def sub(a, b):
    """Return a - b."""
    return a - b


def mul(a, b):'''

# (prompt, chat)
SMOL_SETS: dict[str, list[tuple[str, bool]]] = {
    "copy+code": [
        ("Repeat the following text exactly, word for word:\n\n" + PARAGRAPH, True),
        ("Fix the spelling mistakes in the following text. Write out the whole corrected text.\n\n"
         + TYPOS, True),
        ("Rewrite the following Python code, renaming the function `area` to `rectangle_area`. "
         "Return the whole code.\n\n" + CODE, True),
        ("Convert this comma-separated list into a bulleted Markdown list, one item per line:\n\n"
         "apples, bananas, cherries, dates, elderberries, figs, grapes, honeydew melons, kiwis, "
         "lemons", True),
        ("Write a Python class Stack with push, pop, peek, is_empty and size methods.", True),
        (ARITH, False),
    ],
    "prose": [
        ("Write a short story about a dragon who learns to paint.", True),
        ("Explain why the sky is blue to a ten-year-old.", True),
        ("Write a letter to a friend describing your summer holiday.", True),
    ],
}
TINY_FAMILIES = {"copy+code": ("python", "listing"), "prose": ("explain", "poem")}
DRAFTERS: dict[str, list[list[str]]] = {
    "tiny-ar": [["lookup"], ["self:2"], ["lookup", "self:2"], ["Q8_0"]],
    "smollm2-135m": [["lookup"], ["lookup", "self:24"]],
}
MAX_NEW = {"tiny-ar": 64, "smollm2-135m": 64}


def tiny_sets(per_family: int = 3) -> dict[str, list[tuple[str, bool]]]:
    heldout = need_data_dir("spec") / "eval" / "tiny_heldout.jsonl"
    rows = [json.loads(line) for line in heldout.open()]
    return {name: [(r["prompt"], True) for fam in fams
                   for r in [x for x in rows if x["family"] == fam][:per_family]]
            for name, fams in TINY_FAMILIES.items()}


def worker(model: str, threads: int, repeats: int) -> list[dict[str, Any]]:
    """One model at one thread count (run by ``bench_spec`` in a fresh process)."""
    import llmnb
    from llmnb.ar.drafters import Drafter, make_drafter
    from llmnb.ar.speculative import generate_speculative
    from llmnb.quant.gguf_file import quantize_file

    rows: list[dict[str, Any]] = []
    with llmnb.threads(threads), tempfile.TemporaryDirectory() as tmp:
        path = (need_data_dir("spec") / "models" / "tiny-ar.gguf" if model == "tiny-ar"
                else llmnb.hub.resolve(model))
        m = llmnb.load(path)
        m.transformer                                            # weights ready before timing
        sets = tiny_sets() if model == "tiny-ar" else SMOL_SETS
        n = MAX_NEW[model]
        pool: dict[str, Drafter] = {}
        for names in DRAFTERS[model]:
            for name in names:
                if name == "Q8_0" and name not in pool:          # a quantized copy, as the seed
                    q8 = Path(tmp) / f"{Path(path).stem}.Q8_0.gguf"
                    quantize_file(path, q8, "Q8_0")
                    pool[name] = make_drafter(str(q8), m)
                elif name not in pool:
                    pool[name] = make_drafter(name, m)
        for set_name, prompts in sets.items():
            per_config: dict[str, list[dict[str, float]]] = {"+".join(c): []
                                                             for c in DRAFTERS[model]}
            for prompt, chat in prompts:
                ref = llmnb.generate(m, prompt, max_new_tokens=n, chat=chat)       # warm-up
                for names in DRAFTERS[model]:
                    drafters = [pool[x] for x in names]
                    r = generate_speculative(m, prompt, drafters, max_new_tokens=n, chat=chat)
                    if r.tokens != ref.tokens:
                        raise RuntimeError(f"bench spec: {model} {names} changed the output of "
                                           f"{prompt[:40]!r}")
                    plain_t, spec_t, tpf = [], [], []
                    for _ in range(repeats):
                        t0 = time.perf_counter()
                        llmnb.generate(m, prompt, max_new_tokens=n, chat=chat)
                        t1 = time.perf_counter()
                        r = generate_speculative(m, prompt, drafters, max_new_tokens=n, chat=chat)
                        t2 = time.perf_counter()
                        plain_t.append(t1 - t0)
                        spec_t.append(t2 - t1)
                        tpf.append(r.tokens_per_forward)
                    acc = r.acceptance()
                    per_config["+".join(names)].append({
                        "speedup": statistics.median(plain_t) / statistics.median(spec_t),
                        "plain_tok_s": len(ref.tokens) / statistics.median(plain_t),
                        "spec_tok_s": len(ref.tokens) / statistics.median(spec_t),
                        "tokens_per_forward": statistics.median(tpf),
                        "acceptance": statistics.fmean(acc.values()) if acc else 0.0,
                        "tokens": float(len(ref.tokens))})
            for config, items in per_config.items():
                rows.append({
                    "model": model, "threads": threads, "set": set_name, "drafters": config,
                    "prompts": len(items),
                    "speedup_geomean": math.exp(statistics.fmean(math.log(x["speedup"])
                                                                 for x in items)),
                    "speedup_min": min(x["speedup"] for x in items),
                    "speedup_max": max(x["speedup"] for x in items),
                    "plain_tok_s": statistics.fmean(x["plain_tok_s"] for x in items),
                    "spec_tok_s": statistics.fmean(x["spec_tok_s"] for x in items),
                    "tok_per_fwd": statistics.fmean(x["tokens_per_forward"] for x in items),
                    "acceptance": statistics.fmean(x["acceptance"] for x in items),
                    "mean_tokens": statistics.fmean(x["tokens"] for x in items),
                    "identical": True})
    return rows


def bench_spec(repeats: int = 3, threads: list[int] | None = None) -> list[dict[str, Any]]:
    """Rows for every model, thread count, set and drafter set (see the module docstring)."""
    from llmnb import hub
    from llmnb.perf.bench import run_worker

    models = ["tiny-ar"]
    if hub.is_pulled("smollm2-135m"):
        models.append("smollm2-135m")
    else:
        print("bench spec: smollm2-135m not pulled (llmnb pull smollm2-135m); tiny-ar only",
              file=sys.stderr)
    rows: list[dict[str, Any]] = []
    for model in models:
        for n in threads or [1, 2]:
            print(f"bench spec: {model}, {n} thread(s)", file=sys.stderr)
            rows.extend(run_worker("llmnb.perf.bench_spec", f"worker({model!r}, {n}, {repeats})",
                                   "spec"))
    return rows


VERIFY_ROWS = (1, 2, 3, 4, 6, 8, 16, 33)


def verify_costs(model: str = "smollm2-135m", threads: int = 1,
                 rows: tuple[int, ...] = VERIFY_ROWS, repeats: int = 5,
                 context: int = 150) -> list[dict[str, Any]]:
    """What a verify batch of T rows costs after `context` cached tokens: median seconds of
    ``llmnb.ar.speculative.verify`` (T = 1 is a plain decode step) and the ratio to T = 1, the
    c(T) / t_1 that ``VerifyCosts`` predicts."""
    import numpy as np

    import llmnb
    from llmnb.ar.kv_cache import KVCache
    from llmnb.ar.speculative import verify
    from llmnb.perf.bench import median_time

    with llmnb.threads(threads):
        m = llmnb.load(model)
        tr = m.transformer
        cache = KVCache(m.config, context + max(rows))
        tr.forward(np.arange(context, dtype=np.int64) % m.config.vocab_size, cache=cache,
                   last_only=True)
        cache.commit()

        def batch(t: int) -> Callable[[], None]:
            def run() -> None:
                verify(tr, cache, 1, [list(range(2, 1 + t))])   # the root and one branch
                cache.truncate(context)
            return run

        secs = [median_time(batch(t), repeats) for t in rows]
    return [{"model": model, "threads": threads, "rows": t, "ms": 1e3 * s,
             "decode_steps": s / secs[0]} for t, s in zip(rows, secs)]


def main(argv: list[str] | None = None) -> int:
    import argparse

    from llmnb.perf.bench import _print_rows

    p = argparse.ArgumentParser(prog="python -m llmnb.perf.bench_spec",
                                description="the cost of a verify batch of T rows in decode steps "
                                            "(llmnb bench spec measures the speed-ups)")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    a = p.parse_args(argv)
    for n in a.threads:
        _print_rows(f"verify batch cost, {a.model}, {n} thread(s), 150 cached tokens, median of 5",
                    verify_costs(a.model, n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
