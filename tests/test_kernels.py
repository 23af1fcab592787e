"""llmnb.kernels: products on repacked blocks vs dequantize-then-multiply in float64, the exact
dense copies, and the quantized residency against the f32 path."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import llmnb
from llmnb.gguf.constants import GGMLType as T
from llmnb.gguf.constants import type_name
from llmnb.gguf.reader import MetadataField
from llmnb.gguf.writer import TensorToWrite, write_gguf
from llmnb.kernels import KERNEL_TYPES, PackedMatrix, pack, rows, to_dense
from llmnb.kernels.product import DENSE_ROWS
from llmnb.kernels.product import dense_matmul, quantized_matmul  # noqa: E402
from llmnb.model.weights import Weights, default_weights, plan_residency
from llmnb.model.config import config_from_gguf
from llmnb.perf.bench_quant import random_matrix
from llmnb.quant import dequantize, quantize
from oracle import MANIFEST, ORACLE, PROMPT, TOL, forward_case, reference
from real_models import hub_model

# max |kernel - float64| / max |float64 product| <= REL_BOUND[type] * sqrt(n_in): float32
# sums of n_in rounded terms grow like sqrt(n_in) * 6e-8; formats with an offset (m * sum(x):
# Q4_0's -8d, Q4_1, Q5_1, Q4_K, Q5_K) cancel part of the sum and get twice the room. Measured
# here: at most 3.5e-8 * sqrt(n_in) on random blocks, 1.3e-7 * sqrt(n_in) on the real tensors.
REL_BOUND = {T.Q4_0: 4e-7, T.Q4_1: 4e-7, T.Q5_0: 2e-7, T.Q5_1: 4e-7, T.Q8_0: 2e-7,
             T.Q4_K: 4e-7, T.Q5_K: 4e-7, T.Q6_K: 2e-7, T.F16: 2e-7, T.BF16: 2e-7}
TYPES = list(REL_BOUND)
ROW_COUNTS = (1, 3, 17, DENSE_ROWS + 1)        # one row, the small-batch kernel, the dense way


def rel_error(got: np.ndarray, w: np.ndarray, x: np.ndarray) -> float:
    """max |got - x @ w.T in float64| / max |x @ w.T|, per sqrt(n_in) (see REL_BOUND)."""
    want = x.astype(np.float64) @ w.astype(np.float64).T
    return float(np.abs(got - want).max() / np.abs(want).max() / np.sqrt(w.shape[1]))


def random_case(t: int, n_out: int, n_in: int, seed: int) -> tuple[PackedMatrix, np.ndarray]:
    raw = random_matrix(t, n_out, n_in, np.random.default_rng(seed))
    return pack(raw, t, n_out, n_in), dequantize(raw, t, (n_out, n_in))


@pytest.mark.parametrize("t", TYPES, ids=type_name)
def test_each_kernel_matches_dequantize_then_multiply_in_float64(t: int) -> None:
    n_in = 768 if t in (T.Q4_K, T.Q5_K, T.Q6_K) else 512
    p, w = random_case(t, 200, n_in, t)                           # 200: a partial last tile
    rng = np.random.default_rng(1)
    for n in ROW_COUNTS:
        x = rng.standard_normal((n, n_in)).astype(np.float32)
        got = p.matmul(x)
        assert got.shape == (n, 200) and got.dtype == np.float32
        assert rel_error(got, w, x) < REL_BOUND[t], (type_name(t), n)
    x = rng.standard_normal((5, n_in)).astype(np.float32)        # both ways agree on any row count
    assert rel_error(quantized_matmul(x, p), w, x) < REL_BOUND[t]
    assert rel_error(dense_matmul(x, p), w, x) < REL_BOUND[t]


@pytest.mark.parametrize("t", TYPES, ids=type_name)
def test_few_row_kernels_give_each_row_bit_identical_to_it_alone_for_t_1_to_17(t: int) -> None:
    """The few-row kernels run rows in blocks of 8, 4, 3, 2 and 1: every T from 1 to 17 (each
    mix of blocks), each row bit-identical to that row multiplied alone, and within the bound."""
    n_in = 768 if t in (T.Q4_K, T.Q5_K, T.Q6_K) else 512
    p, w = random_case(t, 200, n_in, t + 100)
    rng = np.random.default_rng(5)
    for n in range(1, 18):
        x = rng.standard_normal((n, n_in)).astype(np.float32)
        got = quantized_matmul(x, p)
        assert rel_error(got, w, x) < REL_BOUND[t], (type_name(t), n)
        for r in range(n):
            np.testing.assert_array_equal(got[r], quantized_matmul(x[r:r + 1], p)[0])


@pytest.mark.parametrize("t", TYPES, ids=type_name)
def test_dense_copy_and_row_lookup_are_bit_identical_to_dequantize(t: int) -> None:
    n_in = 512 if t not in (T.Q4_K, T.Q5_K, T.Q6_K) else 256
    p, w = random_case(t, 130, n_in, 7)
    np.testing.assert_array_equal(to_dense(p), w.T)
    ids = np.array([0, 63, 64, 129, 5, 5], dtype=np.int64)
    np.testing.assert_array_equal(rows(p, ids), w[ids])


def test_a_nan_or_inf_scale_poisons_its_outputs_as_the_dequantizer_does() -> None:
    raw = random_matrix(T.Q4_1, 64, 64, np.random.default_rng(3))   # 2 blocks of 20 bytes a row
    raw[5, 0:2] = np.frombuffer(np.float16(np.nan).tobytes(), np.uint8)
    raw[9, 20:22] = np.frombuffer(np.float16(np.inf).tobytes(), np.uint8)
    p, w = pack(raw, T.Q4_1, 64, 64), dequantize(raw, T.Q4_1, (64, 64))
    x = np.random.default_rng(4).standard_normal((1, 64)).astype(np.float32)
    with np.errstate(invalid="ignore"):
        got, want = p.matmul(x)[0], (x @ w.T)[0]
    assert np.isnan(got[5]) and np.isnan(want[5])
    assert not np.isfinite(got[9]) and not np.isfinite(want[9])
    ok = np.isfinite(want)
    assert ok.sum() == 62 and np.allclose(got[ok], want[ok], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(to_dense(p), w.T)                  # the copy keeps them exactly


def test_types_without_a_kernel_become_float32_copies() -> None:
    raw = random_matrix(T.Q3_K, 64, 256, np.random.default_rng(5))
    p = pack(raw, T.Q3_K, 64, 256)
    assert T.Q3_K not in KERNEL_TYPES and p.kind == "dense"
    np.testing.assert_array_equal(p.w_t, dequantize(raw, T.Q3_K, (64, 256)).T)


# --- real models: every tensor type they hold -----------------------------------------------

REAL_TENSORS = {
    "smollm2-135m": ["blk.0.attn_q.weight", "token_embd.weight"],                 # Q4_1, Q8_0
    "qwen2.5-coder-0.5b": ["blk.0.attn_q.weight", "blk.0.attn_v.weight",          # Q5_0, Q8_0
                           "blk.0.ffn_down.weight", "blk.2.ffn_down.weight"],     # Q6_K, Q4_K
}


@pytest.mark.parametrize("model", list(REAL_TENSORS))
def test_real_tensors_match_dequantize_then_multiply(model: str) -> None:
    f = llmnb.gguf.open(hub_model(model))
    seen = set()
    for name in REAL_TENSORS[model]:
        info = f.tensors[name]
        rows_used = min(info.shape[0], 4096)                          # the head: its first rows
        raw = f.raw(name).reshape(info.shape[0], -1)[:rows_used]
        p = pack(raw, info.ggml_type, rows_used, info.shape[1])
        w = dequantize(raw, info.ggml_type, (rows_used, info.shape[1]))
        np.testing.assert_array_equal(to_dense(p), w.T)
        x = np.random.default_rng(0).standard_normal((2, info.shape[1])).astype(np.float32)
        assert rel_error(p.matmul(x[:1]), w, x[:1]) < REL_BOUND[info.ggml_type], name
        assert rel_error(p.matmul(x), w, x) < REL_BOUND[info.ggml_type], name
        seen.add(info.type_name)
    assert seen == ({"Q4_1", "Q8_0"} if model == "smollm2-135m"
                    else {"Q5_0", "Q8_0", "Q6_K", "Q4_K"})


# --- the quantized residency against the f32 path, on the oracle fixtures --------------------

def retyped_fixture(tmp_path: Path, name: str, t: int) -> Path:
    """An oracle fixture with every 2-D weight stored as type `t` (norms and biases F32)."""
    f = llmnb.gguf.open(ORACLE / MANIFEST["fixtures"][name]["gguf"])
    tensors = []
    for n, info in f.tensors.items():
        data = dequantize(f.raw(n), info.ggml_type, info.shape)
        if len(info.shape) == 2:
            raw = quantize(data, t)
            tensors.append(TensorToWrite(n, raw, t, info.shape))
        else:
            tensors.append(TensorToWrite(n, data, T.F32, info.shape))
    out = tmp_path / f"{name}_{type_name(t)}.gguf"
    write_gguf(out, f.architecture, list(f.fields.values()), tensors)
    return out


def both_ways(path: Path) -> tuple[llmnb.Model, llmnb.Model]:
    """The float-activation kernels on the file's blocks, and its float32 copy."""
    return llmnb.load(path, weights="quantized-float"), llmnb.load(path, weights="f32")


