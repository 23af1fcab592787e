"""Thread scaling of AR decode and diffusion steps: the regime inversion, measured.

Decoding one token multiplies every weight matrix by one vector: it streams all weights
from memory per token, and extra threads share one memory bus, so it saturates early.
A diffusion step multiplies the same matrices by prompt + B vectors at once: compute-bound,
so each extra core adds about its share (diffuse-cpp paper, §3.2 and Table 4: 7.4x at 12
cores for diffusion, 2.4x for llama.cpp's decode).

``thread_sweep`` measures both at each thread count (``llmnb.threads``: BLAS through
threadpoolctl, and numexpr), interleaved so machine noise hits both, and hands every point
to a callback as soon as it is measured (for a progress bar or a live plot).
"""
from __future__ import annotations

import operator
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, SupportsIndex

import numpy as np

from llmnb.ar.engine import Generator
from llmnb.ar.sampling import Greedy
from llmnb.diffusion.engine import diffuse
from llmnb.errors import UsageError
from llmnb.model.model import Model
from llmnb.perf.threads import threads as use_threads
from llmnb.perf.timing import MIN_RUNS, Timing, median_times, timed_rounds

AR, DIFFUSION = "ar_decode", "diffusion_step"


@dataclass
class ScalingPoint:
    """One measurement: a kind of forward pass at one thread count."""

    kind: str            # AR ("ar_decode") or DIFFUSION ("diffusion_step")
    threads: int
    seconds: float       # median seconds per decoded token, or per denoising step
    tok_s: float         # decode: tokens/s; diffusion: B / (steps * seconds), diffuse-cpp's figure
    tokens: int          # tokens through each weight matrix per forward (1, or prompt + B)
    scaling: float = 1.0  # tok_s over the same kind's tok_s at the sweep's first thread count

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "threads": self.threads, "seconds": self.seconds,
                "tok_s": self.tok_s, "tokens": self.tokens, "scaling": self.scaling}


OnPoint = Callable[[ScalingPoint, int, int], None]     # (point, points done, points in total)


