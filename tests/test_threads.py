"""llmnb.threads sets BLAS and numexpr thread counts for a block and restores them."""
from __future__ import annotations

import numexpr
import pytest
from threadpoolctl import threadpool_info

import llmnb
from llmnb.errors import UsageError


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
