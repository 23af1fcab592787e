"""Quant blocks with NaN, Inf and subnormal values: the defined behaviour.

dequantize: a file's NaN/Inf/subnormal float16 scale follows IEEE arithmetic silently,
bit for bit as gguf-py (ggml's reference), and only its own block is affected.
quantize: block formats refuse NaN/Inf and values whose float16 scale would overflow with a
QuantError; tiny and subnormal values give zero-scale blocks that decode to zeros; F32, F16
and BF16 convert value by value by IEEE rules.
"""
from __future__ import annotations

import re
import warnings

import gguf
import numpy as np
import numpy.typing as npt
import pytest
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

from llmnb.gguf.constants import GGML_BLOCK_SIZES, GGMLType, type_name
from llmnb.quant import FORMATS, QuantError, dequantize, quantize

T = GGMLType
BLOCK_TYPES = [t for t, f in FORMATS.items() if f.block_size > 1]
QUANT_BLOCK_TYPES = [t for t in BLOCK_TYPES if FORMATS[t].can_quantize]
LEGACY = [T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1]
# float16 bit patterns: NaN, -NaN, +Inf, -Inf, smallest and largest subnormal, -0, largest finite
SPECIALS = {"nan": 0x7E00, "-nan": 0xFE00, "inf": 0x7C00, "-inf": 0xFC00, "sub_min": 0x0001,
            "sub_max": 0x03FF, "-0": 0x8000, "max": 0x7BFF}


def finite_blocks(ggml_type: int, n_blocks: int, seed: int) -> npt.NDArray[np.uint8]:
    """Random blocks with every float16 scale finite (exponent bits never all ones)."""
    size = GGML_BLOCK_SIZES[ggml_type][1]
    raw = np.random.default_rng(seed).integers(0, 256, (n_blocks, size), dtype=np.uint8)
    for off in FORMATS[ggml_type].scale_offsets:
        raw[:, off + 1] &= 0x3B
    return raw


def gguf_py_quantize(x: npt.NDArray[np.float32], ggml_type: int) -> npt.NDArray[np.uint8]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # gguf-py warns where 1/d overflows; llmnb does not
        return np.asarray(gguf_quantize(x, gguf.GGMLQuantizationType(ggml_type))).view(np.uint8)


def oracle(raw: npt.NDArray[np.uint8], ggml_type: int) -> npt.NDArray[np.float32]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # gguf-py warns on Inf x 0; llmnb does not
        return np.asarray(gguf_dequantize(raw, gguf.GGMLQuantizationType(ggml_type)), np.float32)


def same_ieee(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> bool:
    """NaN in the same places, every other value bit-identical."""
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b))
                and np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32)))


# --- dequantize ------------------------------------------------------------------------------

@pytest.mark.parametrize("ggml_type", BLOCK_TYPES, ids=type_name)
def test_every_scale_field_special_decodes_like_gguf_py_silently(ggml_type: int) -> None:
    fmt = FORMATS[ggml_type]
    assert fmt.scale_offsets, "every block format names its float16 scales"
    cases = [(off, bits) for off in fmt.scale_offsets for bits in SPECIALS.values()]
    raw = finite_blocks(ggml_type, len(cases), seed=ggml_type)
    for i, (off, bits) in enumerate(cases):   # one special value per block
        raw[i, off:off + 2] = np.array([bits], "<u2").view(np.uint8)
    shape = (len(cases), fmt.block_size)
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # IEEE results, no RuntimeWarning
        got = dequantize(raw, ggml_type, shape)
    assert same_ieee(got, oracle(raw, ggml_type).reshape(shape))
    nans = (SPECIALS["nan"], SPECIALS["-nan"])
    nan_scale = [i for i, (_, bits) in enumerate(cases) if bits in nans]
    assert all(np.isnan(got[i]).any() for i in nan_scale)


@pytest.mark.parametrize("ggml_type", BLOCK_TYPES, ids=type_name)
def test_a_nan_or_inf_scale_changes_only_its_own_block(ggml_type: int) -> None:
    fmt = FORMATS[ggml_type]
    clean = finite_blocks(ggml_type, 5, seed=7)
    shape = (5, fmt.block_size)
    before = dequantize(clean, ggml_type, shape)
    assert np.isfinite(before).all()
    for off in fmt.scale_offsets:
        for bits in (SPECIALS["nan"], SPECIALS["inf"], SPECIALS["-inf"]):
            raw = clean.copy()
            raw[2, off:off + 2] = np.array([bits], "<u2").view(np.uint8)
            after = dequantize(raw, ggml_type, shape)
            np.testing.assert_array_equal(np.delete(after, 2, axis=0), np.delete(before, 2, axis=0))
            assert not np.isfinite(after[2]).all(), (off, hex(bits))


