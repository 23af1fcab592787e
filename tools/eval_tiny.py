"""Evaluate the tiny models through llmnb itself, and check the embedded tokenizer.

- Validity on the answer families of ``data/eval/tiny_heldout.jsonl``, for single-answer and
  multi-answer prompts apart (valid: ``llmnb.perf.heldout.is_valid``, the text decoded up to
  the first end of text, stripped, equals one of the prompt's ``answers``). tiny-ar by
  ``llmnb.generate(m, prompt, chat=True)`` (greedy, the file's ChatML template, no system
  prompt); tiny-llada and tiny-dream by ``llmnb.diffuse`` on 48 positions
  (one block, temperature 0, no cache) four ways: 16 steps of low_confidence (the cosine
  schedule), ONE step (all 48 positions committed at once), and entropy_exit (at most 16
  steps; threshold 1.5 nats, diffuse-cpp's default, and 1.0 nats; its mean steps too); then,
  on every ``--sweep-every``-th prompt,
  entropy_exit's threshold sweep, the remasking rules at 16 steps, and the inter-step caches
  (diffuse-cpp's; Fast-dLLM's prefix and dual on two blocks of 24) against the uncached run:
  tokens equal, validity, positions recomputed (``eval_llmnb`` in ``<name>.json``).
- ``--baseline``: validity on the whole held-out set, the rule families (copy, reverse, replace,
  alphabetical, distinct) apart from the answer families, per family and per kind of prompt,
  each figure with its 95% interval (``llmnb.perf.intervals.share``): tiny-ar greedy, the
  diffusion models at 16 steps (cosine schedule) and at 1 step, as above (``heldout_llmnb`` in
  ``<name>.json``; ``--table`` prints it too). Validity is ``llmnb.perf.heldout.is_valid``.
- Tokenizer: ``m.tokenizer.encode`` equals the ``tokenizers`` tokenizer trained by
  ``tiny_tokenizer.py`` (``data/models/tiny-tokenizer.json``) on the held-out set and on a
  sample of the training corpus, and decoding round-trips; for every shipped GGUF.

Needs only llmnb (no torch): run it with the project's venv.

    .venv/bin/python tools/eval_tiny.py                    # validity + tokenizer checks
    .venv/bin/python tools/eval_tiny.py --table            # data/models/README.md's tables
    .venv/bin/python tools/eval_tiny.py --baseline         # the whole set, rule families apart
    .venv/bin/python tools/eval_tiny.py --tokenizer-only
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tokenizers

import llmnb
from llmnb.perf.heldout import CHECKS, Prompt
from llmnb.perf.heldout import read_heldout as read_prompts
from llmnb.perf.intervals import share
from tiny_corpus import (BENCHMARK_PROMPTS, FAMILIES, HeldOut, benchmark_answer, chatml,
                         read_heldout, training_examples)

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "data" / "models"
HELDOUT = REPO / "data" / "eval" / "tiny_heldout.jsonl"
NAMES = ("tiny-ar", "tiny-llada", "tiny-dream")
KINDS = ("single", "multi")
GEN_LENGTH = 48
# How the diffusion models are decoded: the engine's low_confidence scheduler, cosine schedule,
# each position's confidence = its top token's softmax probability.
DIFFUSE: dict[str, Any] = {"chat": True, "gen_length": GEN_LENGTH, "cache": False,
                           "remasking": "probability"}
SETTINGS: dict[str, dict[str, Any]] = {
    "16 steps": {"steps": 16},
    "1 step": {"steps": 1},
    "entropy_exit": {"steps": 16, "scheduler": "entropy_exit", "entropy_threshold": 1.5},
    "entropy_exit 1.0": {"steps": 16, "scheduler": "entropy_exit", "entropy_threshold": 1.0},
}
SWEEP = (0.05, 0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)
RULES = ("low_confidence", "probability", "topk_margin", "entropy", "random")
# The inter-step caches, each against the uncached run with the same blocks: diffuse-cpp's on
# one block of 48, Fast-dLLM's prefix and dual caches on two blocks of 24 (they work per block).
CACHES: dict[str, dict[str, Any]] = {
    "diffuse-cpp": {},
    "prefix": {"block_length": 24, "cache_policy": "prefix"},
    "dual": {"block_length": 24, "cache_policy": "dual"},
}
NOT_SETTINGS = ("entropy_exit_sweep", "remasking", "cache")
# --baseline: each model's settings on the whole held-out set.
BASELINE: dict[str, tuple[str, ...]] = {"tiny-ar": ("greedy",),
                                        "tiny-llada": ("16 steps", "1 step"),
                                        "tiny-dream": ("16 steps", "1 step")}
GROUP_NAMES = {"answers": "answer families", "rule": "rule families"}


def kind(e: HeldOut) -> str:
    return "single" if e.modes == 1 else "multi"


def check_tokenizer(path: Path, n_corpus: int = 2000) -> dict[str, Any]:
    """Compare llmnb's tokenizer (built from the GGUF) with the trained ``tokenizers`` one."""
    m = llmnb.load(path)
    ref = tokenizers.Tokenizer.from_file(str(MODELS / "tiny-tokenizer.json"))
    held = read_heldout()
    texts = [e.prompt for e in held] + sorted({a for e in held for a in e.answers[:8]})
    texts += [chatml(e.prompt, e.system) + e.answer + "<|im_end|>\n"
              for e in training_examples(n_corpus)]
    mismatches, round_trip = 0, 0
    for t in texts:
        special = "<|" in t
        ours = m.tokenizer.encode(t, special=special)
        if ours != ref.encode(t).ids:
            mismatches += 1
        if m.tokenizer.decode(ours) != t:
            round_trip += 1
    rendered = m.tokenizer.render_chat([{"role": "user", "content": "Hi"}])
    return {"texts": len(texts), "encode_mismatches": mismatches,
            "decode_round_trip_failures": round_trip,
            "chat_template_ok": rendered == chatml("Hi"),
            "eos": m.tokenizer.eos_id, "eot": m.tokenizer.eot_id,
            "vocab": m.tokenizer.vocab_size}


