"""llmnb.threads sets BLAS and numexpr thread counts for a block and restores them;
``LLMNB_THREADS`` sets where every pool starts."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numba
import numexpr
import numpy as np
import pytest
from threadpoolctl import threadpool_info

import llmnb
from llmnb.errors import UsageError

TINY = Path(__file__).resolve().parents[1] / "data" / "models" / "tiny-ar.gguf"


def blas_threads() -> list[int]:
    return [int(i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"]


def test_threads_sets_and_restores_both_pools() -> None:
    before_ne = numexpr.get_num_threads()
    before_blas = blas_threads()
    with llmnb.threads(1):
        assert numexpr.get_num_threads() == 1
        assert all(n == 1 for n in blas_threads())
    assert numexpr.get_num_threads() == before_ne and blas_threads() == before_blas


def test_threads_refuses_zero() -> None:
    with pytest.raises(UsageError, match="positive"):
        with llmnb.threads(0):
            pass


ENV_CHECK = """
import llmnb, numba, numexpr
from threadpoolctl import threadpool_info
def counts():
    blas = {int(i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"}
    return [numba.get_num_threads(), numexpr.get_num_threads(), sorted(blas)]
print(counts())
with llmnb.threads(2):
    print(counts())
print(counts())
"""


def run_with_threads(value: str, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "LLMNB_THREADS": value, "NUMBA_NUM_THREADS": "2"})


def test_llmnb_threads_in_the_environment_starts_every_pool_there() -> None:
    r = run_with_threads("1", ENV_CHECK)
    assert r.returncode == 0, r.stderr
    start, inside, after = r.stdout.splitlines()
    assert start == after == "[1, 1, [1]]"
    assert inside == "[2, 2, [2]]"                  # a block still gets what it asks for


@pytest.mark.parametrize("value", ["0", "two"])
def test_a_bad_llmnb_threads_imports_and_load_refuses_it(value: str) -> None:
    r = run_with_threads(value, "import llmnb, numba; print(numba.get_num_threads()); "
                                f"llmnb.load({str(TINY)!r})")
    assert r.stdout.strip() == "2"                  # read as unset: numba's default
    message = f"LLMNB_THREADS: expected a positive whole number of threads, got {value!r}"
    assert r.stderr.splitlines()[-1] == f"llmnb.errors.UsageError: {message}"
    cli = subprocess.run([sys.executable, "-m", "llmnb.cli", "generate", str(TINY), "-p", "hi"],
                         capture_output=True, text=True, env={**os.environ, "LLMNB_THREADS": value})
    assert cli.returncode == 2 and cli.stderr.strip() == f"llmnb: error: {message}"


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="numba has one thread here")
def test_a_pass_whose_products_run_in_blas_runs_numba_on_one_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """tiny-ar's float32 decode step multiplies in BLAS: its attention kernel runs on one
    numba thread (and numba's count is back afterwards); a batch through the tiled few-row
    kernel keeps both threads; the logits are the same bits at one thread and at two."""
    import llmnb.kernels.attention as attention
    from llmnb.ar.kv_cache import KVCache

    m = llmnb.load(TINY)
    tr = m.transformer
    assert tr.weights.kind == "f32"
    seen: list[int] = []
    original = attention.cached_attention

    def counting(*args: object) -> None:
        seen.append(numba.get_num_threads())
        original(*args)

    monkeypatch.setattr(attention, "cached_attention", counting)
    ids = np.arange(1, 9, dtype=np.int64)

    def step(rows: int) -> np.ndarray:
        cache = KVCache(m.config, 16)
        tr.forward(ids[:4], cache=cache, last_only=True)
        cache.commit()
        seen.clear()
        return tr.forward(ids[4:4 + rows], start=4, cache=cache)

    with llmnb.threads(1):
        one = step(1)
    with llmnb.threads(2):
        two = step(1)
        assert seen == [1] * m.config.n_layer and numba.get_num_threads() == 2
        tr.use_batch_copies(True)
        try:
            assert tr.tiled(4)
            step(4)
            assert seen == [2] * m.config.n_layer
        finally:
            tr.use_batch_copies(False)
    assert np.array_equal(one, two)
