"""Greedy ids equal llama.cpp's on an all-F32 copy of the same real model (fixtures/llamacpp)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import llmnb
from llmnb.ar import generate
from llmnb.model import Model
from real_models import hub_model

FIXTURES = Path(__file__).parent / "fixtures" / "llamacpp"
MODELS = {"smollm2": "smollm2-135m", "qwen2": "qwen2.5-coder-0.5b", "gemma3": "gemma3-270m"}
CASES = [(key, i) for key in MODELS if (FIXTURES / f"greedy_{key}.json").exists()
         for i in range(len(json.loads((FIXTURES / f"greedy_{key}.json").read_text())["cases"]))]
_loaded: dict[str, Model] = {}


def model(key: str) -> Model:
    if key not in _loaded:
        _loaded.clear()  # one real model in memory at a time
        _loaded[key] = llmnb.load(hub_model(MODELS[key]))
    return _loaded[key]


@pytest.mark.parametrize("key,index", CASES)
def test_greedy_ids_equal_llama_cpp_f32(key: str, index: int) -> None:
    fx = json.loads((FIXTURES / f"greedy_{key}.json").read_text())
    case = fx["cases"][index]
    m = model(key)
    r = generate(m, case["prompt_ids"], max_new_tokens=len(case["new_ids"]))
    assert r.tokens == case["new_ids"], (case["prompt_text"], r.text, case["new_text"])
