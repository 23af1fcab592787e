"""Record llama.cpp's greedy token ids and perplexities: the reference outputs for llmnb's engine.

Greedy ids (DESIGN.md "Verification"): for each model, an all-F32 copy of its GGUF (written by
``llmnb quantize NAME OUT F32``) is run through a local ``libllama.so`` via ctypes with flash
attention off and an F32 K/V cache, one sequence at a time: the prompt is decoded in one
batch, then one token per decode, and the next token is the argmax of the last logits (the
loop of a KV-cached engine). Each step also records the top-2 logit margin, so a test can tell
a near tie from a real disagreement. The same prompts are then run on the original quantized
file with llama.cpp's default context settings, to record how far its ids follow the F32 run.

Quantized references (the oracle of llmnb's integer path, whose Q8 activations are
llama.cpp's): the same prompts on the original quantized file, F32 K/V cache, flash attention
off, default model parameters (llama.cpp may repack weights); per step the chosen id, top-2
margin, runner-up and the 16 best (id, logit) pairs. Each prompt is run again with 1 thread,
without repacking (when the default load repacked), and with the default context.

Perplexity: the ``llama-perplexity`` binary on ``data/text/persuasion.txt`` (its rule:
non-overlapping chunks of n_ctx tokens, the second half of each chunk scored;
reference/peers.md §11), for SmolLM2 on the F32 copy and on the original Q4_1 file.

    python tools/make_llamacpp_references.py --lib /work/llama.cpp/build/bin/libllama.so

Writes ``tests/fixtures/llamacpp/{greedy,quantized}_{smollm2,qwen2,gemma3}.json`` and
``perplexity_smollm2.json``.
Needs a llama.cpp build (libllama.so and llama-perplexity side by side; ``--lib`` or
``$LLAMA_CPP_LIB``), llmnb with the models pulled, and ~3 GB in ``--f32-dir`` for the copies.
CI never runs this; the JSON it writes is committed.
"""
from __future__ import annotations

import argparse
import ctypes as C
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "tests" / "fixtures" / "llamacpp"
TEXT = ROOT / "data" / "text" / "persuasion.txt"

N_NEW = 48          # greedy tokens per prompt (fewer if an end-of-generation token comes)
N_CTX = 1024        # context of the greedy runs: prompt + 48 new tokens fit with room to spare
N_THREADS = 2

GGML_TYPE_F32 = 0
LLAMA_FLASH_ATTN_TYPE_DISABLED = 0

# (hub name, fixture key, chat format, default system prompt of the model: "" for none)
MODELS: list[tuple[str, str, str, str]] = [
    ("smollm2-135m", "smollm2", "chatml",
     "You are a helpful AI assistant named SmolLM, trained by Hugging Face"),
    ("qwen2.5-coder-0.5b", "qwen2", "chatml",
     "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."),
    ("gemma3-270m", "gemma3", "gemma", ""),
]

# Plain prompts are fed as text; chat prompts are user turns rendered as ChatML.
PLAIN_PROMPTS: list[str] = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived",
    "def fibonacci(n):\n",
    "The three laws of thermodynamics are",
]
CHAT_PROMPTS: list[str] = [
    "What is the capital of France?",
    "Write a Python function that reverses a string.",
    "Explain in two sentences why the sky is blue.",
]


def chatml(system: str, user: str) -> str:
    """One system and one user turn in ChatML, ending where the assistant's reply begins."""
    return (f"<|im_start|>system\n{system}<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n"
            f"<|im_start|>assistant\n")


def gemma(system: str, user: str) -> str:
    """One user turn in Gemma's turn format (its template's layout; no system turn, the BOS
    comes from the tokenizer), ending where the model's reply begins."""
    del system
    return f"<start_of_turn>user\n{user}<end_of_turn>\n<start_of_turn>model\n"


CHAT_FORMATS = {
    "chatml": (chatml, "ChatML, rendered as text: <|im_start|>system\\n{system}<|im_end|>\\n"
                       "<|im_start|>user\\n{user}<|im_end|>\\n<|im_start|>assistant\\n"),
    "gemma": (gemma, "Gemma's turn format, rendered as text (the GGUF has no template): "
                     "<start_of_turn>user\\n{user}<end_of_turn>\\n<start_of_turn>model\\n, "
                     "BOS added by the tokenizer"),
}


