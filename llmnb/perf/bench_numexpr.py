"""``llmnb bench numexpr``: llmnb's own elementwise work over large arrays, numpy against numexpr.

numexpr evaluates a compound expression in one pass over cache-sized blocks, without numpy's
temporaries, on its own threads; numpy's transcendental functions are SIMD-vectorised and
numexpr's are not. Which wins depends on the expression and the array, so each row times one
piece of llmnb's work as llmnb does it with numpy and as one numexpr expression (the same
result, checked), at each thread count (``llmnb.threads``: BLAS's and numexpr's):

- ``dequantize Q8_0``: x = d * q over a tensor the size of SmolLM2's token embedding
  (49152 x 576), as ``legacy_dequant`` computes it (int8 -> float32, then times each block's
  scale repeated over its 32 values) and as ``d * q`` with the (n, 1) scales broadcast: over
  the whole tensor at once, and in the chunks of 2048 blocks ``quant.dequantize`` runs;
- ``perplexity NLL``: -log softmax(logits)[target] over a window of 512 positions of SmolLM2's
  vocabulary, as log-sum-exp minus the target's logit both ways (``ar.perplexity.token_nll``
  takes the whole log-softmax first), numexpr for exp and the sum;
- ``diffusion entropy``: the entropy of every masked position's distribution, 256 positions
  (``softmax.entropy``, float32, what entropy_exit and the remasking rules read);
- ``k-quant error``: the weighted squared error ggml's k-quant search sums for each candidate
  scale, sum w (s q + m - x)^2 over a whole tensor's 32-value sub-blocks (``kquants_search``
  evaluates it chunk by chunk).

ratio = numpy ms / numexpr ms (above 1: numexpr faster). Timings on a shared machine are
noisy; only the ratios of one run compare.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from llmnb.perf.timing import median_times

F32 = npt.NDArray[np.float32]
Case = tuple[str, Callable[[], Any], Callable[[], Any]]


def cases(rng: np.random.Generator) -> list[Case]:
    """(name, numpy as llmnb runs it, numexpr) for each piece of work (module docstring)."""
    import numexpr as ne

    from llmnb.gguf.constants import GGMLType
    from llmnb.quant.block_fields import f16_column, per_element
    from llmnb.quant.formats import dequantize_blocks, quantize
    from llmnb.quant.legacy_dequant import q8_0_kernel
    from llmnb.softmax import entropy

    n_blocks = 49152 * 576 // 32
    q = rng.integers(-127, 128, (n_blocks, 32), dtype=np.int8)            # (n, 32)
    d = rng.uniform(1e-3, 1e-2, (n_blocks, 1)).astype(np.float32)          # (n, 1)
    out = np.empty((n_blocks, 32), dtype=np.float32)

    def dequant_numpy() -> F32:
        np.copyto(out, q, casting="unsafe")
        out[...] *= per_element(d, 32)
        return out

    def dequant_numexpr() -> F32:
        result: F32 = ne.evaluate("d * q", local_dict={"d": d, "q": q}, out=out)
        return result

    raw = quantize(rng.standard_normal((49152, 576)).astype(np.float32),
                   GGMLType.Q8_0).reshape(-1, 34)                           # (n, 34) blocks

    def q8_0_numexpr(blocks: npt.NDArray[np.uint8], chunk: F32) -> None:
        """legacy_dequant.q8_0_kernel with its arithmetic as one numexpr expression."""
        ne.evaluate("d * q", local_dict={"d": f16_column(blocks, 0),
                                         "q": blocks[:, 2:34].view(np.int8)}, out=chunk)

    logits = rng.standard_normal((512, 49152)).astype(np.float32) * 3      # (T, V)
    targets = rng.integers(0, 49152, 512)

    def nll_numpy() -> npt.NDArray[np.float64]:
        z = logits.astype(np.float64)
        top = z.max(axis=1, keepdims=True)                                  # (T, 1)
        lse = np.log(np.exp(z - top).sum(axis=1)) + top[:, 0]
        nll: npt.NDArray[np.float64] = lse - z[np.arange(len(targets)), targets]
        return nll

    def nll_numexpr() -> npt.NDArray[np.float64]:
        z = logits.astype(np.float64)
        top = z.max(axis=1, keepdims=True)                                  # (T, 1)
        lse = np.log(ne.evaluate("sum(exp(z - top), axis=1)")) + top[:, 0]
        nll: npt.NDArray[np.float64] = lse - z[np.arange(len(targets)), targets]
        return nll

    masked = logits[:256]                                                   # (m, V)

    def entropy_numexpr() -> npt.NDArray[np.float64]:
        top = masked.max(axis=1, keepdims=True)
        p = ne.evaluate("exp(x - top)", local_dict={"x": masked, "top": top})
        p /= p.sum(axis=1, keepdims=True)
        h = ne.evaluate("sum(where(p > 1e-10, p * log(p), 0), axis=1)")
        return -np.asarray(h, dtype=np.float64)

    xs = rng.standard_normal((32, n_blocks // 8)).astype(np.float32)       # (32, sub-blocks)
    ws = np.abs(xs) + np.float32(0.5)
    levels = np.rint(np.abs(xs) * 7).astype(np.float32)
    scale = rng.uniform(0.1, 0.2, (1, xs.shape[1])).astype(np.float32)
    minimum = -np.abs(rng.standard_normal((1, xs.shape[1]))).astype(np.float32)

    def error_numpy() -> F32:
        diff = scale * levels + minimum - xs
        e: F32 = (ws * diff * diff).sum(axis=0)
        return e

    def error_numexpr() -> F32:
        e: F32 = ne.evaluate("sum(w * (s * l + m - x) ** 2, axis=0)",
                             local_dict={"w": ws, "s": scale, "l": levels, "m": minimum,
                                         "x": xs})
        return e

    return [("dequantize Q8_0, whole tensor", dequant_numpy, dequant_numexpr),
            ("dequantize Q8_0, llmnb's chunks",
             lambda: dequantize_blocks(q8_0_kernel, raw, 32),
             lambda: dequantize_blocks(q8_0_numexpr, raw, 32)),
            ("perplexity NLL", nll_numpy, nll_numexpr),
            ("diffusion entropy", lambda: entropy(masked), entropy_numexpr),
            ("k-quant error", error_numpy, error_numexpr)]


def bench_numexpr(repeats: int, threads: list[int]) -> list[dict[str, object]]:
    import llmnb

    rows: list[dict[str, object]] = []
    work = cases(np.random.default_rng(0))
    for name, numpy_f, numexpr_f in work:       # the same result both ways, before any timing
        a, b = np.asarray(numpy_f()), np.asarray(numexpr_f())
        if not np.allclose(a, b, rtol=1e-4, atol=1e-6):
            raise AssertionError(f"bench numexpr: {name}: numpy and numexpr disagree")
        rows_done = []
        for n in threads:
            with llmnb.threads(n):
                t_numpy, t_numexpr = median_times([numpy_f, numexpr_f], repeats)
            rows_done.append({"op": name, "threads": n, "numpy_ms": t_numpy * 1e3,
                              "numexpr_ms": t_numexpr * 1e3, "ratio": t_numpy / t_numexpr,
                              "exact": bool(np.array_equal(a, b))})
        rows += rows_done
    return rows


def run(repeats: int, threads: list[int] | None, peer: str | None, weights: list[str] | None,
        models: list[str] | None) -> list[dict[str, object]]:
    """``llmnb bench numexpr``: at 1 and 2 threads unless told."""
    return bench_numexpr(repeats, threads or [1, 2])
