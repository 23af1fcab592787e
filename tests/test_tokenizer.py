"""The tokenizer: token-for-token parity with llama.cpp's ``llama-tokenize`` on the same GGUF,
round trips, special ids, and one clear TokenizerError for each malformed vocabulary.

The expected ids are llama.cpp's output, recorded by ``tools/make_tokenizer_fixtures.py``
into ``tests/fixtures/tokenizer/`` (see the README there).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import llmnb
from llmnb.errors import EXIT_MODEL
from llmnb.tokenizer import (
    Tokenizer, TokenizerError, supported_pre_tokenizers, tokenizer_from_json,
    tokenizer_from_metadata,
)
from llmnb.tokenizer.byte_bpe import BYTE_TO_CHAR, UNKNOWN_BYTE
from llmnb.tokenizer.sentencepiece import merges_from_scores
from real_models import hub_model, llama_cpp_vocab

FIXTURES = Path(__file__).parent / "fixtures" / "tokenizer"
HUB = {"smollm2": "smollm2-135m", "qwen2": "qwen2.5-coder-0.5b", "gemma3": "gemma3-270m"}
# llama.cpp's vocabulary-only test files with .inp/.out tests (not committed: third-party
# vocabularies; `make vocab` fetches them), one per pre-tokenizer or vocabulary kind
VOCABS = ["bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "gpt-2",
          "llama-bpe", "llama-spm", "mpt", "phi-3", "qwen2", "qwen35", "refact", "starcoder"]
VOCAB_LABELS = {"vocab_" + v.replace("-", "_"): v for v in VOCABS}


_FIXTURES: dict[str, dict[str, Any]] = {}


def load_fixture(label: str) -> dict[str, Any]:
    if label not in _FIXTURES:
        _FIXTURES[label] = json.loads((FIXTURES / f"{label}_llamacpp_ids.json").read_text("utf-8"))
    return _FIXTURES[label]


def build(path: Path) -> Tokenizer:
    return tokenizer_from_metadata(llmnb.gguf.open(path).metadata, str(path))


_CACHE: dict[str, Tokenizer] = {}


def tokenizer_for(label: str) -> Tokenizer:
    """The tokenizer of a fixture's model, built once per test session."""
    if label not in _CACHE:
        if label in HUB:
            path = hub_model(HUB[label])
        elif label == "tiny_spm":
            path = FIXTURES / "tiny_spm.gguf"
        else:
            path = llama_cpp_vocab(VOCAB_LABELS[label])
        _CACHE[label] = build(path)
    return _CACHE[label]


LABELS = ["smollm2", "qwen2", "gemma3", "tiny_spm", *VOCAB_LABELS]


def show(failures: list[str], total: int) -> str:
    return f"{len(failures)}/{total} strings differ; first ones:\n" + "\n".join(failures[:5])


# -- parity with llama.cpp --------------------------------------------------------------

def read_vocab_tests(path: Path) -> list[tuple[str, list[int]]]:
    """llama.cpp's test-tokenizer-0 cases: the .inp strings (separated by
    '\\n__ggml_vocab_test__\\n') and the .out id lines, paired in order."""
    raw = path.with_name(path.name + ".inp").read_bytes().decode("utf-8")   # bytes as they are
    sep = "\n__ggml_vocab_test__\n"
    texts = raw.split(sep)
    if raw.endswith(sep):
        texts.pop()                          # a trailing separator opens no case
    lines = path.with_name(path.name + ".out").read_bytes().decode("utf-8").split("\n")
    assert len(lines) >= len(texts) and not any(lines[len(texts):])
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines)]


@pytest.mark.parametrize("name", VOCABS)
def test_llama_cpp_vocab_test_strings_give_their_out_ids(name: str) -> None:
    """llama.cpp's own tokenizer test (test-tokenizer-0: no BOS, no special parsing)."""
    path = llama_cpp_vocab(name)
    tok = tokenizer_for("vocab_" + name.replace("-", "_"))
    cases = read_vocab_tests(path)
    assert len(cases) >= 46
    failures = [f"{text!r}: llmnb {got} != {want}" for text, want in cases
                if (got := tok.encode(text)) != want]
    assert not failures, show(failures, len(cases))