@pytest.mark.parametrize("name", ["llama_f32", "qwen2_tied_f32", "dream_f32"])
@pytest.mark.parametrize("t", [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.F16, T.BF16],
                         ids=type_name)
def test_quantized_forward_is_within_1e_4_of_the_f32_path(
        tmp_path: Path, name: str, t: int) -> None:
    q, f = both_ways(retyped_fixture(tmp_path, name, t))
    for ids in (PROMPT, PROMPT[:1]):
        np.testing.assert_allclose(q.forward(ids), f.forward(ids), atol=1e-4, rtol=1e-4)
    assert q.transformer.weights.nbytes < f.transformer.weights.nbytes


@pytest.mark.parametrize("name", ["llama_f16", "dream_f16"])
def test_f16_fixtures_through_the_f16_kernel_match_the_reference_logits(name: str) -> None:
    m = llmnb.load(ORACLE / MANIFEST["fixtures"][name]["gguf"], weights="quantized-float")
    for case in MANIFEST["fixtures"][name]["cases"]:
        np.testing.assert_allclose(forward_case(m.transformer, name, case),
                                   reference(name)[case], **TOL)


def test_the_default_is_quantized_for_block_files_and_f32_for_float_files(tmp_path: Path) -> None:
    assert default_weights(llmnb.gguf.open(ORACLE / "llama_f16.gguf")) == "f32"
    q4_0 = retyped_fixture(tmp_path, "llama_f32", T.Q4_0)
    assert default_weights(llmnb.gguf.open(q4_0)) == "quantized"
    assert llmnb.load(ORACLE / "llama_f32.gguf").plan.weights == "f32"
    with pytest.raises(llmnb.LLMNBError, match="weights: expected one of quantized, "
                                               "quantized-float, f32 or 'auto'") as e:
        llmnb.load(ORACLE / "llama_f32.gguf", weights="q4")
    assert e.value.exit_code == 2