def _prompt(model: Model, n: int, seed: int = 0) -> list[int]:
    """`n` ordinary token ids (the middle of the vocabulary: no control tokens, no mask)."""
    v = model.config.vocab_size
    ids: list[int] = np.random.default_rng(seed).integers(v // 4, v // 2, n).tolist()
    return ids


def _sizes(where: str, **sizes: SupportsIndex) -> tuple[int, ...]:
    """The sizes as ints, each at least 1, or one UsageError naming them all."""
    got = {name: operator.index(v) for name, v in sizes.items()}
    if min(got.values()) < 1:
        listed = ", ".join(f"{name} {v}" for name, v in got.items())
        raise UsageError(f"{where}: expected positive sizes, got {listed}")
    return tuple(got.values())


def _decode_rounds(model: Model, prompt_tokens: SupportsIndex, decode_tokens: SupportsIndex,
                   repeats: SupportsIndex, where: str) -> tuple[list[float], list[float]]:
    """Every round's seconds of a `prompt_tokens` prefill and of the `decode_tokens` greedy
    steps after it, each round on a fresh ``Generator`` (built untimed); one untimed round
    first. Runs at the caller's thread setting."""
    p, d, r = _sizes(where, prompt=prompt_tokens, decode=decode_tokens, repeats=repeats)
    prompt = _prompt(model, p)
    generator: list[Generator] = []

    def fresh() -> None:
        generator[:] = [Generator(model, Greedy(), capacity=p + d + 1)]

    def prefill() -> None:
        generator[0].prefill(prompt)

    def decode() -> None:
        g = generator[0]
        for _ in range(d):
            g.feed(g.next_token())

    prefill_s, decode_s = timed_rounds([prefill, decode], r, before=fresh)
    return prefill_s, decode_s


def decode_timings(model: Model, prompt_tokens: SupportsIndex = 32,
                   decode_tokens: SupportsIndex = 16,
                   repeats: SupportsIndex = 3) -> tuple[float, float]:
    """Median seconds of a `prompt_tokens` prefill and of the `decode_tokens` greedy steps
    after it, each round on a fresh ``Generator`` (built untimed); one untimed round first.
    ``llmnb bench ar`` and the thread sweep both measure this. Runs at the caller's thread
    setting."""
    prefill_s, decode_s = _decode_rounds(model, prompt_tokens, decode_tokens, repeats,
                                         "decode_timings")
    return statistics.median(prefill_s), statistics.median(decode_s)


def decode_timing(model: Model, prompt_tokens: SupportsIndex = 32,
                  decode_tokens: SupportsIndex = 16, repeats: int = MIN_RUNS) -> Timing:
    """Seconds per decoded token, every round kept (``decode_timings``' rounds, each round's
    decode divided by `decode_tokens`): what a verdict reads, at least ``MIN_RUNS`` rounds."""
    _enough("decode_timing", repeats)
    decode_s = _decode_rounds(model, prompt_tokens, decode_tokens, repeats, "decode_timing")[1]
    return Timing(tuple(s / operator.index(decode_tokens) for s in decode_s))


def _enough(who: str, repeats: int) -> None:
    if repeats < MIN_RUNS:
        raise UsageError(f"{who}: repeats={repeats}; expected at least {MIN_RUNS} (a verdict "
                         f"reads the median and quartiles of {MIN_RUNS} or more runs)")


def decode_seconds(model: Model, prompt_tokens: SupportsIndex = 32,
                   decode_tokens: SupportsIndex = 16, repeats: SupportsIndex = 3) -> float:
    """Median seconds per decoded token (greedy) after a `prompt_tokens` prefill
    (``decode_timings``)."""
    seconds = decode_timings(model, prompt_tokens, decode_tokens, repeats)[1]
    return seconds / operator.index(decode_tokens)


def diffusion_step_timings(model: Model, gen_length: SupportsIndex = 64,
                           prompt_tokens: SupportsIndex = 32, repeats: SupportsIndex = 3,
                           beside: Sequence[Callable[[], object]] = ()) -> list[float]:
    """Median seconds of one uncached denoising step (forward over prompt + B, head on the B
    masked rows) through ``llmnb.diffuse``, as its stats time the forward, then the median
    wall seconds of each function `beside`, timed in the same rounds, alternating with the
    step (one untimed round first)."""
    forward_s, others = _step_rounds(model, gen_length, prompt_tokens, repeats, beside,
                                     "diffusion_step_timings")
    return [statistics.median(forward_s), *others]


def _step_rounds(model: Model, gen_length: SupportsIndex, prompt_tokens: SupportsIndex,
                 repeats: SupportsIndex, beside: Sequence[Callable[[], object]],
                 where: str) -> tuple[list[float], list[float]]:
    """Every timed round's forward seconds of one uncached step (the warm-up's dropped), and
    the median wall seconds of each function `beside`."""
    b, p, r = _sizes(where, B=gen_length, prompt=prompt_tokens, repeats=repeats)
    prompt = _prompt(model, p)
    forward_s: list[float] = []

    def step() -> None:
        res = diffuse(model, prompt, gen_length=b, steps=1, cache=False)
        forward_s.append(res.stats.forward_s[0])

    others = median_times([step, *beside], r, warmup=1)[1:]
    return forward_s[1:], others                                    # the warm-up step dropped


def step_timing(model: Model, gen_length: SupportsIndex = 64, prompt_tokens: SupportsIndex = 32,
                repeats: int = MIN_RUNS) -> Timing:
    """Seconds of one uncached denoising step, every round kept (``diffusion_step_timings``'
    rounds): what a verdict reads, at least ``MIN_RUNS`` rounds."""
    _enough("step_timing", repeats)
    return Timing(tuple(_step_rounds(model, gen_length, prompt_tokens, repeats, (),
                                     "step_timing")[0]))


def diffusion_step_seconds(model: Model, gen_length: SupportsIndex = 64,
                           prompt_tokens: SupportsIndex = 32, repeats: SupportsIndex = 3) -> float:
    """Median seconds of one uncached denoising step (``diffusion_step_timings``).
    ``llmnb bench diffusion`` and the thread sweep both measure this."""
    return diffusion_step_timings(model, gen_length, prompt_tokens, repeats)[0]


def thread_sweep(ar: Model | None, diffusion: Model | None, threads: Sequence[int],
                 gen_length: int = 64, prompt_tokens: int = 32, decode_tokens: int = 16,
                 steps: int = 16, repeats: int = 3,
                 on_point: OnPoint | None = None) -> list[ScalingPoint]:
    """AR decode (on `ar`) and diffusion steps (on `diffusion`, B = `gen_length`) at each
    thread count; either model may be None to measure only the other. `steps` only converts
    a step's time into diffuse-cpp's tok/s (B / (steps * step time))."""
    counts = [int(t) for t in threads]
    if not counts or min(counts) < 1:
        raise UsageError(f"thread_sweep: expected positive thread counts, got {counts}")
    if ar is None and diffusion is None:
        raise UsageError("thread_sweep: expected an AR model, a diffusion model or both")
    total = len(counts) * ((ar is not None) + (diffusion is not None))
    points: list[ScalingPoint] = []
    first: dict[str, float] = {}

    def record(p: ScalingPoint) -> None:
        first.setdefault(p.kind, p.tok_s)
        p.scaling = p.tok_s / first[p.kind]
        points.append(p)
        if on_point is not None:
            on_point(p, len(points), total)

    for n in counts:
        with use_threads(n):
            if ar is not None:
                s = decode_seconds(ar, prompt_tokens, decode_tokens, repeats)
                record(ScalingPoint(AR, n, s, 1.0 / s, 1))
            if diffusion is not None:
                s = diffusion_step_seconds(diffusion, gen_length, prompt_tokens, repeats)
                record(ScalingPoint(DIFFUSION, n, s, gen_length / (steps * s),
                                    prompt_tokens + gen_length))
    return points


def scaling_rows(points: Sequence[ScalingPoint]) -> list[dict[str, Any]]:
    """One row per thread count: each kind's tok/s and scaling factor side by side."""
    rows: dict[int, dict[str, Any]] = {}
    for p in points:
        row = rows.setdefault(p.threads, {"threads": p.threads})
        if p.kind == AR:
            row |= {"ar_decode_tok_s": p.tok_s, "ar_scaling": p.scaling}
        else:
            row |= {"diffusion_step_ms": p.seconds * 1e3, "diffusion_tok_s": p.tok_s,
                    "diffusion_scaling": p.scaling}
    return [rows[t] for t in sorted(rows)]
