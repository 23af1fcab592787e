"""Learnability probes: can the tiny models' architecture, tokenizer and data learn a rule family?

A short run from random weights on a mix that is mostly rule families (``tiny_corpus``'s
generators: copy, reverse, replace, alphabetical, distinct), bounded by CPU time, that
evaluates held-out validity per family every ``--eval-every`` steps and writes the learning curve
(CPU seconds, step, training loss, and per family: valid/total on the held-out prompts of
``data/eval/tiny_heldout.jsonl`` and the teacher-forced loss on their answers) to a CSV.

- ``ar``: the tiny-ar architecture (Llama: RMSNorm, RoPE, grouped-query attention, SwiGLU,
  untied output; ``--hidden``/``--layers``/... default to tiny-ar's shape), causal,
  next-token loss on the answer and its ``<|im_end|>``; evaluated by greedy decoding.
- ``llada``: the same network, bidirectional, LLaDA's masked-diffusion objective (t ~ U(0, 1],
  each answer token masked with p = (1 - 1e-3) t + 1e-3, loss = CE on the masked tokens / p per
  answer token; the prompt never masked; the answer padded with ``<|im_end|>`` to ``--canvas``);
  evaluated by low-confidence remasking at temperature 0 with ``--eval-steps`` steps (default:
  one token per step, the most steps the canvas allows).

The network is written here in plain torch (the same layers as ``LlamaForCausalLM`` at tiny-ar's
shape; the probe needs no ``transformers``). Validity is decided by
``llmnb.perf.heldout.is_valid`` in a companion process (``--validity-python``, llmnb's venv with
this worktree first on its path), fed each held-out line and decoded text. Every process runs at
``nice 19`` with one torch thread; budgets and the curve count CPU time
(``time.process_time``), not wall time; ``--wall-minutes`` stops a run early on a busy machine.

    PY=path/to/a/venv/with/torch/bin/python     # torch (CPU), numpy, tokenizers
    nice -n 19 $PY tools/probe_rules.py ar --families copy,reverse --cpu-minutes 15
    nice -n 19 $PY tools/probe_rules.py llada --families copy,reverse --cpu-minutes 15
    nice -n 19 $PY tools/probe_rules.py ar --diagnose      # token counts, overlaps, lengths only
    $PY tools/probe_rules.py table /tmp/llmnb-probe/ar-copy-reverse.csv   # the curve as a table
    $PY tools/probe_rules.py errors /tmp/llmnb-probe/ar-copy-reverse.pt   # misses by length, item

Outputs go to ``--out`` (default /tmp/llmnb-probe, outside the repository): ``<tag>.csv`` (the
curve), ``<tag>.json`` (settings, diagnostics, final figures, the first misses per family) and
``<tag>.pt`` (the final weights; probes' models are not kept in the repository).
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tiny_corpus import (RULE_FAMILIES, RULE_ITEMS, RULE_TEMPLATES, SEED, SYSTEM,
                         SYSTEM_FRACTION, Example, HeldOut, RuleInstance, chatml, draw_instance,
                         heldout_instances, item_tokens, read_heldout, training_examples)

REPO = Path(__file__).resolve().parents[1]
TOKENIZER_PATH = REPO / "data" / "models" / "tiny-tokenizer.json"
ENDOFTEXT, IM_START, IM_END, MASK = range(4)    # tiny_tokenizer.py's special ids
DEFAULT_OUT = Path("/tmp/llmnb-probe")          # outside the repository, as train_tiny.py's --work
DEFAULT_VALIDITY_PYTHON = str(REPO / ".venv" / "bin" / "python")   # llmnb's own venv (make setup)


@dataclass(frozen=True)
class Shape:
    """tiny-ar's shape (data/models/README.md; train_tiny.py's ``Shape``, which this venv cannot
    import: train_tiny.py imports llmnb at its top)."""

    hidden: int = 160
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 640
    theta: float = 10000.0


# ================================================================================================
# The network: LlamaForCausalLM's layers at a given shape, causal or bidirectional
# ================================================================================================

class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Llama's rotary embedding (halves rotated), x: (B, H, T, D)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Block(nn.Module):
    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.s = s
        d = s.hidden // s.heads
        self.attn_norm = RMSNorm(s.hidden)
        self.q = nn.Linear(s.hidden, s.heads * d, bias=False)
        self.k = nn.Linear(s.hidden, s.kv_heads * d, bias=False)
        self.v = nn.Linear(s.hidden, s.kv_heads * d, bias=False)
        self.o = nn.Linear(s.heads * d, s.hidden, bias=False)
        self.ffn_norm = RMSNorm(s.hidden)
        self.gate = nn.Linear(s.hidden, s.ffn, bias=False)
        self.up = nn.Linear(s.hidden, s.ffn, bias=False)
        self.down = nn.Linear(s.ffn, s.hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, causal: bool,
                keep: torch.Tensor | None) -> torch.Tensor:
        b, t, _ = x.shape
        s = self.s
        d = s.hidden // s.heads
        h = self.attn_norm(x)
        q = self.q(h).view(b, t, s.heads, d).transpose(1, 2)
        k = self.k(h).view(b, t, s.kv_heads, d).transpose(1, 2)
        v = self.v(h).view(b, t, s.kv_heads, d).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        rep = s.heads // s.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if keep is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        else:   # keys a row may read (left padding at evaluation), causal or not
            allowed = keep[:, None, None, :]
            if causal:
                allowed = allowed & torch.ones(t, t, dtype=torch.bool).tril()
            allowed = allowed | torch.eye(t, dtype=torch.bool)   # a padding row reads itself
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, s.heads * d))
        h = self.ffn_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class TinyLlama(nn.Module):
    """Token embedding, `layers` blocks, final RMSNorm, untied output (HF's init, std 0.02)."""

    def __init__(self, vocab: int, s: Shape, causal: bool) -> None:
        super().__init__()
        self.s, self.causal = s, causal
        self.embed = nn.Embedding(vocab, s.hidden)
        self.blocks = nn.ModuleList(Block(s) for _ in range(s.layers))
        self.norm = RMSNorm(s.hidden)
        self.out = nn.Linear(s.hidden, vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, ids: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, V). `keep` (B, T) marks real tokens; padding before them is skipped
        and positions count from each row's first real token (RoPE sees the same offsets)."""
        b, t = ids.shape
        d = self.s.hidden // self.s.heads
        if keep is None:
            pos = torch.arange(t, dtype=torch.float32).expand(b, t)
        else:
            pos = (keep.cumsum(1) - 1).clamp(min=0).float()
        inv = 1.0 / (self.s.theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        ang = pos[..., None] * inv                                  # (B, T, D/2)
        ang = torch.cat([ang, ang], dim=-1)[:, None]                # (B, 1, T, D)
        cos, sin = ang.cos(), ang.sin()
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x, cos, sin, self.causal, keep)
        return self.out(self.norm(x))


# ================================================================================================
# Data: the probe's mix, encoded once
# ================================================================================================

def probe_examples(n: int, weights: dict[str, float], seed: int,
                   lengths: tuple[int, int] | None = None) -> list[Example]:
    """`n` training examples: each family drawn by `weights` (rule families by
    ``tiny_corpus``'s generator, never a held-out instance, phrasings from ``RULE_TEMPLATES``,
    30% with the system prompt; "answers" = an example of the answer families,
    ``training_examples(rules=False)``). `lengths` (lowest, highest) redraws the list length of
    copy, reverse and alphabetical instances, whose generator draws 3-5 items."""
    rng = random.Random(seed)
    held = {inst for inst, _ in heldout_instances()}
    answers = training_examples(max(1, int(n * weights.get("answers", 0)) + 16), rules=False)
    answers = answers[16:]    # past the benchmark prompts, which come first
    families = list(weights)
    w = [weights[f] for f in families]
    out: list[Example] = []
    a = 0
    while len(out) < n:
        family = rng.choices(families, w)[0]
        if family == "answers":
            out.append(answers[a % len(answers)])
            a += 1
            continue
        inst = draw_instance(family, rng)
        while inst in held:
            inst = draw_instance(family, rng)
        if lengths is not None and family in ("copy", "reverse", "alphabetical"):
            while True:
                items = tuple(rng.sample(RULE_ITEMS, rng.randint(*lengths)))
                inst = RuleInstance(family, items)
                if inst not in held and (family != "alphabetical"
                                         or list(items) != sorted(items)):
                    break
        system = SYSTEM if rng.random() < SYSTEM_FRACTION else None
        out.append(Example(family, rng.choice(RULE_TEMPLATES[family]).format(**inst.fields()),
                           inst.answer(rng), system, inst))
    return out


def encode(tok: Any, examples: list[Example]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids + <|im_end|>), as ``train_tiny.encode_examples``."""
    prompts = tok.encode_batch([chatml(e.prompt, e.system) for e in examples])
    answers = tok.encode_batch([e.answer for e in examples])
    return [(p.ids, a.ids + [IM_END]) for p, a in zip(prompts, answers)]


def ar_batch(data: list[tuple[list[int], list[int]]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and labels (-100 outside the answer), as ``train_tiny.ar_batch``."""
    n = max(len(p) + len(a) for p, a in data)
    ids = torch.full((len(data), n), ENDOFTEXT, dtype=torch.long)
    labels = torch.full((len(data), n), -100, dtype=torch.long)
    for r, (p, a) in enumerate(data):
        ids[r, :len(p) + len(a)] = torch.tensor(p + a)
        labels[r, len(p):len(p) + len(a)] = torch.tensor(a)
    return ids, labels


def diffusion_batch(data: list[tuple[list[int], list[int]]],
                    canvas: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids (prompt + answer + <|im_end|> padding to `canvas`) and the answer region, as
    ``train_tiny.diffusion_batch``."""
    n = max(len(p) for p, _ in data) + canvas
    ids = torch.full((len(data), n), IM_END, dtype=torch.long)
    answer = torch.zeros((len(data), n), dtype=torch.bool)
    for r, (p, a) in enumerate(data):
        a = a[:canvas]
        ids[r, :len(p)] = torch.tensor(p)
        ids[r, len(p):len(p) + len(a)] = torch.tensor(a)
        answer[r, len(p):] = True
    return ids, answer


def ar_loss(model: TinyLlama, ids: torch.Tensor, labels: torch.Tensor,
            reduction: str = "mean") -> torch.Tensor:
    logits = model(ids)
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                           labels[:, 1:].reshape(-1), ignore_index=-100, reduction=reduction)


def diffusion_loss(model: TinyLlama, ids: torch.Tensor, answer: torch.Tensor,
                   g: torch.Generator, t: float | None = None) -> torch.Tensor:
    """LLaDA's loss (``train_tiny.diffusion_loss``, unshifted); `t` fixes the mask ratio."""
    b, n = ids.shape
    eps = 1e-3
    tt = torch.rand(b, 1, generator=g) if t is None else torch.full((b, 1), t)
    p_mask = (1 - eps) * tt + eps
    masked = (torch.rand(b, n, generator=g) < p_mask) & answer
    noisy = torch.where(masked, torch.full_like(ids, MASK), ids)
    logits = model(noisy)
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1),
                         reduction="none").view(b, n)
    return ((ce * masked / p_mask).sum(dim=1) / answer.sum(dim=1)).mean()


