"""A Hugging Face ``tokenizer.json`` -> GGUF ``tokenizer.ggml.*`` metadata (``llmnb convert``'s
tokenizer half; ``build.tokenizer_from_metadata`` reads it back).

A byte-level BPE ``tokenizer.json`` (Llama 3, Qwen2/Dream, GPT-2 style) becomes
``tokenizer.ggml.model = gpt2`` with its tokens, token types, merges, the pre-tokenizer name
(``pretokenizers.detect_pre``), BOS/EOS/PAD/UNK ids, ``add_bos_token`` and the chat template
from ``tokenizer_config.json``, as llama.cpp's converter writes them. Without one (or with
another kind) ``synthetic_vocab`` gives ``<tokN>`` tokens that keep strict loaders (llama.cpp)
happy.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from llmnb.gguf.constants import ARRAY, BOOL, FLOAT32, INT32, STRING, UINT32
from llmnb.gguf.reader import MetadataField
from llmnb.tokenizer.build import config_token_text, read_tokenizer_config
from llmnb.tokenizer.errors import TokenizerError
from llmnb.tokenizer.pretokenizers import detect_pre
from llmnb.tokenizer.vocab import KEY_MERGES, KEY_MODEL, KEY_PRE, KEY_SCORES, KEY_TEMPLATE, \
    KEY_TOKENS, KEY_TYPES, TOKEN_CONTROL, TOKEN_NORMAL, TOKEN_UNUSED, TOKEN_USER_DEFINED


def synthetic_vocab(n_vocab: int) -> list[MetadataField]:
    """``<tok0>`` ... : a vocabulary that keeps strict loaders (llama.cpp) happy."""
    return [
        MetadataField(KEY_MODEL, STRING, "llama"),
        MetadataField(KEY_TOKENS, ARRAY, [f"<tok{i}>" for i in range(n_vocab)], STRING),
        MetadataField(KEY_SCORES, ARRAY, np.zeros(n_vocab, np.float32), FLOAT32),
        MetadataField(KEY_TYPES, ARRAY, np.ones(n_vocab, np.int32), INT32),
    ]


def tokenizer_fields(hf: Path, n_vocab: int) -> tuple[list[MetadataField], str]:
    """GGUF tokenizer metadata from ``hf/tokenizer.json`` (+ ``tokenizer_config.json``) for a
    model of `n_vocab` embedding rows, and a note saying what was done.

    Empty list when there is no byte-level BPE tokenizer.json to embed (the note says why)."""
    path = hf / "tokenizer.json"
    if not path.exists():
        return [], "none (no tokenizer.json beside the checkpoint)"
    try:
        tj = json.loads(path.read_text(encoding="utf-8"))
        model = tj["model"]
        vocab: dict[str, int] = {str(k): int(v) for k, v in model["vocab"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise TokenizerError(str(path), "model.vocab",
                             f"a tokenizers JSON with model.vocab ({e})") from None
    if model.get("type") != "BPE" or not isinstance(model.get("merges"), list):
        return [], f"none ({path.name}: model type {model.get('type')!r} is not byte-level BPE)"
    pre = detect_pre(tj.get("pre_tokenizer"))
    if pre is None:
        return [], f"none ({path.name}: pre-tokenizer not recognised)"
    added = {int(a["id"]): a for a in tj.get("added_tokens") or [] if isinstance(a, dict)}
    for i, a in added.items():
        vocab[str(a["content"])] = i
    size = max(n_vocab, max(vocab.values()) + 1)
    if size > n_vocab:
        raise TokenizerError(str(path), "model.vocab", f"at most the {n_vocab} rows of the "
                             f"token embedding, got {size} tokens")
    tokens = [f"[PAD{i}]" for i in range(n_vocab)]
    types = [TOKEN_UNUSED] * n_vocab
    for text, i in vocab.items():
        tokens[i] = text
        types[i] = TOKEN_NORMAL
    for i, a in added.items():
        types[i] = TOKEN_CONTROL if a.get("special") else TOKEN_USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    fields = [MetadataField(KEY_MODEL, STRING, "gpt2"),
              MetadataField(KEY_PRE, STRING, pre),
              MetadataField(KEY_TOKENS, ARRAY, tokens, STRING),
              MetadataField(KEY_TYPES, ARRAY, np.array(types, np.int32), INT32),
              MetadataField(KEY_MERGES, ARRAY, merges, STRING)]
    cfg = read_tokenizer_config(hf / "tokenizer_config.json")
    for role, key in (("bos", "bos_token"), ("eos", "eos_token"), ("padding", "pad_token"),
                      ("unknown", "unk_token")):
        named = config_token_text(cfg.get(key))
        tid = None if named is None else vocab.get(named)
        if tid is not None:
            fields.append(MetadataField(f"tokenizer.ggml.{role}_token_id", UINT32, int(tid)))
    add_bos, template = cfg.get("add_bos_token"), cfg.get("chat_template")
    if isinstance(add_bos, bool):
        fields.append(MetadataField("tokenizer.ggml.add_bos_token", BOOL, add_bos))
    if isinstance(template, str):
        fields.append(MetadataField(KEY_TEMPLATE, STRING, template))
    return fields, f"embedded (gpt2 BPE, pre {pre!r}, {len(vocab)} tokens, {len(merges)} merges)"
