"""llmnb.kernels.integer: activations quantized as llama.cpp quantizes them, integer products
equal to their exact integer sums, bit-identical across instruction sets, row counts and
threads; the choice of instruction set, and the integer path as the default weights."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import njit

import llmnb
from llmnb.gguf.constants import GGMLType as T
from llmnb.gguf.constants import type_name
from llmnb.kernels import integer as I
from llmnb.kernels import reference
from llmnb.kernels.isa import available, choose
from llmnb.kernels.simd import half_rounded
from llmnb.quant import dequantize, quantize

TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K]
ISAS = available()
ROWS = (1, 2, 5, 7, 9, 15)   # one row; fewer than a register block; blocks and each remainder


def random_weight(t: int, n_out: int, n_in: int, seed: int) -> tuple[np.ndarray, I.IntMatrix]:
    w = np.random.default_rng(seed).standard_normal((n_out, n_in)).astype(np.float32)
    raw = quantize(w, t)
    return raw, I.pack(raw, t, n_out, n_in)


# --- the activations ---------------------------------------------------------------------------

@njit(cache=True)
def half_rounded_all(v):  # type: ignore[no-untyped-def]
    out = np.empty_like(v)
    for i in range(v.shape[0]):
        out[i] = half_rounded(v[i])
    return out


def test_a_scale_is_rounded_as_numpy_rounds_to_float16() -> None:
    rng = np.random.default_rng(0)
    v = np.concatenate([rng.standard_normal(4000) * 10.0 ** rng.integers(-9, 5, 4000),
                        [0.0, -0.0, 65504.0, 65519.99, 65520.0, 1e6, 2.0 ** -24, 2.0 ** -25,
                         3 * 2.0 ** -26, 6.1e-5, np.inf, -np.inf]]).astype(np.float32)
    # ties at every exponent: a half's spacing there, times 0.5 and 1.5, on both sides of 1
    e = 2.0 ** np.arange(-14, 15)
    ties = np.concatenate([e * (1 + 2.0 ** -11), e * (1 + 3 * 2.0 ** -11)]).astype(np.float32)
    with np.errstate(over="ignore"):                             # 1e6 and 65520 become inf
        np.testing.assert_array_equal(half_rounded_all(v), v.astype(np.float16).astype(np.float32))
        np.testing.assert_array_equal(half_rounded_all(ties),
                                      ties.astype(np.float16).astype(np.float32))


def q8_0_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """llama.cpp's AVX2 quantize_row_q8_0 / _q8_1 in numpy: (q, d, sums, s) per block of 32."""
    b = x.reshape(-1, 32)
    amax = np.abs(b).max(axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(b * inv[:, None]).astype(np.int32)               # round half to even
    sums = q.sum(axis=1)
    s = (d * sums.astype(np.float32)).astype(np.float16).astype(np.float32)
    return q.astype(np.int8).reshape(-1), d.astype(np.float16).astype(np.float32), sums, s


def test_q8_0_activations_are_llama_cpps_rounding_included() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 256)).astype(np.float32)
    x[0, :32] = np.arange(32, dtype=np.float32) - 15.5            # x * 127/amax: exact halves?
    x[1, 32:64] = 0                                               # an all-zero block
    x[2, 64:96] = np.float32(1e-7) * rng.standard_normal(32)      # a subnormal-half scale
    a = I.quantize(x, "q8_1")
    q, d, sums, s = q8_0_reference(x)
    np.testing.assert_array_equal(a.q, q)
    np.testing.assert_array_equal(a.d, d)
    np.testing.assert_array_equal(a.sums, sums)
    np.testing.assert_array_equal(a.s, s)


def test_a_tie_rounds_to_even_as_vroundps_does() -> None:
    x = np.zeros((1, 32), np.float32)
    x[0, 0], x[0, 1], x[0, 2] = 127.0, 2.5, 3.5                  # id = 1: 2.5 -> 2, 3.5 -> 4
    assert I.quantize(x, "q8_0").q[:3].tolist() == [127, 2, 4]


