"""``llmnb diffuse``: masked diffusion, its flags one ``DiffusionOptions``."""
from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from llmnb.cli.ar import load_batched
from llmnb.cli.flags import (
    AUTO_BATCHED, add_weights_flag, non_negative_float, non_negative_int, positive_int,
    probability, utf8_text,
)
from llmnb.cli.terminal import json_text, safe_text
from llmnb.errors import EXIT_OK, UsageError


def cmd_diffuse(a: argparse.Namespace) -> int:
    from llmnb import diffusion
    from llmnb.diffusion.options import DiffusionOptions
    from llmnb.perf.threads import threads

    prompt: str | list[int] = a.prompt
    if a.tokens is not None:
        try:
            prompt = [int(x) for x in a.tokens.split(",") if x.strip()]
        except ValueError:
            raise UsageError(f"--tokens: expected comma-separated token ids, "
                             f"got {a.tokens!r}") from None
    values = {f.name: getattr(a, f.name) for f in fields(DiffusionOptions)}
    values["eb_temperature"] = tuple(values["eb_temperature"])          # (t_max, t_min)
    options = DiffusionOptions(**values)
    with threads(a.threads):
        r = diffusion.denoise(load_batched(a), prompt, options)
    s = r.stats
    if a.json:
        print(json_text({"prompt": a.prompt if a.tokens is None else None,
                         "prompt_ids": r.prompt_ids, "ids": r.tokens, "text": r.text,
                         "steps_taken": r.steps_taken, "stats": s.to_json()}))
    else:
        print(r.text if a.raw else safe_text(r.text))
    remasked = f", {sum(s.remasked)} re-masked" if sum(s.remasked) else ""
    cache = options.cache_policy if options.cache else "off"
    print(f"[{r.steps_taken} steps{remasked}, {s.seconds:.2f} s | {s.tok_s:.1f} tok/s over all "
          f"{s.gen_length} positions (diffuse-cpp's figure) | {s.content_tokens} content tokens, "
          f"{s.useful_tok_s:.1f} tok/s | cache {cache} | {a.threads} thread(s)]", file=sys.stderr)
    return EXIT_OK


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    # every flag of a DiffusionOptions field has the field's name as its dest: cmd_diffuse
    # builds the options from them by name
    s = sub.add_parser("diffuse",
                       help="fill a canvas of masks with a diffusion model (LLaDA, Dream)")
    s.add_argument("model", metavar="MODEL")
    s.add_argument("-p", "--prompt", default="", type=utf8_text, help="the prompt text")
    s.add_argument("--tokens", metavar="IDS",
                   help="the prompt as comma-separated token ids instead")
    s.add_argument("-n", dest="gen_length", metavar="N", type=positive_int, default=128,
                   help="generated positions (128)")
    s.add_argument("-s", "--steps", type=positive_int, default=32, help="denoising steps (32)")
    s.add_argument("--scheduler", default="low_confidence",
                   choices=["low_confidence", "entropy_exit", "threshold", "factor",
                            "entropy_bound", "klass", "wino"],
                   help="how many positions a step commits (low_confidence); threshold, factor, "
                        "entropy_bound and wino run each block until it is done")
    s.add_argument("--schedule", default="cosine", choices=["cosine", "linear", "even", "eps"],
                   help="transfer counts per step (cosine, as diffuse-cpp)")
    s.add_argument("--remasking", default=None,
                   choices=["low_confidence", "probability", "maskgit_plus", "topk_margin",
                            "entropy", "random"],
                   help="which positions first: the confidence rule (default: the scheduler's "
                        "own; low_confidence's is the raw top-1 logit, as diffuse-cpp)")
    s.add_argument("--entropy-threshold", type=non_negative_float, default=1.5,
                   help="entropy_exit: positions below this many nats count as easy (1.5)")
    s.add_argument("--threshold", type=probability, default=0.9, help="threshold scheduler (0.9)")
    s.add_argument("--factor", type=non_negative_float, default=1.0, help="factor scheduler (1.0)")
    s.add_argument("--eb-gamma", type=non_negative_float, default=0.1, metavar="G",
                   help="entropy_bound (EB-Sampler): entropy budget per step (0.1)")
    s.add_argument("--eb-temperature", type=non_negative_float, nargs=2, default=[0.8, 0.4],
                   metavar=("T_MAX", "T_MIN"),
                   help="entropy_bound: sampling temperature annealed over a block's steps "
                        "(0.8 0.4; 0 0 = greedy)")
    s.add_argument("--klass-confidence", type=probability, default=None, metavar="P",
                   help="klass: probability a position must exceed (LLaDA 0.6, Dream 0.9)")
    s.add_argument("--klass-kl", type=non_negative_float, default=None, metavar="KL",
                   help="klass: KL between steps a stable position stays under "
                        "(LLaDA 0.015, Dream 0.001)")
    s.add_argument("--klass-history", type=positive_int, default=2, metavar="N",
                   help="klass: steps a position must stay stable (2)")
    s.add_argument("--wino-draft", type=probability, default=0.6, metavar="P",
                   help="wino: probability a draft must exceed (0.6)")
    s.add_argument("--wino-verify", type=probability, default=0.9, metavar="P",
                   help="wino: re-mask a draft whose re-read probability falls under this (0.9)")
    s.add_argument("--block-length", type=positive_int, default=None,
                   help="semi-autoregressive blocks of this many positions (default: one block)")
    s.add_argument("--temp", dest="temperature", metavar="TEMP", type=non_negative_float,
                   default=0.0, help="temperature (0)")
    s.add_argument("--seed", type=int, default=42)
    s.add_argument("--no-cache", dest="cache", action="store_false",
                   help="recompute every position every step")
    s.add_argument("--cache-keep-active", type=non_negative_int, default=0, metavar="N",
                   help="keep a committed position recomputed for N more steps (0)")
    s.add_argument("--cache-refresh", type=non_negative_int, default=0, metavar="N",
                   help="a full forward every N steps (0 = never)")
    s.add_argument("--cache-policy", choices=["diffuse", "prefix", "dual", "elastic"],
                   default="diffuse",
                   help="what a cached step recomputes: diffuse-cpp's active set, Fast-dLLM's "
                        "block + suffix (prefix) or block only (dual), or a window of masks "
                        "refreshed when attention drifts (elastic)")
    s.add_argument("--elastic-gamma", type=probability, default=0.9, metavar="G",
                   help="elastic: refresh when the tracked token's attention has cosine "
                        "similarity under G with the last step's (0.9)")
    s.add_argument("--elastic-window", type=positive_int, default=16, metavar="N",
                   help="elastic: masked positions a step proposes for and recomputes (16)")
    s.add_argument("--suffix-window", type=non_negative_int, default=None, metavar="N",
                   help="the forward sees only N positions beyond the current block (DPad; "
                        "default: all of them)")
    s.add_argument("--chat", action="store_true", help="apply the model's chat template")
    s.add_argument("--system", type=utf8_text, help="system message (with --chat)")
    s.add_argument("--threads", type=positive_int, default=1)
    add_weights_flag(s, AUTO_BATCHED)
    s.add_argument("--tokenizer", metavar="PATH", help="a tokenizer.json (files without one)")
    s.add_argument("--raw", action="store_true", help="print control characters unchanged")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_diffuse)
