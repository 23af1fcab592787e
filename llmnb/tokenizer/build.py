"""Build a ``Tokenizer`` from GGUF metadata or from a Hugging Face ``tokenizer.json``.

The vocabulary is turned into the ``tokenizers`` JSON format as a dict and handed to Rust in
one call (``Tokenizer.from_str``): for a 152k-token, 151k-merge vocabulary this takes well
under a second, where adding tokens one by one from Python would take many.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

import tokenizers

from llmnb.tokenizer.byte_bpe import byte_bpe_spec
from llmnb.tokenizer.errors import TokenizerError
from llmnb.tokenizer.sentencepiece import gemma4_spec, sentencepiece_spec
from llmnb.tokenizer.tokenizer import Tokenizer
from llmnb.tokenizer.vocab import EOT_TEXTS, KEY_TOKENS, SpecialIds, Vocab, read_vocab
from llmnb.tokenizer.wordpiece import wordpiece_spec

# tokenizer.ggml.model -> the builder of its tokenizers JSON
SPEC_BUILDERS: Final[dict[str, Callable[[Vocab], dict[str, object]]]] = {
    "gpt2": byte_bpe_spec, "llama": sentencepiece_spec, "gemma4": gemma4_spec,
    "bert": wordpiece_spec,
}


def tokenizer_from_metadata(metadata: Mapping[str, object], source: str) -> Tokenizer:
    """The tokenizer a GGUF describes. ``metadata`` is ``llmnb.gguf.open(path).metadata``;
    ``source`` (the file path) names the file in error messages."""
    vocab = read_vocab(metadata, source)
    spec = SPEC_BUILDERS[vocab.model](vocab)
    try:
        hf = tokenizers.Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))
    except Exception as e:   # the Rust side reports e.g. a merge whose halves are not tokens
        raise TokenizerError(source, KEY_TOKENS,
                             f"a vocabulary the BPE model accepts; tokenizers said: {e}") from None
    model = spec.get("model")
    # byte-level BPE's placeholder for bytes without a token sits past the vocabulary
    dropped = len(vocab.tokens) if isinstance(model, dict) and model.get("unk_token") else None
    return Tokenizer(hf, vocab.tokens, vocab.special, kind=vocab.model, pre=vocab.pre,
                     add_bos=vocab.add_bos, add_eos=vocab.add_eos, add_sep=vocab.add_sep,
                     dropped_id=dropped if vocab.model == "gpt2" else None,
                     add_space_prefix=vocab.add_space_prefix,
                     chat_template=vocab.chat_template, source=source)


def tokenizer_from_json(path: str | os.PathLike[str]) -> Tokenizer:
    """A tokenizer from a Hugging Face ``tokenizer.json`` (for GGUFs without a vocabulary,
    e.g. diffuse-cpp's). A ``tokenizer_config.json`` beside it supplies the BOS/EOS texts,
    ``add_bos_token`` and the chat template when present."""
    p = Path(path)
    source = str(p)
    try:
        hf = tokenizers.Tokenizer.from_file(source)
    except Exception as e:
        raise TokenizerError(source, "tokenizer.json",
                             f"a readable Hugging Face tokenizer file: {e}") from None
    size = hf.get_vocab_size(with_added_tokens=True)
    tokens = [""] * size
    for text, tid in hf.get_vocab(with_added_tokens=True).items():
        if 0 <= tid < size:
            tokens[tid] = text

    config = read_tokenizer_config(p.with_name("tokenizer_config.json"))

    def token_id(key: str) -> int | None:
        text = config_token_text(config.get(key))
        tid = None if text is None else hf.token_to_id(text)
        return None if tid is None else int(tid)

    special = SpecialIds(bos=token_id("bos_token"), eos=token_id("eos_token"),
                         pad=token_id("pad_token"), unk=token_id("unk_token"),
                         mask=token_id("mask_token"))
    for text in EOT_TEXTS:
        found = hf.token_to_id(text)
        if found is not None:
            special.eot = int(found)
            break
    template = config.get("chat_template")
    add_bos = config.get("add_bos_token")
    add_eos = config.get("add_eos_token")
    return Tokenizer(hf, tokens, special, kind=type(hf.model).__name__, pre="tokenizer.json",
                     add_bos=add_bos is True, add_eos=add_eos is True,
                     chat_template=template if isinstance(template, str) else None,
                     source=source)


def read_tokenizer_config(path: Path) -> dict[str, object]:
    """``tokenizer_config.json`` (the BOS/EOS texts, ``add_bos_token``, the chat template) as
    a dict: {} when there is none or it holds no JSON object."""
    if not path.is_file():
        return {}
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise TokenizerError(str(path), "tokenizer_config.json", f"valid JSON: {e}") from None
    return loaded if isinstance(loaded, dict) else {}


def config_token_text(value: object) -> str | None:
    """A token as tokenizer_config.json names it: its text, or ``{"content": text, ...}``
    (older configs); None for anything else."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None
