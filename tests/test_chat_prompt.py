"""Chat prompts are tokenized as llama.cpp tokenizes them (``common_chat_templates_apply`` then
``common_tokenize(add_special=true, parse_special=true)``): the model's BOS is added when it
asks for one, a BOS the template wrote itself is not doubled, special-token text is parsed.

The oracle is llama.cpp's ``llama-tokenize`` in its default mode (BOS when the file asks,
special text parsed): ``ids_parse_special`` in tests/fixtures/tokenizer. A chat template that
passes the text through unchanged must give those ids exactly.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import llmnb
from llmnb.model.model import Model
from test_tokenizer import load_fixture, tokenizer_for

ORACLE = Path(__file__).parent / "fixtures" / "oracle"
VERBATIM = "{{ messages[0]['content'] }}"                   # no {{ bos_token }}
WITH_BOS = "{{ bos_token }}{{ messages[0]['content'] }}"


@pytest.fixture
def chat_model(monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], Model]:
    """A tiny model whose tokenizer is `label`'s, with chat `template` (weights never run);
    the shared tokenizer gets its own template back afterwards."""
    def make(label: str, template: str) -> Model:
        m = llmnb.load(ORACLE / "llama_f32.gguf")
        tok = tokenizer_for(label)
        monkeypatch.setattr(tok, "chat_template", template)
        m.tokenizer = tok
        return m
    return make


@pytest.mark.parametrize("label", ["gemma3", "tiny_spm", "vocab_llama_spm", "smollm2"])
def test_chat_prompt_ids_equal_llama_cpp_for_a_template_without_bos_token(
        label: str, chat_model: Callable[[str, str], Model]) -> None:
    """SentencePiece models (Gemma 3, Llama 2) add BOS; SmolLM2 does not: both as llama.cpp."""
    m = chat_model(label, VERBATIM)
    failures = []
    for case in load_fixture(label)["cases"]:
        text = case["text"]
        if not text or text.startswith(m.tokenizer.token_text(m.tokenizer.bos_id or 0)):
            continue    # the empty text renders to nothing; a BOS-led text is the next test's
        got = m.prompt_ids(text, chat=True)
        if got != case["ids_parse_special"]:
            failures.append(f"{text!r}: llmnb {got} != llama.cpp {case['ids_parse_special']}")
    assert not failures, "\n".join(failures[:5])


def test_template_with_bos_token_gives_one_bos_on_a_model_that_adds_it(
        chat_model: Callable[[str, str], Model]) -> None:
    with_bos = chat_model("gemma3", WITH_BOS)
    ids = with_bos.prompt_ids("Hello world", chat=True)
    assert ids[0] == 2 and ids.count(2) == 1
    assert ids == chat_model("gemma3", VERBATIM).prompt_ids("Hello world", chat=True)


def test_template_bos_stays_on_a_model_that_adds_none(
        chat_model: Callable[[str, str], Model]) -> None:
    """SmolLM2's BOS is <|im_start|> (add_bos false): the template's text becomes its id,
    nothing is stripped or added."""
    m = chat_model("smollm2", WITH_BOS)
    ids = m.prompt_ids("Hi", chat=True)
    assert ids == [1] + m.tokenizer.encode("Hi")


def test_plain_prompt_still_adds_bos_and_parses_no_special_text(
        chat_model: Callable[[str, str], Model]) -> None:
    m = chat_model("gemma3", VERBATIM)
    case = next(c for c in load_fixture("gemma3")["cases"] if c["text"] == "<|endoftext|>")
    assert m.prompt_ids(case["text"]) == case["ids"]