# ================================================================================================
# Decoding and validity
# ================================================================================================

def answer_text(tok: Any, ids: list[int]) -> str:
    """Decode up to the first end of turn / end of text / mask."""
    out = []
    for i in ids:
        if i in (IM_END, ENDOFTEXT, MASK):
            break
        out.append(i)
    return str(tok.decode(out))


def left_pad(rows: list[list[int]], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.full((len(rows), width), ENDOFTEXT, dtype=torch.long)
    keep = torch.zeros((len(rows), width), dtype=torch.bool)
    for r, row in enumerate(rows):
        ids[r, width - len(row):] = torch.tensor(row)
        keep[r, width - len(row):] = True
    return ids, keep


@torch.no_grad()
def greedy(model: TinyLlama, prompts: list[list[int]], max_new: int) -> list[list[int]]:
    """Greedy decoding of every prompt at once (left padding, skipped by the attention)."""
    rows = [list(p) for p in prompts]
    done = [False] * len(rows)
    for _ in range(max_new):
        width = max(map(len, rows))
        ids, keep = left_pad(rows, width)
        nxt = model(ids, keep)[:, -1].argmax(-1).tolist()
        for r, tok_id in enumerate(nxt):
            if not done[r]:
                rows[r].append(tok_id)
                done[r] = tok_id == IM_END
            else:
                rows[r].append(IM_END)
        if all(done):
            break
    return [r[len(p):] for r, p in zip(rows, prompts)]


@torch.no_grad()
def low_confidence(model: TinyLlama, prompts: list[list[int]], canvas: int,
                   steps: int) -> list[list[int]]:
    """LLaDA's low-confidence remasking at temperature 0, every prompt at once: each step
    predicts every masked position (argmax) and commits the ones whose top softmax probability
    is highest, as many as LLaDA's linear schedule gives the step (the canvas split evenly)."""
    width = max(map(len, prompts)) + canvas
    ids, keep = left_pad([p + [MASK] * canvas for p in prompts], width)
    masked = torch.zeros_like(keep)
    masked[:, width - canvas:] = True
    base, extra = divmod(canvas, steps)
    for step in range(steps):
        k = base + (step < extra)
        if k == 0:
            continue
        probs = torch.softmax(model(ids, keep).float(), dim=-1)
        conf, token = probs.max(dim=-1)
        conf = torch.where(masked, conf, torch.full_like(conf, -1.0))
        pick = torch.topk(conf, k, dim=1).indices                    # (B, k)
        ids.scatter_(1, pick, token.gather(1, pick))
        masked.scatter_(1, pick, False)
    return [row[width - canvas:] for row in ids.tolist()]


class Validity:
    """``llmnb.perf.heldout.is_valid`` in a companion process of llmnb's own venv (the torch
    venv does not import llmnb): one JSON line in ({"row": ..., "text": ...}), "1" or "0" out."""

    CODE = ("import json, sys\n"
            "from llmnb.perf.heldout import is_valid\n"
            "print('ready', flush=True)\n"
            "for line in sys.stdin:\n"
            "    q = json.loads(line)\n"
            "    print(int(is_valid(q['row'], q['text'])), flush=True)\n")

    def __init__(self, python: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO), LLMNB_THREADS="1")
        self.proc = subprocess.Popen(["nice", "-n", "19", python, "-c", self.CODE], text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     cwd=str(REPO))
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline().strip()
        if first != "ready":
            raise SystemExit(f"validity process ({python}) did not start: {first!r}")

    def __call__(self, row: dict[str, Any], text: str) -> bool:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"row": row, "text": text}) + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip() == "1"

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def evaluate(model: TinyLlama, kind: str, tok: Any, held: dict[str, list[HeldOut]],
             valid: Validity, args: argparse.Namespace,
             g: torch.Generator) -> dict[str, dict[str, Any]]:
    """Per family: valid/total on its held-out prompts, the teacher-forced loss on their
    answers (AR: mean CE per answer token; LLaDA: the objective at mask ratio 0.5), the first
    misses."""
    model.eval()
    out: dict[str, dict[str, Any]] = {}
    for family, rows in held.items():
        prompts = [tok.encode(chatml(e.prompt)).ids for e in rows]
        pairs = [(p, tok.encode(e.answer).ids + [IM_END]) for p, e in zip(prompts, rows)]
        with torch.no_grad():
            if kind == "ar":
                decoded = greedy(model, prompts, args.max_new)
                loss = float(ar_loss(model, *ar_batch(pairs)))
            else:
                decoded = low_confidence(model, prompts, args.canvas, args.eval_steps)
                loss = float(diffusion_loss(model, *diffusion_batch(pairs, args.canvas), g, t=0.5))
        texts = [answer_text(tok, d) for d in decoded]
        oks = [valid(e.row(), t) for e, t in zip(rows, texts)]
        misses = [{"prompt": e.prompt, "got": t} for e, t, ok in zip(rows, texts, oks) if not ok]
        out[family] = {"valid": sum(oks), "total": len(oks), "answer_loss": round(loss, 4),
                       "misses": misses[:5]}
    model.train()
    return out


