"""Make the reference-logit fixtures in ``tests/fixtures/oracle/`` (method: reference/oracle.md).

Tiny stock ``transformers`` models (``LlamaForCausalLM``, ``Qwen2ForCausalLM``) get seeded random
weights; their logits on a fixed 12-id prompt are the references. The same weights are saved as an
HF checkpoint (safetensors + config.json, LLaDA's own OLMo-style names for llada) and converted to
GGUF under llama.cpp's conventions (and diffuse-cpp's ``diffuse`` convention for llada and dream).
Tests then need only numpy and the committed files.

    .venv-oracle/bin/python tools/make_oracle_fixtures.py            # write the fixtures
    .venv-oracle/bin/python tools/make_oracle_fixtures.py --check    # regenerate and compare

Needs the ``[oracle]`` extra (torch, transformers, safetensors) for the models; the conversion
(``llmnb.model.convert.convert_checkpoint``, the code behind ``llmnb convert``) needs only
numpy and gguf-py.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from llmnb.gguf.constants import GGMLType
from llmnb.model.config import DIFFUSION_ARCHS as _DIFFUSION
from llmnb.model.config import PERMUTED_ARCHS as _PERMUTED
from llmnb.model.convert import OUTTYPES
from llmnb.model.convert import convert_checkpoint

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "tests" / "fixtures" / "oracle"

# --- what every fixture shares (oracle.md §4) ---------------------------------------------------

PROMPT_IDS = [3, 17, 120, 42, 99, 7, 64, 127, 1, 88, 100, 31]  # includes the mask id 127
KEY_MASK = [0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]                # 0 = padded key (LLaDA padding case)
MASK_TOKEN_ID = 127
ATOL = RTOL = 1e-4
NEGATIVE_CONTROL = "causal_negative_control"
NEGATIVE_CONTROL_MIN_DIFF = 0.1
SHAPE = dict(vocab=128, hidden=32, layers=2, heads=4, ffn=64, ctx=64)


@dataclass(frozen=True)
class Family:
    """One tiny model: which stock class, its hyper-parameters, and how it is used."""

    name: str
    hf_class: str            # LlamaForCausalLM | Qwen2ForCausalLM
    arch: str                # GGUF architecture under llama.cpp's convention
    seed: int
    kv_heads: int
    eps: float
    theta: float
    tied: bool
    cases: tuple[str, ...]   # reference cases stored besides the negative control


FAMILIES = {f.name: f for f in [
    Family("llama", "LlamaForCausalLM", "llama", 10, 2, 1e-5, 500000.0, False,
           ("causal", "bidirectional")),
    Family("qwen2_tied", "Qwen2ForCausalLM", "qwen2", 11, 2, 1e-6, 1e6, True, ("causal",)),
    Family("llada", "LlamaForCausalLM", "llada", 12, 4, 1e-5, 500000.0, False,
           ("bidirectional", "bidirectional_key_padding")),
    Family("dream", "Qwen2ForCausalLM", "dream", 13, 2, 1e-6, 1e6, False,
           ("bidirectional", "bidirectional_shifted")),
]}

# What each case means, for the manifest (and for the engine test that will replay it).
CASES: dict[str, dict[str, Any]] = {
    "causal": {"attention": "causal", "key_mask": False, "shifted": False},
    "bidirectional": {"attention": "bidirectional", "key_mask": False, "shifted": False},
    "bidirectional_key_padding": {"attention": "bidirectional", "key_mask": True, "shifted": False},
    "bidirectional_shifted": {"attention": "bidirectional", "key_mask": False, "shifted": True},
    NEGATIVE_CONTROL: {"attention": "causal", "key_mask": False, "shifted": False},
}


@dataclass(frozen=True)
class Fixture:
    name: str
    family: str
    outtype: str             # f32 | f16
    convention: str          # llama.cpp | diffuse
    references: str         # the fixture whose .npz holds this one's reference logits


FIXTURES = [
    Fixture("llama_f32", "llama", "f32", "llama.cpp", "llama_f32"),
    Fixture("qwen2_tied_f32", "qwen2_tied", "f32", "llama.cpp", "qwen2_tied_f32"),
    Fixture("llada_f32", "llada", "f32", "llama.cpp", "llada_f32"),
    Fixture("dream_f32", "dream", "f32", "llama.cpp", "dream_f32"),
    Fixture("llama_f16", "llama", "f16", "llama.cpp", "llama_f16"),
    Fixture("dream_f16", "dream", "f16", "llama.cpp", "dream_f16"),
    # Same weights and references as llada_f32 / dream_f32, written the way diffuse-cpp does.
    Fixture("llada_diffuse_f32", "llada", "f32", "diffuse", "llada_f32"),
    Fixture("dream_diffuse_f32", "dream", "f32", "diffuse", "dream_f32"),
]


# ================================================================================================
# 1. Tiny stock models with seeded weights (torch)
# ================================================================================================

def build_model(fam: Family, outtype: str) -> Any:
    """The stock model of `fam`, every parameter overwritten from a seeded generator (oracle §4).

    Norm weights 1 + 0.2 N(0,1), biases 0.5 N(0,1), embeddings N(0,1), linear (out, in) weights
    1.5 N(0,1)/sqrt(in): logits of std 1.4-8, so a forgotten bias or permutation always shows.
    For f16, every 2-D weight is rounded to float16 and back before any reference is computed.
    """
    import transformers

    s = SHAPE
    common = dict(vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["ffn"],
                  num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                  num_key_value_heads=fam.kv_heads, max_position_embeddings=s["ctx"],
                  rms_norm_eps=fam.eps, rope_theta=fam.theta, tie_word_embeddings=fam.tied)
    if fam.hf_class == "LlamaForCausalLM":
        config = transformers.LlamaConfig(**common)
    else:
        config = transformers.Qwen2Config(**common)
    config.architectures = [fam.hf_class]
    model = getattr(transformers, fam.hf_class)._from_config(config, attn_implementation="eager")
    model.eval()
    seed_parameters(model, fam.seed, f16=outtype == "f16")
    if fam.tied and model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        raise RuntimeError("qwen2_tied: lm_head is not tied to embed_tokens")
    return model


def seed_parameters(model: Any, seed: int, f16: bool = False, norm_mean: float = 1.0) -> None:
    """Overwrite every parameter from a seeded generator (oracle §4): norm weights
    norm_mean + 0.2 N(0,1), biases 0.5 N(0,1), embeddings N(0,1), linear (out, in) weights
    1.5 N(0,1)/sqrt(in); with `f16`, 2-D weights rounded to float16 and back."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # a tied lm_head is listed once (as embed_tokens)
            z = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith(".bias"):
                value = 0.5 * z
            elif p.ndim == 1:
                value = norm_mean + 0.2 * z
            elif "embed_tokens" in name:
                value = z
            else:
                value = 1.5 * z / math.sqrt(p.shape[1])
            if f16 and p.ndim == 2:
                value = value.half().float()
            p.copy_(value)


