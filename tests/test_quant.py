"""llmnb.quant against its oracles: gguf-py (dequantize, legacy quantize) and digests of
ggml's own reference quantizers (k-quants)."""
from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import gguf
import numpy as np
import numpy.typing as npt
import pytest
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

import llmnb.gguf
from llmnb.gguf.constants import GGML_BLOCK_SIZES, GGMLType, type_name
from llmnb.quant import FORMATS, QuantError, bits_per_weight, dequantize, quantize
from real_models import hub_model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from make_libggml_digests import (  # noqa: E402 - the inputs live with the tool that made the digests
    INPUTS, edge_rows, ggml_quantize_ref, load_libggml, sha256,
)

T = GGMLType
DEQUANT_TYPES = [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1,
                 T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]
LEGACY_TYPES = [T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1]
K_TYPES = [T.Q4_K, T.Q5_K, T.Q6_K]
# byte offsets of the f16 scales inside each block (the float types are all "scale")
F16_OFFSETS = {T.Q8_0: [0], T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2],
               T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}


def random_blocks(ggml_type: int, n_blocks: int, seed: int) -> npt.NDArray[np.uint8]:
    """Random bytes for n_blocks blocks, with every f16 scale made finite."""
    block, size = GGML_BLOCK_SIZES[ggml_type]
    if block == 1:   # float types: n_blocks rows of 256 finite values
        x = np.random.default_rng(seed).standard_normal((n_blocks, 256)).astype(np.float32)
        return np.asarray(gguf_quantize(x, gguf.GGMLQuantizationType(ggml_type))).view(np.uint8)
    raw = np.random.default_rng(seed).integers(0, 256, (n_blocks, size), dtype=np.uint8)
    for off in F16_OFFSETS[ggml_type]:
        raw[:, off + 1] &= 0x3B          # exponent bits never all ones: finite
    return raw


def oracle_dequantize(raw: npt.NDArray[np.uint8], ggml_type: int) -> npt.NDArray[np.float32]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(gguf_dequantize(raw, gguf.GGMLQuantizationType(ggml_type)),
                          dtype=np.float32)


def elements_per_row(ggml_type: int, raw: npt.NDArray[np.uint8]) -> int:
    block, size = GGML_BLOCK_SIZES[ggml_type]
    return raw.shape[-1] // size * block


def same_bits(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))


# --- dequantize ----------------------------------------------------------------------------

@pytest.mark.parametrize("ggml_type", DEQUANT_TYPES, ids=type_name)
def test_dequantize_bit_exact_vs_gguf_py_on_random_blocks(ggml_type: int) -> None:
    raw = random_blocks(ggml_type, 300, seed=ggml_type)
    row = elements_per_row(ggml_type, raw)
    got = dequantize(raw, ggml_type, (raw.shape[0], row))
    assert got.dtype == np.float32
    assert same_bits(got, oracle_dequantize(raw, ggml_type).reshape(raw.shape[0], row))


@pytest.mark.parametrize("ggml_type", [t for t in DEQUANT_TYPES if t in F16_OFFSETS], ids=type_name)
def test_dequantize_bit_exact_vs_gguf_py_across_chunk_boundaries_and_single_blocks(
        ggml_type: int) -> None:
    from llmnb.quant.formats import DEQUANT_CHUNK_BLOCKS
    for n_blocks in (1, 3, DEQUANT_CHUNK_BLOCKS + 5):
        raw = random_blocks(ggml_type, n_blocks, seed=n_blocks)
        got = dequantize(raw, ggml_type, (n_blocks, elements_per_row(ggml_type, raw)))
        assert same_bits(got, oracle_dequantize(raw, ggml_type).reshape(got.shape)), n_blocks
    empty = dequantize(np.empty((0, GGML_BLOCK_SIZES[ggml_type][1]), np.uint8), ggml_type, (0, 256))
    assert empty.shape == (0, 256) and empty.dtype == np.float32


@pytest.mark.parametrize("ggml_type", [t for t in DEQUANT_TYPES if t in F16_OFFSETS], ids=type_name)
def test_dequantize_propagates_nan_inf_and_subnormal_scales_like_gguf_py(ggml_type: int) -> None:
    raw = random_blocks(ggml_type, 8, seed=1)
    off = F16_OFFSETS[ggml_type][0]
    # nan, inf, -inf, the smallest subnormal, -0, the largest subnormal, the largest normal, 0
    specials = [0x7E00, 0x7C00, 0xFC00, 0x0001, 0x8000, 0x03FF, 0x7BFF, 0x0000]
    for i, bits in enumerate(specials):
        raw[i, off:off + 2] = np.array([bits], dtype="<u2").view(np.uint8)
    row = elements_per_row(ggml_type, raw)
    with np.errstate(all="ignore"):
        got = dequantize(raw, ggml_type, (8, row))
    want = oracle_dequantize(raw, ggml_type).reshape(8, row)
    np.testing.assert_array_equal(got, want)        # NaN positions must agree too
    assert np.isnan(got[0]).any()


