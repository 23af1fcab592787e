"""Read and check the ``tokenizer.*`` keys of GGUF metadata (llama.cpp's ``llama_vocab::load``).

GGUF stores a vocabulary as parallel arrays — ``tokenizer.ggml.tokens`` (text),
``tokenizer.ggml.token_type`` (NORMAL, CONTROL, USER_DEFINED, BYTE ...),
``tokenizer.ggml.scores`` (SentencePiece) or ``tokenizer.ggml.merges`` (byte-level BPE) —
plus special ids and flags. ``read_vocab`` checks every key it uses and returns plain
Python lists, so the builders never touch numpy or guess at types.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from llmnb.tokenizer.errors import TokenizerError

KEY_MODEL: Final = "tokenizer.ggml.model"
KEY_PRE: Final = "tokenizer.ggml.pre"
KEY_TOKENS: Final = "tokenizer.ggml.tokens"
KEY_TYPES: Final = "tokenizer.ggml.token_type"
KEY_SCORES: Final = "tokenizer.ggml.scores"
KEY_MERGES: Final = "tokenizer.ggml.merges"
KEY_TEMPLATE: Final = "tokenizer.chat_template"

# GGUF token types (llama.cpp's llama_token_type)
TOKEN_NORMAL: Final = 1
TOKEN_UNKNOWN: Final = 2
TOKEN_CONTROL: Final = 3
TOKEN_USER_DEFINED: Final = 4
TOKEN_UNUSED: Final = 5
TOKEN_BYTE: Final = 6

# Texts that mark the end of a chat turn, in the order llmnb prefers them when the file
# names no eot id (llama.cpp detects the same texts; its pick among several is unordered).
EOT_TEXTS: Final = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                    "<|end_of_text|>", "<EOT>", "<｜end▁of▁sentence｜>")

# Texts llama.cpp treats as CONTROL whatever type the file gives them (end-of-generation,
# end-of-turn and fill-in-the-middle markers: llama_vocab::load's auto-detection). Matching
# them matters: with special parsing on, "</s>" typed in a prompt becomes one id.
CONTROL_TEXTS: Final = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
    "<|code_prefix|>", "<|prefix|>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
    "<|code_suffix|>", "<|suffix|>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
    "<|code_middle|>", "<|middle|>",
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>",
})
# ... and texts it forces to USER_DEFINED (gpt-oss's harmony markers, always matched).
USER_DEFINED_TEXTS: Final = frozenset({"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})

SPECIAL_ID_KEYS: Final = {
    "bos": "tokenizer.ggml.bos_token_id", "eos": "tokenizer.ggml.eos_token_id",
    "eot": "tokenizer.ggml.eot_token_id", "pad": "tokenizer.ggml.padding_token_id",
    "unk": "tokenizer.ggml.unknown_token_id", "mask": "tokenizer.ggml.mask_token_id",
    "sep": "tokenizer.ggml.seperator_token_id",      # (sic: GGUF's spelling)
}

# The vocabulary kinds (``tokenizer.ggml.model``) llmnb builds, and what each one is.
MODELS: Final = {
    "gpt2": "byte-level BPE",
    "llama": "SentencePiece BPE with scores",
    "gemma4": "SentencePiece-style BPE with merges",
    "bert": "WordPiece",
}

# llama.cpp's special ids for WordPiece vocabularies when the file names none (BERT's
# [CLS] = BOS, [UNK], [SEP], [PAD], [MASK]).
WORDPIECE_DEFAULT_IDS: Final = {"bos": 101, "unk": 100, "sep": 102, "pad": 0, "mask": 103}


@dataclass
class SpecialIds:
    """The special token ids of a vocabulary (None where the model has none)."""

    bos: int | None = None
    eos: int | None = None
    eot: int | None = None
    pad: int | None = None
    unk: int | None = None
    mask: int | None = None
    sep: int | None = None


@dataclass
class Vocab:
    """One vocabulary as plain lists: everything a builder needs, already checked."""

    model: str                        # ``tokenizer.ggml.model`` (a key of MODELS)
    pre: str                          # the pre-tokenizer's name
    tokens: list[str]
    types: list[int]
    scores: list[float]
    merges: list[str]
    special: SpecialIds
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    chat_template: str | None
    source: str                       # the file, for messages
    add_sep: bool = False             # WordPiece: [SEP] after the text
    lowercase: bool = False           # WordPiece normaliser options
    strip_accents: bool = False


def read_vocab(md: Mapping[str, object], source: str) -> Vocab:
    """Check and collect the tokenizer keys of ``md`` (the dict ``llmnb.gguf.open(p).metadata``)."""
    model = _str(md, KEY_MODEL, source, None)
    if model not in MODELS:
        kinds = ", ".join(f"{k!r} ({v})" for k, v in MODELS.items())
        raise TokenizerError(source, KEY_MODEL, f"one of {kinds}, got {model!r}")
    # llama.cpp reads the pre-tokenizer name for byte-level BPE only; Gemma 4 has its own.
    pre = {"gpt2": _str(md, KEY_PRE, source, "default"), "gemma4": "gemma4"}.get(model, "default")
    tokens = _str_list(md, KEY_TOKENS, source)
    n = len(tokens)
    if n == 0:
        raise TokenizerError(source, KEY_TOKENS, "a non-empty array of token strings")
    # llama.cpp renames empty token strings so that every text maps to one id
    tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
    types = (_num_list(md, KEY_TYPES, source, n, integer=True) if KEY_TYPES in md
             else [TOKEN_NORMAL] * n)
    types_int = [int(t) for t in types]
    for i, t in enumerate(tokens):
        if t in CONTROL_TEXTS:
            types_int[i] = TOKEN_CONTROL
        elif t in USER_DEFINED_TEXTS:
            types_int[i] = TOKEN_USER_DEFINED
    demote_markers(tokens, types_int)
    scores: list[float] = []
    merges: list[str] = []
    if model == "llama":
        if KEY_SCORES not in md:
            raise TokenizerError(source, KEY_SCORES,
                                 "one score per token (SentencePiece vocabularies need them)")
        scores = [float(s) for s in _num_list(md, KEY_SCORES, source, n, integer=False)]
    elif model in ("gpt2", "gemma4"):
        merges = _str_list(md, KEY_MERGES, source)

    special = SpecialIds()
    if model == "bert":
        for name, tid in WORDPIECE_DEFAULT_IDS.items():
            if tid < n:
                setattr(special, name, tid)
    for name, key in SPECIAL_ID_KEYS.items():
        value = md.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TokenizerError(source, key, f"an integer token id, got {type(value).__name__}")
        tid = int(value)
        if not 0 <= tid < n:
            raise TokenizerError(source, key, f"a token id in [0, {n}), got {tid}")
        setattr(special, name, tid)
    if special.eot is None:
        special.eot = find_eot(tokens)

    # llama.cpp's defaults: SentencePiece adds BOS and a space prefix, byte-level BPE neither
    # (except the Llama 3 pre-tokenizer, which adds BOS); the file's flags override them.
    # Gemma 4 always adds BOS; WordPiece always adds [CLS] and [SEP] (llama.cpp ignores
    # the flags for it).
    default_bos = model in ("llama", "bert") or pre in ("llama3", "llama-v3", "llama-bpe")
    add_bos = _bool(md, "tokenizer.ggml.add_bos_token", source, default_bos)
    add_eos = _bool(md, "tokenizer.ggml.add_eos_token", source, False)
    add_sep = model == "bert"
    if model in ("gemma4", "bert"):
        add_bos = True
    add_space_prefix = _bool(md, "tokenizer.ggml.add_space_prefix", source, model == "llama")
    if model != "llama":
        add_space_prefix = False   # llama.cpp reads the flag for SentencePiece only
    # BERT's normaliser: lowercase, and strip accents unless told otherwise (llama.cpp's
    # defaults; its keys are read for every kind, used by WordPiece only)
    lowercase = _bool(md, "tokenizer.ggml.normalizer.lowercase", source, True)
    strip_accents = _bool(md, "tokenizer.ggml.normalizer.strip_accents", source, lowercase)
    template = md.get(KEY_TEMPLATE)
    if template is not None and not isinstance(template, str):
        raise TokenizerError(source, KEY_TEMPLATE, f"a string, got {type(template).__name__}")
    return Vocab(model, pre, tokens, types_int, scores, merges, special, add_bos, add_eos,
                 add_space_prefix, template, source, add_sep=add_sep, lowercase=lowercase,
                 strip_accents=strip_accents)


def demote_markers(tokens: Sequence[str], types: list[int]) -> None:
    """llama.cpp's two exceptions to ``CONTROL_TEXTS``, applied to ``types`` in place: in
    vocabularies with Gemma 4's or PLaMo 2's own end markers '</s>' is ordinary text, and
    in gpt-oss's and Solar Open's (which end turns with '<|return|>'/'<|call|>' or
    '<|calls|>'/'<|flush|>') '<|end|>' is user-defined, always matched but not an end."""
    index = {t: i for i, t in enumerate(tokens) if t.startswith(("<", "["))}
    if "</s>" in index and ("<|tool_response>" in index or "<|plamo:eos|>" in index):
        types[index["</s>"]] = TOKEN_NORMAL
    has_call = "<|call|>" in index or "<|calls|>" in index
    if "<|end|>" in index and has_call and ("<|return|>" in index or "<|flush|>" in index):
        types[index["<|end|>"]] = TOKEN_USER_DEFINED


def find_eot(tokens: Sequence[str]) -> int | None:
    """The end-of-turn id found by its text (``<|eot_id|>``, ``<|im_end|>``, ...), or None."""
    index = {t: i for i, t in enumerate(tokens) if t.startswith("<")}
    for text in EOT_TEXTS:
        if text in index:
            return index[text]
    return None


def added_tokens_spec(tokens: Sequence[str], types: Sequence[int]) -> list[dict[str, object]]:
    """``tokenizers`` added tokens for the CONTROL, USER_DEFINED and UNKNOWN tokens.

    They are matched in the raw text before any normalisation, as llama.cpp's
    ``tokenizer_st_partition`` does. CONTROL and UNKNOWN are "special" (matched only when
    parsing special text); USER_DEFINED tokens are always matched.
    """
    out: list[dict[str, object]] = []
    for i, t in enumerate(types):
        if t in (TOKEN_CONTROL, TOKEN_UNKNOWN, TOKEN_USER_DEFINED):
            out.append({"id": i, "content": tokens[i], "single_word": False, "lstrip": False,
                        "rstrip": False, "normalized": False,
                        "special": t != TOKEN_USER_DEFINED})
    return out


# -- typed accessors ---------------------------------------------------------------------

def _str(md: Mapping[str, object], key: str, source: str, default: str | None) -> str:
    value = md.get(key)
    if value is None:
        if default is None:
            raise TokenizerError(source, key, "a string (the key is missing)")
        return default
    if not isinstance(value, str):
        raise TokenizerError(source, key, f"a string, got {type(value).__name__}")
    return value


def _bool(md: Mapping[str, object], key: str, source: str, default: bool) -> bool:
    value = md.get(key)
    if value is None:
        return default
    if not isinstance(value, (bool, np.bool_)):
        raise TokenizerError(source, key, f"a bool, got {type(value).__name__}")
    return bool(value)


def _str_list(md: Mapping[str, object], key: str, source: str) -> list[str]:
    value = md.get(key)
    if value is None:
        raise TokenizerError(source, key, "an array of strings (the key is missing)")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TokenizerError(source, key, f"an array of strings, got {type(value).__name__}")
    return value


def _num_list(md: Mapping[str, object], key: str, source: str, n: int,
              integer: bool) -> list[int] | list[float]:
    value = md.get(key)
    kind = "integers" if integer else "numbers"
    if isinstance(value, np.ndarray) and value.ndim == 1:
        if integer and not np.issubdtype(value.dtype, np.integer):
            raise TokenizerError(source, key, f"an array of {kind}, got dtype {value.dtype}")
        if not integer and not np.issubdtype(value.dtype, np.number):
            raise TokenizerError(source, key, f"an array of {kind}, got dtype {value.dtype}")
        items: list[int] | list[float] = value.tolist()
    elif isinstance(value, list):
        ok = (int,) if integer else (int, float)
        if not all(isinstance(v, ok) and not isinstance(v, bool) for v in value):
            raise TokenizerError(source, key, f"an array of {kind}")
        items = value
    else:
        raise TokenizerError(source, key, f"an array of {kind}, got {type(value).__name__}")
    if len(items) < n:
        raise TokenizerError(source, key, f"at least {n} entries (one per token), got {len(items)}")
    return items[:n]
