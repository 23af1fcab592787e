"""Byte-level BPE (``tokenizer.ggml.model = gpt2``): GPT-2, Llama 3, Qwen2, SmolLM.

Text is cut into words by the pre-tokenizer regexes, each word's UTF-8 bytes are mapped to
printable characters (GPT-2's byte alphabet: byte 0x20 ' ' becomes 'Ġ', 0x0A becomes 'Ċ'),
and the merges — an ordered list of pairs, earliest first — are applied greedily by rank
inside each word (Sennrich et al. 2016; Radford et al. 2019). Every byte is a token, so no
text is unknown. This module turns a checked ``Vocab`` into the ``tokenizers`` JSON for it.
"""
from __future__ import annotations

from typing import Final

from llmnb.tokenizer.errors import TokenizerError
from llmnb.tokenizer.pretokenizers import (
    PRE_TOKENIZERS, pre_tokenizer_spec, supported_pre_tokenizers,
)
from llmnb.tokenizer.vocab import KEY_MERGES, KEY_PRE, Vocab, added_tokens_spec


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> character table: printable Latin-1 bytes map to themselves, the other
    68 bytes to code points 256, 257, ... in byte order."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1))
                 + list(range(0xAE, 0xFF + 1)))
    table: dict[int, str] = {}
    extra = 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_CHAR: Final = bytes_to_unicode()
CHAR_TO_BYTE: Final = {c: b for b, c in BYTE_TO_CHAR.items()}
# The placeholder for a byte the vocabulary has no token for (see byte_bpe_spec).
UNKNOWN_BYTE: Final = "<llmnb:byte-without-token>"


def split_merges(merges: list[str], source: str) -> list[list[str]]:
    """``"a b"`` -> ``["a", "b"]``, splitting at the first space after the first character
    (as llama.cpp does: a left half may itself start with a space-like character)."""
    pairs: list[list[str]] = []
    for i, m in enumerate(merges):
        k = m.find(" ", 1)
        if k < 0 or k == len(m) - 1:
            raise TokenizerError(source, KEY_MERGES,
                                 f"'left right' pairs; entry {i} is {m!r}")
        pairs.append([m[:k], m[k + 1:]])
    return pairs


def merges_for_json(merges: list[str], source: str) -> list[str] | list[list[str]]:
    """Merges in the form ``tokenizers`` parses fastest: its legacy ``"a b"`` strings when
    every entry has exactly one inner space (the usual case), else explicit pairs."""
    if all(m.count(" ") == 1 and m[0] != " " and m[-1] != " " for m in merges):
        return merges
    return split_merges(merges, source)


def byte_bpe_spec(vocab: Vocab) -> dict[str, object]:
    """The ``tokenizers`` JSON (as a dict) for a byte-level BPE vocabulary."""
    choice = PRE_TOKENIZERS.get(vocab.pre)
    if choice is None:
        raise TokenizerError(vocab.source, KEY_PRE,
                             "a pre-tokenizer llmnb knows "
                             f"({', '.join(supported_pre_tokenizers())}), got {vocab.pre!r}")
    regexes, ignore_merges = choice
    ids = {t: i for i, t in enumerate(vocab.tokens)}    # a repeated text keeps its last id
    # A byte with no token (Falcon, MPT, StarCoder lack a few) still keeps its place in the
    # word in llama.cpp, so the bytes around it do not merge across it, and is dropped from the
    # output. tokenizers' BPE would skip it before merging; as the unknown token it stays put,
    # under an id past the vocabulary (len(vocab.tokens)) that encode() then drops.
    unk = None
    if any(ch not in ids for ch in BYTE_TO_CHAR.values()):
        unk = UNKNOWN_BYTE
        ids[UNKNOWN_BYTE] = len(vocab.tokens)
    model: dict[str, object] = {
        "type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": None,
        "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
        "ignore_merges": ignore_merges, "vocab": ids,
        "merges": merges_for_json(vocab.merges, vocab.source),
    }
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added_tokens_spec(vocab.tokens, vocab.types),
        "normalizer": None,
        "pre_tokenizer": pre_tokenizer_spec(regexes),
        "post_processor": None,
        "decoder": byte_level,
        "model": model,
    }


def byte_bpe_token_bytes(text: str) -> bytes:
    """The bytes a byte-level token stands for ('Ġhi' -> b' hi'); characters outside the
    byte alphabet (special tokens' text) are taken as UTF-8."""
    out = bytearray()
    for ch in text:
        b = CHAR_TO_BYTE.get(ch)
        if b is None:
            out += ch.encode("utf-8")
        else:
            out.append(b)
    return bytes(out)