def model_logits(model: Any, ids: list[int]) -> npt.NDArray[np.float32]:
    """A causal forward of `ids` (no mask argument): (len(ids), vocab) float32 logits."""
    import torch

    with torch.no_grad():
        out = model(torch.tensor([ids])).logits[0]
    return np.ascontiguousarray(out.float().numpy(), dtype=np.float32)


def convert_model(model: Any, out_path: Path, arch: str, name: str) -> None:
    """Save `model` as an HF checkpoint (safetensors + its config.json; a tied lm_head left
    out, as transformers saves it) in a temporary folder and convert it with llmnb's converter."""
    from safetensors.torch import save_file

    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp)
        state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()
                 if not (tied and k == "lm_head.weight")}
        save_file(state, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
        (ckpt / "config.json").write_text(model.config.to_json_string())
        convert_checkpoint(ckpt, out_path, arch=arch, name=name)


# ================================================================================================
# 2. Reference logits (oracle §5)
# ================================================================================================

def reference_logits(model: Any, fam: Family) -> dict[str, npt.NDArray[np.float32]]:
    """The cases of `fam` plus ``causal_negative_control``, each (12, vocab) float32.

    Bidirectional = an additive all-zero 4-D mask (works on transformers 4.46 and 5.x); key
    padding = float32 min in the padded key columns; Dream's shifted view is derived from the
    raw bidirectional logits, never from a modified model.
    """
    import torch

    ids = torch.tensor([PROMPT_IDS])
    n = len(PROMPT_IDS)

    def run(mask: Any = None) -> npt.NDArray[np.float32]:
        with torch.no_grad():
            out = model(ids, attention_mask=mask).logits[0]
        return np.ascontiguousarray(out.float().numpy(), dtype=np.float32)  # (12, vocab)

    zero = torch.zeros(1, 1, n, n)                                 # (B, 1, T, T), 0 = attend
    padded = zero.clone()
    padded[..., torch.tensor(KEY_MASK) == 0] = torch.finfo(torch.float32).min
    causal = run()
    bidirectional = run(zero)
    out: dict[str, npt.NDArray[np.float32]] = {}
    for case in fam.cases:
        if case == "causal":
            out[case] = causal
        elif case == "bidirectional":
            out[case] = bidirectional
        elif case == "bidirectional_key_padding":
            out[case] = run(padded)
        elif case == "bidirectional_shifted":
            out[case] = np.concatenate([bidirectional[:1], bidirectional[:-1]])
        else:
            raise ValueError(f"unknown case {case!r}")
    out[NEGATIVE_CONTROL] = causal
    return out


# ================================================================================================
# 3. The HF checkpoint on disk (safetensors + config.json)
# ================================================================================================

# HF Llama name -> LLaDA's OLMo-style name (oracle §3): ff_proj = gate, up_proj = up, ff_out = down.
_LLADA_BLOCK = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "q_proj", "self_attn.k_proj": "k_proj",
    "self_attn.v_proj": "v_proj", "self_attn.o_proj": "attn_out",
    "post_attention_layernorm": "ff_norm", "mlp.gate_proj": "ff_proj", "mlp.up_proj": "up_proj",
    "mlp.down_proj": "ff_out",
}