# ================================================================================================
# Diagnostics: what could stop a family being learnt, measured before training
# ================================================================================================

def diagnose(tok: Any, examples: list[Example], held: dict[str, list[HeldOut]],
             data: list[tuple[list[int], list[int]]]) -> dict[str, Any]:
    """Tokens per item (first in an answer and after ", "; and in the prompt's form), whether a
    held-out instance or prompt occurs in the training draws, answer lengths in tokens."""
    per_item = item_tokens(tok)
    prompt_form = {it: tok.encode(" " + it).ids for it in per_item}
    answer_form = {it: tok.encode(it).ids for it in per_item}
    train_inst = {e.instance for e in examples if e.instance is not None}
    train_prompts = {e.prompt for e in examples}
    lengths: dict[str, list[int]] = {}
    for e, (_, a) in zip(examples, data):
        lengths.setdefault(e.family if e.instance is not None else "answers", []).append(len(a))
    return {
        "items": len(per_item),
        "items_not_one_token": {k: v for k, v in per_item.items() if v != 1},
        "first_item_differs_from_prompt_form": sum(prompt_form[i] != answer_form[i]
                                                   for i in per_item),
        "heldout_instances_in_training": sum(e.instance in train_inst
                                             for rows in held.values() for e in rows),
        "heldout_prompts_in_training": sum(e.prompt in train_prompts
                                           for rows in held.values() for e in rows),
        "train_answer_tokens": {f: [min(v), round(float(np.mean(v)), 1), max(v)]
                                for f, v in sorted(lengths.items())},
        "heldout_answer_tokens": {f: [min(n), max(n)] for f, rows in held.items()
                                  for n in [[len(tok.encode(e.answer).ids) + 1 for e in rows]]},
        "train_examples_per_family": {f: len(v) for f, v in sorted(lengths.items())},
    }