def evaluate(held: list[HeldOut], answer: Callable[[str], tuple[str, int]],
             method: str) -> dict[str, Any]:
    """Validity of `answer(prompt)` -> (text, steps) per kind of prompt and per family."""
    per: dict[str, list[int]] = {}
    misses: dict[str, list[dict[str, str]]] = {k: [] for k in KINDS}
    t0 = time.perf_counter()
    for e in held:
        text, steps = answer(e.prompt)
        ok = e.valid(text)
        for key in (kind(e), e.family):
            c = per.setdefault(key, [0, 0, 0])
            c[0] += ok
            c[1] += 1
            c[2] += steps
        if not ok and len(misses[kind(e)]) < 8:
            misses[kind(e)].append({"prompt": e.prompt, "got": text.strip()})

    def summary(c: list[int]) -> dict[str, Any]:
        return {"valid": c[0], "total": c[1], "validity": round(c[0] / c[1], 4),
                "mean_steps": round(c[2] / c[1], 3)}
    return {"method": method, "seconds": round(time.perf_counter() - t0, 1),
            **{k: summary(per[k]) for k in KINDS if k in per},
            "per_family": {f: summary(per[f]) for f in FAMILIES if f in per},
            "misses": misses}


def evaluate_ar(path: Path, held: list[HeldOut]) -> dict[str, Any]:
    m = llmnb.load(path)

    def answer(prompt: str) -> tuple[str, int]:
        r = llmnb.generate(m, prompt, max_new_tokens=GEN_LENGTH, chat=True)
        return r.text, len(r.tokens)
    with llmnb.threads(1):
        return {"greedy": evaluate(held, answer, "llmnb.generate(m, prompt, max_new_tokens=48, "
                                   "chat=True), greedy, the GGUF's ChatML template, no system "
                                   "prompt; steps = tokens generated")}


def diffusion_answer(m: Any, kw: dict[str, Any]) -> Callable[[str], tuple[str, int]]:
    def answer(prompt: str) -> tuple[str, int]:
        r = llmnb.diffuse(m, prompt, **kw)
        return r.text, r.steps_taken
    return answer