def llada_name(hf_name: str) -> str:
    """``model.layers.N.mlp.gate_proj.weight`` -> ``model.transformer.blocks.N.ff_proj.weight``."""
    top = {"model.embed_tokens.weight": "model.transformer.wte.weight",
           "model.norm.weight": "model.transformer.ln_f.weight",
           "lm_head.weight": "model.transformer.ff_out.weight"}
    if hf_name in top:
        return top[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)          # model, layers, N, <module>.<param>
    module, param = rest.rsplit(".", 1)
    return f"model.transformer.blocks.{layer}.{_LLADA_BLOCK[module]}.{param}"


def save_checkpoint(model: Any, fam: Family, out_dir: Path) -> None:
    """Write ``model.safetensors`` + ``config.json`` as the family's own checkpoints look.

    llama, qwen2_tied: transformers' config (5.x writes ``rope_parameters``); llada: OLMo-style
    names and LLaDA config keys; dream: Qwen2 names, Dream's config keys (top-level rope_theta).
    A tied state dict is saved without ``lm_head.weight`` (as transformers does).
    """
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()
             if not (fam.tied and k == "lm_head.weight")}
    s = SHAPE
    if fam.name == "llada":
        state = {llada_name(k): v for k, v in state.items()}
        config: dict[str, Any] = {
            "architectures": ["LLaDAModelLM"], "model_type": "llada", "activation_type": "silu",
            "d_model": s["hidden"], "n_layers": s["layers"], "n_heads": s["heads"],
            "n_kv_heads": fam.kv_heads, "mlp_hidden_size": s["ffn"],
            "max_sequence_length": s["ctx"], "vocab_size": s["vocab"],
            "embedding_size": s["vocab"], "layer_norm_type": "rms", "rms_norm_eps": fam.eps,
            "rope": True, "rope_theta": fam.theta, "include_bias": False,
            "include_qkv_bias": False, "weight_tying": False, "mask_token_id": MASK_TOKEN_ID,
        }
    elif fam.name == "dream":
        config = {
            "architectures": ["DreamModel"], "model_type": "Dream", "hidden_act": "silu",
            "hidden_size": s["hidden"], "num_hidden_layers": s["layers"],
            "num_attention_heads": s["heads"], "num_key_value_heads": fam.kv_heads,
            "intermediate_size": s["ffn"], "max_position_embeddings": s["ctx"],
            "vocab_size": s["vocab"], "rms_norm_eps": fam.eps, "rope_theta": fam.theta,
            "tie_word_embeddings": False, "mask_token_id": MASK_TOKEN_ID,
        }
    else:
        config = json.loads(model.config.to_json_string())
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


# ================================================================================================
# 4. HF checkpoint -> GGUF: the package's own converter (llmnb.model.convert, `llmnb convert`)
# ================================================================================================

_FILE_TYPE = OUTTYPES   # general.file_type: ALL_F32, MOSTLY_F16


# ================================================================================================
# 5. Writing the fixture set
# ================================================================================================

