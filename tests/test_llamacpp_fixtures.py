"""The committed llama.cpp references on the quantized files (fixtures/llamacpp/quantized_*.json)
are whole and consistent, and describe the files `llmnb pull` fetches."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from llamacpp_fixtures import (FIXTURES, QUANTIZED_MODELS, TOP_K, FixtureError, load_quantized,
                               quantized_path)
from llmnb import hub
from real_models import hub_model

KEYS = list(QUANTIZED_MODELS)


def leading_agreement(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.parametrize("key", KEYS)
def test_quantized_reference_is_consistent_with_itself_and_the_f32_fixture(key: str) -> None:
    assert quantized_path(key).stat().st_size < 1_000_000
    ref = load_quantized(key)
    f32 = json.loads((FIXTURES / f"greedy_{key}.json").read_text())
    pulled = hub.MODELS[QUANTIZED_MODELS[key]]
    assert (ref.model, ref.file, ref.sha256, ref.nbytes) == (pulled.name, pulled.filename,
                                                             pulled.sha256, pulled.nbytes)
    exact, one = ref.settings["exact_run"], ref.settings["one_thread_run"]
    assert (exact["flash_attn_type"], exact["type_k"], exact["type_v"]) == (0, 0, 0)
    assert exact["n_threads"] == exact["n_threads_batch"] == 2
    assert one["n_threads"] == one["n_threads_batch"] == 1
    assert len(ref.cases) == len(f32["cases"]) == 7
    for case, f32_case in zip(ref.cases, f32["cases"]):
        where = (key, case.prompt_text)
        assert case.prompt_ids == f32_case["prompt_ids"], where
        steps = len(case.new_ids)
        assert 1 <= steps <= 48 and (steps == 48) == (case.stop_reason == "max_new_tokens"), where
        assert case.top_ids.shape == case.top_logits.shape == (steps, TOP_K)
        assert (case.top_ids[:, 0] == case.new_ids).all(), where
        assert (case.top_ids[:, 1] == case.runner_up_ids).all(), where
        assert ((case.top_ids >= 0) & (case.top_ids < ref.n_vocab)).all(), where
        assert all(len(set(row)) == TOP_K for row in case.top_ids.tolist()), where
        assert (np.diff(case.top_logits, axis=1) <= 0).all(), where
        margin = np.array(case.top2_margin)
        assert (margin >= 0).all(), where
        np.testing.assert_allclose(margin, case.top_logits[:, 0] - case.top_logits[:, 1],
                                   atol=1.01e-4)
        assert case.agree_with_f32_prefix == leading_agreement(case.new_ids, f32_case["new_ids"])
        for run in [case.one_thread] + ([case.no_repack] if case.no_repack else []):
            assert run.same_ids == (run.new_ids == case.new_ids), where
            assert run.agree_prefix == leading_agreement(case.new_ids, run.new_ids), where
            assert 1 <= run.steps_compared <= steps, where
            assert run.steps_compared == min(run.agree_prefix + 1, steps, len(run.new_ids)), where
            assert abs(max(run.max_abs_logit_diff_per_step) - run.max_abs_logit_diff) <= 5e-5, where
    assert (ref.cases[0].no_repack is None) == (not ref.repack)


@pytest.mark.parametrize("key", KEYS)
def test_quantized_reference_sha256_matches_pulled_file(key: str) -> None:
    ref = load_quantized(key)
    path = hub_model(ref.model)   # skips when not pulled; `make test` pulls every model first
    assert path.name == ref.file and path.stat().st_size == ref.nbytes
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    assert h.hexdigest() == ref.sha256


def test_quantized_reference_reader_names_the_broken_field(tmp_path: Path) -> None:
    doc = json.loads(quantized_path("smollm2").read_text())
    doc["cases"][2][f"top{TOP_K}_ids"].pop()
    broken = tmp_path / "quantized_smollm2.json"
    broken.write_text(json.dumps(doc))
    with pytest.raises(FixtureError, match=r"cases\[2\]: field 'top16_ids' has shape"):
        load_quantized("smollm2", broken)
    doc["cases"][2].pop(f"top{TOP_K}_ids")
    doc["cases"][0]["one_thread"]["same_ids"] = "yes"
    broken.write_text(json.dumps(doc))
    with pytest.raises(FixtureError, match=r"cases\[0\]\.one_thread: field 'same_ids' is str"):
        load_quantized("smollm2", broken)
