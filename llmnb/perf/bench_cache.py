"""``llmnb bench cache``: the inter-step K/V cache on the tiny diffusion models, as the paper's
Tables 4 and 6 measure it, in miniature.

Over 100 held-out prompts of each kind spread through the file, or all of a kind with
fewer (``heldout.py``; single- and multi-answer prompts apart), 48 positions, 16 steps (the
cosine schedule and the probability rule: the strongest 16-step setting), one thread, each
prompt is denoised without the cache and with each cache (``llmnb/diffusion/cache.py``):
diffuse-cpp's active set over one block, Fast-dLLM's prefix and dual caches over blocks of 24,
each against the uncached run with the same blocks, and entropy_exit against the fixed 16
steps. Per row: speed-up (the uncached run's time over this one's, summed over the
prompts), fidelity (tokens equal to the uncached run's), validity with its 95% interval and
paired prompt by prompt with the uncached run's (``Tally.paired_with``: prompts lost and
gained, the difference's 95% interval, the exact McNemar p-value, and "keeps", "loses" or
"cannot tell" at ``intervals.MARGIN``), mean steps, and both throughputs: canvas tokens per
second (diffuse-cpp's figure, end-of-text filler included) and useful tokens (up to the first
end of text) per second. The
"entropy_exit + cache" row is taken over the prompts where entropy_exit needs at least 2
steps (the cache acts from the second step on; on one-step answers it cannot), against
uncached entropy_exit on the same prompts, and is left out where there are none.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from llmnb.perf.heldout import kinds, on_tiny_models, run_settings
from llmnb.perf.inputs import has_data

BLOCKS = {"block_length": 24}
SETTINGS: dict[str, tuple[dict[str, Any], str]] = {   # name: (diffuse's arguments, reference)
    "no cache": ({"cache": False}, "no cache"),
    "diffuse-cpp's cache": ({"cache": True}, "no cache"),
    "no cache, blocks of 24": ({"cache": False} | BLOCKS, "no cache, blocks of 24"),
    "prefix, blocks of 24": ({"cache_policy": "prefix"} | BLOCKS, "no cache, blocks of 24"),
    "dual, blocks of 24": ({"cache_policy": "dual"} | BLOCKS, "no cache, blocks of 24"),
    "entropy_exit": ({"cache": False, "scheduler": "entropy_exit", "remasking": None},
                     "no cache"),
}
PLAIN, CACHED = "entropy_exit (2+ steps)", "entropy_exit + cache (2+ steps)"
COMMON: dict[str, Any] = {"chat": True, "gen_length": 48, "steps": 16, "schedule": "cosine",
                          "remasking": "probability"}


def cache_worker(model_path: str, heldout: str, per_kind: int) -> list[dict[str, Any]]:
    """One tiny diffusion model, 1 thread: every setting on up to `per_kind` prompts of
    each kind; rows of figures."""
    settings = {name: COMMON | kw for name, (kw, _) in SETTINGS.items()}
    refs = {name: ref for name, (_, ref) in SETTINGS.items()}
    rows: list[dict[str, Any]] = []
    for m, kind, chosen in kinds(model_path, heldout, per_kind, COMMON):
        tallies, tokens = run_settings(m, chosen, settings, refs)
        acts = [p for p, n in zip(chosen, tallies["entropy_exit"].steps) if n >= 2]  # cache acts
        if acts:
            exit_kw = settings["entropy_exit"]
            more, _ = run_settings(m, acts, {PLAIN: exit_kw, CACHED: exit_kw | {"cache": True}},
                                   {PLAIN: PLAIN, CACHED: PLAIN})
            tallies |= more
            refs |= {PLAIN: PLAIN, CACHED: PLAIN}
        for name, tally in tallies.items():
            base = tallies[refs[name]]
            rows.append({"model": Path(model_path).stem, "kind": kind, "setting": name}
                        | tally.row() | tally.paired_with(base)
                        | {"speedup": base.seconds / tally.seconds if tally.seconds else 0.0})
    return rows


def cache_rows(per_kind: int = 100) -> list[dict[str, Any]]:
    """``cache_worker``'s rows for each tiny diffusion model, each in a fresh subprocess."""
    return on_tiny_models("llmnb.perf.bench_cache", "cache_worker", "cache", per_kind)


def run(repeats: int, threads: list[int] | None, peer: str | None, weights: list[str] | None,
        models: list[str] | None) -> list[dict[str, Any]] | None:
    """``llmnb bench cache``: the defaults above; skipped without data/."""
    return cache_rows() if has_data("cache") else None