def write_npz(path: Path, arrays: dict[str, npt.NDArray[np.float32]]) -> None:
    """``np.savez`` with fixed zip timestamps, so equal arrays give byte-equal files."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for key in sorted(arrays):
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            with z.open(info, "w") as fh:
                np.lib.format.write_array(fh, np.ascontiguousarray(arrays[key]),
                                          allow_pickle=False)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def versions() -> dict[str, str]:
    import safetensors
    import torch
    import transformers
    from importlib.metadata import version
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "safetensors": safetensors.__version__, "gguf": version("gguf"),
            "numpy": np.__version__}


def expected_keys(fix: Fixture, fam: Family) -> dict[str, Any]:
    """The metadata a loader needs to run the fixture right, as the GGUF must state it."""
    if fix.convention == "diffuse":
        return {"general.architecture": "diffuse", "diffuse.model_type": fam.arch,
                "diffuse.mask_token_id": MASK_TOKEN_ID,
                "diffuse.attention.head_count_kv": fam.kv_heads}
    keys: dict[str, Any] = {"general.architecture": fam.arch,
                            "general.file_type": _FILE_TYPE[fix.outtype],
                            f"{fam.arch}.attention.head_count_kv": fam.kv_heads}
    if fam.arch in _DIFFUSION:
        keys.update({f"{fam.arch}.attention.causal": False,
                     "diffusion.shift_logits": fam.arch == "dream",
                     "tokenizer.ggml.mask_token_id": MASK_TOKEN_ID})
    return keys


def make_fixtures(out: Path, keep_checkpoints: Path | None = None) -> dict[str, Any]:
    """Build every model, write every ``.gguf``/``.npz`` and ``manifest.json`` into `out`."""
    import torch

    torch.set_num_threads(1)  # one summation order, whatever the machine
    out.mkdir(parents=True, exist_ok=True)
    manifest_fixtures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="oracle-ckpt-") as tmp:
        ckpt_root = keep_checkpoints or Path(tmp)
        refs: dict[str, dict[str, npt.NDArray[np.float32]]] = {}
        for fix in FIXTURES:
            fam = FAMILIES[fix.family]
            ckpt = ckpt_root / f"{fam.name}_{fix.outtype}"
            if fix.references == fix.name:
                model = build_model(fam, fix.outtype)
                refs[fix.name] = reference_logits(model, fam)
                write_npz(out / f"{fix.name}.npz", refs[fix.name])
                save_checkpoint(model, fam, ckpt)
            gguf_path = out / f"{fix.name}.gguf"
            convert_checkpoint(ckpt, gguf_path, fam.arch, fix.outtype, fix.convention,
                               name=f"llmnb-oracle-{fix.name}")
            diffusion = fam.arch in _DIFFUSION
            manifest_fixtures[fix.name] = {
                "gguf": gguf_path.name, "npz": f"{fix.references}.npz",
                "family": fam.name, "hf_class": fam.hf_class,
                "arch": "diffuse" if fix.convention == "diffuse" else fam.arch,
                "model_type": fam.arch, "convention": fix.convention, "outtype": fix.outtype,
                "seed": fam.seed, "qk_permuted": fix.convention == "llama.cpp"
                and fam.arch in _PERMUTED,
                "tied": fam.tied, "has_output_weight": not fam.tied,
                "config": {"vocab": SHAPE["vocab"], "hidden": SHAPE["hidden"],
                           "layers": SHAPE["layers"], "heads": SHAPE["heads"],
                           "kv_heads": fam.kv_heads, "head_dim": SHAPE["hidden"] // SHAPE["heads"],
                           "ffn": SHAPE["ffn"], "ctx": SHAPE["ctx"], "rms_eps": fam.eps,
                           "rope_theta": fam.theta},
                "cases": {c: CASES[c] for c in fam.cases},
                "causal": not diffusion, "shift_logits": fam.arch == "dream",
                "mask_token_id": MASK_TOKEN_ID if diffusion else None,
                "metadata": expected_keys(fix, fam),
                "sha256": sha256(gguf_path), "npz_sha256": sha256(out / f"{fix.references}.npz"),
                "bytes": gguf_path.stat().st_size,
            }
            print(f"  {fix.name:<18} {gguf_path.stat().st_size:>7} B  "
                  f"cases {', '.join(fam.cases)}", file=sys.stderr)
    manifest = {
        "about": "Reference logits for llmnb's forward passes; made by "
                 "tools/make_oracle_fixtures.py (method: oracle.md). Generated data.",
        "prompt_ids": PROMPT_IDS, "key_mask": KEY_MASK, "mask_token_id": MASK_TOKEN_ID,
        "tolerance": {"atol": ATOL, "rtol": RTOL},
        "negative_control": {"case": NEGATIVE_CONTROL, "min_max_abs_diff":
                             NEGATIVE_CONTROL_MIN_DIFF},
        "logits_shape": [len(PROMPT_IDS), SHAPE["vocab"]],
        "versions": versions(), "fixtures": manifest_fixtures,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


# ================================================================================================
# 6. --check: regenerate and compare within tolerance
# ================================================================================================

def _gguf_contents(path: Path) -> tuple[dict[str, Any], dict[str, npt.NDArray[np.float32]],
                                        dict[str, tuple[int, tuple[int, ...]]]]:
    from llmnb.gguf import open as open_gguf

    with open_gguf(path) as f:
        meta = {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                for k, v in f.metadata.items()}
        types = {n: (t.ggml_type, t.shape) for n, t in f.tensors.items()}
        data: dict[str, npt.NDArray[np.float32]] = {}
        for n, t in f.tensors.items():
            dt = np.float16 if t.ggml_type == GGMLType.F16 else np.float32
            data[n] = f.raw(n).view(dt).astype(np.float32).reshape(t.shape)
    return meta, data, types


def check(committed: Path) -> list[str]:
    """Regenerate into a temp folder; list every difference beyond tolerance (empty = pass)."""
    problems: list[str] = []
    old = json.loads((committed / "manifest.json").read_text())
    with tempfile.TemporaryDirectory(prefix="oracle-check-") as tmp:
        new = make_fixtures(Path(tmp))
        if sorted(old["fixtures"]) != sorted(new["fixtures"]):
            problems.append(f"fixture set: committed {sorted(old['fixtures'])}, "
                            f"regenerated {sorted(new['fixtures'])}")
        for key in ("prompt_ids", "key_mask", "mask_token_id", "tolerance", "logits_shape"):
            if old.get(key) != new[key]:
                problems.append(f"manifest {key}: committed {old.get(key)}, now {new[key]}")
        compared: set[str] = set()
        for name, nf in new["fixtures"].items():
            of = old["fixtures"].get(name)
            if of is None:
                continue
            skip = ("sha256", "npz_sha256", "bytes")
            for k in nf:
                if k not in skip and of.get(k) != nf[k]:
                    problems.append(f"{name}: manifest {k}: committed {of.get(k)}, now {nf[k]}")
            if of["sha256"] != nf["sha256"]:
                print(f"  {name}: GGUF not byte-identical; comparing values", file=sys.stderr)
            om, od, ot = _gguf_contents(committed / of["gguf"])
            nm, nd, nt = _gguf_contents(Path(tmp) / nf["gguf"])
            if om != nm:
                diff = sorted(k for k in set(om) | set(nm) if om.get(k) != nm.get(k))
                problems.append(f"{name}.gguf: metadata differs in {diff}")
            if ot != nt:
                problems.append(f"{name}.gguf: tensor names, types or shapes differ")
            for t in sorted(set(od) & set(nd)):
                if od[t].shape == nd[t].shape and not np.allclose(od[t], nd[t], ATOL, RTOL):
                    problems.append(f"{name}.gguf: tensor {t} differs by "
                                    f"{float(np.abs(od[t] - nd[t]).max()):.3g}")
            if of["npz"] in compared:
                continue  # a diffuse fixture shares its parent's references
            compared.add(of["npz"])
            with np.load(committed / of["npz"]) as a, np.load(Path(tmp) / nf["npz"]) as b:
                if sorted(a.files) != sorted(b.files):
                    problems.append(f"{of['npz']}: cases {sorted(a.files)} vs {sorted(b.files)}")
                for case in sorted(set(a.files) & set(b.files)):
                    ok = a[case].shape == b[case].shape and np.allclose(a[case], b[case],
                                                                         rtol=RTOL, atol=ATOL)
                    if not ok:
                        d = (float(np.abs(a[case] - b[case]).max())
                             if a[case].shape == b[case].shape else float("nan"))
                        problems.append(f"{of['npz']}: case {case} differs by {d:.3g}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="fixture folder "
                    "(default tests/fixtures/oracle)")
    ap.add_argument("--check", action="store_true", help="regenerate into a temp folder and "
                    "compare with the fixtures in --out within atol = rtol = 1e-4")
    ap.add_argument("--keep-checkpoints", type=Path, help="also keep the intermediate HF "
                    "checkpoints (safetensors + config.json) in this folder")
    args = ap.parse_args(argv)
    if args.check:
        problems = check(args.out)
        for p in problems:
            print(f"MISMATCH {p}", file=sys.stderr)
        print("check: " + ("OK, all fixtures reproduce within tolerance" if not problems
                           else f"{len(problems)} mismatches"), file=sys.stderr)
        return 1 if problems else 0
    manifest = make_fixtures(args.out, args.keep_checkpoints)
    total = sum((args.out / f).stat().st_size for f in os.listdir(args.out))
    print(f"wrote {len(manifest['fixtures'])} fixtures to {args.out} ({total} bytes)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
