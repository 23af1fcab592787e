"""The reference-logit fixtures (tests/fixtures/oracle) are what the manifest says they are.

The fixtures are made by ``tools/make_oracle_fixtures.py`` (method: reference/oracle.md); these
tests need only numpy and llmnb's GGUF reader. The expected tensor tables below are written out
from the fixture shape of oracle.md §4, not read from the manifest, so a converter slip shows.
The forward-pass comparison (engine logits vs the ``.npz``) belongs to the engine's tests.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

import llmnb.gguf
from llmnb.gguf import GGMLType

ORACLE = Path(__file__).parent / "fixtures" / "oracle"
MANIFEST: dict[str, Any] = json.loads((ORACLE / "manifest.json").read_text())
FIXTURES: dict[str, dict[str, Any]] = MANIFEST["fixtures"]
NAMES = sorted(FIXTURES)

# oracle.md §4: vocab 128, hidden 32, 2 layers, 4 heads of 8, FFN 64; KV heads 2 (LLaDA 4)
VOCAB, HIDDEN, LAYERS, HEADS, HEAD_DIM, FFN = 128, 32, 2, 4, 8, 64
KV_HEADS = {"llama": 2, "qwen2_tied": 2, "llada": 4, "dream": 2}
WITH_QKV_BIAS = {"qwen2_tied", "dream"}        # Qwen2 family: q/k/v biases, none on o_proj
TIED = {"qwen2_tied"}
PROMPT_IDS = [3, 17, 120, 42, 99, 7, 64, 127, 1, 88, 100, 31]
NEGATIVE_CONTROL = "causal_negative_control"


def expected_tensors(family: str) -> dict[str, tuple[int, ...]]:
    """GGUF name -> numpy-order shape for a fixture of `family` (llama.cpp names)."""
    kv = KV_HEADS[family] * HEAD_DIM
    t: dict[str, tuple[int, ...]] = {"token_embd.weight": (VOCAB, HIDDEN),
                                     "output_norm.weight": (HIDDEN,)}
    if family not in TIED:
        t["output.weight"] = (VOCAB, HIDDEN)
    for i in range(LAYERS):
        b = f"blk.{i}."
        t.update({b + "attn_norm.weight": (HIDDEN,), b + "attn_q.weight": (HIDDEN, HIDDEN),
                  b + "attn_k.weight": (kv, HIDDEN), b + "attn_v.weight": (kv, HIDDEN),
                  b + "attn_output.weight": (HIDDEN, HIDDEN), b + "ffn_norm.weight": (HIDDEN,),
                  b + "ffn_gate.weight": (FFN, HIDDEN), b + "ffn_up.weight": (FFN, HIDDEN),
                  b + "ffn_down.weight": (HIDDEN, FFN)})
        if family in WITH_QKV_BIAS:
            t.update({b + "attn_q.bias": (HIDDEN,), b + "attn_k.bias": (kv,),
                      b + "attn_v.bias": (kv,)})
    return t


def tensors(path: Path) -> dict[str, npt.NDArray[np.float32]]:
    """Every tensor of an F32/F16 GGUF as float32, in numpy shape."""
    out: dict[str, npt.NDArray[np.float32]] = {}
    with llmnb.gguf.open(path) as f:
        for name, info in f.tensors.items():
            dtype = {GGMLType.F32: np.float32, GGMLType.F16: np.float16}[info.ggml_type]
            out[name] = f.raw(name).view(dtype).astype(np.float32).reshape(info.shape)
    return out


def references(name: str) -> dict[str, npt.NDArray[np.float32]]:
    with np.load(ORACLE / FIXTURES[name]["npz"]) as z:
        return {k: z[k] for k in z.files}


def semantics(md: dict[str, Any]) -> tuple[str, bool, bool, int | None]:
    """(model type, causal, shift_logits, mask id) as a loader derives them (oracle.md §6.2,
    diffuse-cpp.md §2.3): llama.cpp keys with their defaults, or diffuse's model_type."""
    arch = str(md["general.architecture"])
    if arch == "diffuse":
        kind = str(md.get("diffuse.model_type", "llada"))
        return kind, False, kind == "dream", md.get("diffuse.mask_token_id")
    causal = bool(md.get(f"{arch}.attention.causal", True))
    shift = bool(md.get("diffusion.shift_logits", arch == "dream"))
    return arch, causal, shift, md.get("tokenizer.ggml.mask_token_id")


