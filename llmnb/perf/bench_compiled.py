"""``llmnb bench compiled``: what mypyc buys -- the compiled build against the pure-Python build
of the same source, side by side in one run.

The compiled build is the installed package. The pure-Python build is the same source run
interpreted: a worker subprocess with ``PYTHONPATH`` at the source tree the package was
installed from (pip's ``direct_url.json``; else the folder that holds the virtualenv, as in a
clone after ``make setup``; else the current folder), taken only if its ``.py`` files are the
installed package's own (mypyc ships them beside each extension module). Each worker says
which files it ran (``llmnb.gguf.reader.__file__``: a ``.py`` for pure, an extension module
for compiled) and what each workload produced; the run stops if a build is not what it is
called or the two builds' outputs differ.

The workloads are the places with Python-level loops, at 1 thread (the loops are measured, not
BLAS): opening a GGUF (header, metadata, tensor infos), building a tokenizer from a GGUF's
vocabulary, encoding and decoding a text, greedy decoding on tiny-ar per token (and its
forwards alone: the rest is sampling and text), the lookup and n-gram drafters fed a long
context a few tokens a round, and the diffusion loop on tiny-llada (the whole loop, and its
bookkeeping: the loop's time minus its forwards); and, as controls, dequantizing and
quantizing a tensor (``llmnb.quant``: whole-array numpy calls, where compiling has nothing to
remove). Each is one warm-up and the median of `repeats` runs in a worker; each build's
worker runs ``ROUNDS`` times, the builds alternating which goes first, and a row keeps the
median of a build's workers (the machine is shared: drift between two workers run one after
the other was as large as the effect measured). Rows: {workload, module, compiled, pure_ms,
compiled_ms, speedup} with speedup = pure_ms / compiled_ms; `module` is where the workload's
code is and `compiled` whether the installed build compiled it (setup.py compiles only what
gained: a row with `compiled` false runs the same interpreted code in both builds, and its
speed-up is 1 but for noise). Built with ``LLMNB_COMPILE=all`` every row is compiled, which
is how setup.py's choice is measured.
"""
from __future__ import annotations

import hashlib
import json
import statistics
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from llmnb.errors import UsageError
from llmnb.perf.inputs import need_data_dir
from llmnb.perf.worker import run_worker

TEXT_CHARS = 50_000          # of data/text/persuasion.txt: the encode/decode text
LOOKUP_TOKENS = 20_000       # the drafters' context
ROUND = 4                    # tokens committed per drafter round
DRAFT = 8                    # tokens a drafter is asked for
DECODE_TOKENS = 48           # greedy decoding on tiny-ar (fewer if it ends its answer)
PROMPT = "List the planets."
QUANT_WEIGHTS = 1 << 20      # the numpy-only controls' tensor
ROUNDS = 3                   # workers per build, alternating pure-compiled, compiled-pure, ...


# --- the workloads (run inside each build's worker) -------------------------------------

def _digest(x: object) -> str:
    """A short fingerprint of a workload's output (bytes as they are, anything else its repr)."""
    return hashlib.sha256(x if isinstance(x, bytes) else repr(x).encode()).hexdigest()[:12]


