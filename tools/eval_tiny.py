"""Evaluate the tiny models through llmnb itself, and check the embedded tokenizer (issue 4).

- Held-out exact match per task family, the answer stripped and compared with the expected
  text of ``data/eval/tiny_heldout.jsonl``: tiny-ar by ``llmnb.generate(m, prompt, chat=True)``
  (greedy, the file's ChatML template, no system prompt); tiny-llada and tiny-dream by
  ``llmnb.diffuse`` (48 positions, 16 steps, even schedule, probability remasking, no cache,
  temperature 0), in one block and in two blocks of 24 (``eval_llmnb``, ``eval_llmnb_blocks``
  in ``<name>.json``).
- Tokenizer: ``m.tokenizer.encode`` equals the ``tokenizers`` tokenizer trained by
  ``tiny_tokenizer.py`` (``data/models/tiny-tokenizer.json``) on the held-out set and on a
  sample of the training corpus, and decoding round-trips; for every shipped GGUF.

Needs only llmnb (no torch): run it with the project's venv.

    .venv/bin/python tools/eval_tiny.py                    # accuracy + tokenizer checks
    .venv/bin/python tools/eval_tiny.py --table            # data/models/README.md's table
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
from tiny_corpus import (BENCHMARK_PROMPTS, FAMILIES, benchmark_answer, chatml, read_heldout,
                         training_examples)

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "data" / "models"
NAMES = ("tiny-ar", "tiny-llada", "tiny-dream")


def check_tokenizer(path: Path, n_corpus: int = 2000) -> dict[str, Any]:
    """Compare llmnb's tokenizer (built from the GGUF) with the trained ``tokenizers`` one."""
    m = llmnb.load(path)
    ref = tokenizers.Tokenizer.from_file(str(MODELS / "tiny-tokenizer.json"))
    texts = [e.prompt for e in read_heldout()] + [e.answer for e in read_heldout()]
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


def evaluate(answer: Callable[[str], str], method: str) -> dict[str, Any]:
    """Held-out exact match of `answer(prompt)` (stripped) per task family."""
    per = {f: [0, 0] for f in FAMILIES}
    misses = []
    t0 = time.perf_counter()
    for e in read_heldout():
        text = answer(e.prompt).strip()
        ok = text == e.answer
        per[e.family][0] += ok
        per[e.family][1] += 1
        if not ok and len(misses) < 12:
            misses.append({"prompt": e.prompt, "expected": e.answer, "got": text})
    correct = sum(c for c, _ in per.values())
    total = sum(n for _, n in per.values())
    return {"method": method,
            "overall": round(correct / total, 4), "correct": correct, "total": total,
            "macro": round(sum(c / n for c, n in per.values()) / len(per), 4),
            "per_family": {f: {"correct": c, "total": n, "accuracy": round(c / n, 4)}
                           for f, (c, n) in per.items()},
            "seconds": round(time.perf_counter() - t0, 1), "misses": misses}


def evaluate_ar(path: Path) -> dict[str, Any]:
    m = llmnb.load(path)
    return evaluate(lambda p: llmnb.generate(m, p, max_new_tokens=48, chat=True).text,
                    "llmnb.generate(m, prompt, max_new_tokens=48, chat=True), greedy, the GGUF's "
                    "ChatML template, no system prompt; exact match after strip()")


def evaluate_diffusion(path: Path, block_length: int | None = None) -> dict[str, Any]:
    m = llmnb.load(path)
    kw: dict[str, Any] = {"chat": True, "gen_length": 48, "steps": 16, "schedule": "even",
                          "remasking": "probability", "block_length": block_length,
                          "cache": False}
    with llmnb.threads(1):
        return evaluate(lambda p: llmnb.diffuse(m, p, **kw).text,
                        "llmnb.diffuse(m, prompt, " + ", ".join(f"{k}={v!r}" for k, v in kw.items())
                        + "), temperature 0; exact match after strip()")


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


def markdown_table() -> str:
    """Held-out accuracy per family from the ``<name>.json`` reports, as a markdown table."""
    cols: list[tuple[str, dict[str, Any]]] = []
    for name in NAMES:
        path = MODELS / f"{name}.json"
        if not path.exists():
            continue
        report = json.loads(path.read_text())
        if "eval_llmnb" in report:
            cols.append((name, report["eval_llmnb"]))
    for name in NAMES[1:]:                            # the diffusion models in two blocks
        report = json.loads((MODELS / f"{name}.json").read_text())
        if "eval_llmnb_blocks" in report:
            cols.append((f"{name}, 2 blocks", report["eval_llmnb_blocks"]))
    lines = ["| family | " + " | ".join(c for c, _ in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for f in FAMILIES:
        cells = [f"{ev['per_family'][f]['correct']}/{ev['per_family'][f]['total']} "
                 f"({100 * ev['per_family'][f]['accuracy']:.0f}%)" for _, ev in cols]
        lines.append(f"| {f} | " + " | ".join(cells) + " |")
    lines.append("| **overall** | " + " | ".join(
        f"**{ev['correct']}/{ev['total']} ({100 * ev['overall']:.1f}%)**" for _, ev in cols) + " |")
    lines.append("| mean of families | " + " | ".join(
        f"{100 * ev['macro']:.1f}%" for _, ev in cols) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer-only", action="store_true")
    ap.add_argument("--llama-bin", type=Path, default=None, help="a llama.cpp build/bin: "
                    "also record what llama.cpp does with each file")
    ap.add_argument("--table", action="store_true", help="only print the accuracy table "
                    "(markdown) from the reports")
    args = ap.parse_args(argv)
    if args.table:
        print(markdown_table())
        return 0
    failed = False
    for name in NAMES:
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
            runs = ({"eval_llmnb": evaluate_ar(path)} if name == "tiny-ar" else
                    {"eval_llmnb": evaluate_diffusion(path),
                     "eval_llmnb_blocks": evaluate_diffusion(path, block_length=24)})
            report |= runs
            for key, ev in runs.items():
                print(f"{name}: {key} held-out exact match {ev['correct']}/{ev['total']} "
                      + " ".join(f"{f}={v['accuracy']:.2f}" for f, v in ev["per_family"].items()),
                      file=sys.stderr)
        if args.llama_bin is not None:
            lc = llamacpp_checks(name, path, args.llama_bin)
            report["llamacpp"] = lc
            print(f"{name}: llama.cpp tokenize mismatches {len(lc['tokenize_mismatches'])}/"
                  f"{lc['tokenize_texts']}; benchmark prompts matching the expected answer "
                  f"{sum(p['matches_expected'] for p in lc['prompts'])}/8"
                  + (f", same text as llmnb {sum(p['same_as_llmnb'] for p in lc['prompts'])}/8"
                     if name == "tiny-ar" else ""), file=sys.stderr)
        report_path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
