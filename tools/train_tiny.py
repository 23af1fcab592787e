"""Train llmnb's tiny models on the seeded chat corpus and write them as GGUF.

- ``tiny-ar``    stock ``LlamaForCausalLM``, causal, next-token loss on the assistant's answer.
- ``tiny-llada`` the same architecture trained from scratch with LLaDA's masked-diffusion
                 objective: bidirectional attention (an all-zero 4-D additive mask), t ~ U(0, 1],
                 each answer token masked with probability t, loss = CE on masked tokens / t,
                 the prompt never masked, the answer padded with EOS to a fixed length
                 (Nie et al. 2025, "Large Language Diffusion Models", SFT recipe).
- ``tiny-dream`` stock ``Qwen2ForCausalLM`` (QKV biases) initialised from tiny-ar's weights,
                 bidirectional, Dream's shifted objective: the logits at position i-1 predict
                 masked token i (Ye et al. 2025, "Dream 7B").

Each run is seeded, CPU only, bounded by ``--minutes`` (or exactly ``--steps``), logs its loss
curve to ``data/models/<name>.loss.csv``, keeps its HF checkpoint in ``--work``, converts it with
``make_oracle_fixtures.convert_checkpoint`` (llama.cpp's conventions; F16) and embeds the
tokenizer of ``tiny_tokenizer.py``. Then it evaluates on every third prompt of
``data/eval/tiny_heldout.jsonl`` torch-side (tiny-ar greedy; the diffusion models with
low-confidence remasking, 16 steps of the cosine schedule, as ``eval_tiny.py`` runs llmnb) and
writes ``data/models/<name>.json``. ``eval_tiny.py`` evaluates all three through llmnb itself.

    python tools/train_tiny.py ar --minutes 15
    python tools/train_tiny.py llada --minutes 20
    python tools/train_tiny.py dream --minutes 15        # needs tiny-ar's checkpoint in --work
    python tools/train_tiny.py eval tiny-llada           # re-evaluate a kept checkpoint
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from make_oracle_fixtures import convert_checkpoint
from tiny_corpus import SEED, Example, chatml, read_heldout, training_examples
from tiny_tokenizer import (ENDOFTEXT, IM_END, MASK, TOKENIZER_PATH, gguf_tokenizer_fields,
                            load_tokenizer)

from llmnb.diffusion.transfer_schedule import transfer_count
from llmnb.gguf import open as open_gguf
from llmnb.gguf.constants import STRING, GGMLType
from llmnb.gguf.reader import MetadataField
from llmnb.gguf.writer import TensorToWrite, write_gguf

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "data" / "models"
DEFAULT_WORK = Path("/tmp/llmnb-tiny")
GEN_LENGTH = 48          # the diffusion models' answer canvas (longest answer + EOS is 48)
EVAL_STEPS = 16
N_TRAIN = 100_000        # training examples drawn from the corpus generator


@dataclass(frozen=True)
class Shape:
    hidden: int = 160
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 640
    ctx: int = 256
    theta: float = 10000.0


SHAPE = Shape()
KINDS = {"ar": "tiny-ar", "llada": "tiny-llada", "dream": "tiny-dream"}
ARCH = {"tiny-ar": "llama", "tiny-llada": "llada", "tiny-dream": "dream"}


# ================================================================================================
# Data
# ================================================================================================

def encode_examples(tok: Any, examples: list[Example]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids + <|im_end|>) per example; the prompt is the ChatML rendering.

    The prompt ends in "\\n", a pre-token of its own, so encoding the two halves apart gives
    the same ids as encoding the whole conversation."""
    prompts = tok.encode_batch([chatml(e.prompt, e.system) for e in examples])
    answers = tok.encode_batch([e.answer for e in examples])
    return [(p.ids, a.ids + [IM_END]) for p, a in zip(prompts, answers)]


def ar_batch(data: list[tuple[list[int], list[int]]], idx: list[int]) -> tuple[Any, Any]:
    """Right-padded ids and labels (-100 outside the answer) for the causal loss."""
    rows = [data[i][0] + data[i][1] for i in idx]
    n = max(len(r) for r in rows)
    ids = torch.full((len(rows), n), ENDOFTEXT, dtype=torch.long)
    labels = torch.full((len(rows), n), -100, dtype=torch.long)
    for r, i in enumerate(idx):
        p, a = data[i]
        ids[r, :len(p) + len(a)] = torch.tensor(p + a)
        labels[r, len(p):len(p) + len(a)] = torch.tensor(a)
    return ids, labels


