"""The shipped tiny models answer held-out prompts through llmnb itself (accuracy floors).

Floors sit below the measured accuracy on this subset (every 5th held-out prompt, all task
families), so a broken engine, tokenizer or model file fails while a retrained model passes.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import llmnb

ROOT = Path(__file__).parent.parent
HELDOUT = [json.loads(line) for line in (ROOT / "data" / "eval" / "tiny_heldout.jsonl").open()][::5]


def accuracy(answers: list[str]) -> float:
    return sum(a.strip() == r["answer"] for a, r in zip(answers, HELDOUT)) / len(HELDOUT)


def test_tiny_ar_greedy_accuracy_floor() -> None:
    m = llmnb.load(ROOT / "data" / "models" / "tiny-ar.gguf")
    answers = [llmnb.generate(m, r["prompt"], chat=True, max_new_tokens=48).text for r in HELDOUT]
    assert accuracy(answers) >= 0.85


@pytest.mark.parametrize("name,floor", [("tiny-llada", 0.55), ("tiny-dream", 0.6)])
def test_tiny_diffusion_accuracy_floor(name: str, floor: float) -> None:
    m = llmnb.load(ROOT / "data" / "models" / f"{name}.gguf")
    answers = [llmnb.diffuse(m, r["prompt"], chat=True, gen_length=48, steps=16, schedule="even",
                             remasking="probability", cache=False).text for r in HELDOUT]
    assert accuracy(answers) >= floor


def test_entropy_exit_needs_far_fewer_steps_for_nearly_the_same_answers() -> None:
    m = llmnb.load(ROOT / "data" / "models" / "tiny-llada.gguf")
    fixed = [llmnb.diffuse(m, r["prompt"], chat=True, gen_length=48, steps=16, cache=False)
             for r in HELDOUT]
    fast = [llmnb.diffuse(m, r["prompt"], chat=True, gen_length=48, steps=16,
                          scheduler="entropy_exit", cache=False) for r in HELDOUT]
    assert sum(r.steps_taken for r in fast) < 0.25 * sum(r.steps_taken for r in fixed)
    assert accuracy([r.text for r in fast]) >= accuracy([r.text for r in fixed]) - 0.1
