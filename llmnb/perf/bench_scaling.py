"""``llmnb bench scaling``: AR decode against diffusion steps as threads are added.

The paper's Table 4 and Figure 1 on this machine: at each thread count, the median time per
decoded token (SmolLM2-135M, greedy, after a 32-token prompt) and per uncached denoising step
(the same weights relabelled as a ``llada`` file, see ``bench_files.llada_copy``; prompt
32 + B = 64 masked positions), both in this process, interleaved, each timed by the function
``bench ar`` and ``bench diffusion`` time it with (``scaling.decode_timings``,
``scaling.diffusion_step_seconds``; ``bench ar`` times 32 tokens after a 128-token prompt,
this bench 16 after 32). Scaling = tok/s over tok/s at the first thread count.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from llmnb import hub
from llmnb.perf.bench_files import llada_copy
from llmnb.perf.inputs import has_model
from llmnb.perf.machine import default_thread_counts, physical_cores
from llmnb.perf.scaling import ScalingPoint, scaling_rows, thread_sweep

GEN_LENGTH = 64


def _progress(p: ScalingPoint, done: int, total: int) -> None:
    print(f"bench scaling: {done}/{total} {p.kind} at {p.threads} threads: {p.tok_s:.1f} tok/s "
          f"({p.scaling:.2f}x)", file=sys.stderr)


def bench_scaling(repeats: int = 5, threads: list[int] | None = None) -> list[dict[str, Any]]:
    import llmnb

    counts = threads or default_thread_counts(physical_cores())
    with tempfile.TemporaryDirectory() as d:
        diff_path = Path(d) / "smollm2-llada.gguf"
        llada_copy(hub.path("smollm2-135m"), diff_path)
        ar, diffusion = llmnb.load("smollm2-135m"), llmnb.load(diff_path)
        points = thread_sweep(ar, diffusion, counts, gen_length=GEN_LENGTH, repeats=repeats,
                              on_point=_progress)
    return [{"model": "smollm2-135m", **row} for row in scaling_rows(points)]


def run(repeats: int, threads: list[int] | None, peer: str | None, weights: list[str] | None,
        models: list[str] | None) -> list[dict[str, Any]] | None:
    """``llmnb bench scaling``: skipped when SmolLM2-135M is not pulled."""
    if not has_model("smollm2-135m", "scaling"):
        return None
    return bench_scaling(repeats=repeats, threads=threads)