# ---------------------------------------------------------------------------------------------
# ctypes view of llama.h (the fields of this llama.cpp version, in declaration order)
# ---------------------------------------------------------------------------------------------

class LlamaModelParams(C.Structure):
    _fields_ = [
        ("devices", C.c_void_p), ("tensor_buft_overrides", C.c_void_p),
        ("n_gpu_layers", C.c_int32), ("split_mode", C.c_int), ("load_mode", C.c_int),
        ("lazy_mode", C.c_int), ("main_gpu", C.c_int32), ("tensor_split", C.c_void_p),
        ("progress_callback", C.c_void_p), ("progress_callback_user_data", C.c_void_p),
        ("kv_overrides", C.c_void_p),
        ("vocab_only", C.c_bool), ("check_tensors", C.c_bool), ("use_extra_bufts", C.c_bool),
        ("no_host", C.c_bool), ("no_alloc", C.c_bool), ("load_mtp", C.c_bool),
    ]


class LlamaContextParams(C.Structure):
    _fields_ = [
        ("n_ctx", C.c_uint32), ("n_batch", C.c_uint32), ("n_ubatch", C.c_uint32),
        ("n_seq_max", C.c_uint32), ("n_rs_seq", C.c_uint32), ("n_outputs_max", C.c_uint32),
        ("n_outputs_max_per_seq", C.c_uint32), ("n_threads", C.c_int32),
        ("n_threads_batch", C.c_int32),
        ("ctx_type", C.c_int), ("rope_scaling_type", C.c_int), ("pooling_type", C.c_int),
        ("attention_type", C.c_int), ("flash_attn_type", C.c_int),
        ("rope_freq_base", C.c_float), ("rope_freq_scale", C.c_float),
        ("yarn_ext_factor", C.c_float), ("yarn_attn_factor", C.c_float),
        ("yarn_beta_fast", C.c_float), ("yarn_beta_slow", C.c_float),
        ("yarn_orig_ctx", C.c_uint32), ("defrag_thold", C.c_float),
        ("cb_eval", C.c_void_p), ("cb_eval_user_data", C.c_void_p),
        ("type_k", C.c_int), ("type_v", C.c_int),
        ("abort_callback", C.c_void_p), ("abort_callback_data", C.c_void_p),
        ("embeddings", C.c_bool), ("offload_kqv", C.c_bool), ("no_perf", C.c_bool),
        ("op_offload", C.c_bool), ("swa_full", C.c_bool), ("kv_unified", C.c_bool),
        ("samplers", C.c_void_p), ("n_samplers", C.c_size_t), ("ctx_other", C.c_void_p),
    ]


class LlamaBatch(C.Structure):
    _fields_ = [
        ("n_tokens", C.c_int32), ("token", C.POINTER(C.c_int32)), ("embd", C.POINTER(C.c_float)),
        ("pos", C.POINTER(C.c_int32)), ("n_seq_id", C.POINTER(C.c_int32)),
        ("seq_id", C.POINTER(C.POINTER(C.c_int32))), ("logits", C.POINTER(C.c_int8)),
    ]


LOG_CALLBACK = C.CFUNCTYPE(None, C.c_int, C.c_char_p, C.c_void_p)


def load_library(path: str) -> C.CDLL:
    """libllama.so with the signatures this tool calls."""
    lib = C.CDLL(path)
    sig: dict[str, tuple[Any, list[Any]]] = {
        "llama_backend_init": (None, []),
        "llama_version": (C.c_char_p, []),
        "llama_print_system_info": (C.c_char_p, []),
        "llama_log_set": (None, [LOG_CALLBACK, C.c_void_p]),
        "llama_model_default_params": (LlamaModelParams, []),
        "llama_context_default_params": (LlamaContextParams, []),
        "llama_model_load_from_file": (C.c_void_p, [C.c_char_p, LlamaModelParams]),
        "llama_model_free": (None, [C.c_void_p]),
        "llama_init_from_model": (C.c_void_p, [C.c_void_p, LlamaContextParams]),
        "llama_free": (None, [C.c_void_p]),
        "llama_model_get_vocab": (C.c_void_p, [C.c_void_p]),
        "llama_vocab_n_tokens": (C.c_int32, [C.c_void_p]),
        "llama_vocab_is_eog": (C.c_bool, [C.c_void_p, C.c_int32]),
        "llama_vocab_get_add_bos": (C.c_bool, [C.c_void_p]),
        "llama_tokenize": (C.c_int32, [C.c_void_p, C.c_char_p, C.c_int32, C.POINTER(C.c_int32),
                                       C.c_int32, C.c_bool, C.c_bool]),
        "llama_token_to_piece": (C.c_int32, [C.c_void_p, C.c_int32, C.c_char_p, C.c_int32,
                                             C.c_int32, C.c_bool]),
        "llama_batch_get_one": (LlamaBatch, [C.POINTER(C.c_int32), C.c_int32]),
        "llama_decode": (C.c_int32, [C.c_void_p, LlamaBatch]),
        "llama_get_logits_ith": (C.POINTER(C.c_float), [C.c_void_p, C.c_int32]),
    }
    for name, (restype, argtypes) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