def diffusion_batch(data: list[tuple[list[int], list[int]]],
                    idx: list[int]) -> tuple[Any, Any]:
    """Ids (prompt + answer + EOS padding) and a mask of the answer region (B, T).

    Each answer is padded with EOS (<|im_end|>) to GEN_LENGTH, as LLaDA's SFT pads with EOS;
    rows with shorter prompts get more EOS so that all rows end together."""
    n = max(len(data[i][0]) for i in idx) + GEN_LENGTH
    ids = torch.full((len(idx), n), IM_END, dtype=torch.long)
    answer = torch.zeros((len(idx), n), dtype=torch.bool)
    for r, i in enumerate(idx):
        p, a = data[i]
        a = a[:GEN_LENGTH]
        ids[r, :len(p)] = torch.tensor(p)
        ids[r, len(p):len(p) + len(a)] = torch.tensor(a)
        answer[r, len(p):] = True
    return ids, answer


# ================================================================================================
# Models
# ================================================================================================

def build(kind: str, vocab: int, shape: Shape = SHAPE) -> Any:
    import transformers

    common = dict(vocab_size=vocab, hidden_size=shape.hidden, intermediate_size=shape.ffn,
                  num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                  num_key_value_heads=shape.kv_heads, max_position_embeddings=shape.ctx,
                  rope_theta=shape.theta, tie_word_embeddings=False,
                  bos_token_id=ENDOFTEXT, eos_token_id=IM_END, pad_token_id=ENDOFTEXT)
    if kind == "tiny-dream":
        config = transformers.Qwen2Config(rms_norm_eps=1e-6, **common)
        config.architectures = ["Qwen2ForCausalLM"]
        return transformers.Qwen2ForCausalLM._from_config(config, attn_implementation="sdpa")
    config = transformers.LlamaConfig(rms_norm_eps=1e-5, **common)
    config.architectures = ["LlamaForCausalLM"]
    return transformers.LlamaForCausalLM._from_config(config, attn_implementation="sdpa")


def bidirectional_bias(b: int, n: int) -> Any:
    """The additive all-zero 4-D mask that turns the stock models bidirectional (oracle §5)."""
    return torch.zeros(b, 1, n, n)


def init_from_ar(model: Any, ar_dir: Path) -> list[str]:
    """Copy tiny-ar's weights into `model` (same names: Llama for llada, Qwen2 for dream);
    parameters tiny-ar lacks (Qwen2's QKV biases) start at 0 and are returned."""
    from safetensors.torch import load_file

    ar = load_file(str(ar_dir / "model.safetensors"))
    fresh = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in ar:
                p.copy_(ar[name])
            else:
                p.zero_()
                fresh.append(name)
    return fresh


# ================================================================================================
# Losses
# ================================================================================================

def ar_loss(model: Any, ids: Any, labels: Any) -> Any:
    logits = model(ids).logits                                 # (B, T, V)
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                             labels[:, 1:].reshape(-1), ignore_index=-100)


def diffusion_loss(model: Any, ids: Any, answer: Any, shifted: bool, g: Any) -> Any:
    """LLaDA's masked-diffusion loss (Dream's when `shifted`).

    t ~ U(0, 1] per row, p_mask = (1 - eps) t + eps; each answer token is replaced by the mask
    with probability p_mask; loss = sum over masked tokens of CE / p_mask, divided by the answer
    length, averaged over rows. Dream reads the logits of position i-1 for token i.
    """
    b, n = ids.shape
    eps = 1e-3
    t = torch.rand(b, 1, generator=g)
    p_mask = (1 - eps) * t + eps                               # (B, 1)
    masked = (torch.rand(b, n, generator=g) < p_mask) & answer  # (B, T)
    noisy = torch.where(masked, torch.full_like(ids, MASK), ids)
    logits = model(noisy, attention_mask=bidirectional_bias(b, n)).logits  # (B, T, V)
    if shifted:
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                           ids.reshape(-1), reduction="none").view(b, n)
    weighted = (ce * masked / p_mask).sum(dim=1) / answer.sum(dim=1)
    return weighted.mean()