@pytest.mark.parametrize("label", LABELS)
def test_encode_ids_equal_llama_tokenize(label: str) -> None:
    tok = tokenizer_for(label)
    add = tok.add_bos   # llama-tokenize adds BOS when the file asks for it
    cases = load_fixture(label)["cases"]
    failures = []
    for case in cases:
        for key, special in (("ids", False), ("ids_parse_special", True)):
            got = tok.encode(case["text"], special=special, add_special=add)
            if got != case[key]:
                failures.append(f"{key} {case['text']!r}: llmnb {got} != llama.cpp {case[key]}")
    assert not failures, show(failures, len(cases))


@pytest.mark.parametrize("label", [label for label in LABELS if label != "vocab_bert_bge"])
def test_decode_encode_round_trips_where_llama_cpp_does(label: str) -> None:
    tok = tokenizer_for(label)
    checked, failures = 0, []
    for case in load_fixture(label)["cases"]:
        llama_text = case["llamacpp_detokenized"]
        if tok.add_space_prefix and llama_text and llama_text.startswith(" "):
            llama_text = llama_text[1:]      # llama.cpp's detokenizer drops the prefix space too
        if llama_text != case["text"]:
            continue                         # llama.cpp's own pieces do not give the text back
        checked += 1
        text = case["text"]
        if tok.decode(tok.encode(text)) != text:
            failures.append(repr(text))
        if tok.kind == "gpt2" and tok.decode(tok.encode(text, special=True)) != text:
            failures.append(f"special=True {text!r}")   # byte-level: exact in both modes
    assert checked >= 40
    assert not failures, show(failures, checked)


@pytest.mark.parametrize("label", LABELS)
def test_token_bytes_equal_llama_cpp_pieces(label: str) -> None:
    tok = tokenizer_for(label)
    failures = []
    for case in load_fixture(label)["cases"]:
        if case["llamacpp_detokenized"] is None:
            continue                         # pieces not valid UTF-8 together
        ids = case["ids"][1:] if tok.add_bos else case["ids"]   # pieces were made without BOS
        ids = ids[:-1] if tok.add_sep else ids                  # ... and without WordPiece's [SEP]
        pieces = b"".join(tok.token_bytes(t) for t in ids)
        if pieces != case["llamacpp_detokenized"].encode("utf-8"):
            failures.append(f"{case['text']!r}: {pieces!r}")
    assert not failures, show(failures, len(load_fixture(label)["cases"]))


def test_fixtures_cover_at_least_40_strings_per_real_model() -> None:
    for label in ("smollm2", "qwen2", "gemma3"):
        data = load_fixture(label)
        assert len(data["cases"]) >= 40
        assert "--no-parse-special" in data["command"]["ids"]
        assert data["llama_cpp_version"]


def test_parse_special_turns_chatml_text_into_control_ids() -> None:
    tok = tokenizer_for("smollm2")
    plain = tok.encode("<|im_start|>user")
    parsed = tok.encode("<|im_start|>user", special=True)
    assert parsed[0] == 1 and 1 not in plain
    assert tok.decode(plain) == tok.decode(parsed) == "<|im_start|>user"


# -- special ids and metadata -----------------------------------------------------------

def test_smollm2_special_ids_match_models_md() -> None:
    tok = tokenizer_for("smollm2")
    assert (tok.vocab_size, tok.bos_id, tok.eos_id, tok.eot_id, tok.unk_id, tok.pad_id) == \
        (49152, 1, 2, 2, 0, 2)
    assert tok.add_bos is False
    assert tok.token_text(1) == "<|im_start|>"
    assert tok.eog_ids == [2]
    assert tok.chat_template is not None and len(tok.chat_template) == 368


def test_qwen2_special_ids_match_models_md() -> None:
    tok = tokenizer_for("qwen2")
    assert (tok.vocab_size, tok.bos_id, tok.eos_id, tok.eot_id, tok.pad_id) == \
        (151936, 151643, 151645, 151645, 151643)
    assert tok.add_bos is False and tok.pre == "qwen2"
    assert tok.token_text(151644) == "<|im_start|>"


