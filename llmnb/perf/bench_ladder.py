"""``llmnb bench ladder``: training-free parallel decoding, measured in forwards per answer.

On the tiny diffusion models, over every held-out prompt (``heldout.py``), single- and
multi-answer prompts apart, 48 positions, one thread, each method against the reference: 16
steps of the cosine schedule in probability order, no cache (the strongest 16-step setting:
the even schedule loses tens of points on tiny-dream's multi-answer prompts). Per method:
forwards per answer (NFE), committed tokens per forward (canvas positions, and useful ones: up
to the first end of text), recomputed rows per forward, wall time per answer (the denoising
loop), validity with its 95% interval, fidelity (tokens equal to the reference's), and
relative to the reference: NFE ratio, speed-up, and validity paired prompt by prompt
(``Tally.paired_with``: prompts lost and gained, the difference in points with its 95%
interval, the exact McNemar p-value, and the verdict at ``intervals.MARGIN``: "keeps",
"loses" or "cannot tell").

The rungs: one step; entropy_exit (diffuse-cpp); Fast-dLLM's threshold and factor; EB-Sampler
(diffusers' defaults, seeded, and greedy); KLASS; WINO; and on the reference's 16 steps the
caches: diffuse-cpp's, Fast-dLLM's prefix and dual (blocks of 24), elastic (windows of 16
and 8), DPad's suffix window (blocks of 16, 8 positions beyond), dual with the suffix window;
and Fast-dLLM's threshold with its dual cache and with elastic, the pairings of their papers.

Targets (multi-answer prompts): some training-free method needs at least 3x fewer forwards
than the reference and keeps its validity (the paired verdict "keeps"); some cache beats the
dual cache's speed-up by 1.5x at 99% fidelity or better (a target only when the dual cache
was among the methods run). ``targets`` says which rows meet them; ``best`` picks the method
the break-even of the notebooks is built on.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from llmnb.ar import generate
from llmnb.diffusion.engine import diffuse
from llmnb.errors import UsageError
from llmnb.model.model import Model
from llmnb.perf.heldout import KINDS, kinds, on_tiny_models, run_settings
from llmnb.perf.inputs import has_data
from llmnb.perf.threads import threads

REFERENCE = "16 steps, cosine"
BASE: dict[str, Any] = {"chat": True, "gen_length": 48, "steps": 16, "schedule": "cosine",
                        "remasking": "probability", "cache": False}
OWN_RULE: dict[str, Any] = {"remasking": None}           # the scheduler's own rule
METHODS: dict[str, dict[str, Any]] = {
    REFERENCE: {},
    "one step": {"steps": 1},
    "entropy_exit": {"scheduler": "entropy_exit"} | OWN_RULE,
    "threshold 0.9": {"scheduler": "threshold"} | OWN_RULE,
    "factor 1": {"scheduler": "factor"} | OWN_RULE,
    "entropy_bound": {"scheduler": "entropy_bound"} | OWN_RULE,
    "entropy_bound, greedy": {"scheduler": "entropy_bound", "eb_temperature": (0.0, 0.0)}
                             | OWN_RULE,
    "klass": {"scheduler": "klass"} | OWN_RULE,
    "wino": {"scheduler": "wino"} | OWN_RULE,
    "cache: diffuse-cpp": {"cache": True},
    "cache: prefix, blocks of 24": {"cache": True, "cache_policy": "prefix", "block_length": 24},
    "cache: dual, blocks of 24": {"cache": True, "cache_policy": "dual", "block_length": 24},
    "cache: elastic": {"cache": True, "cache_policy": "elastic"},
    "cache: elastic, window 8": {"cache": True, "cache_policy": "elastic", "elastic_window": 8},
    "suffix window 8, blocks of 16": {"block_length": 16, "steps": 15, "suffix_window": 8},
    "cache: dual + suffix window 8, blocks of 16": {"cache": True, "cache_policy": "dual",
                                                    "block_length": 16, "steps": 15,
                                                    "suffix_window": 8},
    "threshold 0.9 + cache: dual, blocks of 24": {"scheduler": "threshold", "cache": True,
                                                  "cache_policy": "dual", "block_length": 24}
                                                 | OWN_RULE,
    "threshold 0.9 + cache: elastic": {"scheduler": "threshold", "cache": True,
                                       "cache_policy": "elastic"} | OWN_RULE,
}
DUAL = "cache: dual, blocks of 24"


def training_free(method: str) -> bool:
    """A rung that changes how many forwards an answer takes (the cache-only rungs keep the
    reference's 16)."""
    return method != REFERENCE and not method.startswith("cache:")


def ladder_worker(model_path: str, heldout: str, per_kind: int,
                  methods: list[str] | None = None, only: str = "",
                  checked_by: str | None = None) -> list[dict[str, Any]]:
    """One tiny diffusion model, 1 thread: each method on up to `per_kind` prompts of each
    kind (all of them when `per_kind` <= 0; of kind `only` alone when given; of the families
    whose validity is `checked_by` alone when given: "answers" or "rule"), the reference
    first; rows of figures."""
    if only and only not in KINDS:
        raise UsageError(f"bench ladder: only={only!r}; expected one of {', '.join(KINDS)}")
    names = [REFERENCE] + [n for n in (methods or list(METHODS)) if n != REFERENCE]
    settings = {n: BASE | METHODS[n] for n in names}
    rows: list[dict[str, Any]] = []
    for m, kind, chosen in kinds(model_path, heldout, per_kind, BASE, checked_by):
        if only and kind != only:
            continue
        tallies, _ = run_settings(m, chosen, settings, {n: REFERENCE for n in names})
        base = tallies[REFERENCE]
        for name, tally in tallies.items():
            rows.append({"model": Path(model_path).stem, "kind": kind, "method": name}
                        | tally.row() | tally.paired_with(base)
                        | {"nfe_ratio": base.forwards / tally.forwards,
                           "speedup": base.seconds / tally.seconds if tally.seconds else 0.0,
                           "remasked": tally.remasked})
    return rows


def targets(rows: list[dict[str, Any]]) -> list[str]:
    """Per model, on the multi-answer prompts: the methods that meet each target. The cache
    target compares the other cache rungs ("cache:" in the name) with the dual cache's
    speed-up; without both it is neither met nor missed, and the line says it was not judged
    and why (not "none")."""
    out = []
    for model in sorted({r["model"] for r in rows}):
        multi = {r["method"]: r for r in rows if r["model"] == model and r["kind"] == "multi"}
        if not multi:
            out.append(f"{model}: no multi-answer prompts in this held-out set")
            continue
        fewer = [f"{n} ({r['nfe_ratio']:.1f}x, {r['only_ref']} lost, {r['only_other']} gained, "
                 f"[{r['delta_low']:.1f}, {r['delta_high']:.1f}] pt)"
                 for n, r in multi.items()
                 if training_free(n) and r["nfe_ratio"] >= 3 and r["verdict"] == "keeps"]
        margin = next(iter(multi.values()))["margin"]
        line = (f"{model}: >= 3x fewer forwards, validity kept (paired, margin {margin:g} "
                f"points): {', '.join(fewer) or 'none'}; ")
        caches = {n: r for n, r in multi.items() if "cache:" in n and n != DUAL}
        if DUAL not in multi or multi[DUAL]["speedup"] <= 0 or not caches:
            missing = (f"{DUAL!r} was not run" if DUAL not in multi else
                       "its time was not measured" if multi[DUAL]["speedup"] <= 0 else
                       "no other cache rung was run")
            out.append(line + f">= 1.5x the dual cache's speed-up at >= 99% fidelity: not "
                              f"judged ({missing})")
            continue
        dual = multi[DUAL]["speedup"]
        faster = [f"{n} ({r['speedup'] / dual:.2f}x dual's, fidelity {r['fidelity']:.3f})"
                  for n, r in caches.items()
                  if r["speedup"] >= 1.5 * dual and r["fidelity"] >= 0.99]
        out.append(line + f">= 1.5x the dual cache's speed-up at >= 99% fidelity: "
                          f"{', '.join(faster) or 'none'}")
    return out


def best(rows: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The row of `kind` (one model's rows) that commits the most useful tokens per forward
    among the reference and the training-free methods that keep its validity (the paired
    verdict "keeps", ``intervals.MARGIN``; fewer forwards break a tie); the reference itself
    when no other method keeps its validity."""
    unpaired = [r["method"] for r in rows if r["kind"] == kind and "verdict" not in r]
    if unpaired:
        raise UsageError(f"bench ladder: rows of {', '.join(unpaired)} have no paired verdict "
                         f"(saved before per-prompt outcomes were kept); run ladder_worker again")
    kept = [r for r in rows if r["kind"] == kind and (r["method"] == REFERENCE or (
        training_free(r["method"]) and r["verdict"] == "keeps"))]
    if not kept:
        raise UsageError(f"bench ladder: no rows of kind {kind!r} (kinds: "
                         f"{sorted({r['kind'] for r in rows})})")
    return max(kept, key=lambda r: (r["useful_per_forward"], -r["nfe"]))


def breakeven_costs(ar: Model, diffusion: Model, prompt: str, gen_length: int = 48,
                    new_tokens: int = 32, rounds: int = 4) -> tuple[float, float]:
    """The two costs of the break-even (notebooks 16 and 17), 1 thread: seconds per token of
    `ar`'s greedy decode (`new_tokens` after the chat-formatted `prompt`; the first comes from
    the prefill) and seconds of one uncached forward of `diffusion` over the prompt and
    `gen_length` masks. Timed in alternating rounds so that machine noise hits both, the first
    round a warm-up; medians of the others."""
    if rounds < 2:
        raise UsageError(f"breakeven_costs: rounds is {rounds}; expected at least 2 (one warm-up)")
    dec: list[float] = []
    fwd: list[float] = []
    with threads(1):
        for rnd in range(rounds):
            g = generate(ar, prompt, chat=True, max_new_tokens=new_tokens)
            d = diffuse(diffusion, prompt, chat=True, gen_length=gen_length, steps=4, cache=False)
            if rnd and g.stats.new_tokens > 1:
                dec.append(g.stats.decode_s / (g.stats.new_tokens - 1))
            if rnd:
                fwd += d.stats.forward_s
    if not dec:
        raise UsageError(f"breakeven_costs: {prompt!r} ends after one token; no decode to time")
    return float(np.median(dec)), float(np.median(fwd))


def ladder_rows(per_kind: int = 0) -> list[dict[str, Any]]:
    """``ladder_worker``'s rows for each tiny diffusion model, each in a fresh subprocess;
    the targets' verdicts on stderr."""
    rows = on_tiny_models("llmnb.perf.bench_ladder", "ladder_worker", "ladder", per_kind)
    for line in targets(rows):
        print(f"bench ladder: {line}", file=sys.stderr)
    return rows


def run(repeats: int, threads: list[int] | None, peer: str | None, weights: list[str] | None,
        models: list[str] | None) -> list[dict[str, Any]] | None:
    """``llmnb bench ladder``: the defaults above; skipped without data/."""
    return ladder_rows() if has_data("ladder") else None