# ================================================================================================

def errors(weights: Path) -> dict[str, Any]:
    """Where a probe's final model (``<tag>.pt`` beside ``<tag>.json``) goes wrong, per family:
    exact answers by list length, and the first wrong item (by its place in the answer)
    on the misses, with the decoding and shape of the run."""
    from tokenizers import Tokenizer

    report = json.loads(weights.with_suffix(".json").read_text())
    st = report["settings"]
    tok = Tokenizer.from_file(str(TOKENIZER_PATH))
    model = TinyLlama(tok.get_vocab_size(), Shape(**report["shape"]), st["kind"] == "ar")
    model.load_state_dict(torch.load(weights))
    model.eval()
    out: dict[str, Any] = {}
    for family in st["families"].split(","):
        rows = [e for e in read_heldout() if e.family == family]
        prompts = [tok.encode(chatml(e.prompt)).ids for e in rows]
        decoded = (greedy(model, prompts, st["max_new"]) if st["kind"] == "ar" else
                   low_confidence(model, prompts, st["canvas"], st["eval_steps"]))
        by_len: dict[int, list[int]] = {}
        first_wrong: dict[str, int] = {}
        for e, d in zip(rows, decoded):
            got, want = answer_text(tok, d).strip().split(", "), e.answer.split(", ")
            c = by_len.setdefault(len(want), [0, 0])
            c[0] += got == want
            c[1] += 1
            if got != want:
                i = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                         min(len(got), len(want)))
                key = f"item {i + 1}" if i < len(want) else "extra items"
                first_wrong[key] = first_wrong.get(key, 0) + 1
        out[family] = {"exact_by_items": {n: f"{a}/{b}" for n, (a, b) in sorted(by_len.items())},
                       "first_wrong_item": dict(sorted(first_wrong.items()))}
    return out