def test_manifest_lists_every_fixture_file_and_nothing_else() -> None:
    listed = {"manifest.json", "README.md"}
    for fx in FIXTURES.values():
        listed |= {fx["gguf"], fx["npz"]}
    on_disk = {p.name for p in ORACLE.iterdir()}
    assert on_disk == listed
    assert {"llama_f32", "qwen2_tied_f32", "llada_f32", "dream_f32"} <= set(FIXTURES)


def test_fixture_set_stays_small() -> None:
    total = sum(p.stat().st_size for p in ORACLE.iterdir())
    assert total < 1_200_000, f"fixtures take {total} bytes"


@pytest.mark.parametrize("name", NAMES)
def test_gguf_and_npz_sha256_match_manifest(name: str) -> None:
    fx = FIXTURES[name]
    assert hashlib.sha256((ORACLE / fx["gguf"]).read_bytes()).hexdigest() == fx["sha256"]
    assert hashlib.sha256((ORACLE / fx["npz"]).read_bytes()).hexdigest() == fx["npz_sha256"]


@pytest.mark.parametrize("name", NAMES)
def test_gguf_metadata_gives_arch_causal_shift_and_mask_id_of_manifest(name: str) -> None:
    fx = FIXTURES[name]
    with llmnb.gguf.open(ORACLE / fx["gguf"]) as f:
        md = f.metadata
        assert f.architecture == fx["arch"]
    for key, value in fx["metadata"].items():
        assert md.get(key) == value, key
    assert semantics(md) == (fx["model_type"], fx["causal"], fx["shift_logits"],
                             fx["mask_token_id"])
    diffusion = fx["model_type"] in ("llada", "dream")
    assert fx["causal"] is not diffusion
    assert fx["mask_token_id"] == (127 if diffusion else None)
    if fx["convention"] == "llama.cpp" and diffusion:  # written explicitly, not left to defaults
        arch = fx["arch"]
        assert md[f"{arch}.attention.causal"] is False
        assert md["diffusion.shift_logits"] is (arch == "dream")


@pytest.mark.parametrize("name", NAMES)
def test_gguf_hyperparameters_are_the_fixture_shape(name: str) -> None:
    fx = FIXTURES[name]
    with llmnb.gguf.open(ORACLE / fx["gguf"]) as f:
        md = f.metadata
    p = fx["arch"] + "."
    family = fx["family"]
    assert (md[p + "embedding_length"], md[p + "block_count"], md[p + "attention.head_count"],
            md[p + "attention.head_count_kv"], md[p + "feed_forward_length"],
            md[p + "vocab_size"]) == (HIDDEN, LAYERS, HEADS, KV_HEADS[family], FFN, VOCAB)
    theta, eps = (500000.0, 1e-5) if family in ("llama", "llada") else (1e6, 1e-6)
    assert md[p + "rope.freq_base"] == pytest.approx(theta)
    assert md[p + "attention.layer_norm_rms_epsilon"] == pytest.approx(eps)


@pytest.mark.parametrize("name", NAMES)
def test_gguf_tensor_names_shapes_and_types(name: str) -> None:
    fx = FIXTURES[name]
    with llmnb.gguf.open(ORACLE / fx["gguf"]) as f:
        got = {n: (t.shape, t.ggml_type) for n, t in f.tensors.items()}
    want = expected_tensors(fx["family"])
    assert {n: s for n, (s, _) in got.items()} == want
    for n, (shape, ggml_type) in got.items():
        f16 = fx["outtype"] == "f16" and len(shape) == 2   # 1-D norms and biases stay F32
        assert ggml_type == (GGMLType.F16 if f16 else GGMLType.F32), n
    assert ("output.weight" in got) is fx["has_output_weight"]


@pytest.mark.parametrize("name", NAMES)
def test_vocabulary_is_synthetic_for_llama_cpp_and_absent_for_diffuse(name: str) -> None:
    fx = FIXTURES[name]
    with llmnb.gguf.open(ORACLE / fx["gguf"]) as f:
        md = f.metadata
    if fx["convention"] == "diffuse":
        assert not [k for k in md if k.startswith("tokenizer.")]
    else:
        assert md["tokenizer.ggml.model"] == "llama"
        assert md["tokenizer.ggml.tokens"] == [f"<tok{i}>" for i in range(VOCAB)]