def test_gemma3_is_sentencepiece_with_bos() -> None:
    tok = tokenizer_for("gemma3")
    assert tok.kind == "llama" and tok.vocab_size == 262144
    assert (tok.bos_id, tok.eos_id, tok.unk_id, tok.pad_id, tok.add_bos) == (2, 1, 3, 0, True)
    assert tok.encode("Hi", add_special=True)[0] == 2
    assert tok.chat_template is None


def test_token_ids_are_python_ints() -> None:
    tok = tokenizer_for("smollm2")
    ids = tok.encode("Hello")
    assert all(type(i) is int for i in ids)
    assert type(tok.bos_id) is int and type(tok.vocab_size) is int


def test_decode_rejects_out_of_range_id() -> None:
    tok = tokenizer_for("tiny_spm")
    with pytest.raises(TokenizerError, match="token id"):
        tok.decode([tok.vocab_size])
    with pytest.raises(TokenizerError, match="token id"):
        tok.token_text(-1)


# -- by-hand checks of the two algorithms -------------------------------------------------

def test_byte_alphabet_maps_space_and_newline_like_gpt2() -> None:
    assert BYTE_TO_CHAR[ord(" ")] == "Ġ" and BYTE_TO_CHAR[ord("\n")] == "Ċ"
    assert BYTE_TO_CHAR[ord("a")] == "a" and len(set(BYTE_TO_CHAR.values())) == 256


def test_merges_from_scores_rank_by_merged_piece_score() -> None:
    tokens = ["a", "b", "c", "ab", "bc", "abc", "<0x41>"]
    types = [1, 1, 1, 1, 1, 1, 6]
    scores = [0.0, 0.0, 0.0, -2.0, -1.0, -3.0, 0.0]
    assert merges_from_scores(tokens, types, scores) == [
        ["b", "c"], ["a", "b"], ["a", "bc"], ["ab", "c"]]


# -- tokenizer.json -----------------------------------------------------------------------

def test_tokenizer_json_gives_the_same_ids_and_reads_its_config(tmp_path: Path) -> None:
    gguf_tok = tokenizer_for("smollm2")
    spec = json.loads(gguf_tok.hf.to_str())       # as a Hugging Face file has it: without
    spec["model"]["unk_token"] = None             # llmnb's placeholder for bytes with no token
    del spec["model"]["vocab"][UNKNOWN_BYTE]
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"},
        "add_bos_token": False, "chat_template": "{{ messages[0]['content'] }}"}))
    tok = tokenizer_from_json(tmp_path / "tokenizer.json")
    for case in load_fixture("smollm2")["cases"]:
        assert tok.encode(case["text"]) == case["ids"]
        assert tok.encode(case["text"], special=True) == case["ids_parse_special"]
    assert (tok.bos_id, tok.eos_id, tok.eot_id, tok.vocab_size) == (1, 2, 2, 49152)
    assert tok.render_chat([{"role": "user", "content": "x"}]) == "x"


def test_tokenizer_json_missing_file_is_tokenizer_error(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="tokenizer.json"):
        tokenizer_from_json(tmp_path / "tokenizer.json")


# -- malformed vocabularies ---------------------------------------------------------------

def tiny_bpe_metadata() -> dict[str, object]:
    """A valid 10-token byte-level BPE vocabulary: bytes 'a','b',' ' and a few merges."""
    g = BYTE_TO_CHAR
    tokens = [g[ord("a")], g[ord("b")], g[ord(" ")], "ab", g[ord(" ")] + "a", "<|end|>"]
    return {
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": np.array([1, 1, 1, 1, 1, 3], dtype=np.int32),
        "tokenizer.ggml.merges": ["a b", "Ġ a"],
        "tokenizer.ggml.eos_token_id": 5,
    }


def test_a_byte_without_a_token_blocks_merges_and_is_dropped_as_in_llama_cpp() -> None:
    """Falcon's vocabulary has no token for byte 0x1C: llama.cpp keeps it in the word " \\x1c؈"
    (so ' ' and the Arabic sign's first byte do not merge) and drops it from the output."""
    tok = tokenizer_for("vocab_falcon")
    assert BYTE_TO_CHAR[0x1C] not in tok.tokens
    ids = tok.encode(" \x1c\u0608")
    assert [tok.token_text(i) for i in ids] == ["Ġ", "Ø", "Ī"]
    assert tok.encode(" \u0608") != ids               # without the byte, the merge happens


