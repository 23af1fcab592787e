"""``llmnb generate`` and ``llmnb perplexity``: autoregressive decoding, with speculative
decoding and the selective KV cache as options."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmnb.cli.flags import (
    AUTO_BATCHED, AUTO_WEIGHTS, add_weights_flag, non_negative_float, non_negative_int,
    positive_int, probability, utf8_text,
)
from llmnb.cli.terminal import json_text, progress_bar, stream_out
from llmnb.errors import EXIT_INPUT, EXIT_OK, LLMNBError, UsageError

if TYPE_CHECKING:                 # the handlers import what they run: parsing stays light
    from llmnb.ar.sampling import Sampler
    from llmnb.model import Model


class TextFileError(LLMNBError):
    """A text file that cannot be read as UTF-8 text."""

    exit_code = EXIT_INPUT


def sampler_from(a: argparse.Namespace) -> Sampler:
    """--temp (0: greedy), --top-k, --top-p, --min-p and --seed as a sampler."""
    from llmnb.ar.sampling import Greedy, Sampler

    if a.temp == 0.0:
        return Greedy()
    return Sampler(temperature=a.temp, top_k=a.top_k, top_p=a.top_p, min_p=a.min_p, seed=a.seed)


def kv_args(a: argparse.Namespace) -> dict[str, Any]:
    """The --kv-* flags as keyword arguments of generate / perplexity, checked before any work
    (none without --kv-budget)."""
    from llmnb.ar.kv_eviction import check_budget

    if a.kv_budget is None:
        for flag in ("recent", "sinks", "policy", "scope"):
            if getattr(a, "kv_" + flag) is not None:
                raise UsageError(f"--kv-{flag}: expected --kv-budget N as well")
        return {}
    kw: dict[str, Any] = {"kv_budget": a.kv_budget, "kv_recent": a.kv_recent,
                          "kv_sinks": 4 if a.kv_sinks is None else a.kv_sinks,
                          "kv_policy": a.kv_policy or "initial_key",
                          "kv_scope": a.kv_scope or "layer"}
    check_budget(kw["kv_budget"], kw["kv_recent"], kw["kv_sinks"], kw["kv_policy"], kw["kv_scope"])
    return kw


def _spec_note(spec: dict[str, Any]) -> str:
    if not spec:
        return ""
    acc = ", ".join(f"{k} {'n/a' if v is None else format(v, '.0%')}"   # n/a: never verified
                    for k, v in spec["acceptance"].items())
    return (f" | speculative: {spec['tokens_per_forward']:.2f} tokens per target forward, "
            f"{spec['verified_rounds']}/{spec['rounds']} rounds verified, accepted {acc}")


def _kv_note(kw: dict[str, Any]) -> str:
    return f" | kv budget {kw['kv_budget']} ({kw['kv_policy']}, {kw['kv_scope']})" if kw else ""


def cmd_generate(a: argparse.Namespace) -> int:
    from llmnb.ar import generate
    from llmnb.model import load
    from llmnb.perf.threads import threads

    kv = kv_args(a)
    if a.spec_k is not None and not a.spec:
        raise UsageError("--spec-k: expected --spec DRAFT as well")
    if a.spec and kv:
        raise UsageError("--spec: speculative decoding keeps the full KV cache; drop --kv-budget")
    spec: dict[str, object] = {}
    with threads(a.threads):
        model = load(a.model, tokenizer=a.tokenizer, weights=a.weights)
        sampler = sampler_from(a)
        stream = None if a.json else stream_out(a.raw)
        if a.spec:
            from llmnb.ar.speculative import generate_speculative

            sr = generate_speculative(model, a.prompt, a.spec, max_new_tokens=a.n, sampler=sampler,
                                      k=4 if a.spec_k is None else a.spec_k, chat=a.chat,
                                      system=a.system, stop=a.stop or (), on_text=stream)
            spec = sr.spec_json()
            ids, tokens, text, stop_reason, s = (sr.prompt_ids, sr.tokens, sr.text,
                                                 sr.stop_reason, sr.stats)
        else:
            r = generate(model, a.prompt, max_new_tokens=a.n, sampler=sampler, chat=a.chat,
                         system=a.system, stop=a.stop or (), on_text=stream, **kv)
            ids, tokens, text, stop_reason, s = (r.prompt_ids, r.tokens, r.text, r.stop_reason,
                                                 r.stats)
    if a.json:
        print(json_text({"prompt": a.prompt, "prompt_ids": ids, "ids": tokens, "text": text,
                         "stop_reason": stop_reason, "stats": s.to_json()}
                        | ({"spec": spec} if spec else {})))
    else:
        print(flush=True)
    print(f"[{s.prompt_tokens} prompt tokens, prefill {s.prefill_tok_s:.1f} tok/s | "
          f"{s.new_tokens} new tokens, decode {s.decode_tok_s:.1f} tok/s | stop: {stop_reason} | "
          f"{a.threads} thread(s), {model.plan.weights} weights{_kv_note(kv)}{_spec_note(spec)}]",
          file=sys.stderr)
    return EXIT_OK


def load_batched(a: argparse.Namespace) -> Model:
    """The model for a command whose passes cover many tokens at once (diffuse, perplexity):
    with --weights auto, float32 weights when they fit in memory (those passes are
    compute-bound, and sgemm on a float32 copy beats dequantizing a slice per pass: see
    notebooks 07 and 09), else the quantized ones."""
    from llmnb.model import load
    from llmnb.model.weights import MemoryPreflightError

    if a.weights != "auto":
        return load(a.model, tokenizer=a.tokenizer, weights=a.weights)
    try:
        return load(a.model, tokenizer=a.tokenizer, weights="f32", residency="resident")
    except MemoryPreflightError:
        return load(a.model, tokenizer=a.tokenizer, weights="quantized")


def read_text_file(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TextFileError(f"{path}: expected a readable UTF-8 text file ({e})") from None


def cmd_perplexity(a: argparse.Namespace) -> int:
    from llmnb.ar import perplexity
    from llmnb.perf.threads import threads

    text = read_text_file(a.file)
    kv = kv_args(a)
    with threads(a.threads):
        model = load_batched(a)
        r = perplexity(model, text, ctx=a.ctx, rule=a.rule, max_chunks=a.chunks,
                       progress=progress_bar("perplexity", unit="window"), **kv)
    if a.json:
        print(json_text({"ppl": r.ppl, "nll": r.nll, "n_scored": r.n_scored,
                         "n_chunks": r.n_chunks, "ctx": r.ctx, "rule": r.rule,
                         "chunk_ppl": r.chunk_ppl}))
    else:
        print(f"{r.ppl:.4f}")
    print(f"[ppl {r.ppl:.4f} over {r.n_scored} scored tokens in {r.n_chunks} windows of {r.ctx} "
          f"({r.rule} rule){_kv_note(kv)}]", file=sys.stderr)
    return EXIT_OK


def _add_kv_flags(s: argparse.ArgumentParser) -> None:
    g = s.add_argument_group("selective KV cache (Initial-Key Cache; StreamingLLM and H2O "
                             "baselines)")
    g.add_argument("--kv-budget", type=positive_int, metavar="N",
                   help="hold at most N positions in the KV cache (default: every position)")
    g.add_argument("--kv-recent", type=non_negative_int, metavar="N",
                   help="always keep the N latest positions (default: (budget - sinks) / 2)")
    g.add_argument("--kv-sinks", type=non_negative_int, metavar="N",
                   help="always keep the first N positions, the attention sinks (4)")
    g.add_argument("--kv-policy", choices=["initial_key", "h2o", "streaming"],
                   help="how the rest is chosen: initial_key (Score Sum of the last attention "
                        "rows, default), h2o (accumulated attention), streaming (all recent)")
    g.add_argument("--kv-scope", choices=["layer", "global"],
                   help="score and keep per layer (default) or one set for every layer")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("generate", help="continue a prompt (or answer it with --chat)")
    s.add_argument("model", metavar="MODEL")
    s.add_argument("-p", "--prompt", required=True, type=utf8_text, help="the prompt text")
    s.add_argument("-n", type=positive_int, default=128, help="new tokens at most (128)")
    s.add_argument("--chat", action="store_true", help="apply the model's chat template")
    s.add_argument("--system", type=utf8_text, help="system message (with --chat)")
    s.add_argument("--temp", type=non_negative_float, default=0.0,
                   help="temperature; 0 = greedy (default)")
    s.add_argument("--top-k", type=non_negative_int, default=0,
                   help="keep the k most likely (0 = off)")
    s.add_argument("--top-p", type=probability, default=1.0, help="nucleus mass (1 = off)")
    s.add_argument("--min-p", type=probability, default=0.0, help="min-p ratio (0 = off)")
    s.add_argument("--seed", type=int, default=None, help="random seed for sampling")
    s.add_argument("--stop", action="append", type=utf8_text, metavar="TEXT",
                   help="stop string (repeatable)")
    s.add_argument("--threads", type=positive_int, default=1,
                   help="BLAS/numexpr/numba threads (1)")
    add_weights_flag(s, AUTO_WEIGHTS)
    s.add_argument("--tokenizer", metavar="PATH", help="a tokenizer.json (files without one)")
    s.add_argument("--raw", action="store_true", help="print control characters unchanged")
    s.add_argument("--json", action="store_true",
                   help="print one JSON object (prompt, ids, text, stats) instead of streaming")
    _add_kv_flags(s)
    s.add_argument("--spec", action="append", metavar="DRAFT",
                   help="speculative decoding with this drafter: a model path or hub name with the "
                        "same tokenizer (e.g. a quantized copy), self:N (the first N layers), "
                        "lookup (prompt lookup) or ngram / ngram:N (a table of n-token "
                        "contexts); repeatable, all verified in one batch")
    s.add_argument("--spec-k", type=positive_int, default=None, metavar="N",
                   help="initial draft length of a model drafter (4; adapted per round)")
    s.set_defaults(func=cmd_generate)

    s = sub.add_parser("perplexity", help="perplexity of a model on a text file")
    s.add_argument("model", metavar="MODEL")
    s.add_argument("file", metavar="FILE")
    s.add_argument("--ctx", type=positive_int, default=512, help="window length in tokens (512)")
    s.add_argument("--rule", choices=["half", "full"], default="half",
                   help="score the second half of each window (llama-perplexity) or all of it")
    s.add_argument("--chunks", type=positive_int, default=None, help="score at most N windows")
    s.add_argument("--threads", type=positive_int, default=1)
    add_weights_flag(s, AUTO_BATCHED)
    s.add_argument("--tokenizer", metavar="PATH")
    s.add_argument("--json", action="store_true")
    _add_kv_flags(s)
    s.set_defaults(func=cmd_perplexity)