@pytest.mark.parametrize("name", NAMES)
def test_npz_holds_every_case_as_12_by_128_float32(name: str) -> None:
    fx = FIXTURES[name]
    refs = references(name)
    assert set(refs) == set(fx["cases"]) | {NEGATIVE_CONTROL}
    assert MANIFEST["prompt_ids"] == PROMPT_IDS
    for case, logits in refs.items():
        assert logits.shape == (len(PROMPT_IDS), VOCAB), case
        assert logits.dtype == np.float32, case
        assert np.isfinite(logits).all(), case
        assert float(logits.std()) > 1.0, case  # oracle.md §4: logit std 1.4-8


@pytest.mark.parametrize("name", NAMES)
def test_bidirectional_cases_differ_from_causal_negative_control(name: str) -> None:
    fx = FIXTURES[name]
    refs = references(name)
    min_diff = MANIFEST["negative_control"]["min_max_abs_diff"]
    bidirectional = [c for c, spec in fx["cases"].items() if spec["attention"] == "bidirectional"]
    assert bidirectional or fx["causal"]
    for case in bidirectional:
        assert float(np.abs(refs[case] - refs[NEGATIVE_CONTROL]).max()) > min_diff, case
    if "causal" in refs:
        np.testing.assert_array_equal(refs["causal"], refs[NEGATIVE_CONTROL])


def test_llada_key_padding_changes_the_logits() -> None:
    refs = references("llada_f32")
    assert MANIFEST["key_mask"] == [0, 0] + [1] * 10
    diff = np.abs(refs["bidirectional_key_padding"] - refs["bidirectional"]).max()
    assert float(diff) > 0.1


@pytest.mark.parametrize("name", [n for n in NAMES if FIXTURES[n]["model_type"] == "dream"])
def test_dream_shifted_case_is_raw_shifted_by_one(name: str) -> None:
    refs = references(name)
    raw = refs["bidirectional"]
    np.testing.assert_array_equal(refs["bidirectional_shifted"],
                                  np.concatenate([raw[:1], raw[:-1]]))


@pytest.mark.parametrize("f16, f32", [("llama_f16", "llama_f32"), ("dream_f16", "dream_f32")])
def test_f16_fixture_holds_the_f32_weights_rounded(f16: str, f32: str) -> None:
    a, b = tensors(ORACLE / FIXTURES[f16]["gguf"]), tensors(ORACLE / FIXTURES[f32]["gguf"])
    assert a.keys() == b.keys()
    for n in a:
        want = b[n].astype(np.float16).astype(np.float32) if b[n].ndim == 2 else b[n]
        np.testing.assert_array_equal(a[n], want, err_msg=n)
    # the f16 references were computed on the rounded weights: close to f32, but not equal
    ra, rb = references(f16), references(f32)
    d = max(float(np.abs(ra[c] - rb[c]).max()) for c in ra)
    assert 1e-5 < d < 0.5


@pytest.mark.parametrize("diffuse, llama_cpp, permuted",
                         [("llada_diffuse_f32", "llada_f32", True),
                          ("dream_diffuse_f32", "dream_f32", False)])
def test_diffuse_and_llama_cpp_files_differ_only_by_the_qk_permutation(
        diffuse: str, llama_cpp: str, permuted: bool) -> None:
    """llama.cpp permutes Q/K rows of llama/llada per head into ggml's interleaved (NORM)
    layout; diffuse-cpp keeps HF's half-split layout (oracle.md §6.1)."""
    a = tensors(ORACLE / FIXTURES[diffuse]["gguf"])
    b = tensors(ORACLE / FIXTURES[llama_cpp]["gguf"])
    assert FIXTURES[llama_cpp]["qk_permuted"] is permuted
    assert FIXTURES[diffuse]["qk_permuted"] is False
    assert a.keys() == b.keys()
    kv = KV_HEADS[FIXTURES[diffuse]["family"]]
    for n in a:
        want = a[n]
        if permuted and (".attn_q." in n or ".attn_k." in n):
            heads = HEADS if ".attn_q." in n else kv
            # new row h*d + 2i + j = old row h*d + j*d/2 + i
            want = want.reshape(heads, 2, HEAD_DIM // 2, *want.shape[1:]).swapaxes(1, 2)
            want = want.reshape(a[n].shape)
            assert not np.array_equal(want, a[n]), n
        np.testing.assert_array_equal(b[n], want, err_msg=n)