@pytest.mark.parametrize("label,text,want", [
    # llama.cpp's ids (libllama): its literal ranges never see a non-ASCII space, so the thin
    # space U+2009 joins 's' (deepseek-coder) and U+3000 is no punctuation (deepseek-llm)
    ("vocab_deepseek_coder", "a\u2009s", [64, 350, 6950]),
    ("vocab_deepseek_llm", "a\u2009s", [64, 36004, 82]),
    ("vocab_deepseek_llm", "\uff0c\u3000\u3002", [19304, 88946, 398]),
])
def test_non_ascii_space_outside_literal_ranges_as_in_llama_cpp(label: str, text: str,
                                                                  want: list[int]) -> None:
    assert tokenizer_for(label).encode(text) == want


def test_tiny_bpe_vocabulary_merges_by_rank() -> None:
    tok = tokenizer_from_metadata(tiny_bpe_metadata(), "tiny.gguf")
    assert tok.encode("ab a") == [3, 4]
    assert tok.encode("<|end|>", special=True) == [5] and tok.eot_id == 5


@pytest.mark.parametrize("key,value,message", [
    ("tokenizer.ggml.model", None, "tokenizer.ggml.model: expected a string"),
    ("tokenizer.ggml.model", "t5", "one of 'gpt2' .*'bert' \\(WordPiece\\), got 't5'"),
    ("tokenizer.ggml.pre", "viking", "tokenizer.ggml.pre: expected a pre-tokenizer llmnb knows"),
    ("tokenizer.ggml.tokens", None, "tokenizer.ggml.tokens: expected an array of strings"),
    ("tokenizer.ggml.tokens", [], "non-empty"),
    ("tokenizer.ggml.tokens", [1, 2], "an array of strings"),
    ("tokenizer.ggml.merges", None, "tokenizer.ggml.merges: expected an array of strings"),
    ("tokenizer.ggml.merges", ["ab"], "entry 0 is 'ab'"),
    ("tokenizer.ggml.merges", ["a zz"], "tokenizers said"),
    ("tokenizer.ggml.token_type", np.array([1.5] * 6), "array of integers"),
    ("tokenizer.ggml.token_type", np.array([1, 1], dtype=np.int32), "at least 6 entries"),
    ("tokenizer.ggml.eos_token_id", 99, r"a token id in \[0, 6\), got 99"),
    ("tokenizer.ggml.eos_token_id", "5", "an integer token id"),
    ("tokenizer.ggml.add_bos_token", 1, "tokenizer.ggml.add_bos_token: expected a bool"),
    ("tokenizer.chat_template", 7, "tokenizer.chat_template: expected a string"),
])
def test_malformed_vocabulary_is_one_tokenizer_error(key: str, value: object,
                                                      message: str) -> None:
    md = tiny_bpe_metadata()
    if value is None:
        del md[key]
    else:
        md[key] = value
    with pytest.raises(TokenizerError, match=message) as info:
        tokenizer_from_metadata(md, "bad.gguf")
    assert str(info.value).startswith("bad.gguf: ")
    assert info.value.exit_code == EXIT_MODEL


def test_sentencepiece_without_scores_is_tokenizer_error_and_unk_defaults_to_id_0() -> None:
    md: dict[str, object] = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a", "b"]}
    with pytest.raises(TokenizerError, match="tokenizer.ggml.scores"):
        tokenizer_from_metadata(md, "spm.gguf")
    md["tokenizer.ggml.scores"] = np.zeros(2, dtype=np.float32)
    tok = tokenizer_from_metadata(md, "spm.gguf")   # no unk named: id 0, as llama.cpp does
    assert tok.encode("c") == [0]


def test_unknown_pre_tokenizer_message_lists_supported_names() -> None:
    md = tiny_bpe_metadata()
    md["tokenizer.ggml.pre"] = "mystery"
    with pytest.raises(TokenizerError) as info:
        tokenizer_from_metadata(md, "m.gguf")
    for name in ("llama-bpe", "smollm", "qwen2", "gpt2", "command-r", "deepseek-coder",
                 "deepseek-llm", "falcon", "mpt", "qwen35", "refact"):
        assert name in supported_pre_tokenizers() and name in str(info.value)