# ================================================================================================
# Training loop
# ================================================================================================

def train(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(SEED)
    torch.set_num_threads(args.threads)
    tok = load_tokenizer(TOKENIZER_PATH)
    vocab = tok.get_vocab_size()
    data = encode_examples(tok, training_examples(N_TRAIN))
    model = build(kind, vocab)
    fresh: list[str] = []
    phase = 0
    curve_path = MODELS / f"{kind}.loss.csv"
    curve: list[tuple[int, float, float, float]] = []
    if args.resume:   # continue a kept checkpoint: fresh optimizer, new warmup + schedule
        from safetensors.torch import load_file
        model.load_state_dict(load_file(str(args.work / kind / "model.safetensors")))
        with curve_path.open() as fh:
            curve = [(int(r["step"]), float(r["seconds"]), float(r["loss"]), float(r["lr"]))
                     for r in csv.DictReader(fh)]
        phase = len(training_phases(json.loads((MODELS / f"{kind}.json").read_text())))
    elif kind == "tiny-dream" or args.init_ar:
        fresh = init_from_ar(model, args.work / "tiny-ar")
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.ndim >= 2]
    other = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(SEED + 7 + 100 * phase)
    rng = np.random.default_rng(SEED + 8 + 100 * phase)
    step0, seconds0 = (curve[-1][0], curve[-1][1]) if curve else (0, 0.0)
    t0 = time.perf_counter()
    step, warmup = 0, args.warmup
    print(f"{kind}: {n_params} parameters, {len(data)} examples, batch {args.batch}, "
          f"{'%d steps' % args.steps if args.steps else '%.1f min' % args.minutes}",
          file=sys.stderr)
    while True:
        elapsed = time.perf_counter() - t0
        progress = step / args.steps if args.steps else elapsed / (args.minutes * 60)
        if progress >= 1.0:
            break
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 *
                                                        (1 + math.cos(math.pi * progress)))
        for group in opt.param_groups:
            group["lr"] = lr
        idx = rng.integers(0, len(data), args.batch).tolist()
        if kind == "tiny-ar":
            loss = ar_loss(model, *ar_batch(data, idx))
        else:
            ids, answer = diffusion_batch(data, idx)
            loss = diffusion_loss(model, ids, answer, kind == "tiny-dream", g)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        curve.append((step0 + step, round(seconds0 + time.perf_counter() - t0, 2),
                      loss.item(), lr))
        if step % 100 == 0:
            recent = np.mean([c[2] for c in curve[-100:]])
            print(f"  step {step0 + step:5d}  {curve[-1][1]:7.1f} s  loss {recent:.4f}  "
                  f"lr {lr:.2e}",
                  file=sys.stderr)
    seconds = time.perf_counter() - t0
    with curve_path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["step", "seconds", "loss", "lr"])
        w.writerows(curve)
    model.eval()
    save_checkpoint(model, kind, args.work / kind)
    return {"phase": phase, "steps": step, "steps_total": step0 + step,
            "train_seconds": round(seconds, 1), "threads": args.threads,
            "minutes_budget": None if args.steps else args.minutes,
            "batch": args.batch, "lr": args.lr, "warmup": warmup, "parameters": n_params,
            "final_loss_mean_last_100": round(float(np.mean([c[2] for c in curve[-100:]])), 4),
            "initialised_from": (f"{kind} after phase {phase - 1} (resumed)" if args.resume
                                 else "tiny-ar" if kind == "tiny-dream" or args.init_ar
                                 else "random (seed %d)" % SEED),
            "zero_initialised": fresh, "loss_curve": curve_path.name}


def training_phases(report: dict[str, Any]) -> list[dict[str, Any]]:
    """A report's training phases (a first run may have stored a single dict)."""
    t = report["training"]
    return [t] if isinstance(t, dict) else list(t)


