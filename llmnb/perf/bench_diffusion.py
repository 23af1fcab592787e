"""``llmnb bench diffusion``: the cost of one denoising step against this machine's sgemm peak.

A diffusion step runs the whole canvas (prompt + B generated positions) through every weight
matrix at once: a matrix-matrix product, compute-bound, where BLAS runs near its peak. The
step's FLOPs are counted from the model's shapes,

    2 * N * (weights of one layer) * layers        (projections and feed-forward, N tokens)
  + 4 * N^2 * d * layers                           (attention scores and weighted values)
  + 2 * m * d * vocab                              (output head, only for the m masked rows),

and divided by the step time and by sgemm's GFLOP/s measured in the same run (MFU). The model
is SmolLM2-135M's weights relabelled as a `llada` file (bidirectional, a mask id added):
SmolLM2-shaped, so the figures speak of a real 135M-parameter network.

With ``peer`` (a llama.cpp build folder or its ``llama-diffusion-cli``), the same step is timed
in llama.cpp on the same file (SmolLM2's Q4_1/Q8_0 tensors) and on an all-F32 copy of it
(llama.cpp's fastest batched path on this CPU): ``llama-diffusion-cli`` with a canvas of
``PROMPT_TOKENS + B`` positions (``-ub``), 16 steps, one block, temperature 0, its own "time
per step" line (total time / steps: a full forward of the canvas plus sampling). Both engines
recompute the whole canvas every step (no inter-step cache), on the same thread count, one
after the other in this run. ``step_ratio`` = llama.cpp's time / llmnb's (above 1: llmnb faster).

The inter-step cache's own table is ``llmnb bench cache`` (``bench_cache.py``).
"""
from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from llmnb.gguf.constants import BOOL, UINT32
from llmnb.gguf.reader import MetadataField, open_gguf
from llmnb.gguf.writer import TensorToWrite, write_gguf
from llmnb.perf.machine import sgemm_gflops

PROMPT_TOKENS = 32
MASK_ID = 4  # a control token of SmolLM2's vocabulary (unused in its chat format) as the mask


def llada_copy(src: Path, dst: Path) -> None:
    """SmolLM2's GGUF rewritten as arch `llada`: the same tensors (quantized bytes copied),
    keys under `llada.`, attention marked bidirectional, a mask token id."""
    f = open_gguf(src)
    fields = [MetadataField("llada." + k[len("llama."):] if k.startswith("llama.") else k,
                            v.value_type, v.value, v.item_type) for k, v in f.fields.items()]
    fields += [MetadataField("llada.attention.causal", BOOL, False),
               MetadataField("tokenizer.ggml.mask_token_id", UINT32, MASK_ID)]
    tensors = [TensorToWrite(n, np.asarray(f.raw(n)), t.ggml_type, t.shape)
               for n, t in f.tensors.items()]
    write_gguf(dst, "llada", fields, tensors)


def step_flops(config: Any, n_tokens: int, n_head_rows: int) -> float:
    c = config
    per_layer = c.n_embd * c.head_dim * (2 * c.n_head + 2 * c.n_head_kv) + 3 * c.n_embd * c.n_ff
    return float(2 * n_tokens * per_layer * c.n_layer + 4 * n_tokens ** 2 * c.n_embd * c.n_layer
                 + 2 * n_head_rows * c.n_embd * c.vocab_size)


def worker(path: str, threads: int, gen_length: int, repeats: int,
           weights: str = "auto") -> dict[str, Any]:
    """Median time of one full (uncached) denoising step at `threads`, with its FLOPs and MFU."""
    import llmnb
    from llmnb.diffusion import diffuse

    with llmnb.threads(threads):
        m = llmnb.load(path, weights=weights)
        peak = sgemm_gflops(repeats=repeats)
        prompt = list(range(100, 100 + PROMPT_TOKENS))
        diffuse(m, prompt, gen_length=gen_length, steps=1, cache=False)      # warm-up
        times = []
        for _ in range(repeats):
            r = diffuse(m, prompt, gen_length=gen_length, steps=1, cache=False)
            times.append(r.stats.forward_s[0])
    t = statistics.median(times)
    flops = step_flops(m.config, PROMPT_TOKENS + gen_length, gen_length)
    return {"threads": threads, "weights": m.plan.weights, "B": gen_length, "step_ms": t * 1e3,
            "gflops": flops / t / 1e9,
            "sgemm_peak_gflops": peak, "mfu": flops / t / 1e9 / peak,
            "canvas_tok_s_at_16_steps": gen_length / (16 * t)}


PEER_STEPS = 16
PEER_PROMPT = "Explain in a few sentences why the sky is blue during the day."


def peer_exe(peer: str) -> Path:
    exe = Path(peer)
    if exe.is_dir():
        exe = exe / "llama-diffusion-cli"
    if not exe.is_file():
        found = shutil.which(str(exe))
        if found is None:
            raise FileNotFoundError(f"--peer: no llama-diffusion-cli at {exe}")
        exe = Path(found)
    return exe


def peer_step_ms(exe: Path, path: Path, canvas: int, threads: int, repeats: int) -> float:
    """Median of llama-diffusion-cli's "time per step" over `repeats` runs (after a warm-up)."""
    cmd = [str(exe), "-m", str(path), "-p", PEER_PROMPT, "-ub", str(canvas), "-b", str(canvas),
           "-c", str(max(512, canvas)), "--diffusion-steps", str(PEER_STEPS),
           "--diffusion-block-length", str(canvas), "-t", str(threads), "-tb", str(threads),
           "--temp", "0", "--seed", "42"]
    times = []
    for i in range(repeats + 1):
        r = subprocess.run(cmd, capture_output=True, text=True)
        out = r.stdout + r.stderr
        m = re.search(r"time per step: ([0-9.]+)ms", out)
        if r.returncode != 0 or m is None:
            raise RuntimeError(f"llama-diffusion-cli failed ({' '.join(cmd)}): {out.strip()[-500:]}")
        if i > 0:                                               # the first run is the warm-up
            times.append(float(m.group(1)))
    return statistics.median(times)


def _worker(call: str) -> dict[str, Any]:
    from llmnb.perf.bench import run_worker

    out: dict[str, Any] = run_worker("llmnb.perf.bench_diffusion", call, "diffusion")
    return out


def bench_diffusion(repeats: int = 5, threads: list[int] | None = None,
                    lengths: tuple[int, ...] = (64, 256), peer: str | None = None,
                    weights: list[str] | None = None) -> list[dict[str, Any]]:
    """One uncached step per (threads, B), each in a fresh subprocess; with `peer`, llama.cpp's
    step on the same file and on an all-F32 copy, timed right after llmnb's."""
    from llmnb import hub
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
                row = _worker(f"worker({str(path)!r}, {n}, {b}, {repeats}, {w!r})")
                if exe is not None:
                    canvas = PROMPT_TOKENS + b
                    q = peer_step_ms(exe, path, canvas, n, repeats)
                    full = peer_step_ms(exe, f32, canvas, n, repeats)
                    row |= {"llama_cpp_step_ms": q, "step_ratio": q / row["step_ms"],
                            "llama_cpp_f32_step_ms": full, "f32_step_ratio": full / row["step_ms"]}
                rows.append(row)
    return rows
