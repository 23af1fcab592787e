"""Make the Gemma 3 reference-logit fixture in ``tests/fixtures/gemma3/``.

A tiny stock ``transformers.Gemma3ForCausalLM`` (3 layers: two sliding-window layers of window
4, then a global one; 16-wide heads with hidden 32 and 4 heads; GQA 4/2; GeGLU; q/k norms;
post-attention and post-FFN norms; sqrt(d)-scaled embeddings; tied output; linear RoPE x2 on
the global layer with base 1e6, base 1e4 on the sliding ones; final logit soft-capping 10)
gets seeded random weights as in ``make_oracle_fixtures.py`` (norms 0.2 N(0,1), since Gemma's
RMSNorm multiplies by 1 + w). Its logits on a 16-id prompt are the reference; the same weights
with a window wider than the prompt give ``no_window_negative_control``. The checkpoint is
converted by ``llmnb convert``'s code (``convert_checkpoint(arch="gemma3")``), which writes
1 + w into the norms as llama.cpp's converter does.

    .venv-oracle/bin/python tools/make_gemma3_fixtures.py            # write the fixture
    .venv-oracle/bin/python tools/make_gemma3_fixtures.py --check    # regenerate and compare

Needs the ``[oracle]`` extra (torch, transformers, safetensors); CI never runs it.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from make_oracle_fixtures import (
    convert_model, model_logits, seed_parameters, sha256, versions, write_npz,
)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "tests" / "fixtures" / "gemma3"
ATOL = RTOL = 1e-4
SEED = 40
PROMPT_IDS = [int(i) for i in np.random.default_rng(41).integers(0, 128, 16)]
CONFIG: dict[str, Any] = dict(
    vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
    rms_norm_eps=1e-6, sliding_window=4,
    layer_types=["sliding_attention", "sliding_attention", "full_attention"],
    query_pre_attn_scalar=16, final_logit_softcapping=10.0, tie_word_embeddings=True,
    rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
                     "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
)


def build(window: int) -> Any:
    import transformers

    config = transformers.Gemma3TextConfig(**(CONFIG | {"sliding_window": window}))
    config.architectures = ["Gemma3ForCausalLM"]
    model = transformers.Gemma3ForCausalLM._from_config(config, attn_implementation="eager")
    model.eval()
    seed_parameters(model, SEED, norm_mean=0.0)
    return model


def write_all(out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    model = build(CONFIG["sliding_window"])
    ref = model_logits(model, PROMPT_IDS)
    control = model_logits(build(len(PROMPT_IDS) + 1), PROMPT_IDS)
    convert_model(model, out / "gemma3_f32.gguf", "gemma3", "gemma3-tiny")
    write_npz(out / "gemma3_f32.npz", {"causal": ref, "no_window_negative_control": control})
    manifest = {
        "prompt_ids": PROMPT_IDS, "atol": ATOL, "rtol": RTOL, "seed": SEED,
        "class": "Gemma3ForCausalLM", "config": CONFIG, "versions": versions(),
        "max_abs_diff_vs_no_window": float(np.abs(ref - control).max()),
        "gguf_sha256": sha256(out / "gemma3_f32.gguf"),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def check(committed: Path) -> int:
    """Regenerate into a temp folder; compare values within tolerance. 0 = all match."""
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        write_all(Path(tmp))
        a, b = np.load(committed / "gemma3_f32.npz"), np.load(Path(tmp) / "gemma3_f32.npz")
        for key in b.files:
            if not np.allclose(a[key], b[key], atol=ATOL, rtol=RTOL):
                print(f"MISMATCH gemma3_f32.npz {key}")
                bad += 1
    print("check:", "OK" if bad == 0 else f"{bad} mismatches")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="regenerate and compare, write nothing")
    args = ap.parse_args()
    if args.check:
        return 1 if check(args.out) else 0
    m = write_all(args.out)
    print(f"gemma3_f32: max |windowed - unwindowed| = {m['max_abs_diff_vs_no_window']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