def tensor_rows(
        f: llmnb.gguf.GGUFFile, name: str, max_rows: int) -> tuple[npt.NDArray[np.uint8], int]:
    """The first and last rows of a tensor (all of it if small) as (rows, row bytes)."""
    info = f.tensors[name]
    block, size = GGML_BLOCK_SIZES[info.ggml_type]
    row_bytes = info.shape[-1] // block * size
    raw = f.raw(name).reshape(-1, row_bytes)
    if raw.shape[0] > max_rows:
        raw = np.concatenate([raw[: max_rows // 2], raw[-(max_rows // 2):]])
    return raw, info.shape[-1]


@pytest.mark.parametrize("model", ["smollm2-135m", "qwen2.5-coder-0.5b"])
def test_dequantize_bit_exact_vs_gguf_py_on_every_tensor_of_real_models(model: str) -> None:
    path = hub_model(model)
    seen: set[str] = set()
    with llmnb.gguf.open(path) as f:
        for name, info in f.tensors.items():
            raw, row = tensor_rows(f, name, max_rows=16)
            got = dequantize(raw, info.ggml_type, (raw.shape[0], row))
            want = oracle_dequantize(np.ascontiguousarray(raw), info.ggml_type)
            assert same_bits(got, want.reshape(got.shape)), name
            seen.add(info.type_name)
    expected = {"smollm2-135m": {"F32", "Q4_1", "Q8_0"},
                "qwen2.5-coder-0.5b": {"F32", "Q5_0", "Q4_K", "Q6_K", "Q8_0"}}[model]
    assert seen == expected


def test_dequantize_whole_real_tensor_keeps_its_shape() -> None:
    path = hub_model("smollm2-135m")
    with llmnb.gguf.open(path) as f:
        info = f.tensors["blk.0.ffn_down.weight"]
        w = dequantize(f.raw(info.name), info.ggml_type, info.shape)
        assert w.shape == info.shape == (576, 1536)
        assert same_bits(w, oracle_dequantize(f.raw(info.name).reshape(576, -1), info.ggml_type))


def test_f32_dequantize_is_a_view_of_the_bytes() -> None:
    x = np.arange(64, dtype=np.float32)
    got = dequantize(x.view(np.uint8), T.F32, (8, 8))
    assert np.shares_memory(got, x) and np.array_equal(got.ravel(), x)


# --- quantize: bit-exact where gguf-py has a quantizer ---------------------------------------

@pytest.mark.parametrize("ggml_type", LEGACY_TYPES + [T.F16, T.BF16], ids=type_name)
def test_quantize_bit_exact_vs_gguf_py(ggml_type: int) -> None:
    rng = np.random.default_rng(ggml_type)
    x = np.concatenate([rng.standard_normal((40, 256)).astype(np.float32) * 0.05,
                        rng.uniform(-100, 100, (8, 256)).astype(np.float32), edge_rows()])
    got = quantize(x, ggml_type)
    want = np.asarray(gguf_quantize(x, gguf.GGMLQuantizationType(ggml_type))).view(np.uint8)
    assert got.shape == want.reshape(x.shape[0], -1).shape
    assert np.array_equal(got, want.reshape(got.shape))


def test_bf16_quantize_keeps_nan_quiet_and_rounds_to_even_like_gguf_py() -> None:
    bits = np.array([0x7F800001, 0xFFC00000, 0x3F808000, 0x3F818000, 0x7F7FFFFF, 0x00000001],
                    dtype=np.uint32)
    x = bits.view(np.float32)
    want = np.asarray(gguf_quantize(x, gguf.GGMLQuantizationType.BF16)).view(np.uint8)
    assert np.array_equal(quantize(x, T.BF16), want)


# --- quantize: ggml's reference quantizers ---------------------------------------------------

# sha256 of ggml's quantize_row_<type>_ref on the inputs of tools/make_libggml_digests.py, made
# once from a llama.cpp build (tests/fixtures/libggml/README.md)
LIBGGML = json.loads((Path(__file__).parent / "fixtures" / "libggml" / "quantize_ref.json")
                     .read_text())


@pytest.mark.parametrize("input_name", list(INPUTS))
@pytest.mark.parametrize("ggml_type", K_TYPES + LEGACY_TYPES, ids=type_name)
def test_quantize_bit_exact_vs_ggml_reference_quantizers(ggml_type: int, input_name: str) -> None:
    """Against the committed digests of libggml's output, and against libggml itself too when
    LLMNB_LIBGGML names a llama.cpp build's libggml-base.so."""
    x = INPUTS[input_name]()
    assert sha256(x) == LIBGGML["inputs"][input_name]      # the input the digests were made from
    got = quantize(x, ggml_type)
    assert sha256(got) == LIBGGML["digests"][input_name][type_name(ggml_type)]
    lib = os.environ.get("LLMNB_LIBGGML")
    if lib:
        want = ggml_quantize_ref(load_libggml(lib), x, type_name(ggml_type))
        assert np.array_equal(got.ravel(), want)


# --- round trips ---------------------------------------------------------------------------

# relative RMSE of dequantize(quantize(x)) on Gaussian rows: measured over seeds 3..7
# (Q8_0 0.0053, Q6_K 0.0177, Q5_K 0.0360, Q5_1 0.0377, Q5_0 0.0425, Q4_K 0.0710,
# Q4_1 0.0777, Q4_0 0.0860, F16 0.00021, BF16 0.00166), bounds ~10% above
RMSE_BOUND = {T.Q8_0: 0.006, T.Q6_K: 0.0195, T.Q5_K: 0.040, T.Q5_1: 0.0415, T.Q5_0: 0.047,
              T.Q4_K: 0.078, T.Q4_1: 0.086, T.Q4_0: 0.095, T.F16: 2.4e-4, T.BF16: 1.9e-3,
              T.F32: 0.0}


@pytest.mark.parametrize("ggml_type", list(RMSE_BOUND), ids=type_name)
def test_round_trip_error_within_bound(ggml_type: int) -> None:
    x = np.random.default_rng(3).standard_normal((32, 512)).astype(np.float32)
    y = dequantize(quantize(x, ggml_type), ggml_type, x.shape)
    rel = float(np.sqrt(np.mean((y - x) ** 2)) / np.sqrt(np.mean(x ** 2)))
    assert rel <= RMSE_BOUND[ggml_type]
    if ggml_type != T.F32:
        assert rel > RMSE_BOUND[ggml_type] / 2       # it really went through the format


def test_more_bits_give_smaller_error() -> None:
    x = np.random.default_rng(4).standard_normal((16, 1024)).astype(np.float32)
    errors = {t: float(np.abs(dequantize(quantize(x, t), t, x.shape) - x).mean())
              for t in [T.Q4_0, T.Q4_K, T.Q5_K, T.Q6_K, T.Q8_0]}
    assert errors[T.Q4_0] > errors[T.Q4_K] > errors[T.Q5_K] > errors[T.Q6_K] > errors[T.Q8_0]


def test_zero_tensor_round_trips_to_zero_in_every_quantize_type() -> None:
    x = np.zeros((2, 256), dtype=np.float32)
    for t, fmt in FORMATS.items():
        if fmt.can_quantize:
            assert not dequantize(quantize(x, t), t, x.shape).any(), fmt.name


# --- registry and errors -------------------------------------------------------------------

def test_registry_geometry_agrees_with_gguf_py() -> None:
    for t, fmt in FORMATS.items():
        want = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(t)]
        assert (fmt.block_size, fmt.type_size) == want


def test_bits_per_weight() -> None:
    assert bits_per_weight(T.Q4_0) == 4.5
    assert bits_per_weight("q8_0") == 8.5
    assert bits_per_weight(T.Q4_K) == 4.5
    assert bits_per_weight("Q6_K") == 6.5625
    assert bits_per_weight(T.F16) == 16.0
    with pytest.raises(QuantError, match="unknown tensor type"):
        bits_per_weight("Q9_9")


def test_unsupported_type_names_what_is_supported() -> None:
    with pytest.raises(QuantError,
                       match=r"cannot dequantize tensor type IQ2_XXS: expected one of .*Q6_K"):
        dequantize(np.zeros(66, np.uint8), T.IQ2_XXS, (256,))
    with pytest.raises(QuantError, match="cannot quantize tensor type Q2_K"):
        quantize(np.zeros(256, np.float32), T.Q2_K)
    with pytest.raises(QuantError, match="type99"):
        dequantize(np.zeros(4, np.uint8), 99, (1,))


def test_wrong_byte_count_says_what_was_expected() -> None:
    with pytest.raises(QuantError,
                       match=r"Q4_0 tensor of shape \(2, 64\): expected 72 bytes .* got 70"):
        dequantize(np.zeros(70, np.uint8), T.Q4_0, (2, 64))
    with pytest.raises(QuantError, match="multiple of the block size 256"):
        dequantize(np.zeros(144, np.uint8), T.Q4_K, (2, 128))
    with pytest.raises(QuantError, match="raw uint8 bytes"):
        dequantize(np.zeros(18, np.int8), T.Q4_0, (32,))


def test_quantize_rejects_ragged_rows_and_non_finite_values() -> None:
    with pytest.raises(QuantError, match="row length 48 must be a multiple of 32"):
        quantize(np.zeros((2, 48), np.float32), T.Q8_0)
    bad = np.zeros((1, 256), np.float32)
    bad[0, 3] = np.nan
    with pytest.raises(QuantError, match="NaN or Inf"):
        quantize(bad, T.Q4_K)