# llama.cpp's log, kept rather than printed, so a run can read its own model-load report.
# The callback object stays referenced here: llama.cpp holds the pointer.
LOG: list[str] = []
_log = LOG_CALLBACK(lambda level, text, user: LOG.append(text.decode("utf-8", "replace")))


def tokenize(lib: C.CDLL, vocab: int, text: str, parse_special: bool) -> list[int]:
    """llama.cpp's ids for text, with the model's BOS added if its GGUF asks for one."""
    raw = text.encode("utf-8")
    buf = (C.c_int32 * (len(raw) + 8))()
    n = lib.llama_tokenize(vocab, raw, len(raw), buf, len(buf), True, parse_special)
    if n < 0:
        raise RuntimeError(f"llama_tokenize failed ({n}) on {text!r}")
    return list(buf[:n])


def piece(lib: C.CDLL, vocab: int, token: int) -> bytes:
    buf = C.create_string_buffer(256)
    n = lib.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
    return buf.raw[:max(n, 0)]


def context_params(lib: C.CDLL, exact: bool) -> LlamaContextParams:
    """exact: flash attention off, F32 K and V; otherwise llama.cpp's defaults.
    Both: context N_CTX, one sequence, N_THREADS threads, the whole prompt in one ubatch."""
    p: LlamaContextParams = lib.llama_context_default_params()
    p.n_ctx, p.n_seq_max = N_CTX, 1
    p.n_threads = p.n_threads_batch = N_THREADS
    if exact:
        p.n_batch = p.n_ubatch = N_CTX
        p.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED
        p.type_k = p.type_v = GGML_TYPE_F32
    return p


def settings_of(p: LlamaContextParams) -> dict[str, Any]:
    keys = ["n_ctx", "n_batch", "n_ubatch", "n_seq_max", "n_threads", "n_threads_batch",
            "flash_attn_type", "type_k", "type_v", "offload_kqv", "op_offload", "kv_unified"]
    return {k: getattr(p, k) for k in keys}


def greedy_run(lib: C.CDLL, model: int, prompt_ids: list[int], p: LlamaContextParams,
               n_vocab: int, top_k: int = 0, keep_logits: bool = False) -> dict[str, Any]:
    """Decode the prompt in one batch, then one token at a time, taking the argmax each step.

    top_k > 0 also records each step's k best (id, logit) pairs, logits rounded to 1e-4
    (``top_ids``, ``top_logits``); keep_logits keeps every step's whole logit vector
    (``logits``, for comparisons inside this tool; never written)."""
    vocab = lib.llama_model_get_vocab(model)
    ctx = lib.llama_init_from_model(model, p)          # a fresh context: one sequence at a time
    if not ctx:
        raise RuntimeError("llama_init_from_model failed")
    new_ids: list[int] = []
    margins: list[float] = []
    runner_up: list[int] = []
    top_ids: list[list[int]] = []
    top_logits: list[list[float]] = []
    kept: list[np.ndarray] = []
    stop = "max_new_tokens"
    try:
        feed = (C.c_int32 * len(prompt_ids))(*prompt_ids)
        n_feed = len(prompt_ids)
        for _ in range(N_NEW):
            # llama_batch_get_one: positions follow the cache, logits for the last token only.
            rc = lib.llama_decode(ctx, lib.llama_batch_get_one(feed, n_feed))
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
            top = np.argsort(-logits, kind="stable")[:max(2, top_k)]   # ties to the lower id
            token = int(top[0])
            if top_k:
                top_ids.append([int(i) for i in top[:top_k]])
                top_logits.append([round(float(logits[i]), 4) for i in top[:top_k]])
            if keep_logits:
                kept.append(logits.copy())
            new_ids.append(token)
            margins.append(float(logits[top[0]] - logits[top[1]]))
            runner_up.append(int(top[1]))
            if lib.llama_vocab_is_eog(vocab, token):
                stop = "end_of_generation_token"
                break
            feed = (C.c_int32 * 1)(token)
            n_feed = 1
    finally:
        lib.llama_free(ctx)
    text = b"".join(piece(lib, vocab, t) for t in new_ids).decode("utf-8", errors="replace")
    run: dict[str, Any] = {"new_ids": new_ids, "stop_reason": stop, "top2_margin": margins,
                           "runner_up_ids": runner_up, "new_text": text}
    if top_k:
        run.update({"top_ids": top_ids, "top_logits": top_logits})
    if keep_logits:
        run["logits"] = kept
    return run


