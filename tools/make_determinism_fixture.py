"""Make tests/fixtures/determinism.json: the token ids of greedy generation (tiny-ar) and
temperature-0 diffusion (tiny-llada, tiny-dream) on held-out prompts, from the pure-Python
build. tests/test_determinism.py replays them in whatever build it runs in (`make test`: the
mypyc-compiled one), at 1 and 2 threads and in a fresh process.

A case is kept only if it is robust: its ids do not change when every logit is scaled by
(1 + 1e-5 * noise) for three noise draws. A different CPU's BLAS kernels round differently
(by ~1e-7 relative), so a near-tie could otherwise flip an id on another machine and make
the fixture, not the engine, the cause of a failure.

Run from the repository root in the pure-Python dev venv (``make test-pure`` installs it):

    .venv/bin/python tools/make_determinism_fixture.py
"""
from __future__ import annotations

import hashlib
import json
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import llmnb
import llmnb.gguf.reader
from llmnb.model import Model

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "determinism.json"
FAMILIES = ("capitals", "addition", "translate_fr", "listing", "animal_poem", "pick")
CASES: list[dict[str, Any]] = [
    {"model": "tiny-ar", "kind": "generate", "args": {"max_new_tokens": 24}},
    {"model": "tiny-llada", "kind": "diffuse", "args": {"gen_length": 24, "steps": 12}},
    {"model": "tiny-llada", "kind": "diffuse",
     "args": {"gen_length": 24, "steps": 12, "scheduler": "entropy_exit", "cache": False}},
    {"model": "tiny-dream", "kind": "diffuse", "args": {"gen_length": 24, "steps": 12}},
]


def model_sha256(name: str) -> str:
    """The digest of a tiny model file: the fixture is only valid for these exact weights."""
    return hashlib.sha256((ROOT / "data" / "models" / f"{name}.gguf").read_bytes()).hexdigest()


def run_case(model: Model, kind: str, prompt: str, args: dict[str, Any]) -> list[int]:
    """The new token ids of one case (greedy / temperature 0, chat template applied)."""
    if kind == "generate":
        return list(llmnb.generate(model, prompt, chat=True, sampler=llmnb.Greedy(), **args).tokens)
    return list(llmnb.diffuse(model, prompt, chat=True, temperature=0.0, **args).tokens)


def perturbed(model: Model, seed: int) -> Callable[[], None]:
    """Scale every logit the transformer computes (``Transformer.logits``, which both
    ``forward`` and the diffusion loop call) by (1 + 1e-5 noise); returns an undo."""
    t = model.transformer
    logits = t.logits
    rng = np.random.default_rng(seed)
    calls = [0]

    def noisy(hidden: Any) -> Any:
        calls[0] += 1
        out = logits(hidden)
        noise = rng.standard_normal(out.shape).astype(np.float32)
        return out * (np.float32(1) + np.float32(1e-5) * noise)

    t.logits = noisy  # type: ignore[method-assign]  # pure build only: an instance attribute

    def undo() -> None:
        delattr(t, "logits")
        assert calls[0] > 0, "the perturbation was never applied"
    return undo


def main() -> int:
    import llmnb.gguf.reader as reader
    if not reader.__file__.endswith(".py"):
        print("run this in the pure-Python build (the fixture is its output)", file=sys.stderr)
        return 1
    prompts: dict[str, str] = {}
    for line in (ROOT / "data" / "eval" / "tiny_heldout.jsonl").read_text().splitlines():
        d = json.loads(line)
        prompts.setdefault(d["family"], d["prompt"])
    cases = []
    with llmnb.threads(1):
        for spec in CASES:
            model = llmnb.load(ROOT / "data" / "models" / f"{spec['model']}.gguf")
            for family in FAMILIES:
                ids = run_case(model, spec["kind"], prompts[family], spec["args"])
                robust = True
                for seed in range(3):
                    undo = perturbed(model, seed)
                    try:
                        got = run_case(model, spec["kind"], prompts[family], spec["args"])
                        robust &= got == ids
                    finally:
                        undo()
                print(f"{spec['model']:<11} {spec['kind']:<8} {family:<13} robust={robust} "
                      f"{model.tokenizer.decode(ids)!r}")
                if robust:
                    cases.append({**spec, "prompt": prompts[family], "ids": ids})
    made_with = (f"pure-Python llmnb, numpy {np.__version__}, Python {platform.python_version()}, "
                 f"{platform.machine()}, 1 thread")
    digests = {name: model_sha256(name) for name in sorted({c["model"] for c in CASES})}
    lines = ",\n  ".join(json.dumps(c) for c in cases)   # one case per line
    OUT.write_text(f'{{"made_with": {json.dumps(made_with)},\n "command": '
                   f'"python tools/make_determinism_fixture.py",\n'
                   f' "model_sha256": {json.dumps(digests)},\n "cases": [\n  {lines}\n]}}\n')
    print(f"wrote {OUT} ({len(cases)} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
