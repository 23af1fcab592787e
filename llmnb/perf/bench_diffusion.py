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
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from llmnb.gguf.constants import BOOL, UINT32
from llmnb.gguf.reader import MetadataField, open_gguf
from llmnb.gguf.writer import TensorToWrite, write_gguf
from llmnb.perf.bench import median_time

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


def sgemm_gflops(n: int = 2048, repeats: int = 5) -> float:
    a = np.ones((n, n), dtype=np.float32)
    b = np.ones((n, n), dtype=np.float32)
    return 2 * n ** 3 / median_time(lambda: a @ b, repeats) / 1e9


def step_flops(config: Any, n_tokens: int, n_head_rows: int) -> float:
    c = config
    per_layer = c.n_embd * c.head_dim * (2 * c.n_head + 2 * c.n_head_kv) + 3 * c.n_embd * c.n_ff
    return float(2 * n_tokens * per_layer * c.n_layer + 4 * n_tokens ** 2 * c.n_embd * c.n_layer
                 + 2 * n_head_rows * c.n_embd * c.vocab_size)


def worker(path: str, threads: int, gen_length: int, repeats: int) -> dict[str, Any]:
    """Median time of one full (uncached) denoising step at `threads`, with its FLOPs and MFU."""
    import llmnb
    from llmnb.diffusion import diffuse

    with llmnb.threads(threads):
        m = llmnb.load(path)
        peak = sgemm_gflops(repeats=repeats)
        prompt = list(range(100, 100 + PROMPT_TOKENS))
        diffuse(m, prompt, gen_length=gen_length, steps=1, cache=False)      # warm-up
        times = []
        for _ in range(repeats):
            r = diffuse(m, prompt, gen_length=gen_length, steps=1, cache=False)
            times.append(r.stats.forward_s[0])
    t = statistics.median(times)
    flops = step_flops(m.config, PROMPT_TOKENS + gen_length, gen_length)
    return {"threads": threads, "B": gen_length, "step_ms": t * 1e3, "gflops": flops / t / 1e9,
            "sgemm_peak_gflops": peak, "mfu": flops / t / 1e9 / peak,
            "canvas_tok_s_at_16_steps": gen_length / (16 * t)}


def bench_diffusion(repeats: int = 5, threads: list[int] | None = None,
                    lengths: tuple[int, ...] = (64, 256)) -> list[dict[str, Any]]:
    from llmnb import hub

    import json

    rows = []
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "smollm2-llada.gguf"
        llada_copy(hub.path("smollm2-135m"), path)
        for n in threads or [1, 2]:
            for b in lengths:
                code = ("import json; from llmnb.perf.bench_diffusion import worker; "
                        f"print(json.dumps(worker({str(path)!r}, {n}, {b}, {repeats})))")
                r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
                if r.returncode != 0:
                    raise RuntimeError(f"bench diffusion worker failed: {r.stderr.strip()[-500:]}")
                rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return rows