def evaluate_diffusion(path: Path, held: list[HeldOut], sweep_every: int) -> dict[str, Any]:
    """The three settings on every prompt, and the entropy_exit sweep on every
    `sweep_every`-th prompt."""
    m = llmnb.load(path)
    out: dict[str, Any] = {}
    with llmnb.threads(1):
        for name, setting in SETTINGS.items():
            kw = DIFFUSE | setting
            out[name] = evaluate(held, diffusion_answer(m, kw), "llmnb.diffuse(m, prompt, " +
                                 ", ".join(f"{k}={v!r}" for k, v in kw.items()) + ")")
        sweep = []
        for h in SWEEP:
            kw = DIFFUSE | SETTINGS["entropy_exit"] | {"entropy_threshold": h}
            ev = evaluate(held[::sweep_every], diffusion_answer(m, kw), "")
            sweep.append({"threshold": h, **{k: ev[k] for k in KINDS}})
        out["entropy_exit_sweep"] = {"every": sweep_every, "points": sweep}
        sub = held[::sweep_every]
        rules = {}
        for rule in RULES:
            kw = DIFFUSE | SETTINGS["16 steps"] | {"remasking": rule}
            ev = evaluate(sub, diffusion_answer(m, kw), "")
            rules[rule] = {k: ev[k] for k in KINDS}
        out["remasking"] = {"every": sweep_every, "steps": 16, "rules": rules}
        out["cache"] = {"every": sweep_every, "steps": 16,
                        "policies": {name: evaluate_cache(m, sub, setting)
                                     for name, setting in CACHES.items()}}
    return out


def evaluate_cache(m: Any, held: list[HeldOut], setting: dict[str, Any]) -> dict[str, Any]:
    """One cache policy against the uncached run with the same blocks, 16 steps, per kind of
    prompt: fidelity (canvas tokens equal to the uncached run's; prompts whose whole canvas
    is equal), validity of both, and the share of canvas positions the cached steps
    recomputed (the work the cache leaves)."""
    blocks = {"block_length": setting["block_length"]} if "block_length" in setting else {}
    plain_kw = DIFFUSE | SETTINGS["16 steps"] | blocks
    cached_kw = plain_kw | {"cache": True} | setting
    fields = ("prompts", "equal", "tokens", "identical", "valid_uncached", "valid_cached",
              "recomputed", "positions")
    per = {k: dict.fromkeys(fields, 0) for k in KINDS}
    for e in held:
        plain = llmnb.diffuse(m, e.prompt, **plain_kw)
        cached = llmnb.diffuse(m, e.prompt, **cached_kw)
        c = per[kind(e)]
        c["prompts"] += 1
        c["equal"] += sum(a == b for a, b in zip(plain.tokens, cached.tokens))
        c["tokens"] += len(plain.tokens)
        c["identical"] += plain.tokens == cached.tokens
        c["valid_uncached"] += e.valid(plain.text)
        c["valid_cached"] += e.valid(cached.text)
        c["recomputed"] += sum(cached.stats.active_positions)
        c["positions"] += (len(plain.prompt_ids) + GEN_LENGTH) * cached.steps_taken
    return {"method": "llmnb.diffuse(m, prompt, " + ", ".join(
                f"{k}={v!r}" for k, v in cached_kw.items()) + ") against cache=False",
            **{k: {"prompts": c["prompts"],
                   "token_fidelity": round(c["equal"] / c["tokens"], 4),
                   "identical_prompts": c["identical"],
                   "validity_uncached": round(c["valid_uncached"] / c["prompts"], 4),
                   "validity_cached": round(c["valid_cached"] / c["prompts"], 4),
                   "recomputed": round(c["recomputed"] / c["positions"], 4)}
               for k, c in per.items() if c["prompts"]}}


def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)