def curve_table(path: Path, rows: int) -> str:
    """A curve CSV as a markdown table: up to `rows` checkpoints evenly spread (the first and
    the last always), CPU minutes, step, loss and each family's valid/total."""
    with path.open() as fh:
        curve = list(csv.DictReader(fh))
    families = [k[:-len("_valid")] for k in curve[0] if k.endswith("_valid")]
    n = len(curve)
    k = min(rows, n)
    picks = sorted({round(i * (n - 1) / max(k - 1, 1)) for i in range(k)})
    head = ["training CPU min", "step", "train loss"] + [
        f"{f} valid (answer loss)" for f in families]
    lines = [f"`{path.name}`", "", "| " + " | ".join(head) + " |",
             "|" + "---:|" * len(head)]
    for i in picks:
        r = curve[i]
        cells = [f"{float(r['cpu_seconds']) / 60:.1f}", r["step"], r["loss"]]
        cells += [f"{r[f + '_valid']}/{r[f + '_total']} ({r[f + '_answer_loss']})"
                  for f in families]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def parse_mix(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in text.split(","):
        name, _, w = part.partition("=")
        if name not in (*RULE_FAMILIES, "answers"):
            raise SystemExit(f"--mix: {name!r} is not a rule family or 'answers'")
        out[name] = float(w or 1)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=["ar", "llada", "table", "errors"])
    ap.add_argument("curves", nargs="*", type=Path, help="table: curve CSVs to print; "
                    "errors: probe weights (<tag>.pt) to examine")
    ap.add_argument("--families", default="copy,reverse",
                    help="rule families evaluated (held-out prompts of each)")
    ap.add_argument("--mix", default="", help="training mix, e.g. copy=0.4,reverse=0.4,"
                    "answers=0.2 (default: the families evenly, 0.8 in all, answers 0.2)")
    ap.add_argument("--cpu-minutes", type=float, default=15.0, help="training CPU budget")
    ap.add_argument("--wall-minutes", type=float, default=0.0, help="also stop after this "
                    "much wall time (0: no limit)")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--stop-at", type=float, default=0.0, help="stop once every family's "
                    "held-out validity reaches this (0: run the whole budget)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--hidden", type=int, default=Shape.hidden)
    ap.add_argument("--layers", type=int, default=Shape.layers)
    ap.add_argument("--heads", type=int, default=Shape.heads)
    ap.add_argument("--kv-heads", type=int, default=Shape.kv_heads)
    ap.add_argument("--ffn", type=int, default=Shape.ffn)
    ap.add_argument("--canvas", type=int, default=48, help="llada: answer canvas (tokens)")
    ap.add_argument("--eval-steps", type=int, default=0, help="llada: decoding steps "
                    "(0: one token per step, = --canvas)")
    ap.add_argument("--max-new", type=int, default=24, help="ar: greedy tokens at most")
    ap.add_argument("--examples", type=int, default=60000, help="training draws encoded")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--lengths", default="", help="list lengths LOW-HIGH for copy, reverse and "
                    "alphabetical training draws (default: the generator's 3-5)")
    ap.add_argument("--init", type=Path, help="start from a probe's weights (<tag>.pt) of the "
                    "same kind and shape instead of random weights")
    ap.add_argument("--tag", default="", help="output name (default: kind + families)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--validity-python", default=DEFAULT_VALIDITY_PYTHON)
    ap.add_argument("--diagnose", action="store_true", help="print the diagnostics and stop")
    ap.add_argument("--rows", type=int, default=8, help="table: checkpoints shown at most")
    args = ap.parse_args(argv)
    if args.kind == "table":
        for path in args.curves:
            print(curve_table(path, args.rows))
        return 0
    from tokenizers import Tokenizer
    if args.kind == "errors":
        for path in args.curves:
            print(json.dumps(errors(path), indent=1))
        return 0

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    families = args.families.split(",")
    for f in families:
        if f not in RULE_FAMILIES:
            raise SystemExit(f"--families: {f!r} is not one of {', '.join(RULE_FAMILIES)}")
    weights = (parse_mix(args.mix) if args.mix
               else {f: 0.8 / len(families) for f in families} | {"answers": 0.2})
    args.eval_steps = args.eval_steps or args.canvas
    tag = args.tag or f"{args.kind}-{'-'.join(families)}"
    tok = Tokenizer.from_file(str(TOKENIZER_PATH))
    held = {f: [e for e in read_heldout() if e.family == f] for f in families}
    lengths = (tuple(int(x) for x in args.lengths.split("-")) if args.lengths else None)
    examples = probe_examples(args.examples, weights, args.seed,
                              (lengths[0], lengths[1]) if lengths else None)
    data = encode(tok, examples)
    diag = diagnose(tok, examples, held, data)
    print(json.dumps(diag, indent=1), file=sys.stderr)
    if args.diagnose:
        return 0
    shape = Shape(args.hidden, args.layers, args.heads, args.kv_heads, args.ffn)
    model = TinyLlama(tok.get_vocab_size(), shape, causal=args.kind == "ar")
    if args.init:
        model.load_state_dict(torch.load(args.init))
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.ndim >= 2]
    other = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(args.seed + 7)
    g_eval = torch.Generator().manual_seed(args.seed + 9)
    rng = np.random.default_rng(args.seed + 8)
    valid = Validity(args.validity_python)
    args.out.mkdir(parents=True, exist_ok=True)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    report: dict[str, Any] = {"settings": settings, "mix": weights, "shape": asdict(shape),
                              "parameters": n_params, "diagnostics": diag, "curve": []}
    fields = ["cpu_seconds", "eval_cpu_seconds", "wall_seconds", "step", "loss", "lr"]
    for f in families:
        fields += [f"{f}_valid", f"{f}_total", f"{f}_validity", f"{f}_answer_loss"]
    csv_path = args.out / f"{tag}.csv"
    fh = csv_path.open("w", newline="")
    writer = csv.writer(fh)
    writer.writerow(fields)
    print(f"{tag}: {n_params} parameters, mix {weights}, {args.cpu_minutes} CPU-min",
          file=sys.stderr)
    budget = args.cpu_minutes * 60
    cpu0, wall0 = time.process_time(), time.perf_counter()
    eval_cpu = 0.0
    step, losses = 0, []

    def checkpoint(lr: float) -> dict[str, dict[str, Any]]:
        nonlocal eval_cpu
        c0 = time.process_time()
        res = evaluate(model, args.kind, tok, held, valid, args, g_eval)
        eval_cpu += time.process_time() - c0
        train_cpu = time.process_time() - cpu0 - eval_cpu
        loss = float(np.mean(losses)) if losses else float("nan")
        row: list[Any] = [round(train_cpu, 1), round(eval_cpu, 1),
                          round(time.perf_counter() - wall0, 1), step, round(loss, 4),
                          f"{lr:.2e}"]
        for f in families:
            r = res[f]
            row += [r["valid"], r["total"], round(r["valid"] / r["total"], 4), r["answer_loss"]]
        writer.writerow(row)
        fh.flush()
        report["curve"].append(dict(zip(fields, row)))
        print("  " + "  ".join(f"{k}={v}" for k, v in zip(fields, row)), file=sys.stderr)
        for f in families:
            for m in res[f]["misses"][:2]:
                print(f"    {f} miss: {m['prompt']!r} -> {m['got']!r}", file=sys.stderr)
        losses.clear()
        return res

    lr = 0.0
    res = checkpoint(lr)
    stopped = "cpu budget"
    while True:
        train_cpu = time.process_time() - cpu0 - eval_cpu
        if train_cpu >= budget:
            break
        if args.wall_minutes and time.perf_counter() - wall0 >= args.wall_minutes * 60:
            stopped = "wall limit"
            break
        progress = train_cpu / budget
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (
            0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        for group in opt.param_groups:
            group["lr"] = lr
        batch = [data[i] for i in rng.integers(0, len(data), args.batch)]
        if args.kind == "ar":
            loss = ar_loss(model, *ar_batch(batch))
        else:
            loss = diffusion_loss(model, *diffusion_batch(batch, args.canvas), g)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        step += 1
        if step % args.eval_every == 0:
            res = checkpoint(lr)
            if args.stop_at and all(r["valid"] >= args.stop_at * r["total"]
                                    for r in res.values()):
                stopped = f"every family at {args.stop_at:.0%} or more"
                break
    final = checkpoint(lr) if step % args.eval_every else res
    valid.close()
    report |= {"stopped_by": stopped, "steps": step,
               "train_cpu_seconds": round(time.process_time() - cpu0 - eval_cpu, 1),
               "eval_cpu_seconds": round(eval_cpu, 1),
               "wall_seconds": round(time.perf_counter() - wall0, 1), "final": final}
    (args.out / f"{tag}.json").write_text(json.dumps(report, indent=1) + "\n")
    torch.save(model.state_dict(), args.out / f"{tag}.pt")
    fh.close()
    print(f"{tag}: stopped by {stopped} after {step} steps; wrote {csv_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