def load_model(lib: C.CDLL, path: Path, extra_bufts: bool = True) -> tuple[int, list[str]]:
    """A model on the CPU with llama.cpp's default model parameters (repacking allowed unless
    extra_bufts is False), and the lines of its load report that say where the weights went
    ('CPU_REPACK model buffer size = ...' when llama.cpp rearranged some of them)."""
    mparams = lib.llama_model_default_params()
    mparams.n_gpu_layers = 0
    mparams.use_extra_bufts = extra_bufts
    LOG.clear()
    model = lib.llama_model_load_from_file(str(path).encode(), mparams)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    lines = "".join(LOG).splitlines()
    return model, [re.sub(r"\s+", " ", ln.split(":", 1)[1]).strip()
                   for ln in lines if "model buffer size" in ln]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def llmnb_bin() -> str:
    return str(Path(sys.executable).with_name("llmnb"))


def f32_copy(hub_name: str, f32_dir: Path) -> tuple[Path, list[str]]:
    """The all-F32 copy of a hub model, made with llmnb quantize if it is not there yet."""
    out = f32_dir / f"{hub_name}-F32.gguf"
    cmd = ["llmnb", "quantize", hub_name, str(out), "F32"]
    if not out.exists():
        subprocess.run([llmnb_bin(), *cmd[1:]], check=True)
    return out, cmd


def llamacpp_version(bin_dir: Path) -> str:
    """'version: X (build N, commit C)' as printed by the build's own binaries."""
    out = subprocess.run([str(bin_dir / "llama-perplexity"), "--version"],
                         capture_output=True, text=True).stderr
    return next(line for line in out.splitlines() if line.startswith("version:"))


def git_head() -> str:
    r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                       text=True)
    return r.stdout.strip()


# ---------------------------------------------------------------------------------------------
# Greedy references
# ---------------------------------------------------------------------------------------------

def prompts_of(chat_format: str, system: str) -> list[tuple[str, str, str, bool]]:
    """(kind, user text, prompt text, parse_special) of the 7 prompts, in fixture order."""
    render = CHAT_FORMATS[chat_format][0]
    return ([("plain", t, t, False) for t in PLAIN_PROMPTS]
            + [("chat", u, render(system, u), True) for u in CHAT_PROMPTS])