def llamacpp_checks(name: str, path: Path, bin_dir: Path) -> dict[str, Any]:
    """What a local llama.cpp build does with the file, on the eight benchmark prompts (ChatML):
    llama-tokenize ids vs llmnb's (the rendered prompts and 40 held-out answers); for tiny-ar,
    llama-simple's greedy text vs llmnb's; for the diffusion models, llama-diffusion-cli's text
    (its own samplers, 16 steps, temperature 0) vs the expected answer."""
    m = llmnb.load(path)
    tok = m.tokenizer
    prompts = [tok.render_chat([{"role": "user", "content": p}]) for p in BENCHMARK_PROMPTS]
    texts = prompts + [e.answer for e in read_heldout()[::6]]
    tok_mismatch = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, t in enumerate(texts):
            f = Path(tmp) / f"{i}.txt"
            f.write_text(t, encoding="utf-8")
            out = run([str(bin_dir / "llama-tokenize"), "-m", str(path), "-f", str(f),
                       "--ids", "--log-disable", "--no-escape"]).stdout
            ids = json.loads(out.strip().splitlines()[-1])
            if ids != tok.encode(t, special=True):
                tok_mismatch.append(t)
    result: dict[str, Any] = {"tokenize_texts": len(texts), "tokenize_mismatches": tok_mismatch,
                              "prompts": []}
    for prompt, rendered in zip(BENCHMARK_PROMPTS, prompts):
        n_input = len(tok.encode(rendered, special=True))
        if name == "tiny-ar":
            cmd = [str(bin_dir / "llama-simple"), "-m", str(path), "-n", "48", rendered]
            out = run(cmd).stdout
            text = out[out.find(rendered) + len(rendered):] if rendered in out else out
            ours = llmnb.generate(m, prompt, max_new_tokens=48, chat=True).text
        else:
            ub = str(n_input + 48)
            sched = (["--diffusion-block-length", ub] if name == "tiny-llada"
                     else ["--diffusion-eps", "0.001"])
            cmd = [str(bin_dir / "llama-diffusion-cli"), "-m", str(path), "-p", prompt,
                   "-ub", ub, "-b", ub, "-c", "256", "--diffusion-steps", "16", *sched,
                   "-t", "1", "--temp", "0", "--no-log-timestamps", "--no-log-prefix"]
            for _ in range(3):   # its logger thread can drop the last lines at exit under load
                err = run(cmd).stderr
                if "sampling time per step" in err:
                    break
            text = err.split("sampling time per step", 1)[-1].split("\n", 1)[-1]
            ours = None
        entry = {"prompt": prompt, "llamacpp": text.strip(),
                 "expected": benchmark_answer(prompt),
                 "matches_expected": text.strip() == benchmark_answer(prompt)}
        if ours is not None:
            entry["llmnb"] = ours.strip()
            entry["same_as_llmnb"] = text.strip() == ours.strip()
        result["prompts"].append(entry)
    result["command_last"] = shlex.join(cmd)
    return result


def columns() -> list[tuple[str, dict[str, Any]]]:
    """(column title, evaluation) for every model and setting in the ``<name>.json`` reports."""
    cols: list[tuple[str, dict[str, Any]]] = []
    for name in NAMES:
        path = MODELS / f"{name}.json"
        report = json.loads(path.read_text()) if path.exists() else {}
        for setting, ev in report.get("eval_llmnb", {}).items():
            if setting not in NOT_SETTINGS:
                cols.append((f"{name} {setting}", ev))
    return cols


def cell(c: dict[str, Any]) -> str:
    return f"{c['valid']}/{c['total']} ({100 * c['validity']:.0f}%)"


def baseline(name: str, prompts: list[Prompt]) -> dict[str, Any]:
    """`name`'s ``BASELINE`` settings on `prompts`: valid and total per family and per (group,
    kind), the group being how validity is decided ("answers" or "rule"), and the first misses
    of each family."""
    m = llmnb.load(MODELS / f"{name}.gguf")
    out: dict[str, Any] = {}
    with llmnb.threads(1):
        for setting in BASELINE[name]:
            if name == "tiny-ar":
                kw: dict[str, Any] = {"max_new_tokens": GEN_LENGTH, "chat": True}
                method = "llmnb.generate(m, prompt, max_new_tokens=48, chat=True), greedy"
            else:
                kw = DIFFUSE | SETTINGS[setting]
                method = "llmnb.diffuse(m, prompt, " + ", ".join(
                    f"{k}={v!r}" for k, v in kw.items()) + ")"
            per: dict[str, list[int]] = {}
            misses: dict[str, list[dict[str, str]]] = {}
            t0 = time.perf_counter()
            for p in prompts:
                r = (llmnb.generate(m, p.prompt, **kw) if name == "tiny-ar"
                     else llmnb.diffuse(m, p.prompt, **kw))
                ok = p.valid(r.text)
                for key in (f"{p.checked_by} {p.kind}", f"family {p.family}"):
                    c = per.setdefault(key, [0, 0])
                    c[0] += ok
                    c[1] += 1
                if not ok and len(misses.setdefault(p.family, [])) < 3:
                    misses[p.family].append({"prompt": p.prompt, "got": r.text.strip()})
            out[setting] = {
                "method": method, "seconds": round(time.perf_counter() - t0, 1),
                "groups": {key: {"valid": c[0], "total": c[1]} for key, c in per.items()
                           if not key.startswith("family ")},
                "per_family": {key[7:]: {"valid": c[0], "total": c[1]}
                               for key, c in per.items() if key.startswith("family ")},
                "misses": misses}
    return out


