"""Benchmark llmnb.quant against gguf-py's ``gguf.quants``, and llmnb.kernels against numpy.

``bench_quant``: for each type, random blocks (finite f16 scales) of ``n_elements``, one
warm-up call, then the median of `repeats` timed calls of each implementation, alternating
so that machine noise hits both (``timing.median_times``). Both are single-threaded numpy
(no BLAS in these kernels). Rows: {type, op, n_elements, llmnb_s, gguf_s, ratio} with
ratio = gguf_s / llmnb_s (> 1: llmnb is faster); for k-quant quantize gguf-py has no
quantizer and gguf_s/ratio are None.

``bench_kernels``: the matrix-vector products of a decode step, per type: SmolLM2-135M's
layer shapes (fused QKV, O, fused gate/up, down) for all 30 layers, random blocks repacked
(``llmnb.kernels.pack``), one vector through every matrix, against numpy's float32 GEMV
over the same shapes (``x @ W.T`` with W.T stored (in, out), as the f32 path keeps it), in
the same run, at the current thread setting. Every side gets distinct matrices for every
layer, so each reads a whole step's bytes, as a decode step does. GB/s counts the bytes the
kernel reads (the repacked quants and float32 scales); where the CPU has integer kernels, the
same step through them (``llmnb.kernels.integer``: activations quantized to 8 bits, byte dot
products).
``cost_curve`` is c(T) per format: a product of T rows over 4 layers' matrices in units of the
one-row product, by the float kernels, the integer ones and the dequantize + sgemm way
(``llmnb.kernels.product``); ``DENSE_ROWS`` comes from where the float kernels and sgemm cross.

``compile_time``: numba's one-time cost. A fresh interpreter with an empty cache folder runs
every kernel once (one row, a few rows, the dense copy, a row lookup, for nibbles, bytes and
halves); a second one, on the cache the first wrote, runs them again: {cold_s, cached_s}.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from llmnb.gguf.constants import GGML_BLOCK_SIZES, GGMLType, type_name
from llmnb.kernels.integer import INTEGER_TYPES
from llmnb.kernels.integer import matmul as integer_matmul
from llmnb.kernels.integer import pack as pack_integer
from llmnb.kernels.isa import integer_isa
from llmnb.perf.table import table_lines
from llmnb.perf.threads import threads as use_threads
from llmnb.perf.timing import median_time, median_times
from llmnb.quant import dequantize, quantize

T = GGMLType
DEQUANT_TYPES = [T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1,
                 T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]
QUANT_TYPES = [T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q4_K, T.Q5_K, T.Q6_K]
GGUF_QUANTIZES = {T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1}
# byte offsets of the f16 scales, made finite so both sides do the same arithmetic
F16_OFFSETS = {T.Q8_0: [0], T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2],
               T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}
ROW = 4096


def random_raw(ggml_type: int, n_elements: int, rng: np.random.Generator) -> npt.NDArray[np.uint8]:
    """(rows, row bytes) of random blocks of `ggml_type`, ROW elements per row."""
    block, size = GGML_BLOCK_SIZES[ggml_type]
    rows = n_elements // ROW
    if block == 1:
        x = rng.standard_normal((rows, ROW)).astype(np.float32)
        return quantize(x, ggml_type)
    raw = rng.integers(0, 256, (rows * ROW // block, size), dtype=np.uint8)
    for off in F16_OFFSETS[ggml_type]:
        raw[:, off + 1] &= 0x3B
    return raw.reshape(rows, -1)


def row(ggml_type: int, op: str, n: int, ours: float, theirs: float | None) -> dict[str, object]:
    return {"type": type_name(ggml_type), "op": op, "n_elements": n, "llmnb_s": ours,
            "gguf_s": theirs, "ratio": (theirs / ours) if theirs is not None else None}


def bench_quant(repeats: int = 5, n_elements: int = 1 << 21) -> list[dict[str, object]]:
    """Time dequantize (every type) and quantize (where possible) against gguf.quants."""
    import gguf  # gguf-py: the oracle, imported only when benchmarking
    from gguf import quants

    rng = np.random.default_rng(0)
    rows: list[dict[str, object]] = []
    warnings.simplefilter("ignore", RuntimeWarning)
    for t in DEQUANT_TYPES:
        raw = random_raw(t, n_elements, rng)
        shape = (raw.shape[0], ROW)
        qt = gguf.GGMLQuantizationType(t)
        ours, theirs = median_times([lambda: dequantize(raw, t, shape),
                                     lambda: quants.dequantize(raw, qt)], repeats)
        rows.append(row(t, "dequantize", n_elements, ours, theirs))
    x = rng.standard_normal((n_elements // ROW, ROW)).astype(np.float32) * np.float32(0.02)
    for t in QUANT_TYPES:
        qt = gguf.GGMLQuantizationType(t)
        fns: list[Callable[[], object]] = [lambda: quantize(x, t)]
        if t in GGUF_QUANTIZES:
            fns.append(lambda: quants.quantize(x, qt))
        times = median_times(fns, repeats)
        rows.append(row(t, "quantize", n_elements, times[0], times[1] if len(times) > 1 else None))
    return rows


def format_rows(rows: list[dict[str, object]]) -> str:
    """A plain-text table of `bench_quant` rows in ms and Melem/s."""
    shown: list[dict[str, object]] = []
    for r in rows:
        ours, theirs = float(r["llmnb_s"]), r["gguf_s"]  # type: ignore[arg-type]
        n = int(r["n_elements"])  # type: ignore[call-overload]
        shown.append({"type": r["type"], "op": r["op"], "llmnb_ms": 1e3 * ours,
                      "gguf_ms": 1e3 * theirs if isinstance(theirs, float) else "-",
                      "ratio": r["ratio"] if isinstance(r["ratio"], float) else "-",
                      "llmnb_Melem_s": n / ours / 1e6})
    return "\n".join(table_lines(shown))


# SmolLM2-135M's matrices (n_out, n_in): fused QKV, O, fused gate/up, down
LAYER_SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
KERNEL_TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K, T.F16, T.BF16]


def random_matrix(ggml_type: int, n_out: int, n_in: int,
                  rng: np.random.Generator) -> npt.NDArray[np.uint8]:
    """(n_out, row bytes) of random blocks of `ggml_type` with finite scales."""
    block, size = GGML_BLOCK_SIZES[ggml_type]
    if block == 1:
        return quantize(rng.standard_normal((n_out, n_in)).astype(np.float32) * np.float32(0.02),
                        ggml_type)
    raw = rng.integers(0, 256, (n_out * n_in // block, size), dtype=np.uint8)
    for off in F16_OFFSETS[ggml_type]:
        raw[:, off + 1] &= 0x3B                                  # small finite float16 scales
    return raw.reshape(n_out, -1)


def distinct_bytes(mats: list[Any]) -> int:
    """Bytes of the distinct matrices in `mats` (one listed twice counts once): what a step
    over them reads from beyond the caches, at most."""
    return sum(int(m.nbytes) for m in {id(m): m for m in mats}.values())


def bench_kernels(repeats: int = 5, layers: int = 30) -> list[dict[str, object]]:
    """Rows {type, bytes_per_weight, file_bytes_per_weight, MB read, kernel_ms, GB_s,
    numpy_f32_ms, numpy_MB_read, vs_numpy_f32} for one decode step's products, then the cost
    curve."""
    from llmnb.kernels import pack
    from llmnb.kernels.product import quantized_matmul

    rng = np.random.default_rng(0)
    x = {k: rng.standard_normal((1, k)).astype(np.float32) for k in {i for _, i in LAYER_SHAPES}}
    # every layer its own matrices, as the kernels below get: both sides read as many distinct
    # bytes as a real step does (the same matrices again would be read from cache)
    f32 = [rng.standard_normal((i, o), dtype=np.float32) for _ in range(layers)
           for o, i in LAYER_SHAPES]

    def numpy_step() -> None:
        for w_t in f32:
            x[w_t.shape[0]][0] @ w_t

    rows: list[dict[str, object]] = []
    for t in KERNEL_TYPES:
        block = GGML_BLOCK_SIZES[t][0]          # k-quants need rows of 256: 576 becomes 768
        shapes = [(o, -(-i // block) * block) for o, i in LAYER_SHAPES]
        mats = [pack(random_matrix(t, o, i, rng), t, o, i)
                for _ in range(layers) for o, i in shapes]
        xs = {i: rng.standard_normal((1, i)).astype(np.float32) for _, i in shapes}
        nbytes = distinct_bytes(mats)
        weights = sum(o * i for o, i in shapes) * layers
        f32_weights = sum(o * i for o, i in LAYER_SHAPES) * layers

        def kernel_step() -> None:
            for m in mats:
                quantized_matmul(xs[m.n_in], m)

        steps = [kernel_step, numpy_step]
        isa = integer_isa()
        if isa is not None and t in INTEGER_TYPES:
            ints = [pack_integer(random_matrix(t, o, i, rng), t, o, i)     # distinct, as above
                    for _ in range(layers) for o, i in shapes]

            def integer_step() -> None:
                for w in ints:
                    integer_matmul(xs[w.n_in], w, isa)
            steps.append(integer_step)
        times = median_times(steps, repeats)
        ours, theirs = times[0], times[1]
        numpy_s = theirs * weights / f32_weights                     # the same weight count
        row_: dict[str, object] = {
            "type": type_name(t), "bytes_per_weight": nbytes / weights,
            "file_bytes_per_weight": GGML_BLOCK_SIZES[t][1] / block,
            "MB_read": nbytes / 1e6, "kernel_ms": ours * 1e3, "GB_s": nbytes / ours / 1e9,
            "numpy_f32_ms": numpy_s * 1e3, "numpy_MB_read": distinct_bytes(f32) / 1e6,
            "vs_numpy_f32": numpy_s / ours}
        if len(times) == 3:
            int_bytes = distinct_bytes(ints)
            row_ |= {"integer_isa": isa, "integer_bytes_per_weight": int_bytes / weights,
                     "integer_ms": times[2] * 1e3, "integer_GB_s": int_bytes / times[2] / 1e9,
                     "integer_vs_float": ours / times[2]}
        rows.append(row_)
    return rows + cost_curve(repeats, layers=min(layers, 4))


def first_calls() -> float:
    """Seconds to import the kernels and run each of them once (what a fresh process pays):
    the float kernels, and the integer ones of this CPU's build."""
    def run_each_once() -> None:
        from llmnb.kernels import matmul, pack, rows, to_dense

        rng = np.random.default_rng(2)
        for t in (T.Q4_1, T.Q8_0, T.Q4_0, T.F16):
            w = pack(random_matrix(t, 128, 256, rng), t, 128, 256)
            for n in (1, 3, 64):
                matmul(rng.standard_normal((n, 256)).astype(np.float32), w)
            rows(w, np.arange(2, dtype=np.int64))
            to_dense(w)
        isa = integer_isa()
        if isa is None:
            return
        for t in (T.Q4_1, T.Q8_0, T.Q5_0, T.Q4_K, T.Q6_K):
            wi = pack_integer(random_matrix(t, 128, 256, rng), t, 128, 256)
            for n in (1, 3, 64):
                integer_matmul(rng.standard_normal((n, 256)).astype(np.float32), wi, isa)

    return median_time(run_each_once, repeats=1, warmup=0)


