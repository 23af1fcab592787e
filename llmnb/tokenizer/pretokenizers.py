"""Pre-tokenizer regexes for byte-level BPE vocabularies, chosen by ``tokenizer.ggml.pre``.

Before BPE merges run, text is cut into words by one or more regexes; merges never cross a
word boundary. Which regexes a model uses is not in the GGUF: only a name is
(``tokenizer.ggml.pre``), and llama.cpp maps that name to its regex list in
``src/llama-vocab.cpp`` (``llm_tokenizer_bpe``). This table mirrors that mapping for the names
llmnb supports. Each regex is applied in turn, and both the matches and the text between them
become words ("isolated" splitting), exactly as llama.cpp's ``unicode_regex_split`` does.

The table is the one list of pre-tokenizer names: the tokenizer builds from it, and
``detect_pre`` (``llmnb convert``'s guess of the name for a Hugging Face ``tokenizer.json``)
answers with its names.
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

# Qwen3.5: the Qwen2 regex with combining marks (\p{M}) kept inside letter runs.
QWEN35_REGEX: Final = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+"
    r"|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Falcon: runs of punctuation first, then GPT-2, then three-digit groups.
FALCON_REGEXES: Final = (r"[\p{P}\$\+<=>\^~\|`]+", GPT2_REGEX, r"[0-9][0-9][0-9]")

# llama.cpp matches a regex with literal non-ASCII characters against the text with every
# non-ASCII whitespace character replaced by \v (std::wregex's \s knows only ASCII), so such a
# space never falls in a literal range: the ranges below leave out U+1680, U+2000-U+200A,
# U+2028, U+2029, U+202F, U+205F and U+3000 where the tokenizers wrote them in.

# Runs of CJK ideographs (U+4E00-U+9FA5), of everything from U+0800 up to them (as written
# in the DeepSeek tokenizers) and of Hangul syllables.
CJK_RUNS: Final = ("[\u4e00-\u9fa5\u0800-\u167f\u1681-\u1fff\u200b-\u2027\u202a-\u202e"
                   "\u2030-\u205e\u2060-\u2fff\u3001-\u4e00\uac00-\ud7ff]+")

# DeepSeek LLM: newlines alone, letter words (one listed set of scripts, explicit ranges),
# ASCII/full-width punctuation runs, trailing whitespace, CJK runs, digit runs.
DEEPSEEK_LLM_REGEXES: Final = (
    "[\r\n]",
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293"
    "\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c"
    "\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5"
    "\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
    "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59"
    "\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc"
    "\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
    "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee"
    "\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e"
    "\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f"
    "\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    "\U000118a0-\U000118df\U0001e900-\U0001e943]+",
    "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3001-\u3002]+",
    r"\s+$",
    CJK_RUNS,
    r"\p{N}+",
)

# DeepSeek Coder: newlines alone, letter runs, punctuation runs, CJK runs, single digits.
DEEPSEEK_CODER_REGEXES: Final = (
    "[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK_RUNS, r"\p{N}",
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

# The other pre-tokenizers llama.cpp's vocabulary tests use: GPT-2's regex under MPT's name,
# StarCoder's under Refact's and Command R's, and the families with regexes of their own.
PRE_TOKENIZERS.update({
    "mpt": ((GPT2_REGEX,), False),
    "refact": ((r"\p{N}", GPT2_REGEX), False),
    "command-r": ((r"\p{N}", GPT2_REGEX), False),
    "falcon": (FALCON_REGEXES, False),
    "deepseek-llm": (DEEPSEEK_LLM_REGEXES, False),
    "deepseek-coder": (DEEPSEEK_CODER_REGEXES, False),
    "qwen35": ((QWEN35_REGEX,), False),
})


def supported_pre_tokenizers() -> list[str]:
    """The ``tokenizer.ggml.pre`` names llmnb can build, sorted."""
    return sorted(PRE_TOKENIZERS)


def _split_patterns(pre: object) -> tuple[list[str], bool]:
    """The Split regexes of a tokenizer.json pre-tokenizer, and whether ByteLevel splits too
    (``use_regex``: GPT-2's regex, built into the step)."""
    steps = pre.get("pretokenizers", [pre]) if isinstance(pre, dict) else []
    regexes: list[str] = []
    byte_level_regex = False
    for s in steps:
        if not isinstance(s, dict):
            continue
        pattern = s.get("pattern")
        if s.get("type") == "Split" and isinstance(pattern, dict):
            regexes.append(str(pattern.get("Regex", pattern.get("String", ""))))
        if s.get("type") == "ByteLevel" and s.get("use_regex", True):
            byte_level_regex = True
    return regexes, byte_level_regex


def detect_pre(pre: object) -> str | None:
    """The ``PRE_TOKENIZERS`` name (llama.cpp's ``tokenizer.ggml.pre``) of a tokenizer.json
    ``pre_tokenizer``, or None when it is none of these. Hugging Face writes the regexes its
    own way (``(?i:'s|'t|...)`` where llama.cpp spells out the cases), so the families are
    told apart by their distinctive parts: Llama 3's three-digit groups, Qwen2's single
    digits after a letter run that may take one leading symbol, SmolLM's digit split before
    GPT-2's byte-level regex, GPT-2's byte-level regex alone."""
    regexes, gpt2 = _split_patterns(pre)
    joined = " ".join(regexes)
    if "\\p{N}{1,3}" in joined and "\\p{L}+" in joined:
        return "llama-bpe"                                   # Llama 3 (and LLaDA's tokenizer)
    if "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+" in joined and "|\\p{N}|" in joined:
        return "qwen2"                                       # Qwen2 / Dream
    if regexes == ["\\p{N}"] and gpt2:
        return "smollm"
    if not regexes and gpt2:
        return "gpt2"
    return None


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