def greedy_fixture(lib: C.CDLL, hub_name: str, key: str, chat_format: str, system: str,
                   f32_dir: Path, version: str, thread_check: bool) -> dict[str, Any]:
    import llmnb.hub as hub

    original = Path(hub.path(hub_name))
    f32, f32_cmd = f32_copy(hub_name, f32_dir)
    exact_p, default_p = context_params(lib, exact=True), context_params(lib, exact=False)

    cases: list[dict[str, Any]] = []
    model, _ = load_model(lib, f32)
    vocab = lib.llama_model_get_vocab(model)
    n_vocab = lib.llama_vocab_n_tokens(vocab)
    add_bos = bool(lib.llama_vocab_get_add_bos(vocab))
    chat_description = CHAT_FORMATS[chat_format][1]
    for kind, user, text, parse_special in prompts_of(chat_format, system):
        ids = tokenize(lib, vocab, text, parse_special)
        t0 = time.perf_counter()
        run = greedy_run(lib, model, ids, exact_p, n_vocab)
        same_1t = None
        if thread_check:   # the same ids with 1 thread as with N_THREADS?
            one = greedy_run(lib, model, ids, _with_threads(exact_p, 1), n_vocab)
            same_1t = one["new_ids"] == run["new_ids"]
        print(f"  {key} {kind:<5} {len(ids):>3} prompt ids -> {len(run['new_ids'])} new "
              f"({run['stop_reason']}), min margin {min(run['top2_margin']):.4f}, "
              f"{time.perf_counter() - t0:.1f}s", flush=True)
        cases.append({"kind": kind, "user_text": user if kind == "chat" else None,
                      "prompt_text": text, "parse_special": parse_special,
                      "prompt_ids": ids, **run,
                      "same_ids_with_1_thread": same_1t})
    lib.llama_model_free(model)

    model, _ = load_model(lib, original)
    for case in cases:
        q = greedy_run(lib, model, case["prompt_ids"], default_p, n_vocab)
        agree = 0
        for a, b in zip(q["new_ids"], case["new_ids"]):
            if a != b:
                break
            agree += 1
        case["quantized_default"] = {"new_ids": q["new_ids"], "stop_reason": q["stop_reason"],
                                     "new_text": q["new_text"], "agree_with_f32_prefix": agree}
        print(f"  {key} quantized default: agrees for {agree} of {len(case['new_ids'])} "
              "tokens", flush=True)
    lib.llama_model_free(model)

    return {
        "what": "llama.cpp greedy (argmax) token ids on an all-F32 copy of the GGUF; reference "
                "for llmnb's autoregressive engine (DESIGN.md 'Verification')",
        "model": hub_name,
        "original_file": original.name,
        "original_sha256": sha256(original),
        "f32_copy": {"made_with": " ".join(f32_cmd), "repo_commit_when_recorded": git_head(),
                     "note": "every tensor dequantized to F32 by llmnb, metadata copied, written "
                             "with gguf-py", "sha256": sha256(f32), "bytes": f32.stat().st_size},
        "llama_cpp": {"version": version,
                      "llama_version": lib.llama_version().decode(),
                      "system_info": lib.llama_print_system_info().decode().strip()},
        "settings": {
            "f32_run": settings_of(exact_p),
            "quantized_default_run": settings_of(default_p),
            "enum_values": "flash_attn_type: -1 auto, 0 disabled, 1 enabled; type_k/type_v: "
                           "ggml_type (0 F32, 1 F16)",
            "model_params": "llama_model_default_params() with n_gpu_layers = 0 (mmap, repack "
                            "buffers allowed: llama.cpp's defaults)",
            "decode_loop": "fresh context per prompt; llama_decode(llama_batch_get_one(prompt)) "
                           "once, then one token per llama_decode; next token = argmax of "
                           "llama_get_logits_ith(ctx, -1), ties to the lower id",
            "tokenize": "llama_tokenize(add_special=true, parse_special=<per prompt>); "
                        f"this vocabulary adds BOS: {add_bos}",
            "n_new_max": N_NEW,
            "stop": "after an end-of-generation token (llama_vocab_is_eog), which is included "
                    "as the last new id",
            "top2_margin": "logit of the chosen token minus the second-highest logit, per step "
                           "(float32 logits, difference in float64)",
            "chat_template": chat_description,
            "system_prompt": system or None,
        },
        "n_vocab": n_vocab,
        "cases": cases,
    }


def _with_threads(p: LlamaContextParams, n: int) -> LlamaContextParams:
    q = LlamaContextParams.from_buffer_copy(p)
    q.n_threads = q.n_threads_batch = n
    return q


# ---------------------------------------------------------------------------------------------
# Quantized references: llama.cpp on the original file, the oracle of llmnb's integer path
# ---------------------------------------------------------------------------------------------

TOP_K = 16