def save_checkpoint(model: Any, kind: str, out: Path) -> None:
    """HF checkpoint (safetensors + config.json), plus the mask id the converter needs."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    config = json.loads((out / "config.json").read_text())
    if kind != "tiny-ar":
        config["mask_token_id"] = MASK
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


# ================================================================================================
# GGUF: convert_checkpoint, then the tokenizer replaces its synthetic vocabulary
# ================================================================================================

def write_model_gguf(kind: str, work: Path, out: Path) -> None:
    tmp = work / f"{kind}.no-tokenizer.gguf"
    convert_checkpoint(work / kind, tmp, ARCH[kind], outtype="f16", convention="llama.cpp",
                       name=kind)
    tok = load_tokenizer(TOKENIZER_PATH)
    with open_gguf(tmp) as f:
        fields = [fld for key, fld in f.fields.items()
                  if not key.startswith("tokenizer.") and key != "general.architecture"]
        fields.append(MetadataField("general.license", STRING, "Apache-2.0"))
        fields += gguf_tokenizer_fields(tok)
        tensors = []
        for name, info in f.tensors.items():
            dtype = np.float16 if info.ggml_type == GGMLType.F16 else np.float32
            data = f.raw(name).view(dtype).reshape(info.shape).copy()
            tensors.append(TensorToWrite(name, data, info.ggml_type, info.shape))
        arch = f.architecture
    write_gguf(out, arch, fields, tensors)
    tmp.unlink()


# ================================================================================================
# Torch-side evaluation (the weights rounded to F16, exactly as the GGUF holds them)
# ================================================================================================

def load_for_eval(kind: str, work: Path) -> Any:
    import transformers

    cls = transformers.Qwen2ForCausalLM if kind == "tiny-dream" else transformers.LlamaForCausalLM
    model = cls.from_pretrained(work / kind, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.copy_(p.half().float())
    return model


def answer_text(tok: Any, ids: list[int]) -> str:
    """Decode up to the first end-of-turn / end-of-text / mask id."""
    out = []
    for i in ids:
        if i in (IM_END, ENDOFTEXT, MASK):
            break
        out.append(i)
    return str(tok.decode(out))


@torch.no_grad()
def generate_ar(model: Any, prompt: list[int], max_new: int = GEN_LENGTH) -> list[int]:
    ids = list(prompt)
    for _ in range(max_new):
        nxt = int(model(torch.tensor([ids])).logits[0, -1].argmax())
        ids.append(nxt)
        if nxt == IM_END:
            break
    return ids[len(prompt):]


@torch.no_grad()
def generate_diffusion(model: Any, prompt: list[int], shifted: bool, steps: int = EVAL_STEPS,
                       gen_length: int = GEN_LENGTH) -> list[int]:
    """Low-confidence remasking at temperature 0: each step predicts every masked position
    (argmax), keeps the n with the highest softmax probability, n from llmnb's cosine schedule
    (``transfer_count``, one block). Dream reads row i-1."""
    x = torch.tensor([prompt + [MASK] * gen_length])
    n = x.shape[1]
    is_masked = torch.zeros(n, dtype=torch.bool)
    is_masked[len(prompt):] = True
    for step in range(steps):
        k = transfer_count("cosine", step, steps, int(is_masked.sum()), gen_length)
        logits = model(x, attention_mask=bidirectional_bias(1, n)).logits[0]   # (T, V)
        if shifted:
            logits = torch.cat([logits[:1], logits[:-1]])
        probs = torch.softmax(logits.float(), dim=-1)
        conf, token = probs.max(dim=-1)
        conf = torch.where(is_masked, conf, torch.full_like(conf, -1.0))
        pick = torch.topk(conf, min(k, int(is_masked.sum()))).indices
        x[0, pick] = token[pick]
        is_masked[pick] = False
    return x[0, len(prompt):].tolist()


def evaluate(kind: str, work: Path, threads: int, every: int = 3) -> dict[str, Any]:
    """Validity on every `every`-th held-out prompt, single- and multi-answer apart."""
    torch.set_num_threads(threads)
    tok = load_tokenizer(TOKENIZER_PATH)
    model = load_for_eval(kind, work)
    held = read_heldout()[::every]
    t0 = time.perf_counter()
    per: dict[str, list[int]] = {}
    misses = []
    for e in held:
        prompt = tok.encode(chatml(e.prompt)).ids
        if kind == "tiny-ar":
            out = generate_ar(model, prompt)
        else:
            out = generate_diffusion(model, prompt, kind == "tiny-dream")
        text = answer_text(tok, out)
        ok = e.valid(text)
        for key in ("single" if e.modes == 1 else "multi", e.family):
            c = per.setdefault(key, [0, 0])
            c[0] += ok
            c[1] += 1
        if not ok and len(misses) < 12:
            misses.append({"prompt": e.prompt, "got": text.strip()})
    return {"method": "torch-side, weights rounded to F16 as in the GGUF, every "
            f"{every}rd held-out prompt, " + ("greedy, up to 48 new tokens" if kind == "tiny-ar"
            else f"low-confidence remasking (softmax probability), {EVAL_STEPS} steps of the "
            f"cosine schedule, {GEN_LENGTH}-token canvas, temperature 0"),
            **{k: {"valid": c, "total": n, "validity": round(c / n, 4)}
               for k, (c, n) in per.items()},
            "seconds": round(time.perf_counter() - t0, 1), "misses": misses}


@torch.no_grad()
def engine_agreement(kind: str, work: Path) -> dict[str, Any]:
    """Max |torch logits - llmnb logits| on one canvas (a held-out prompt + 48 masks), the
    model's own attention (causal for tiny-ar, bidirectional otherwise; unshifted logits):
    evidence that the GGUF (names, Q/K permutation, biases, flags) holds the trained model."""
    import llmnb

    tok = load_tokenizer(TOKENIZER_PATH)
    model = load_for_eval(kind, work)
    ids = tok.encode(chatml(read_heldout()[0].prompt)).ids + [MASK] * GEN_LENGTH
    x = torch.tensor([ids])
    mask = None if kind == "tiny-ar" else bidirectional_bias(1, len(ids))
    ref = model(x, attention_mask=mask).logits[0].float().numpy()
    ours = llmnb.load(MODELS / f"{kind}.gguf").forward(ids)
    diff = float(np.abs(ref - ours).max())
    return {"tokens": len(ids), "max_abs_diff": diff, "logit_std": float(ref.std())}


# ================================================================================================

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=[*KINDS, "eval"])
    ap.add_argument("name", nargs="?", help="for eval: tiny-ar | tiny-llada | tiny-dream")
    ap.add_argument("--minutes", type=float, default=15.0, help="training time budget")
    ap.add_argument("--steps", type=int, default=0, help="train exactly this many steps "
                    "(overrides --minutes; the lr schedule follows steps instead of time)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK, help="HF checkpoints go here")
    ap.add_argument("--no-eval", action="store_true")
    ap.add_argument("--init-ar", action="store_true", help="llada: start from tiny-ar's "
                    "checkpoint in --work (same architecture) instead of random weights")
    ap.add_argument("--resume", action="store_true", help="continue the checkpoint in --work "
                    "(a new phase: fresh optimizer, warmup and schedule; the curve continues)")
    args = ap.parse_args(argv)
    kind = args.name if args.kind == "eval" else KINDS[args.kind]
    report_path = MODELS / f"{kind}.json"
    if args.kind == "eval":
        report = json.loads(report_path.read_text()) if report_path.exists() else {}
    else:
        phase = train(kind, args)
        if args.resume:
            report = json.loads(report_path.read_text())
            report["training"] = training_phases(report) + [phase]
        else:
            report = {"name": kind, "arch": ARCH[kind], "shape": SHAPE.__dict__,
                      "gen_length": GEN_LENGTH, "tokenizer": TOKENIZER_PATH.name,
                      "training": [phase]}
        out = MODELS / f"{kind}.gguf"
        write_model_gguf(kind, args.work, out)
        report["gguf_bytes"] = out.stat().st_size
        print(f"wrote {out} ({out.stat().st_size} bytes)", file=sys.stderr)
    if not args.no_eval:
        report["engine_agreement"] = engine_agreement(kind, args.work)
        print(f"{kind}: torch vs llmnb logits {report['engine_agreement']}", file=sys.stderr)
        report["eval_torch"] = evaluate(kind, args.work, args.threads)
        ev = report["eval_torch"]
        print(f"{kind}: held-out validity single {ev['single']['validity']:.3f} multi "
              f"{ev['multi']['validity']:.3f}", file=sys.stderr)
    report_path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