def q8_k_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """llama.cpp's quantize_row_q8_K_ref in numpy: (q, d, sums per 16)."""
    b = x.reshape(-1, 256)
    first_max = np.abs(b).argmax(axis=1)                         # the first of the largest
    mx = b[np.arange(len(b)), first_max]
    with np.errstate(divide="ignore"):                           # an all-zero block: d = 0
        iscale = np.where(mx != 0, np.float32(-127) / mx, np.float32(0)).astype(np.float32)
        d = np.where(mx != 0, np.float32(1) / iscale, np.float32(0)).astype(np.float32)
    q = np.minimum(127, np.rint(b * iscale[:, None])).astype(np.int32)
    return q.astype(np.int8).reshape(-1), d, q.reshape(-1, 16).sum(axis=1)


def test_q8_k_activations_are_llama_cpps() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 512)).astype(np.float32)
    x[1, 256:] = 0
    x[0, 3], x[0, 7] = -5.0, 5.0                                 # the first largest is negative
    a = I.quantize(x, "q8_k", 16)
    q, d, sums = q8_k_reference(x)
    np.testing.assert_array_equal(a.q, q)
    np.testing.assert_array_equal(a.d, d)
    np.testing.assert_array_equal(a.sums, sums)
    assert a.q[3] == -127 and a.q[7] == 127
    np.testing.assert_array_equal(I.quantize(x, "q8_k", 32).sums, sums.reshape(-1, 2).sum(axis=1))


# --- the products -------------------------------------------------------------------------------

