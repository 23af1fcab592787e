"""Make the RoPE-scaling fixtures in ``tests/fixtures/rope/`` (linear, YaRN, Llama 3).

Two kinds of reference, both from stock ``transformers``:

1. ``rope_init.json``: the inverse frequencies and attention factor that transformers' RoPE
   initialisation functions (``modeling_rope_utils.ROPE_INIT_FUNCTIONS``) compute for a few
   real models' settings (DeepSeek Coder's linear x4, Qwen2.5's YaRN x4 over 32k, Llama 3.1's
   llama3 x8) and small ones whose YaRN ramp has interior points.
2. Tiny models with scaled RoPE (seeded weights as in ``make_oracle_fixtures.py``): a Llama
   with YaRN and head_dim 16 (not hidden / heads = 8), a Qwen2 with linear scaling, a Llama
   with Llama 3 scaling. Their logits on a 40-id prompt are the references; the same weights
   with the default RoPE give ``unscaled_negative_control``. Each checkpoint is converted with
   ``llmnb convert``'s code (``convert_checkpoint``), so the GGUF carries ``rope_scaling`` and
   ``head_dim`` the way the package writes them.

    .venv-oracle/bin/python tools/make_rope_fixtures.py            # write the fixtures
    .venv-oracle/bin/python tools/make_rope_fixtures.py --check    # regenerate and compare

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
DEFAULT_OUT = REPO / "tests" / "fixtures" / "rope"
ATOL = RTOL = 1e-4
PROMPT_IDS = [int(i) for i in np.random.default_rng(20).integers(0, 128, 40)]

# name -> (head_dim, rope_parameters) for transformers' initialisation functions
INIT_CASES: dict[str, tuple[int, dict[str, Any]]] = {
    "default": (64, {"rope_type": "default", "rope_theta": 10000.0}),
    "linear_deepseek_coder": (128, {"rope_type": "linear", "factor": 4.0, "rope_theta": 100000.0}),
    "yarn_qwen2.5": (128, {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1000000.0,
                           "original_max_position_embeddings": 32768}),
    "yarn_ramp": (16, {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                       "original_max_position_embeddings": 4096}),
    "yarn_x16": (64, {"rope_type": "yarn", "factor": 16.0, "rope_theta": 500000.0,
                      "original_max_position_embeddings": 2048}),
    "llama3_llama3.1": (128, {"rope_type": "llama3", "factor": 8.0, "rope_theta": 500000.0,
                              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 8192}),
}

# name -> tiny model: class, seed, head_dim, context, rope_parameters
MODELS: dict[str, dict[str, Any]] = {
    "llama_yarn": {"cls": "LlamaForCausalLM", "arch": "llama", "seed": 30, "head_dim": 16,
                   "ctx": 16384, "rope": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                          "original_max_position_embeddings": 4096}},
    "qwen2_linear": {"cls": "Qwen2ForCausalLM", "arch": "qwen2", "seed": 31, "head_dim": 8,
                     "ctx": 128, "rope": {"rope_type": "linear", "factor": 2.0,
                                          "rope_theta": 10000.0}},
    "llama_llama3": {"cls": "LlamaForCausalLM", "arch": "llama", "seed": 32, "head_dim": 8,
                     "ctx": 4096, "rope": {"rope_type": "llama3", "factor": 8.0,
                                           "rope_theta": 500000.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 512}},
}


def init_references() -> dict[str, Any]:
    """transformers' (inv_freq, attention_factor) for every INIT_CASES entry."""
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    out: dict[str, Any] = {}
    for name, (head_dim, params) in INIT_CASES.items():
        n_head = 8
        # the context YaRN stretches to: factor x the trained one (transformers warns otherwise)
        ctx = int(params.get("factor", 1.0) * params.get("original_max_position_embeddings", 8192))
        config = transformers.LlamaConfig(hidden_size=head_dim * n_head, num_attention_heads=n_head,
                                          head_dim=head_dim, max_position_embeddings=ctx,
                                          rope_parameters=dict(params))
        kind = params["rope_type"]
        if kind == "default":
            base = params["rope_theta"]
            inv = 1.0 / base ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim)
            factor = 1.0
        else:
            inv_t, factor = ROPE_INIT_FUNCTIONS[kind](config, "cpu")
            inv = inv_t.float().numpy()
        out[name] = {"head_dim": head_dim, "rope_parameters": params,
                     "inv_freq": [float(x) for x in np.asarray(inv, dtype=np.float32)],
                     "attention_factor": float(factor)}
    return out


def build(spec: dict[str, Any], scaled: bool) -> Any:
    """The tiny stock model of `spec`, seeded; with the default RoPE when not `scaled`."""
    import transformers

    rope = dict(spec["rope"]) if scaled else {"rope_type": "default",
                                              "rope_theta": spec["rope"]["rope_theta"]}
    common = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=spec["head_dim"],
                  max_position_embeddings=spec["ctx"], rms_norm_eps=1e-5, rope_parameters=rope,
                  tie_word_embeddings=False)
    config_cls = transformers.LlamaConfig if spec["cls"] == "LlamaForCausalLM" else \
        transformers.Qwen2Config
    config = config_cls(**common)
    config.architectures = [spec["cls"]]
    model = getattr(transformers, spec["cls"])._from_config(config, attn_implementation="eager")
    model.eval()
    seed_parameters(model, spec["seed"])
    return model


def write_all(out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "rope_init.json").write_text(json.dumps(init_references(), indent=1) + "\n")
    manifest: dict[str, Any] = {"prompt_ids": PROMPT_IDS, "atol": ATOL, "rtol": RTOL,
                                "versions": versions(), "models": {}}
    for name, spec in MODELS.items():
        model = build(spec, scaled=True)
        ref = model_logits(model, PROMPT_IDS)
        control = model_logits(build(spec, scaled=False), PROMPT_IDS)
        convert_model(model, out / f"{name}.gguf", spec["arch"], name)
        write_npz(out / f"{name}.npz", {"causal": ref, "unscaled_negative_control": control})
        manifest["models"][name] = {
            "class": spec["cls"], "arch": spec["arch"], "seed": spec["seed"],
            "head_dim": spec["head_dim"], "context": spec["ctx"], "rope_parameters": spec["rope"],
            "max_abs_diff_vs_unscaled": float(np.abs(ref - control).max()),
            "gguf_sha256": sha256(out / f"{name}.gguf"),
        }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def check(committed: Path) -> int:
    """Regenerate into a temp folder; compare values within tolerance. 0 = all match."""
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        write_all(fresh)
        old = json.loads((committed / "rope_init.json").read_text())
        new = json.loads((fresh / "rope_init.json").read_text())
        for name in new:
            if name not in old or not np.allclose(old[name]["inv_freq"], new[name]["inv_freq"],
                                                  rtol=1e-6, atol=0):
                print(f"MISMATCH rope_init.json {name}")
                bad += 1
        for name in MODELS:
            a, b = np.load(committed / f"{name}.npz"), np.load(fresh / f"{name}.npz")
            for key in b.files:
                if not np.allclose(a[key], b[key], atol=ATOL, rtol=RTOL):
                    print(f"MISMATCH {name}.npz {key}")
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
    manifest = write_all(args.out)
    for name, m in manifest["models"].items():
        print(f"{name}: max |scaled - unscaled| = {m['max_abs_diff_vs_unscaled']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