def baseline_table() -> str:
    """The ``heldout_llmnb`` reports as one markdown table: per family, the answer families
    then the rule families, each group's totals per kind of prompt after its families; each
    cell the validity with its 95% interval."""
    cols: list[tuple[str, dict[str, Any]]] = []
    for name in NAMES:
        path = MODELS / f"{name}.json"
        report = json.loads(path.read_text()) if path.exists() else {}
        cols += [(f"{name} {setting}", ev)
                 for setting, ev in report.get("heldout_llmnb", {}).get("settings", {}).items()]
    if not cols:
        return ""
    prompts = read_prompts(HELDOUT)
    lines = ["| family | kind | " + " | ".join(c for c, _ in cols) + " |",
             "|---|---|" + "---:|" * len(cols)]

    def row(label: str, kind: str, get: Callable[[dict[str, Any]], dict[str, int] | None],
            bold: bool = False) -> None:
        cells = []
        for _, ev in cols:
            c = get(ev)
            text = share(c["valid"], c["total"]) if c else "-"
            cells.append(f"**{text}**" if bold and c else text)
        lines.append(f"| {label} | {kind} | " + " | ".join(cells) + " |")
    for group in CHECKS:
        families = list(dict.fromkeys(p.family for p in prompts if p.checked_by == group))
        for f in families:
            kind = next(p.kind for p in prompts if p.family == f)
            row(f, kind, lambda ev, f=f: ev["per_family"].get(f))
        for kind in KINDS:
            row(f"**{GROUP_NAMES[group]}**", kind,
                lambda ev, k=kind, g=group: ev["groups"].get(f"{g} {k}"), bold=True)
    return "\n".join(lines)