def exact(raw: np.ndarray, t: int, n_out: int, n_in: int, a: I.Activations) -> np.ndarray:
    """x @ W.T in float64 from the same quantized activations: the integer path's sums are
    exact, so only its float32 scaling and summing over blocks differ from this."""
    w = dequantize(raw, t, (n_out, n_in)).astype(np.float64)
    rows = a.rows
    per = 256 if I.ACTIVATIONS[t] == "q8_k" else 32
    xd = np.repeat(a.d.reshape(rows, -1).astype(np.float64), per, axis=1)
    x = a.q.reshape(rows, n_in).astype(np.float64) * xd
    out = x @ w.T
    if I.ACTIVATIONS[t] == "q8_1":      # a block's minimum meets Q8_1's fp16(d * sum(q)) instead
        blocks = raw.reshape(n_out, n_in // 32, -1)              # (out, blocks, block bytes)
        mins = np.frombuffer(blocks[:, :, 2:4].tobytes(), np.float16).astype(np.float64)
        exact_sum = a.sums.reshape(rows, -1) * xd[:, ::32]      # what x @ W.T has: d * sum(q)
        out += (a.s.reshape(rows, -1).astype(np.float64) - exact_sum) @ mins.reshape(n_out, -1).T
    return out


@pytest.mark.parametrize("t", TYPES, ids=type_name)
def test_the_plain_reference_is_the_exact_sum_of_the_dequantized_weights(t: int) -> None:
    """kernels.reference, block by block from the file's bytes, against dequantize (gguf-py's
    bits) times the same 8-bit activations in float64: the same numbers to float64 rounding."""
    n_out, n_in = 24, 768
    raw, w = random_weight(t, n_out, n_in, 11)
    x = np.random.default_rng(12).standard_normal((3, n_in)).astype(np.float32)
    want = exact(raw, t, n_out, n_in, I.quantize(x, w.activations, w.group))
    got = reference.matmul(x, raw, t, n_out)
    assert np.abs(got - want).max() <= 1e-12 * np.abs(want).max()


@pytest.mark.parametrize("t", TYPES, ids=type_name)
def test_every_format_is_the_plain_reference_on_every_instruction_set(t: int) -> None:
    n_out, n_in = 48, 768
    raw, w = random_weight(t, n_out, n_in, 3)
    x = np.random.default_rng(4).standard_normal((9, n_in)).astype(np.float32)
    want = reference.matmul(x, raw, t, n_out)
    first = None
    for isa in ISAS:
        got = I.matmul(x, w, isa)
        # float32 scaling per block and summing over n_in / 32 blocks: a few ulps of the largest
        assert np.abs(got - want).max() <= 2e-6 * np.abs(want).max(), isa
        if first is None:
            first = got
        np.testing.assert_array_equal(got, first, err_msg=isa)   # the same floats, in order


@pytest.mark.parametrize("t", [T.Q4_1, T.Q8_0, T.Q4_K, T.Q6_K], ids=type_name)
def test_a_row_is_bit_identical_alone_in_any_batch_and_at_any_thread_count(t: int) -> None:
    raw, w = random_weight(t, 80, 512, 5)
    x = np.random.default_rng(6).standard_normal((max(ROWS), 512)).astype(np.float32)
    isa = ISAS[0]
    alone = np.concatenate([I.matmul(x[i:i + 1], w, isa) for i in range(len(x))])
    for rows in ROWS:
        np.testing.assert_array_equal(I.matmul(x[:rows], w, isa), alone[:rows], err_msg=str(rows))
    with llmnb.threads(1):
        one = I.matmul(x, w, isa)
    with llmnb.threads(2):
        two = I.matmul(x, w, isa)
    np.testing.assert_array_equal(one, alone)
    np.testing.assert_array_equal(two, alone)


def test_parts_of_different_formats_write_their_own_columns() -> None:
    raw_a, a = random_weight(T.Q5_0, 64, 512, 7)
    raw_b, b = random_weight(T.Q8_0, 32, 512, 8)
    raw_c, c = random_weight(T.Q4_K, 40, 512, 9)                 # 40: a part panel padded
    x = np.random.default_rng(10).standard_normal((3, 512)).astype(np.float32)
    got = I.IntParts((a, b, c)).matmul(x)
    want = np.concatenate([I.matmul(x, p, ISAS[0]) for p in (a, b, c)], axis=1)
    np.testing.assert_array_equal(got, want)
    out = np.full((3, 200), np.float32(7))
    I.IntParts((a, b, c)).matmul(x, out[:, 10:146])
    np.testing.assert_array_equal(out[:, 10:146], want)
    assert (out[:, :10] == 7).all() and (out[:, 146:] == 7).all()


def test_gathered_weights_multiply_the_same_from_shared_aligned_buffers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ws = [random_weight(t, 48, 512, 20 + k)[1] for k, t in enumerate((T.Q4_1, T.Q5_0, T.Q6_K))]
    parts = I.IntParts((random_weight(T.Q5_K, 32, 512, 30)[1], random_weight(T.Q8_0, 16, 512,
                                                                              31)[1]))
    x = np.random.default_rng(32).standard_normal((5, 512)).astype(np.float32)
    before = [w.matmul(x) for w in (*ws, parts)]
    held = sum(getattr(m, n).nbytes for m in (*ws, *parts.parts) for n in I.ARRAYS
               if getattr(m, n) is not None)
    monkeypatch.setattr(I, "GATHER_BYTES", 20_000)             # several buffers, not one
    assert I.gather([*ws, parts]) == held
    for got, want in zip([w.matmul(x) for w in (*ws, parts)], before):
        np.testing.assert_array_equal(got, want)
    arrays = [getattr(m, n) for m in (*ws, *parts.parts) for n in I.ARRAYS
              if getattr(m, n) is not None]
    assert all(a.ctypes.data % 64 == 0 and a.base is not None for a in arrays)
    bases = {id(a.base) for a in arrays}
    assert 1 < len(bases) < len(arrays)                          # shared, in a few buffers


@pytest.mark.skipif(not ISAS, reason="no integer kernels on this CPU")
@pytest.mark.parametrize("t", [T.Q4_1, T.Q6_K], ids=type_name)
def test_the_bound_product_gives_the_dispatched_ones_bits_and_other_buffers_go_around_it(
        t: int) -> None:
    raw, w = random_weight(t, 48, 512, 40)
    x = np.random.default_rng(41).standard_normal((5, 512)).astype(np.float32)
    want = I.matmul(x, w, I._host_isa())
    assert w.call is None
    first = w.matmul(x, np.empty((5, 48), np.float32))          # dispatched, then bound
    assert w.call is not None and w.looked
    for rows in (1, 5):                                        # the bound product
        out = np.full((rows, 48), np.nan, np.float32)
        assert w.matmul(x[:rows], out) is out
        np.testing.assert_array_equal(out, want[:rows])
    np.testing.assert_array_equal(first, want)
    wide = np.full((5, 60), np.float32(7))                     # a column slice: around it
    w.matmul(x, wide[:, 4:52])
    np.testing.assert_array_equal(wide[:, 4:52], want)
    assert (wide[:, :4] == 7).all() and (wide[:, 52:] == 7).all()
    np.testing.assert_array_equal(w.matmul(x[:, :].astype(np.float64), np.empty((5, 48),
                                                                                np.float32)),
                                  want)                        # float64 rows: converted first
    arrays = [getattr(w, n) for n in I.ARRAYS if getattr(w, n) is not None]
    I.gather([w])                                              # new arrays: the binding goes
    assert w.call is None and not w.looked and all(a is not b for a, b in zip(
        arrays, [getattr(w, n) for n in I.ARRAYS if getattr(w, n) is not None]))
    np.testing.assert_array_equal(w.matmul(x, np.empty((5, 48), np.float32)), want)


def test_an_output_of_16_or_more_columns_not_a_multiple_of_16_is_padded_then_cut() -> None:
    raw, w = random_weight(T.Q8_0, 37, 256, 11)
    x = np.random.default_rng(12).standard_normal((2, 256)).astype(np.float32)
    got = w.matmul(x)
    assert got.shape == (2, 37)
    a = I.quantize(x, "q8_0")
    want = exact(raw, T.Q8_0, 37, 256, a)
    assert np.abs(got - want).max() <= 2e-6 * np.abs(want).max()


# --- which kernels run ---------------------------------------------------------------------------

def test_the_choice_follows_the_features() -> None:
    assert choose("", {"avx2", "avx512vnni", "avx512bw", "avx512vl"}) == "vnni512"
    assert choose("", {"avx2", "avxvnni"}) == "vnni256"
    assert choose("", {"avx2"}) == "avx2"
    assert choose("", {"sse4.2"}) is None
    assert choose("float", {"avx2"}) is None
    assert choose("vnni", {"avx2", "avxvnni"}) == "vnni256"
    with pytest.raises(llmnb.LLMNBError, match="LLMNB_KERNELS=vnni: this CPU cannot run it "
                                               r"\(it runs: float, avx2\)") as e:
        choose("vnni", {"avx2"})
    assert e.value.exit_code == 2
    with pytest.raises(llmnb.LLMNBError, match="expected one of float, avx2, vnni256, vnni"):
        choose("sse", {"avx2"})


def without(*features: str) -> dict[str, str]:
    """The environment of a process whose numba compiles for this CPU less `features`."""
    import llvmlite.binding as llvm

    have = llvm.get_host_cpu_features().flatten().split(",")
    cut = [("-" + f[1:]) if f[1:] in features else f for f in have]
    env = dict(os.environ, NUMBA_CPU_NAME=llvm.get_host_cpu_name(),
               NUMBA_CPU_FEATURES=",".join(cut))
    env.pop("LLMNB_KERNELS", None)
    return env


@pytest.mark.skipif("avx2" not in ISAS, reason="this CPU has no AVX2")
def test_a_cpu_without_vnni_runs_the_avx2_build_and_one_without_avx2_the_float_kernels() -> None:
    script = ("import llmnb, numpy as np; from llmnb.kernels import isa, integer as I; "
              "from llmnb.quant import quantize; "
              "w = np.random.default_rng(0).standard_normal((32, 256)).astype(np.float32); "
              "p = I.pack(quantize(w, 8), 8, 32, 256); "
              "print(isa.integer_isa(), p.matmul(np.ones((2, 256), np.float32))[0, :2])")
    for cut, want in ((("avx512vnni", "avxvnni"), "avx2"),
                      (("avx2", "avx512vnni", "avxvnni"), "None")):
        r = subprocess.run([sys.executable, "-c", script], env=without(*cut), capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split()[0] == want, r.stdout


def test_llmnb_kernels_refuses_what_this_cpu_lacks_with_one_line() -> None:
    from oracle import ORACLE

    model = str(ORACLE / "llama_f32.gguf")
    env = dict(without("avx512vnni", "avxvnni"), LLMNB_KERNELS="vnni")
    r = subprocess.run([sys.executable, "-m", "llmnb.cli", "generate", model, "-p", "ab", "-n", "2",
                        "--weights", "quantized"],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "LLMNB_KERNELS=vnni: this CPU cannot run it" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


# --- the default weights -----------------------------------------------------------------------

@pytest.mark.skipif(not ISAS, reason="no integer kernels on this CPU")
def test_the_default_quantized_weights_run_the_integer_products(tmp_path: Path) -> None:
    from test_kernels import retyped_fixture   # the fixture models, retyped

    path = retyped_fixture(tmp_path, "llama_f32", T.Q8_0)
    m = llmnb.load(path, weights="quantized")
    lw = m.transformer.weights.layer(0)
    assert isinstance(lw.wqkv_t, (I.IntMatrix, I.IntParts))
    f = llmnb.load(path, weights="f32")
    ids = np.arange(3, 20, dtype=np.int64)
    q, want = m.forward(ids), f.forward(ids)
    # 8-bit activations move this random fixture's logits by up to 3.4% of the largest (its
    # hidden size, 64, gives a block's rounding few values to average over); a wrong sum,
    # scale or offset moves them by the whole logit
    assert np.abs(q - want).max() <= 0.05 * np.abs(want).max()
    assert (q.argmax(-1) == want.argmax(-1)).mean() >= 0.8


# --- llama.cpp's own numbers (tests/fixtures/llamacpp/dot_products.json) -------------------------

def as_llama_cpp_blocks(a: I.Activations, kind: str) -> bytes:
    """Activations in ggml's block layout: Q8_0 (d, qs), Q8_1 (d, s, qs), Q8_K (d, qs, bsums)."""
    if kind == "q8_k":
        q = a.q.reshape(-1, 256)
        sums = a.sums.reshape(-1, 16).astype(np.int16)
        return b"".join(a.d[i:i + 1].tobytes() + q[i].tobytes() + sums[i].tobytes()
                        for i in range(len(q)))
    q = a.q.reshape(-1, 32)
    d, s = a.d.astype(np.float16), a.s.astype(np.float16)
    return b"".join(d[i:i + 1].tobytes() + (s[i:i + 1].tobytes() if kind == "q8_1" else b"")
                    + q[i].tobytes() for i in range(len(q)))


def test_activations_and_dot_products_are_llama_cpps_own() -> None:
    """The same seeded inputs through llama.cpp's from_float and vec_dot (recorded) and through
    llmnb: the quantized activations byte for byte, the products to float32 rounding (the order
    of the float additions differs)."""
    import hashlib
    import json
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    from make_llamacpp_dot_fixtures import N_OUT, case_inputs

    fx = json.loads((Path(__file__).parent / "fixtures" / "llamacpp" / "dot_products.json")
                    .read_text())
    names = {type_name(t): t for t in TYPES}
    for case in fx["cases"]:
        t = names[case["type"]]
        raw, x = case_inputs(t, case["n_in"], case["scale"])
        w = I.pack(raw, t, N_OUT, case["n_in"])
        for row, digest, want in zip(x, case["activations_sha256"], case["dot"]):
            a = I.quantize(row[None], w.activations, 16 if w.activations == "q8_k" else 32)
            blocks = as_llama_cpp_blocks(a, w.activations)
            assert hashlib.sha256(blocks).hexdigest() == digest, case["type"]
            got = I.matmul(row[None], w, ISAS[0])[0] if ISAS else w.matmul(row[None])[0]
            want_ = np.array(want, np.float32)
            assert np.abs(got - want_).max() <= 1e-6 * np.abs(want_).max(), case["type"]
            plain = reference.matmul(row[None], raw, t, N_OUT)[0]
            assert np.abs(plain - want_).max() <= 1e-6 * np.abs(want_).max(), case["type"]
