"""Pre-tokenizer regexes for byte-level BPE vocabularies, chosen by ``tokenizer.ggml.pre``.

Before BPE merges run, text is cut into words by one or more regexes; merges never cross a
word boundary. Which regexes a model uses is not in the GGUF: only a name is
(``tokenizer.ggml.pre``), and llama.cpp maps that name to its regex list in
``src/llama-vocab.cpp`` (``llm_tokenizer_bpe``). This table mirrors that mapping for the names
llmnb supports. Each regex is applied in turn, and both the matches and the text between them
become words ("isolated" splitting), exactly as llama.cpp's ``unicode_regex_split`` does.
"""
from __future__ import annotations

from typing import Final

# GPT-2's word regex: contractions, letters, digits, other symbols, trailing whitespace.
GPT2_REGEX: Final = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"

# Llama 3 (tiktoken-style): case-insensitive contractions, a letter run may take one leading
# non-letter, digits in groups of up to three, newlines kept with the symbols before them.
LLAMA3_REGEX: Final = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen2: the Llama 3 regex with single digits (every digit is its own word).
QWEN2_REGEX: Final = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# name -> (regexes applied in order, BPE ignore_merges: a word that is itself a token is
# emitted whole without running merges — llama.cpp sets this for the Llama 3 family).
PRE_TOKENIZERS: Final[dict[str, tuple[tuple[str, ...], bool]]] = {
    "gpt2": ((GPT2_REGEX,), False),                  # (llama.cpp itself spells it gpt-2)
    "gpt-2": ((GPT2_REGEX,), False),
    "llama-bpe": ((LLAMA3_REGEX,), True),
    "llama3": ((LLAMA3_REGEX,), True),
    "llama-v3": ((LLAMA3_REGEX,), True),
    "smollm": ((r"\p{N}", GPT2_REGEX), False),       # digits split one by one, then GPT-2
    "starcoder": ((r"\p{N}", GPT2_REGEX), False),
    "qwen2": ((QWEN2_REGEX,), False),
    "deepseek-r1-qwen": ((QWEN2_REGEX,), False),
}


def supported_pre_tokenizers() -> list[str]:
    """The ``tokenizer.ggml.pre`` names llmnb can build, sorted."""
    return sorted(PRE_TOKENIZERS)


def pre_tokenizer_spec(regexes: tuple[str, ...]) -> dict[str, object]:
    """The ``tokenizers`` JSON for: split by each regex (isolated), then map bytes to the
    GPT-2 byte alphabet (``ByteLevel`` without its own regex)."""
    steps: list[dict[str, object]] = [
        {"type": "Split", "pattern": {"Regex": rx}, "behavior": "Isolated", "invert": False}
        for rx in regexes
    ]
    steps.append({"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False})
    return {"type": "Sequence", "pretokenizers": steps}
