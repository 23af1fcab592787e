"""``llmnb bench diffusion``: the cost of one denoising step against this machine's sgemm peak.

A diffusion step runs the whole canvas (prompt + B generated positions) through every weight
matrix at once: a matrix-matrix product, compute-bound, where BLAS runs near its peak. The
step's FLOPs are counted from the model's shapes,

    2 * N * (weights of one layer) * layers        (projections and feed-forward, N tokens)
  + 4 * N^2 * d * layers                           (attention scores and weighted values)
  + 2 * m * d * vocab                              (output head, only for the m masked rows),

and divided by the step time and by sgemm's GFLOP/s measured in the same run (MFU). The model
is SmolLM2-135M's weights relabelled as a `llada` file (``bench_files.llada_copy``:
bidirectional, a mask id added), timed by ``scaling.diffusion_step_seconds`` (as the thread
sweep times it): SmolLM2-shaped, so the figures speak of a real 135M-parameter network.

With ``peer`` (a llama.cpp build folder or its ``llama-diffusion-cli``; ``peer.py``), the same
step is timed in llama.cpp on the same file (SmolLM2's Q4_1/Q8_0 tensors) and on an all-F32
copy of it (llama.cpp's fastest batched path on this CPU): ``llama-diffusion-cli`` with a canvas of
``PROMPT_TOKENS + B`` positions (``-ub``), 16 steps, one block, temperature 0, its own "time
per step" line (total time / steps: a full forward of the canvas plus sampling). Both engines
recompute the whole canvas every step (no inter-step cache), on the same thread count, one
after the other in this run. ``step_ratio`` = llama.cpp's time / llmnb's (above 1: llmnb faster).

Column ``products_ms`` times the step's matrix products alone, in the same run and process:
every layer's four projections and the head, through the forward's own ``blocks.Linear``s on
the same weights and shapes, with nothing between them (no norms, RoPE, attention, SwiGLU or
sampling). It is the step's floor on this machine's BLAS: ``products_share`` is how much of
the step they take, and with ``peer`` ``f32_ratio_bound`` = llama.cpp's all-F32 step /
``products_ms`` is the ratio llmnb would reach if everything else in its step took no time.

The inter-step cache's own table is ``llmnb bench cache`` (``bench_cache.py``).

``python -m llmnb.perf.bench_diffusion --elementwise`` times the step's elementwise work on
a canvas of SmolLM2's shapes both ways, as the forward computes it (compiled: SwiGLU, the
attention softmax, RMSNorm, ``llmnb.kernels.rowwise``) against one numexpr pass each: where
numexpr would win is where the forward should use it.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmnb import hub
from llmnb.perf.bench_files import llada_copy
from llmnb.perf.inputs import has_model
from llmnb.perf.peaks import sgemm_gflops
from llmnb.perf.peer import peer_exe, peer_step_ms
from llmnb.perf.timing import median_time
from llmnb.perf.worker import run_worker

PROMPT_TOKENS = 32


def step_flops(config: Any, n_tokens: int, n_head_rows: int) -> float:
    c = config
    per_layer = c.n_embd * c.head_dim * (2 * c.n_head + 2 * c.n_head_kv) + 3 * c.n_embd * c.n_ff
    return float(2 * n_tokens * per_layer * c.n_layer + 4 * n_tokens ** 2 * c.n_embd * c.n_layer
                 + 2 * n_head_rows * c.n_embd * c.vocab_size)


def products(m: Any, n_tokens: int, n_head_rows: int) -> Callable[[], None]:
    """A step's matrix products alone: each layer's q/k/v, output, gate/up
    and down projections over `n_tokens` rows, then the head over `n_head_rows`, through
    each weight's ``blocks.Linear`` (its copies included), as ``Transformer.hidden`` and
    ``logits`` call them; the inputs are random rows of the right widths."""
    import numpy as np

    from llmnb.model.transformer import projections

    t, c = m.transformer, m.config
    t.use_head_copy()                                      # as ``diffuse`` does
    rng = np.random.default_rng(0)

    def rows(n: int, width: int) -> Any:
        return rng.standard_normal((n, width)).astype(np.float32)

    x, f = rows(n_tokens, c.n_embd), rows(n_tokens, c.n_ff)             # (T, d), (T, ff)
    a, h = rows(n_tokens, c.n_head * c.head_dim), rows(n_head_rows, c.n_embd)

    def run() -> None:
        for i in range(c.n_layer):
            qkv, o, gate_up, down = t.linears[i] if t.linears else projections(t.weights.layer(i))
            qkv.matmul(x)
            o.matmul(a)
            gate_up.matmul(x)
            down.matmul(f)
        t.logits(h)

    return run


def worker(path: str, threads: int, gen_length: int, repeats: int,
           weights: str = "auto") -> dict[str, Any]:
    """Median time of one full (uncached) denoising step at `threads`, with its FLOPs and MFU,
    and of its matrix products alone (``products``), timed in the same rounds."""
    import llmnb
    from llmnb.perf.scaling import diffusion_step_timings

    with llmnb.threads(threads):
        m = llmnb.load(path, weights=weights)
        peak = sgemm_gflops(repeats=repeats)
        alone = products(m, PROMPT_TOKENS + gen_length, gen_length)
        t, floor = diffusion_step_timings(m, gen_length, PROMPT_TOKENS, repeats, [alone])
    flops = step_flops(m.config, PROMPT_TOKENS + gen_length, gen_length)
    return {"threads": threads, "weights": m.plan.weights, "B": gen_length, "step_ms": t * 1e3,
            "gflops": flops / t / 1e9,
            "sgemm_peak_gflops": peak, "mfu": flops / t / 1e9 / peak,
            "products_ms": floor * 1e3, "products_share": floor / t,
            "canvas_tok_s_at_16_steps": gen_length / (16 * t)}


def bench_diffusion(repeats: int = 5, threads: list[int] | None = None,
                    lengths: tuple[int, ...] = (64, 256), peer: str | None = None,
                    weights: list[str] | None = None) -> list[dict[str, Any]]:
    """One uncached step per (threads, B), each in a fresh subprocess; with `peer`, llama.cpp's
    step on the same file and on an all-F32 copy, timed right after llmnb's."""
    from llmnb.quant.gguf_file import quantize_file

    exe = peer_exe(peer) if peer else None
    rows = []
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "smollm2-llada.gguf"
        llada_copy(hub.path("smollm2-135m"), path)
        f32 = Path(d) / "smollm2-llada-f32.gguf"
        if exe is not None:
            quantize_file(path, f32, "F32")
        for n in threads or [1, 2]:
            for b, w in [(b, w) for b in lengths for w in weights or ["auto"]]:
                row: dict[str, Any] = run_worker(
                    "llmnb.perf.bench_diffusion",
                    f"worker({str(path)!r}, {n}, {b}, {repeats}, {w!r})", "diffusion")
                if exe is not None:
                    canvas = PROMPT_TOKENS + b
                    q = peer_step_ms(exe, path, canvas, n, repeats)
                    full = peer_step_ms(exe, f32, canvas, n, repeats)
                    row |= {"llama_cpp_step_ms": q, "step_ratio": q / row["step_ms"],
                            "llama_cpp_f32_step_ms": full, "f32_step_ratio": full / row["step_ms"],
                            "f32_ratio_bound": full / row["products_ms"]}
                rows.append(row)
    return rows