# --- quantize --------------------------------------------------------------------------------

@pytest.mark.parametrize("ggml_type", QUANT_BLOCK_TYPES, ids=type_name)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
def test_quantize_refuses_nan_and_inf_anywhere(ggml_type: int, bad: float) -> None:
    x = np.random.default_rng(0).standard_normal((3, 512)).astype(np.float32)
    x[2, 511] = bad                           # the very last value of the last block
    message = f"cannot quantize to {type_name(ggml_type)}: the input holds NaN or Inf"
    with pytest.raises(QuantError, match=message):
        quantize(x, ggml_type)


@pytest.mark.parametrize("ggml_type", QUANT_BLOCK_TYPES, ids=type_name)
@pytest.mark.parametrize("big", [3e38, -3e38, 1e10], ids=["3e38", "-3e38", "1e10"])
def test_quantize_refuses_a_block_whose_float16_scale_would_overflow(
        ggml_type: int, big: float) -> None:
    x = np.random.default_rng(1).standard_normal((2, 512)).astype(np.float32)
    x[1, 300] = big                           # finite in float32, beyond any float16 scale
    block = (512 + 300) // FORMATS[ggml_type].block_size
    message = (f"block {block} (values up to {abs(big):.4g} in magnitude) needs a scale beyond "
               "float16's range")
    with pytest.raises(QuantError, match=re.escape(message)) as e:
        quantize(x, ggml_type)
    assert e.value.exit_code == 4


@pytest.mark.parametrize("ggml_type", LEGACY, ids=type_name)
def test_largest_values_whose_scale_fits_quantize_like_gguf_py(ggml_type: int) -> None:
    x = np.random.default_rng(2).uniform(-1, 1, (4, 64)).astype(np.float32)
    x *= np.float32(65000)                    # Q4_1/Q5_1 store the block minimum as float16
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = quantize(x, ggml_type)
    np.testing.assert_array_equal(got, gguf_py_quantize(x, ggml_type).reshape(got.shape))
    assert np.isfinite(dequantize(got, ggml_type, x.shape)).all()


@pytest.mark.parametrize("ggml_type", QUANT_BLOCK_TYPES, ids=type_name)
@pytest.mark.parametrize("magnitude", [1e-40, 1e-45, 1e-30], ids=["subnormal", "smallest", "tiny"])
def test_subnormal_and_tiny_values_give_zero_scale_blocks_that_decode_to_zero(
        ggml_type: int, magnitude: float) -> None:
    x = (np.random.default_rng(3).standard_normal((2, 256)) * magnitude).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # 1/d overflows inside, as in ggml: silently
        raw = quantize(x, ggml_type)
        back = dequantize(raw, ggml_type, x.shape)
    fmt = FORMATS[ggml_type]
    blocks = raw.reshape(-1, fmt.type_size)
    for off in fmt.scale_offsets:             # every float16 scale is +-0: below float16's range
        assert not (blocks[:, off:off + 2].view("<u2") & 0x7FFF).any()
    assert np.isfinite(back).all() and not back.any()
    if ggml_type in LEGACY:                   # the scales are ggml's (gguf-py's) too
        want = gguf_py_quantize(x, ggml_type).reshape(-1, fmt.type_size)
        for off in fmt.scale_offsets:
            np.testing.assert_array_equal(blocks[:, off:off + 2], want[:, off:off + 2])


def test_float_formats_convert_specials_by_ieee_rules_like_gguf_py() -> None:
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 1e-45, 1e-40, 6e-8, 1e6, -1e6, 3e38, 0.0, -0.0],
                 np.float32)
    for ggml_type in (T.F32, T.F16, T.BF16):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            raw = quantize(x, ggml_type)
        want = gguf_py_quantize(x, ggml_type)
        np.testing.assert_array_equal(raw.reshape(-1), want.reshape(-1),
                                      err_msg=type_name(ggml_type))
        back = dequantize(raw, ggml_type, x.shape)
        assert np.isnan(back[:2]).all() and list(back[2:4]) == [np.inf, -np.inf]
    f16 = dequantize(quantize(x, T.F16), T.F16, x.shape)
    assert list(f16[7:10]) == [np.inf, -np.inf, np.inf]      # beyond 65504: Inf, as in ggml
    assert f16[4] == 0 and f16[6] == np.float32(np.float16(6e-8))  # float16 subnormals kept