def prefix_agreement(a: list[int], b: list[int]) -> int:
    """How many leading ids a and b share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def compare_runs(ref: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """other's ids against ref's, and the largest |logit difference| over the whole vocabulary
    at every step where both runs had been fed the same tokens (both kept their logits)."""
    agree = prefix_agreement(ref["new_ids"], other["new_ids"])
    same_fed = min(agree + 1, len(ref["logits"]), len(other["logits"]))
    diffs = [float(np.max(np.abs(ref["logits"][i] - other["logits"][i]))) for i in range(same_fed)]
    return {"new_ids": other["new_ids"], "same_ids": other["new_ids"] == ref["new_ids"],
            "agree_prefix": agree, "steps_compared": same_fed, "max_abs_logit_diff": max(diffs),
            "max_abs_logit_diff_per_step": [round(d, 4) for d in diffs]}


def tensor_types(path: Path) -> dict[str, int]:
    """How many tensors of each GGML type the file holds (llmnb's GGUF reader)."""
    import llmnb.gguf

    counts: dict[str, int] = {}
    with llmnb.gguf.open(path) as f:
        for info in f.tensors.values():
            counts[info.type_name] = counts.get(info.type_name, 0) + 1
    return dict(sorted(counts.items()))


def quantized_fixture(lib: C.CDLL, hub_name: str, key: str, chat_format: str, system: str,
                      version: str) -> dict[str, Any]:
    import llmnb.hub as hub

    original = Path(hub.path(hub_name))
    types, digest = tensor_types(original), sha256(original)
    f32_fixture = json.loads((OUT_DIR / f"greedy_{key}.json").read_text())
    exact_p, default_p = context_params(lib, exact=True), context_params(lib, exact=False)
    one_p = _with_threads(exact_p, 1)

    model, buffers = load_model(lib, original)
    repacked = any("REPACK" in b for b in buffers)
    print(f"  {key}: {original.name} {types}; {'; '.join(buffers)}", flush=True)
    vocab = lib.llama_model_get_vocab(model)
    n_vocab = lib.llama_vocab_n_tokens(vocab)
    cases: list[dict[str, Any]] = []
    exact_logits: list[list[np.ndarray]] = []   # per case, per step: kept for the no-repack runs
    for index, (kind, user, text, parse_special) in enumerate(prompts_of(chat_format, system)):
        ids = tokenize(lib, vocab, text, parse_special)
        f32_case = f32_fixture["cases"][index]
        if ids != f32_case["prompt_ids"]:
            raise RuntimeError(f"{key} prompt {index}: ids differ from greedy_{key}.json's")
        run = greedy_run(lib, model, ids, exact_p, n_vocab, top_k=TOP_K, keep_logits=True)
        one = compare_runs(run, greedy_run(lib, model, ids, one_p, n_vocab, keep_logits=True))
        default = greedy_run(lib, model, ids, default_p, n_vocab)
        exact_logits.append(run.pop("logits"))
        cases.append({
            "kind": kind, "user_text": user if kind == "chat" else None, "prompt_text": text,
            "parse_special": parse_special, "prompt_ids": ids,
            "new_ids": run["new_ids"], "stop_reason": run["stop_reason"],
            "top2_margin": run["top2_margin"], "runner_up_ids": run["runner_up_ids"],
            f"top{TOP_K}_ids": run["top_ids"], f"top{TOP_K}_logits": run["top_logits"],
            "new_text": run["new_text"],
            "agree_with_f32_prefix": prefix_agreement(run["new_ids"], f32_case["new_ids"]),
            "one_thread": one,
            "default_context": {
                "new_ids": default["new_ids"], "stop_reason": default["stop_reason"],
                "agree_prefix": prefix_agreement(run["new_ids"], default["new_ids"])},
        })
        m = min(run["top2_margin"])
        print(f"  {key} q {kind:<5} {len(ids):>3} prompt ids -> {len(run['new_ids'])} new "
              f"({run['stop_reason']}), min margin {m:.4f} at {run['top2_margin'].index(m)}, "
              f"1 thread same: {one['same_ids']} (max |dlogit| {one['max_abs_logit_diff']:.2e}), "
              f"f32 agrees {cases[-1]['agree_with_f32_prefix']}, "
              f"default ctx agrees {cases[-1]['default_context']['agree_prefix']}", flush=True)
    lib.llama_model_free(model)

    no_repack_buffers = None
    if repacked:   # the same exact runs with the weights left in the file's own layout
        model, no_repack_buffers = load_model(lib, original, extra_bufts=False)
        for case, logits in zip(cases, exact_logits):
            ref = {"new_ids": case["new_ids"], "logits": logits}
            plain = greedy_run(lib, model, case["prompt_ids"], exact_p, n_vocab, keep_logits=True)
            case["no_repack"] = compare_runs(ref, plain)
            print(f"  {key} no repack: same ids {case['no_repack']['same_ids']} "
                  f"(max |dlogit| {case['no_repack']['max_abs_logit_diff']:.2e})", flush=True)
        lib.llama_model_free(model)
    for case in cases:
        case.setdefault("no_repack", None)

    return {
        "what": "llama.cpp greedy (argmax) ids and top-16 logits on the original quantized "
                "GGUF with an F32 K/V cache and flash attention off; the reference for "
                "llmnb's integer (Q8-activation) path",
        "model": hub_name,
        "file": original.name,
        "sha256": digest,
        "bytes": original.stat().st_size,
        "tensor_types": types,
        "llama_cpp": {"version": version,
                      "llama_version": lib.llama_version().decode(),
                      "system_info": lib.llama_print_system_info().decode().strip()},
        "model_load": {"params": "llama_model_default_params() with n_gpu_layers = 0",
                       "buffers": buffers, "repack": repacked,
                       "no_repack_buffers": no_repack_buffers},
        "settings": {
            "exact_run": settings_of(exact_p),
            "one_thread_run": settings_of(one_p),
            "default_context_run": settings_of(default_p),
            "enum_values": "flash_attn_type: -1 auto, 0 disabled, 1 enabled; type_k/type_v: "
                           "ggml_type (0 F32, 1 F16)",
            "decode_loop": "fresh context per prompt; llama_decode(llama_batch_get_one(prompt)) "
                           "once, then one token per llama_decode; next token = argmax of "
                           "llama_get_logits_ith(ctx, -1), ties to the lower id",
            "prompts": f"the prompt ids of greedy_{key}.json (checked equal)",
            "n_new_max": N_NEW,
            "stop": "after an end-of-generation token (llama_vocab_is_eog), which is included "
                    "as the last new id",
            "top2_margin": "logit of the chosen token minus the second-highest logit, per step "
                           "(float32 logits, difference in float64, not rounded)",
            f"top{TOP_K}": f"per step, the {TOP_K} highest logits in descending order (ties to "
                           "the lower id) and their ids; logits rounded to 1e-4; step 0 is the "
                           "prompt's last position, step i > 0 the position of new_ids[i-1]",
            "agree_with_f32_prefix": f"leading new ids equal to greedy_{key}.json's (the F32 copy)",
            "one_thread": "the exact run again with 1 thread; max_abs_logit_diff(_per_step): "
                          "the largest |logit difference| over the whole vocabulary, at each "
                          "step both runs were fed the same tokens (steps_compared of them)",
            "no_repack": "the exact run again with use_extra_bufts = false (no weight "
                         "repacking); null when the default load repacked nothing",
            "default_context": "llama.cpp's default context (F16 K/V, flash attention auto, "
                               "n_batch 2048, n_ubatch 512), greedy ids only",
        },
        "n_vocab": n_vocab,
        "cases": cases,
    }


# ---------------------------------------------------------------------------------------------
# Perplexity references
# ---------------------------------------------------------------------------------------------

PPL_RUNS: list[tuple[str, int, int]] = [("f32", 256, 32), ("f32", 512, 16),
                                        ("original", 256, 32), ("original", 512, 16)]


def perplexity_run(
        bin_dir: Path, model: Path, n_ctx: int, chunks: int, exact: bool) -> dict[str, Any]:
    cmd = [str(bin_dir / "llama-perplexity"), "-m", str(model), "-f", str(TEXT),
           "-c", str(n_ctx), "--chunks", str(chunks), "-t", str(N_THREADS)]
    if exact:
        cmd += ["-fa", "off", "-ctk", "f32", "-ctv", "f32"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    log = r.stdout + r.stderr
    final = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", log)
    head = re.search(r"calculating perplexity over (\d+) chunks, n_ctx=(\d+), "
                     r"batch_size=(\d+), n_seq=(\d+)", log)
    running = [float(v) for v in re.findall(r"\[\d+\]([0-9.]+)", log)]
    assert final and head, f"unexpected llama-perplexity output:\n{log[-2000:]}"
    shown = ["llama-perplexity", "-m", model.name, "-f", str(TEXT.relative_to(ROOT)), *cmd[5:]]
    return {"command": " ".join(shown), "n_ctx": n_ctx, "chunks": int(head[1]),
            "batch_size": int(head[3]), "n_seq": int(head[4]),
            "scored_tokens_per_chunk": n_ctx - n_ctx // 2 - 1,
            "scored_tokens": int(head[1]) * (n_ctx - n_ctx // 2 - 1),
            "ppl": float(final[1]), "ppl_stderr": float(final[2]), "running_ppl": running,
            "seconds": round(time.perf_counter() - t0, 1)}


def perplexity_fixture(bin_dir: Path, f32_dir: Path, version: str) -> dict[str, Any]:
    import llmnb.hub as hub

    original = Path(hub.path("smollm2-135m"))
    f32, f32_cmd = f32_copy("smollm2-135m", f32_dir)
    runs = []
    for which, n_ctx, chunks in PPL_RUNS:
        model = f32 if which == "f32" else original
        run = {"model_file": which, **perplexity_run(bin_dir, model, n_ctx, chunks, which == "f32")}
        print(f"  ppl {which:<8} c={n_ctx} chunks={run['chunks']}: {run['ppl']} "
              f"+/- {run['ppl_stderr']} ({run['seconds']}s)", flush=True)
        runs.append(run)
    return {
        "what": "llama-perplexity on data/text/persuasion.txt for SmolLM2-135M-Instruct; "
                "reference for llmnb's perplexity (same chunking and scoring rule)",
        "text": {"path": str(TEXT.relative_to(ROOT)), "sha256": sha256(TEXT)},
        "rule": "tokenize the whole file (BOS first if the vocabulary adds one); non-overlapping "
                "chunks of n_ctx tokens, each chunk's first token replaced by BOS if the "
                "vocabulary adds BOS; score positions n_ctx/2 .. n_ctx-2 predicting the next "
                "token (n_ctx - n_ctx/2 - 1 per chunk); PPL = exp(mean NLL over all scored "
                "tokens); --chunks N processes the first N chunks",
        "model": "smollm2-135m",
        "original_file": original.name,
        "original_sha256": sha256(original),
        "f32_copy": {"made_with": " ".join(f32_cmd), "sha256": sha256(f32)},
        "llama_cpp": {"version": version},
        "runs": runs,
    }


def write_json(path: Path, obj: Any) -> None:
    """Indented JSON with each list of numbers on one line (diffs stay readable)."""
    text = json.dumps(obj, indent=1, ensure_ascii=False)
    # A real newline is never inside a JSON string, so only indented lists are touched.
    text = re.sub(r"\[\n\s*([-0-9.e,\s]+?)\s*\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m[1].split(",")) + "]", text)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(path)          # a reader never sees half a file
    print(f"wrote {path.relative_to(ROOT)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=os.environ.get("LLAMA_CPP_LIB"),
                    help="path to libllama.so (default: $LLAMA_CPP_LIB); llama-perplexity is "
                         "looked for in the same folder")
    ap.add_argument("--f32-dir", type=Path, default=Path("/tmp"),
                    help="where the all-F32 copies are kept (never in the repository)")
    ap.add_argument("--only", choices=["greedy", "quantized", "perplexity"],
                    help="make only one kind")
    ap.add_argument("--models", nargs="+", choices=[m[1] for m in MODELS],
                    default=[m[1] for m in MODELS], help="greedy and quantized fixtures to make")
    ap.add_argument("--no-thread-check", action="store_true",
                    help="skip the second F32 run with 1 thread (halves the time; the fixture "
                         "then records same_ids_with_1_thread = null)")
    args = ap.parse_args()
    if not args.lib:
        ap.error("give --lib or set LLAMA_CPP_LIB")
    bin_dir = Path(args.lib).resolve().parent
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    version = llamacpp_version(bin_dir)
    print(version)

    if args.only in (None, "greedy", "quantized"):
        lib = load_library(args.lib)
        lib.llama_log_set(_log, None)
        lib.llama_backend_init()
        for hub_name, key, chat_format, system in MODELS:
            if key not in args.models:
                continue
            if args.only in (None, "greedy"):
                fx = greedy_fixture(lib, hub_name, key, chat_format, system, args.f32_dir,
                                    version, not args.no_thread_check)
                write_json(OUT_DIR / f"greedy_{key}.json", fx)
            if args.only in (None, "quantized"):   # after greedy: it checks the prompt ids
                fx = quantized_fixture(lib, hub_name, key, chat_format, system, version)
                write_json(OUT_DIR / f"quantized_{key}.json", fx)
    if args.only in (None, "perplexity"):
        fx = perplexity_fixture(bin_dir, args.f32_dir, version)
        write_json(OUT_DIR / "perplexity_smollm2.json", fx)


if __name__ == "__main__":
    main()