def test_the_preflight_counts_the_quantized_bytes(tmp_path: Path) -> None:
    path = retyped_fixture(tmp_path, "llama_f32", T.Q8_0)
    f = llmnb.gguf.open(path)
    c = config_from_gguf(f)
    plan = plan_residency(f, c, weights="quantized")
    held = Weights(f, c, "resident", "quantized").nbytes
    assert plan.weights == "quantized" and plan.needed_bytes == plan.quantized_bytes
    assert held <= plan.quantized_bytes < plan.resident_bytes + (32 << 20)


def wide_model(tmp_path: Path, t: int, odd: str = "", odd_type: int = T.F32) -> Path:
    """A one-layer llama with rows of 256 (so every k-quant fits), random weights stored as
    `t`, the tensors whose name ends with `odd` as `odd_type`; the fixture's tokenizer."""
    f = llmnb.gguf.open(ORACLE / "llama_f32.gguf")
    sizes = {"llama.embedding_length": 256, "llama.feed_forward_length": 256,
             "llama.block_count": 1, "llama.rope.dimension_count": 64}
    fields = [MetadataField(k, v.value_type, sizes.get(k, v.value), v.item_type)
              for k, v in f.fields.items()]
    rng = np.random.default_rng(0)
    shapes = {"token_embd.weight": (128, 256), "output.weight": (128, 256),
              "output_norm.weight": (256,), "blk.0.attn_norm.weight": (256,),
              "blk.0.ffn_norm.weight": (256,), "blk.0.attn_q.weight": (256, 256),
              "blk.0.attn_k.weight": (128, 256), "blk.0.attn_v.weight": (128, 256),
              "blk.0.attn_output.weight": (256, 256), "blk.0.ffn_gate.weight": (256, 256),
              "blk.0.ffn_up.weight": (256, 256), "blk.0.ffn_down.weight": (256, 256)}
    tensors = []
    for n, shape in shapes.items():
        if len(shape) == 1:
            tensors.append(TensorToWrite(n, np.ones(shape, np.float32), T.F32, shape))
            continue
        tt = odd_type if odd and n.endswith(odd) else t
        data = rng.standard_normal(shape).astype(np.float32) * np.float32(0.06)
        if tt in (T.Q2_K, T.Q3_K):                     # no quantizer: random blocks
            raw = random_matrix(tt, shape[0], shape[1], rng)
        else:
            raw = data if tt == T.F32 else quantize(data, tt)
        tensors.append(TensorToWrite(n, raw, tt, shape))
    out = tmp_path / f"wide_{type_name(t)}_{type_name(odd_type)}.gguf"
    write_gguf(out, "llama", fields, tensors)
    return out