def markdown_table() -> str:
    """Validity per family and per kind of prompt, entropy_exit's mean steps, and its
    threshold sweep, from the ``<name>.json`` reports, as markdown tables."""
    cols = columns()
    lines = ["| family | " + " | ".join(c for c, _ in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for f in FAMILIES:
        lines.append(f"| {f} | " + " | ".join(cell(ev["per_family"][f]) if f in ev["per_family"]
                                              else "-" for _, ev in cols) + " |")
    for k in KINDS:
        lines.append(f"| **{k}-answer** | " + " | ".join(
            f"**{cell(ev[k])}**" for _, ev in cols) + " |")
    for k in KINDS:
        lines.append(f"| mean steps, {k} | " + " | ".join(
            f"{ev[k]['mean_steps']:.2f}" for _, ev in cols) + " |")
    lines += ["", "| entropy_exit threshold (nats) | " + " | ".join(
        f"{name}: {k} valid, steps" for name in NAMES[1:] for k in KINDS) + " |",
        "|---:|" + "---:|" * 4]
    evs = [diffusion_report(name) for name in NAMES[1:]]
    if all("entropy_exit_sweep" in ev for ev in evs):
        sweeps = [ev["entropy_exit_sweep"]["points"] for ev in evs]
        for i, point in enumerate(sweeps[0]):
            row = [f"{100 * sw[i][k]['validity']:.0f}%, {sw[i][k]['mean_steps']:.2f}"
                   for sw in sweeps for k in KINDS]
            lines.append(f"| {point['threshold']} | " + " | ".join(row) + " |")
    if all("remasking" in ev for ev in evs):
        lines += ["", "| remasking rule, 16 steps | " + " | ".join(
            f"{name}: {k}" for name in NAMES[1:] for k in KINDS) + " |", "|---|" + "---:|" * 4]
        for rule in RULES:
            lines.append(f"| {rule} | " + " | ".join(
                cell(ev["remasking"]["rules"][rule][k]) for ev in evs for k in KINDS) + " |")
    if all("cache" in ev for ev in evs):
        lines += ["", "| cache, 16 steps | kind | tokens equal to no cache | identical canvases "
                  "| valid, no cache | valid, cached | positions recomputed |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for name, ev in zip(NAMES[1:], evs):
            for policy, c in ev["cache"]["policies"].items():
                for k in KINDS:
                    r = c[k]
                    lines.append(f"| {name} {policy} | {k} | {100 * r['token_fidelity']:.1f}% | "
                                 f"{r['identical_prompts']}/{r['prompts']} | "
                                 f"{100 * r['validity_uncached']:.0f}% | "
                                 f"{100 * r['validity_cached']:.0f}% | "
                                 f"{100 * r['recomputed']:.0f}% |")
    return "\n".join(lines)


def diffusion_report(name: str) -> dict[str, Any]:
    path = MODELS / f"{name}.json"
    report = json.loads(path.read_text()) if path.exists() else {}
    ev: dict[str, Any] = report.get("eval_llmnb", {})
    return ev


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer-only", action="store_true")
    ap.add_argument("--llama-bin", type=Path, default=None, help="a llama.cpp build/bin: "
                    "also record what llama.cpp does with each file")
    ap.add_argument("--table", action="store_true", help="only print the validity tables "
                    "(markdown) from the reports")
    ap.add_argument("--every", type=int, default=1, help="evaluate every N-th held-out prompt")
    ap.add_argument("--sweep-every", type=int, default=2, help="the threshold sweep on every "
                    "N-th of those")
    ap.add_argument("--models", nargs="*", default=list(NAMES), choices=NAMES)
    ap.add_argument("--baseline", action="store_true", help="only the whole held-out set, "
                    "rule families apart: tiny-ar greedy, the diffusion models at 16 steps and "
                    "1 step (heldout_llmnb in <name>.json)")
    args = ap.parse_args(argv)
    if args.table:
        print(markdown_table())
        print("\n" + baseline_table())
        return 0
    if args.baseline:
        prompts = read_prompts(HELDOUT)
        for name in args.models:
            report_path = MODELS / f"{name}.json"
            report = json.loads(report_path.read_text()) if report_path.exists() else {}
            report["heldout_llmnb"] = {"prompts": len(prompts), "settings": baseline(name, prompts)}
            for setting, ev in report["heldout_llmnb"]["settings"].items():
                print(f"{name} {setting} ({ev['seconds']} s): " + "; ".join(
                    f"{key} {share(c['valid'], c['total'])}" for key, c in ev["groups"].items()),
                    file=sys.stderr)
            tmp = report_path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
            tmp.replace(report_path)
        print(baseline_table())
        return 0
    # the settings, sweeps and caches: on the answer families (the rule families: --baseline)
    held = [e for e in read_heldout() if e.instance is None][::args.every]
    failed = False
    for name in args.models:
        path = MODELS / f"{name}.gguf"
        if not path.exists():
            continue
        tk = check_tokenizer(path)
        print(f"{name}: tokenizer {json.dumps(tk)}", file=sys.stderr)
        failed |= bool(tk["encode_mismatches"] or tk["decode_round_trip_failures"]
                       or not tk["chat_template_ok"])
        report_path = MODELS / f"{name}.json"
        report = json.loads(report_path.read_text()) if report_path.exists() else {}
        report["tokenizer_check_llmnb"] = tk
        if not args.tokenizer_only:
            ev = (evaluate_ar(path, held) if name == "tiny-ar" else
                  evaluate_diffusion(path, held, args.sweep_every))
            report["eval_llmnb"] = ev
            report.pop("eval_llmnb_blocks", None)
            for setting, r in ev.items():
                if setting in ("remasking", "cache"):
                    print(f"{name}: {setting} {json.dumps(r)}", file=sys.stderr)
                    continue
                if setting == "entropy_exit_sweep":
                    print(f"{name}: entropy_exit sweep " + "; ".join(
                        f"{p['threshold']}: " + " ".join(
                            f"{k} {p[k]['validity']:.2f}/{p[k]['mean_steps']:.2f}" for k in KINDS)
                        for p in r["points"]), file=sys.stderr)
                    continue
                print(f"{name}: {setting}: " + " ".join(
                    f"{k} {cell(r[k])} steps {r[k]['mean_steps']:.2f}" for k in KINDS if k in r)
                    + f" ({r['seconds']} s)", file=sys.stderr)
        if args.llama_bin is not None:
            lc = llamacpp_checks(name, path, args.llama_bin)
            report["llamacpp"] = lc
            print(f"{name}: llama.cpp tokenize mismatches {len(lc['tokenize_mismatches'])}/"
                  f"{lc['tokenize_texts']}; benchmark prompts matching the expected answer "
                  f"{sum(p['matches_expected'] for p in lc['prompts'])}/8"
                  + (f", same text as llmnb {sum(p['same_as_llmnb'] for p in lc['prompts'])}/8"
                     if name == "tiny-ar" else ""), file=sys.stderr)
        tmp = report_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        tmp.replace(report_path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