def compile_time() -> list[dict[str, object]]:
    """{kernels, cold_s, cached_s}: the first calls with an empty numba cache, then with it."""
    import os
    import subprocess
    import sys
    import tempfile

    code = "from llmnb.perf.bench_quant import first_calls; print(first_calls())"
    with tempfile.TemporaryDirectory() as cache:
        env = os.environ | {"NUMBA_CACHE_DIR": cache}
        cold, cached = (float(subprocess.run([sys.executable, "-P", "-c", code], env=env,
                                             check=True, capture_output=True,
                                             text=True).stdout.split()[-1])
                        for _ in range(2))
    return [{"kernels": "numba compile (all kernels)", "cold_s": cold, "cached_s": cached}]


COST_TYPES = (T.Q4_1, T.Q5_0, T.Q8_0, T.Q4_K, T.Q6_K)


def cost_curve(repeats: int = 5,
               counts: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64),
               types: tuple[int, ...] = COST_TYPES, layers: int = 4) -> list[dict[str, object]]:
    """c(T) per format: T rows through `layers` SmolLM2 layers' matrices (rows of 768 for
    the k-quants), in units of one row through the same kernel, for the float kernels, the
    integer ones (where the CPU has them) and dequantize + sgemm (in units of the float
    kernels' one row); several layers so one product is long enough to time steadily."""
    from llmnb.kernels import pack
    from llmnb.kernels.product import dense_matmul, quantized_matmul

    isa = integer_isa()
    rng = np.random.default_rng(1)
    rows: list[dict[str, object]] = []
    for t in types:
        block = GGML_BLOCK_SIZES[t][0]
        shapes = [(o, -(-i // block) * block) for o, i in LAYER_SHAPES]
        raws = [random_matrix(t, o, i, rng) for _ in range(layers) for o, i in shapes]
        mats = [pack(r, t, r.shape[0], shapes[k % 4][1]) for k, r in enumerate(raws)]
        ints = ([pack_integer(r, t, r.shape[0], shapes[k % 4][1]) for k, r in enumerate(raws)]
                if isa is not None else [])
        xs = {n: {i: rng.standard_normal((n, i)).astype(np.float32) for _, i in shapes}
              for n in counts}

        def step(n: int, way: str) -> Callable[[], None]:
            def run() -> None:
                if way == "integer" and isa is not None:
                    for w in ints:
                        integer_matmul(xs[n][w.n_in], w, isa)
                    return
                for m in mats:
                    (dense_matmul if way == "dense" else quantized_matmul)(xs[n][m.n_in], m)
            return run

        ways = ["float", "dense"] + (["integer"] if ints else [])
        ones = median_times([step(1, w) for w in ways if w != "dense"], repeats * 4)
        one = dict(zip([w for w in ways if w != "dense"], ones))
        for n in counts:
            times = dict(zip(ways, median_times([step(n, w) for w in ways], repeats * 2)))
            r: dict[str, object] = {
                "rows": n, "type": type_name(t), "float_ms": times["float"] * 1e3,
                "quantized_steps": times["float"] / one["float"],
                "dense_steps": times["dense"] / one["float"]}
            if ints:
                r |= {"integer_ms": times["integer"] * 1e3,
                      "integer_steps": times["integer"] / one["integer"]}
            r["faster"] = min(times, key=lambda w: times[w])
            rows.append(r)
    return rows


def run(repeats: int, threads: list[int] | None, peer: str | None, weights: list[str] | None,
        models: list[str] | None) -> list[dict[str, Any]]:
    """``llmnb bench quant``: the conversions, the kernels and numba's compile time, 1 thread."""
    with use_threads(1):
        return bench_quant(repeats=repeats) + bench_kernels(repeats=repeats) + compile_time()


if __name__ == "__main__":
    print(format_rows(bench_quant()))
    for r in bench_kernels():
        print(r)
