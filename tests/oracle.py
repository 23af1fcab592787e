"""The reference-logit fixtures (tests/fixtures/oracle): manifest, prompt, and a loader."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from llmnb.model.config import config_from_gguf
from llmnb.model.transformer import Transformer
from llmnb.model.weights import Weights
import llmnb

ORACLE = Path(__file__).parent / "fixtures" / "oracle"
MANIFEST = json.loads((ORACLE / "manifest.json").read_text())
PROMPT = np.array(MANIFEST["prompt_ids"], dtype=np.int64)
KEY_MASK = np.array(MANIFEST["key_mask"], dtype=bool)
TOL = MANIFEST["tolerance"]


def transformer(name: str, residency: str = "resident") -> Transformer:
    f = llmnb.gguf.open(ORACLE / MANIFEST["fixtures"][name]["gguf"])
    c = config_from_gguf(f)
    return Transformer(c, Weights(f, c, residency))


def reference(name: str) -> dict[str, np.ndarray]:
    with np.load(ORACLE / MANIFEST["fixtures"][name]["npz"]) as z:
        return {k: z[k] for k in z.files}


def forward_case(t: Transformer, name: str, case: str) -> np.ndarray:
    """Logits for one manifest case: the case's attention and key mask, and Dream's sampler
    view (row i-1 predicts position i) when the case is shifted."""
    spec = MANIFEST["fixtures"][name]["cases"][case]
    logits = t.forward(PROMPT, causal=spec["attention"] == "causal",
                       key_mask=KEY_MASK if spec["key_mask"] else None)
    if spec["shifted"]:
        logits = np.concatenate([logits[:1], logits[:-1]])
    return logits