def run(repeats: int, threads: list[int] | None, peer: str | None, weights: list[str] | None,
        models: list[str] | None) -> list[dict[str, Any]] | None:
    """``llmnb bench diffusion``: skipped when SmolLM2-135M is not pulled."""
    if not has_model("smollm2-135m", "diffusion"):
        return None
    return bench_diffusion(repeats=repeats, threads=threads, peer=peer, weights=weights)


def elementwise(threads: int, n_tokens: int, repeats: int = 21) -> list[dict[str, Any]]:
    """Milliseconds of SwiGLU, the attention softmax and RMSNorm over `n_tokens` canvas rows
    (SmolLM2-135M's d = 576, ff = 1536, 9 heads), the forward's compiled kernels against
    numexpr, at `threads` (numba's, numexpr's and BLAS's)."""
    import numexpr as ne
    import numpy as np

    import llmnb
    from llmnb.kernels.rowwise import rms_norm, softmax, swiglu

    rng = np.random.default_rng(0)
    gu = rng.standard_normal((n_tokens, 2 * 1536)).astype(np.float32)    # (T, 2 ff)
    g, u = gu[:, :1536], gu[:, 1536:]
    scores = rng.standard_normal((3, 3, n_tokens, n_tokens)).astype(np.float32)
    x = rng.standard_normal((n_tokens, 576)).astype(np.float32)
    w = rng.standard_normal(576).astype(np.float32)
    eps, d = np.float32(1e-5), np.float32(576)
    buf = np.empty_like(g)

    def softmax_forward() -> None:
        p = scores.copy()
        softmax(p.reshape(-1, n_tokens), n_tokens, -1)

    def softmax_numexpr() -> None:
        p = scores.copy()
        top = p.max(axis=-1, keepdims=True)
        ne.evaluate("exp(p - top)", local_dict={"p": p, "top": top}, out=p)
        p /= p.sum(axis=-1, keepdims=True)

    def rms_numexpr() -> None:
        ms = np.einsum("td,td->t", x, x)[:, None] / d
        ne.evaluate("x / sqrt(ms + eps) * w", local_dict={"x": x, "ms": ms, "eps": eps, "w": w},
                    out=np.empty_like(x))

    cases = [("swiglu", lambda: swiglu(gu, buf),
              lambda: ne.evaluate("g / (1 + exp(-g)) * u", local_dict={"g": g, "u": u}, out=buf)),
             ("attention softmax", softmax_forward, softmax_numexpr),
             ("rms_norm", lambda: rms_norm(x, w, 1e-5), rms_numexpr)]
    rows = []
    with llmnb.threads(threads):
        for name, forward_f, numexpr_f in cases:
            a, b = median_time(forward_f, repeats), median_time(numexpr_f, repeats)
            rows.append({"threads": threads, "T": n_tokens, "op": name, "forward_ms": a * 1e3,
                         "numexpr_ms": b * 1e3, "numexpr_speedup": a / b})
    return rows


def main(argv: list[str] | None = None) -> int:
    from llmnb.perf.table import print_rows

    p = argparse.ArgumentParser(prog="python -m llmnb.perf.bench_diffusion",
                                description="the diffusion step's elementwise work, the "
                                            "forward's kernels against numexpr (llmnb bench "
                                            "diffusion times steps)")
    p.add_argument("--elementwise", action="store_true", required=True)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--tokens", type=int, nargs="+", default=[PROMPT_TOKENS + 64,
                                                             PROMPT_TOKENS + 256])
    a = p.parse_args(argv)
    print_rows("elementwise work of a diffusion step (median ms)",
               [r for n in a.threads for t in a.tokens for r in elementwise(n, t)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
