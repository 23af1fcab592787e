"""llmnb.kernels.floats: the float32 few-row product on 64-output tiles against float64, each
row bit-identical whatever the number of rows, ragged outputs and inputs, any thread count."""
from __future__ import annotations

import numpy as np
import pytest

import llmnb
from llmnb.kernels import TILE, f32_tiles

# max |kernel - float64| / max |float64 product| per sqrt(n_in), as test_kernels' REL_BOUND for
# float32 weights: a sum of n_in rounded terms grows like sqrt(n_in) * 6e-8
REL_BOUND = 2e-7


def rel_error(got: np.ndarray, w: np.ndarray, x: np.ndarray) -> float:
    want = x.astype(np.float64) @ w.astype(np.float64).T
    return float(np.abs(got - want).max() / np.abs(want).max() / np.sqrt(w.shape[1]))


@pytest.mark.parametrize("n_out, n_in", [(200, 576), (64, 96), (1, 37), (130, 1539), (3, 5)])
def test_tiled_product_matches_float64_for_ragged_outputs_and_inputs(n_out: int, n_in: int) -> None:
    rng = np.random.default_rng(n_out + n_in)
    w = rng.standard_normal((n_out, n_in)).astype(np.float32)
    tiled = f32_tiles(np.ascontiguousarray(w.T))
    assert tiled.tiles.shape == (-(-n_out // TILE), n_in, TILE) and tiled.n_out == n_out
    for t in (1, 2, 3, 5, 8, 17, 64):
        x = rng.standard_normal((t, n_in)).astype(np.float32)
        got = tiled.matmul(x)
        assert got.shape == (t, n_out) and got.dtype == np.float32
        assert rel_error(got, w, x) < REL_BOUND, (n_out, n_in, t)


def test_tiles_hold_w_itself_with_zero_padding() -> None:
    w = np.arange(70 * 3, dtype=np.float32).reshape(70, 3)           # (out, in)
    tiles = f32_tiles(np.ascontiguousarray(w.T)).tiles                 # (2, 3, 64)
    np.testing.assert_array_equal(tiles[1, :, 5], w[64 + 5])
    np.testing.assert_array_equal(tiles[0, 2, :], w[:64, 2])
    assert not tiles[1, :, 6:].any()                                   # outputs 70.. padded


def test_tiled_rows_are_bit_identical_to_each_row_alone_for_t_1_to_17() -> None:
    """Rows go in blocks of 4, 2 and 1: every T from 1 to 17 (each mix of blocks), each row
    bit-identical to that row multiplied alone, and within the bound."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((200, 579)).astype(np.float32)            # 579: a ragged last chunk
    tiled = f32_tiles(np.ascontiguousarray(w.T))
    for n in range(1, 18):
        x = rng.standard_normal((n, 579)).astype(np.float32)
        got = tiled.matmul(x)
        assert rel_error(got, w, x) < REL_BOUND, n
        for r in range(n):
            np.testing.assert_array_equal(got[r], tiled.matmul(x[r:r + 1])[0])


def test_tiled_product_does_not_depend_on_the_thread_count() -> None:
    rng = np.random.default_rng(9)
    w = rng.standard_normal((1000, 256)).astype(np.float32)
    tiled = f32_tiles(np.ascontiguousarray(w.T))
    x = rng.standard_normal((11, 256)).astype(np.float32)
    with llmnb.threads(1):
        one = tiled.matmul(x)
    with llmnb.threads(2):
        two = tiled.matmul(x)
    np.testing.assert_array_equal(one, two)