@pytest.mark.parametrize("t", [T.Q4_K, T.Q5_K, T.Q6_K, T.Q8_0], ids=type_name)
def test_k_quant_models_forward_within_1e_4_of_the_f32_path(tmp_path: Path, t: int) -> None:
    q, f = both_ways(wide_model(tmp_path, t, odd="attn_v.weight", odd_type=T.Q8_0))
    ids = np.arange(3, 40, dtype=np.int64)
    np.testing.assert_allclose(q.forward(ids), f.forward(ids), atol=1e-4, rtol=1e-4)
    assert q.forward(ids[:5]).argmax(-1).tolist() == f.forward(ids[:5]).argmax(-1).tolist()


def test_a_tensor_type_without_a_kernel_is_named_once_on_stderr(tmp_path: Path) -> None:
    path = wide_model(tmp_path, T.Q4_0)
    mixed = wide_model(tmp_path, T.Q3_K, odd="ffn_down.weight", odd_type=T.Q4_K)
    code = (f"import llmnb; m = llmnb.load({str(mixed)!r}); m.forward([1, 2]); "
            f"llmnb.load({str(path)!r}).forward([1])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "no quantized kernel" in ln]
    assert len(lines) == 1 and "7 Q3_K tensor(s) (e.g. output.weight)" in lines[0], r.stderr
    q, f = both_ways(mixed)
    want = f.forward([5, 6, 7])                  # random Q3_K blocks: logits in the hundreds
    np.testing.assert_allclose(q.forward([5, 6, 7]), want, rtol=1e-4,
                               atol=1e-4 * np.abs(want).max())


# --- threads and the real models' greedy ids -------------------------------------------------

def test_threads_set_numba_too_and_results_do_not_depend_on_them() -> None:
    import numba

    p, w = random_case(T.Q4_K, 512, 768, 11)
    x = np.random.default_rng(2).standard_normal((1, 768)).astype(np.float32)
    with llmnb.threads(1):
        assert numba.get_num_threads() == 1
        one = p.matmul(x)
    with llmnb.threads(2):
        assert numba.get_num_threads() == min(2, numba.config.NUMBA_NUM_THREADS)
        two = p.matmul(x)
    np.testing.assert_array_equal(one, two)


def test_dense_way_in_small_panels_and_on_two_threads_matches_float64() -> None:
    p, w = random_case(T.Q4_1, 1000, 512, 13)                      # 16 tiles, a partial last one
    x = np.random.default_rng(3).standard_normal((DENSE_ROWS + 3, 512)).astype(np.float32)
    with llmnb.threads(2):
        for panel in (None, 1):                                    # 1 byte: the fewest tiles
            assert rel_error(dense_matmul(x, p, panel), w, x) < REL_BOUND[T.Q4_1], panel


def test_smollm2_greedy_ids_equal_on_quantized_float_and_f32_weights() -> None:
    path = hub_model("smollm2-135m")
    for w in ("quantized-float", "f32"):
        m = llmnb.load(path, weights=w)
        r = llmnb.generate(m, "The three primary colors are", max_new_tokens=24)
        if w == "quantized-float":
            ids, nbytes = r.tokens, m.transformer.weights.nbytes
        else:
            assert r.tokens == ids and nbytes < m.transformer.weights.nbytes / 4
        del m


def test_cli_weights_flag_runs_both_ways_and_refuses_an_unknown_value(tmp_path: Path) -> None:
    from llmnb.cli import main

    model = str(retyped_fixture(tmp_path, "llama_f32", T.Q8_0))
    ids = []
    for w in ("quantized-float", "f32"):
        r = subprocess.run([sys.executable, "-m", "llmnb.cli", "generate", model, "-p", "ab",
                            "-n", "4", "--weights", w, "--json"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert f"{w} weights" in r.stderr
        ids.append(__import__("json").loads(r.stdout)["ids"])
    assert ids[0] == ids[1] and len(ids[0]) == 4
    with pytest.raises(SystemExit) as e:
        main(["generate", model, "-p", "x", "--weights", "bogus"])
    assert e.value.code == 2


def test_bench_quant_counts_a_matrix_listed_twice_once() -> None:
    # a step over the same matrix twice reads it from memory once: both sides of the kernel
    # table count (and get) distinct matrices per layer
    from llmnb.perf.bench_quant import distinct_bytes

    a, b = np.zeros((4, 8), np.float32), np.zeros((2, 8), np.float32)
    assert distinct_bytes([a, b] * 3) == a.nbytes + b.nbytes
    assert distinct_bytes([a, a.copy()]) == 2 * a.nbytes


def test_bench_quant_kernel_table_and_cost_curve_have_every_type() -> None:
    from llmnb.perf.bench_quant import KERNEL_TYPES as BENCH_TYPES
    from llmnb.perf.bench_quant import bench_kernels

    from llmnb.perf.bench_quant import LAYER_SHAPES

    with llmnb.threads(1):                          # as `llmnb bench quant` runs it
        rows = bench_kernels(repeats=1, layers=1)
    table = [r for r in rows if "GB_s" in r]
    assert [r["type"] for r in table] == [type_name(t) for t in BENCH_TYPES]
    f32_bytes = 4 * sum(o * i for o, i in LAYER_SHAPES)
    for r in table:
        assert r["file_bytes_per_weight"] <= r["bytes_per_weight"] <= 2.0      # what is read
        assert r["GB_s"] > 0 and r["vs_numpy_f32"] > 0
        assert r["numpy_MB_read"] == f32_bytes / 1e6
        if "integer_bytes_per_weight" in r:
            assert r["file_bytes_per_weight"] <= r["integer_bytes_per_weight"] <= 2.0
    curve = [r for r in rows if "rows" in r]
    # the curve's unit is one timed 1-row product, so its first point is timing noise around 1:
    # a unit test checks its shape, `llmnb bench quant` its values
    from llmnb.perf.bench_quant import COST_TYPES
    assert {r["type"] for r in curve} == {type_name(t) for t in COST_TYPES}
    assert all(r["quantized_steps"] > 0 and r["dense_steps"] > 0 for r in curve)
    assert all(r["faster"] in ("float", "dense", "integer") for r in curve)


def test_parts_of_different_types_in_one_dense_product_match_float64() -> None:
    """Q/K/V parts of different types (Q4_K_M files) share one scratch panel and one sgemm;
    partial last tiles (200 and 70 outputs) are dropped from the joined outputs."""
    from llmnb.kernels import PackedParts
    from llmnb.kernels.product import dense_parts_matmul

    a, wa = random_case(T.Q4_K, 200, 512, 21)
    b, wb = random_case(T.Q6_K, 70, 512, 22)
    c, wc = random_case(T.Q4_K, 128, 512, 23)
    parts = PackedParts((a, b, c))
    w = np.concatenate([wa, wb, wc])
    x = np.random.default_rng(4).standard_normal((DENSE_ROWS + 2, 512)).astype(np.float32)
    got = parts.matmul(x)
    assert got.shape == (DENSE_ROWS + 2, 398)
    assert rel_error(got, w, x) < REL_BOUND[T.Q4_K]
    np.testing.assert_array_equal(got, dense_parts_matmul(x, parts.parts))
    few = parts.matmul(x[:3])                                      # the kernels' way, joined
    assert rel_error(few, w, x[:3]) < REL_BOUND[T.Q4_K]


def test_preflight_counts_the_largest_dense_product_as_the_scratch() -> None:
    from llmnb.gguf.reader import GGUFFile
    from llmnb.kernels.layout import SCRATCH_BYTES
    from llmnb.model.weights import scratch_bytes

    f = GGUFFile(hub_model("smollm2-135m"))
    config = config_from_gguf(f)
    gate_up = 2 * f.tensors["blk.0.ffn_gate.weight"].n_elements * 4      # 576 x (2 x 1536)
    head = f.tensors["token_embd.weight"].n_elements * 4                  # tied, 49152 x 576
    assert gate_up < SCRATCH_BYTES < head          # the head (a full forward's logits) in panels
    assert scratch_bytes(f, config) == SCRATCH_BYTES