def compiled_worker(repeats: int, data: str, models: dict[str, str]) -> dict[str, Any]:
    """Every workload in this interpreter's llmnb: {reader, compiled, rows: [{workload, ms,
    output}]}. `data`: the repository's data/ folder; `models`: name -> .gguf to open and
    build a tokenizer from (the first one's tokenizer encodes and decodes the text)."""
    import numpy as np

    import llmnb.gguf.reader as reader
    from llmnb.ar.speculative_draft import Drafter
    from llmnb.ar.engine import Generator, generate
    from llmnb.ar.lookup import LookupDrafter, NgramDrafter
    from llmnb.ar.sampling import Greedy
    from llmnb.diffusion.engine import diffuse
    from llmnb.gguf.constants import GGMLType, type_name
    from llmnb.gguf.reader import open_gguf
    from llmnb.model.model import load
    from llmnb.perf.bench_quant import ROW, random_raw
    from llmnb.perf.machine import is_compiled
    from llmnb.perf.timing import median_time, median_times
    from llmnb.perf.threads import threads
    from llmnb.quant import dequantize, quantize
    from llmnb.tokenizer import Tokenizer, tokenizer_from_metadata

    rows: list[dict[str, Any]] = []

    def add(workload: str, seconds: float, output: object, module: str) -> None:
        rows.append({"workload": workload, "ms": 1e3 * seconds, "output": _digest(output),
                     "module": module, "compiled": is_compiled(module)})

    # the median of a figure a call reports of itself (its stats), after the caller's warm-up;
    # wall times go through timing.median_time(s)
    def median_of(figure: Callable[[], float]) -> float:
        return statistics.median(figure() for _ in range(repeats))

    root = Path(data)
    with threads(1):
        for name, path in models.items():
            with open_gguf(path) as f:
                shape = (len(f.fields), len(f.tensors))
            add(f"open GGUF: {name}", median_time(lambda: open_gguf(path).close(), repeats), shape,
                "llmnb.gguf.reader")
        toks: dict[str, Tokenizer] = {}
        for name, path in models.items():
            with open_gguf(path) as f:
                meta = f.metadata
            tok = tokenizer_from_metadata(meta, path)
            toks[name] = tok
            add(f"build tokenizer: {name} ({tok.vocab_size} tokens)",
                median_time(lambda: tokenizer_from_metadata(meta, path), repeats),
                tok.encode(PROMPT), "llmnb.tokenizer.build")
        name, tok = next(iter(toks.items()))
        novel = (root / "text" / "persuasion.txt").read_text(encoding="utf-8")
        text = novel[:TEXT_CHARS]
        ids = tok.encode(text)
        add(f"encode: {TEXT_CHARS:,} characters, {name}",
            median_time(lambda: tok.encode(text), repeats), ids, "llmnb.tokenizer.tokenizer")
        add(f"decode: {len(ids):,} tokens, {name}",
            median_time(lambda: tok.decode(ids), repeats), tok.decode(ids),
            "llmnb.tokenizer.tokenizer")

        ar = load(root / "models" / "tiny-ar.gguf")
        out = generate(ar, PROMPT, DECODE_TOKENS, Greedy(), chat=True)
        n = len(out.tokens)

        def per_token() -> float:
            r = generate(ar, PROMPT, DECODE_TOKENS, Greedy(), chat=True)
            return r.stats.decode_s / max(1, len(r.tokens) - 1)
        add(f"greedy decoding: tiny-ar, per token ({n} tokens)",
            median_of(per_token), out.tokens, "llmnb.ar.engine")

        gen: list[Generator] = []

        def prefilled() -> None:                      # untimed: a fresh generator, prefilled
            gen[:] = [Generator(ar, Greedy(), capacity=len(out.prompt_ids) + DECODE_TOKENS)]
            gen[0].prefill(out.prompt_ids)

        def feed_all() -> None:                       # the same steps, the forwards alone
            for token in out.tokens[:-1]:
                gen[0].feed(token)
        add("greedy decoding: tiny-ar, its forward alone per token (Generator.feed)",
            median_times([feed_all], repeats, before=prefilled)[0] / max(1, n - 1), out.tokens,
            "llmnb.model.transformer")

        context = ar.tokenizer.encode(novel)[:LOOKUP_TOKENS]
        drafters: list[Drafter] = [LookupDrafter(), NgramDrafter()]
        greedy, rng = Greedy(), np.random.default_rng(0)     # unused by these drafters
        for drafter in drafters:
            drafts: list[list[int]] = []

            def feed() -> None:
                drafter.reset(0)
                drafts.clear()
                seen: list[int] = []
                for i in range(0, len(context), ROUND):
                    seen.extend(context[i:i + ROUND])
                    drafts.append(drafter.propose(seen, DRAFT, greedy, rng).tokens)
            add(f"{drafter.name} drafter: {len(context):,}-token context, {ROUND} a round",
                median_time(feed, repeats), drafts, "llmnb.ar.lookup")

        llada = load(root / "models" / "tiny-llada.gguf")
        kw: dict[str, Any] = {"gen_length": 48, "steps": 16, "chat": True}
        res = diffuse(llada, PROMPT, **kw)
        label = f"tiny-llada, {kw['gen_length']} positions, {res.steps_taken} steps"
        add(f"diffusion loop: {label}",
            median_of(lambda: diffuse(llada, PROMPT, **kw).stats.seconds), res.tokens,
            "llmnb.diffusion.engine")

        def bookkeeping() -> float:
            s = diffuse(llada, PROMPT, **kw).stats
            return s.seconds - sum(s.forward_s)
        add(f"diffusion bookkeeping (loop minus forwards): {label}",
            median_of(bookkeeping), res.tokens, "llmnb.diffusion.engine")

        g = np.random.default_rng(0)                  # controls: modules of numpy calls only
        for t in (GGMLType.Q8_0, GGMLType.Q4_K):
            raw = random_raw(t, QUANT_WEIGHTS, g)
            shape = (raw.shape[0], ROW)
            add(f"numpy only: dequantize {type_name(t)}, {QUANT_WEIGHTS:,} weights",
                median_time(lambda: dequantize(raw, t, shape), repeats),
                dequantize(raw, t, shape).tobytes(), "llmnb.quant.formats")
        x = g.standard_normal((QUANT_WEIGHTS // 4 // ROW, ROW)).astype(np.float32)
        add(f"numpy only: quantize Q4_K, {x.size:,} weights",
            median_time(lambda: quantize(x, GGMLType.Q4_K), repeats),
            quantize(x, GGMLType.Q4_K).tobytes(), "llmnb.quant.formats")
    return {"reader": reader.__file__ or "", "compiled": is_compiled(), "rows": rows}


# --- the two builds ---------------------------------------------------------------------

def _py_files(package: Path) -> dict[str, bytes]:
    return {p.relative_to(package).as_posix(): p.read_bytes()
            for p in package.rglob("*.py") if "__pycache__" not in p.parts}


def source_tree(package: Path) -> Path:
    """The source tree whose llmnb/ holds the same .py files as the installed `package`
    (module docstring); UsageError naming where it looked when there is none."""
    looked: list[str] = []
    candidates: list[Path] = []
    try:
        url = json.loads(metadata.distribution("llmnb").read_text("direct_url.json") or "{}")
        if str(url.get("url", "")).startswith("file://"):
            candidates.append(Path(unquote(urlparse(url["url"]).path)))
    except (metadata.PackageNotFoundError, ValueError):
        pass
    candidates += [Path(sys.prefix).parent, Path.cwd()]
    installed = _py_files(package)
    for root in candidates:
        tree = root / "llmnb"
        if tree.resolve() == package.resolve() or not (tree / "gguf" / "reader.py").is_file():
            looked.append(f"{root} (no llmnb source)")
            continue
        if _py_files(tree) == installed:
            return root.resolve()
        looked.append(f"{root} (its llmnb/*.py differ from the installed ones: `make setup` "
                      f"rebuilds)")
    raise UsageError("bench compiled: no source tree with the installed llmnb's .py files, "
                     "for the pure-Python build; looked in " + "; ".join(looked))


def run_build(pure_root: Path | None, repeats: int, data: Path,
              models: dict[str, str]) -> dict[str, Any]:
    """`compiled_worker` in a fresh interpreter: the pure build from `pure_root`, or the
    installed build (None); checked to be the build it is called."""

    build = "compiled" if pure_root is None else "pure"
    report: dict[str, Any] = run_worker(
        "llmnb.perf.bench_compiled", f"compiled_worker({repeats}, {str(data)!r}, {models!r})",
        build, pythonpath="" if pure_root is None else str(pure_root))
    if report["compiled"] != (pure_root is None) or report["reader"].endswith(".py") == (
            pure_root is None):
        raise UsageError(f"bench compiled: the {build} worker imported llmnb.gguf.reader from "
                         f"{report['reader']}: not a {build} build")
    return report


def compare(pure: list[dict[str, Any]], compiled: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per workload from each build's worker reports: the median over a build's
    reports of their ms, and pure / compiled, with the workload's module and whether the
    compiled build compiled it; RuntimeError when any two reports ran different workloads or
    produced different outputs."""
    first = pure[0]["rows"]
    for report in pure + compiled:
        if [r["workload"] for r in report["rows"]] != [r["workload"] for r in first]:
            raise RuntimeError(f"bench compiled: the builds ran different workloads: "
                               f"{[r['workload'] for r in first]} vs "
                               f"{[r['workload'] for r in report['rows']]}")
        for p, r in zip(first, report["rows"]):
            if r["output"] != p["output"]:
                raise RuntimeError(f"bench compiled: {p['workload']}: the outputs differ "
                                   f"between the builds' runs")
    rows = []
    for i, p in enumerate(first):
        a = statistics.median(report["rows"][i]["ms"] for report in pure)
        b = statistics.median(report["rows"][i]["ms"] for report in compiled)
        rows.append({"workload": p["workload"], "module": p["module"],
                     "compiled": all(report["rows"][i]["compiled"] for report in compiled),
                     "pure_ms": a, "compiled_ms": b, "speedup": a / b if b > 0 else 0.0})
    return rows


def bench_compiled(repeats: int, data: Path, rounds: int = ROUNDS) -> list[dict[str, Any]]:
    """`rounds` workers of each build, alternating which goes first (drift on a shared machine
    then hits both); the rows of ``compare``."""
    import llmnb
    from llmnb import hub
    from llmnb.perf.machine import is_compiled

    if not is_compiled():
        raise UsageError("bench compiled: this llmnb is not compiled (a pure or editable "
                         "install); `make setup` builds and installs the compiled one")
    root = source_tree(Path(llmnb.__file__).parent)
    models = {name: str(hub.path(name)) for name in ("smollm2-135m",) if hub.is_pulled(name)}
    if not models:
        print("bench compiled: smollm2-135m not pulled (llmnb pull smollm2-135m); its file "
              "and vocabulary skipped", file=sys.stderr)
    models["tiny-ar"] = str(data / "models" / "tiny-ar.gguf")
    print(f"bench compiled: pure-Python build from {root}", file=sys.stderr)
    reports: dict[str, list[dict[str, Any]]] = {"pure": [], "compiled": []}
    for n in range(rounds):
        for build in ("pure", "compiled") if n % 2 == 0 else ("compiled", "pure"):
            reports[build].append(run_build(root if build == "pure" else None, repeats, data,
                                            models))
    return compare(reports["pure"], reports["compiled"])


def run(repeats: int, threads: list[int] | None, peer: str | None,
        weights: list[str] | None, models: list[str] | None) -> list[dict[str, Any]]:
    """The registry's entry (``llmnb.perf.bench.BENCHES``): data/ is required."""
    return bench_compiled(repeats, need_data_dir("compiled"))
