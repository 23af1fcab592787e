"""WordPiece (``tokenizer.ggml.model = bert``): BERT and its embedding descendants (BGE).

Text is normalised (accents stripped, lowercased), cut into words at whitespace, around
every punctuation mark and around every CJK ideograph, and each word is covered greedily
left to right by the longest vocabulary piece (Wu et al. 2016; Devlin et al. 2019). A word
that cannot be covered becomes one [UNK].

GGUF stores the vocabulary the way llama.cpp's ``llm_tokenizer_wpm`` reads it: a piece that
starts a word carries '▁' (Hugging Face's ``the``), a piece inside a word is bare (Hugging
Face's ``##the``). llama.cpp matches ``'▁' + word`` against every piece, so this module maps
'▁x' to ``x`` and every piece ``t`` to ``##t``, and the greedy search of ``tokenizers``'
WordPiece model then visits exactly the pieces llama.cpp's does.

The normaliser follows llama.cpp's ``preprocess`` rather than BERT's own where the two part:
llama.cpp replaces a character by the *first* character of its canonical decomposition and
drops every mark (Mn, Mc, Me), so a Hangul syllable keeps only its leading consonant; it
drops control, format and private-use characters, and U+FFFD; its whitespace is Unicode's
White_Space list; it lowercases by the one-to-one mapping.
"""
from __future__ import annotations

from typing import Final

from llmnb.tokenizer.errors import TokenizerError
from llmnb.tokenizer.vocab import TOKEN_CONTROL, TOKEN_UNKNOWN, Vocab, added_tokens_spec

SPACE: Final = "\u2581"   # '▁': the mark of a word-initial piece

# Unicode's White_Space property (PropList.txt), as llama.cpp's table lists it.
WHITESPACE: Final = ("[\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"
                     "\\x{202f}\\x{205f}\\x{3000}]+")

# Characters llama.cpp drops: C0/C1 controls that are not whitespace, format (Cf) and
# private-use (Co) characters, and U+FFFD.
DROPPED: Final = "[\\x00-\\x08\\x0e-\\x1f\\x7f-\\x84\\x86-\\x9f\\p{Cf}\\p{Co}\\x{fffd}]"

# A word of its own: any punctuation, the ASCII symbols $ + < = > ^ ` | ~, and the CJK
# ideograph blocks BERT isolates (the range starting at U+2B920 is BERT's, kept as written).
ISOLATED: Final = ("[\\p{P}\\$\\+<=>\\^`\\|~\\x{4e00}-\\x{9fff}\\x{3400}-\\x{4dbf}"
                   "\\x{20000}-\\x{2a6df}\\x{2a700}-\\x{2b73f}\\x{2b740}-\\x{2b81f}"
                   "\\x{2b920}-\\x{2ceaf}\\x{f900}-\\x{faff}\\x{2f800}-\\x{2fa1f}]")

# Hangul syllables U+AC00.. are laid out as (lead * 21 + vowel) * 28 + tail, so the 588
# syllables sharing a leading consonant (U+1100 + lead) form one contiguous block.
HANGUL_FIRST: Final = 0xAC00
HANGUL_PER_LEAD: Final = 21 * 28
HANGUL_LEADS: Final = 19

# No word is too long to look up (BERT's default of 100 characters gives [UNK]; llama.cpp
# has no limit).
NO_LIMIT: Final = 1 << 62


def first_of_decomposition() -> list[dict[str, object]]:
    """Normalisers that replace every character by the first character of its canonical
    decomposition, given that all marks are dropped afterwards: real NFD differs from that
    only in Hangul syllables, whose tails are letters, so those go to their lead first."""
    steps: list[dict[str, object]] = []
    for lead in range(HANGUL_LEADS):
        lo = HANGUL_FIRST + lead * HANGUL_PER_LEAD
        hi = lo + HANGUL_PER_LEAD - 1
        steps.append({"type": "Replace", "pattern": {"Regex": f"[\\x{{{lo:x}}}-\\x{{{hi:x}}}]"},
                      "content": chr(0x1100 + lead)})
    steps.append({"type": "NFD"})
    steps.append({"type": "Replace", "pattern": {"Regex": "\\p{M}"}, "content": ""})
    return steps


def wordpiece_vocab(vocab: Vocab) -> dict[str, int]:
    """Hugging Face WordPiece keys for GGUF pieces: every piece t -> '##t' (inside a word;
    llama.cpp matches a '▁' inside a word against word-initial pieces too), '▁x' -> 'x'
    (at a word's start), control pieces as they are (the unknown piece is found by its
    text). Where two keys meet, the earlier rule wins; such pieces hold punctuation
    ('▁##', '▁[CLS]'), which never reaches the inside of a word."""
    keys: dict[str, int] = {}
    for i, t in enumerate(vocab.tokens):
        if vocab.types[i] in (TOKEN_CONTROL, TOKEN_UNKNOWN):
            keys[t] = i
    for i, t in enumerate(vocab.tokens):
        keys.setdefault("##" + t, i)
    for i, t in enumerate(vocab.tokens):
        if t.startswith(SPACE) and len(t) > 1:
            keys.setdefault(t[1:], i)
    return keys


def wordpiece_spec(vocab: Vocab) -> dict[str, object]:
    """The ``tokenizers`` JSON (as a dict) for a WordPiece vocabulary."""
    unk = vocab.special.unk
    if unk is None:
        raise TokenizerError(vocab.source, "tokenizer.ggml.unknown_token_id",
                             "an unknown-token id (WordPiece gives [UNK] to a word it cannot "
                             "cover)")
    normalizers: list[dict[str, object]] = [
        {"type": "Replace", "pattern": {"Regex": DROPPED}, "content": ""},
    ]
    if vocab.strip_accents:
        normalizers += first_of_decomposition()
    if vocab.lowercase:
        # U+0130 is the one letter whose full lowercase is two characters; llama.cpp maps it to 'i'
        normalizers += [{"type": "Replace", "pattern": {"String": "\u0130"}, "content": "i"},
                        {"type": "Lowercase"}]
    pre_tokenizers = [
        {"type": "Split", "pattern": {"Regex": WHITESPACE}, "behavior": "Removed", "invert": False},
        {"type": "Split", "pattern": {"Regex": ISOLATED}, "behavior": "Isolated", "invert": False},
    ]
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added_tokens_spec(vocab.tokens, vocab.types),
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": pre_tokenizers},
        "post_processor": None,
        "decoder": None,      # decoding goes through the GGUF pieces (wordpiece_token_bytes)
        "model": {"type": "WordPiece", "unk_token": vocab.tokens[unk],
                  "continuing_subword_prefix": "##", "max_input_chars_per_word": NO_LIMIT,
                  "vocab": wordpiece_vocab(vocab)},
    }


def wordpiece_token_bytes(text: str) -> bytes:
    """The bytes a WordPiece piece stands for in text ('▁the' -> b' the', 'ing' -> b'ing')."""
    return text.replace(SPACE, " ").encode("utf-8")
