"""SentencePiece BPE (``tokenizer.ggml.model = llama``): Llama 1/2, Mistral, Gemma 1-3;
and Gemma 4's variant with explicit merges (``tokenizer.ggml.model = gemma4``).

Spaces become '▁' (U+2581), a '▁' is prepended when ``add_space_prefix`` is set, and the text
is split into characters; then the adjacent pair whose concatenation is the vocabulary piece
with the highest score is merged, repeatedly (Kudo & Richardson 2018; llama.cpp's
``llm_tokenizer_spm``). A character with no piece falls back to its UTF-8 bytes as
``<0xNN>`` tokens. GGUF stores scores, not merges, so the merges are derived: every split of a
piece into two pieces that both exist is a merge, ranked by the merged piece's score.
"""
from __future__ import annotations

from llmnb.tokenizer.byte_bpe import merges_for_json
from llmnb.tokenizer.errors import TokenizerError
from llmnb.tokenizer.vocab import KEY_TOKENS, TOKEN_BYTE, Vocab, added_tokens_spec

SPACE = "\u2581"   # '▁', SentencePiece's visible space


def merges_from_scores(tokens: list[str], types: list[int], scores: list[float]) -> list[list[str]]:
    """All (left, right) pairs whose concatenation is a piece, best merged score first.

    Byte tokens (``<0x41>``) never take part: they are only a fallback. Pieces are visited
    in (score descending, id) order and each piece's splits left to right, so the list comes
    out already ranked, with deterministic ties.
    """
    ids = {t: i for i, t in enumerate(tokens) if types[i] != TOKEN_BYTE}
    order = sorted(ids.values(), key=lambda i: (-scores[i], i))
    merges: list[list[str]] = []
    for pid in order:
        piece = tokens[pid]
        for k in range(1, len(piece)):
            left = piece[:k]
            if left in ids:
                right = piece[k:]
                if right in ids:
                    merges.append([left, right])
    return merges


def sentencepiece_spec(vocab: Vocab) -> dict[str, object]:
    """The ``tokenizers`` JSON (as a dict) for a SentencePiece BPE vocabulary."""
    unk = vocab.special.unk
    if unk is None:  # else '<unk>', else id 0: llama.cpp's default for SentencePiece vocabularies
        unk = next((i for i, t in enumerate(vocab.tokens) if t == "<unk>"), 0)
    if not vocab.tokens:
        raise TokenizerError(vocab.source, KEY_TOKENS, "at least one token")
    model: dict[str, object] = {
        "type": "BPE", "dropout": None, "unk_token": vocab.tokens[unk],
        "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
        "byte_fallback": any(t == TOKEN_BYTE for t in vocab.types), "ignore_merges": False,
        "vocab": {t: i for i, t in enumerate(vocab.tokens)},
        "merges": merges_from_scores(vocab.tokens, vocab.types, vocab.scores),
    }
    return escaped_bpe_spec(vocab, model, pre_tokenizer=None)


def gemma4_spec(vocab: Vocab) -> dict[str, object]:
    """The ``tokenizers`` JSON for Gemma 4's vocabulary (``tokenizer.ggml.model = gemma4``):
    SentencePiece's '▁' spaces, but BPE from the file's ranked merges, over raw UTF-8 with
    ``<0xNN>`` byte fallback, and lines and runs of newlines merged apart (llama.cpp's
    ``[^\\n]+|[\\n]+`` split). A run of newlines that is a token comes out whole from its
    merges, as llama.cpp emits it."""
    model: dict[str, object] = {
        "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
        "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": True,
        "ignore_merges": False, "vocab": {t: i for i, t in enumerate(vocab.tokens)},
        "merges": merges_for_json(vocab.merges, vocab.source),
    }
    lines = {"type": "Split", "pattern": {"Regex": "\n+"}, "behavior": "Isolated",
             "invert": False}
    return escaped_bpe_spec(vocab, model, pre_tokenizer=lines)


def escaped_bpe_spec(vocab: Vocab, model: dict[str, object],
                     pre_tokenizer: dict[str, object] | None) -> dict[str, object]:
    """A BPE ``model`` over text whose spaces are '▁' (with one prepended when
    ``add_space_prefix``), decoded back through '▁' -> ' ' and byte fallback."""
    normalizers: list[dict[str, object]] = []
    if vocab.add_space_prefix:
        normalizers.append({"type": "Prepend", "prepend": SPACE})
    normalizers.append({"type": "Replace", "pattern": {"String": " "}, "content": SPACE})
    decoders: list[dict[str, object]] = [
        {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
        {"type": "ByteFallback"},
        {"type": "Fuse"},
    ]
    if vocab.add_space_prefix:
        decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added_tokens_spec(vocab.tokens, vocab.types),
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": pre_tokenizer,
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": model,
    }


def sentencepiece_token_bytes(text: str) -> bytes:
    """The bytes a SentencePiece token stands for ('▁hi' -> b' hi', '<0x0A>' -> b'\\n')."""
    if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
        try:
            return bytes([int(text[3:5], 16)])
        except ValueError:
            pass
    return text.replace(SPACE, " ").encode("utf-8")
