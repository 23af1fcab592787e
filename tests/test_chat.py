"""Chat templates: the embedded templates render the exact text the models were trained on,
the built-ins match their models, and the sandbox refuses hostile templates."""
from __future__ import annotations

import re

import pytest

import llmnb
from llmnb.errors import EXIT_MODEL
from llmnb.tokenizer import (
    BUILTIN_TEMPLATES, TokenizerError, builtin_template, render_chat, tokenizer_from_metadata,
)
from real_models import hub_model

USER = [{"role": "user", "content": "What is 2+2?"}]


def gguf_template(name: str) -> str:
    template = llmnb.gguf.open(hub_model(name)).metadata["tokenizer.chat_template"]
    assert isinstance(template, str)
    return template


def test_smollm2_template_renders_chatml_with_its_default_system_prompt() -> None:
    text = render_chat(gguf_template("smollm2-135m"), USER)
    assert text == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                    "Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                    "<|im_start|>assistant\n")


def test_smollm2_template_keeps_a_given_system_prompt_and_omits_the_generation_prompt() -> None:
    messages = [{"role": "system", "content": "Be brief."}, *USER,
                {"role": "assistant", "content": "4"}]
    text = render_chat(gguf_template("smollm2-135m"), messages, add_generation_prompt=False)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?"
                    "<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n")


def test_qwen2_template_inserts_qwen_system_prompt() -> None:
    text = render_chat(gguf_template("qwen2.5-coder-0.5b"), USER)
    assert text == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                    "assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                    "<|im_start|>assistant\n")


def test_tokenizer_render_chat_then_encode_special_gives_control_ids() -> None:
    path = hub_model("smollm2-135m")
    tok = tokenizer_from_metadata(llmnb.gguf.open(path).metadata, str(path))
    ids = tok.encode(tok.render_chat(USER), special=True)
    assert ids[0] == 1 and ids.count(1) == 3 and ids.count(2) == 2   # 3 im_start, 2 im_end
    assert tok.decode(ids).endswith("<|im_start|>assistant\n")


def test_builtin_chatml_and_dream() -> None:
    assert render_chat(builtin_template("chatml"), USER) == (
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    assert render_chat(builtin_template("dream"), USER) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    with_system = [{"role": "system", "content": "S"}, *USER]
    assert render_chat(builtin_template("dream"), with_system).count("system") == 1


def test_builtin_llama3_trims_content_and_starts_with_bos() -> None:
    text = render_chat(builtin_template("llama3"), [{"role": "user", "content": "  hi \n"}],
                       bos_token="<|begin_of_text|>")
    assert text == ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert not render_chat(builtin_template("llama3"), USER, add_generation_prompt=False
                           ).endswith("<|end_header_id|>\n\n")


def test_builtin_llada_matches_diffuse_cpp_default_prompt_skeleton() -> None:
    # diffuse-cpp's run-benchmark.sh prompt (reference/diffuse-cpp.md §7): its special ids are
    # 126080 <|startoftext|>, 126346/126347 header start/end, 126348 <|eot_id|>.
    ids = [126080, 126346, 18621, 126347, 198, 198, 2496, 449, 259, 9031, 16841, 13, 126348,
           126346, 3840, 126347, 198, 198, 2372, 341, 268, 7706, 300, 11406, 30, 126348, 126346,
           598, 10450, 126347, 198, 198]
    names = {126080: "<|startoftext|>", 126346: "<|start_header_id|>",
             126347: "<|end_header_id|>", 126348: "<|eot_id|>"}
    text = render_chat(builtin_template("llada"),
                       [{"role": "system", "content": "You are a helpful assistant."},
                        {"role": "user", "content": "What is the capital of France?"}],
                       bos_token="<|startoftext|>")
    markers = re.findall(r"<\|[a-z_]+\|>", text)
    assert markers == [names[i] for i in ids if i in names]
    assert text.startswith("<|startoftext|><|start_header_id|>system<|end_header_id|>\n\n")
    assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_builtin_names_and_unknown_name() -> None:
    assert sorted(BUILTIN_TEMPLATES) == ["chatml", "dream", "llada", "llama3"]
    with pytest.raises(TokenizerError, match="one of chatml, dream, llada, llama3"):
        builtin_template("vicuna")


def test_trim_and_lstrip_blocks_are_on_as_in_transformers() -> None:
    template = ("{% for m in messages %}\n    {% if true %}\n[{{ m['content'] }}]\n{% endif %}\n"
                "{% endfor %}")
    assert render_chat(template, USER) == "[What is 2+2?]\n"


def test_tojson_keeps_non_ascii_and_strftime_now_exists() -> None:
    out = render_chat("{{ messages[0] | tojson }}|{{ strftime_now('%Y') | length }}",
                      [{"role": "user", "content": "café"}])
    assert out == '{"role": "user", "content": "café"}|4'


# -- hostile and broken templates -------------------------------------------------------

def test_sandbox_blocks_mro_walk_to_subclasses() -> None:
    hostile = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(TokenizerError, match="sandbox allows.*unsafe") as info:
        render_chat(hostile, USER, source="evil.gguf")
    assert str(info.value).startswith("evil.gguf: tokenizer.chat_template:")
    assert info.value.exit_code == EXIT_MODEL


def test_sandbox_blocks_mutating_the_messages() -> None:
    messages = [dict(m) for m in USER]
    with pytest.raises(TokenizerError, match="unsafe"):
        render_chat("{% set _ = messages.append({'role': 'x'}) %}", messages)
    assert messages == USER


def test_raise_exception_becomes_tokenizer_error() -> None:
    template = ("{% if messages[0]['role'] != 'system' %}"
                "{{ raise_exception('need a system turn') }}{% endif %}")
    with pytest.raises(TokenizerError, match="need a system turn"):
        render_chat(template, USER)


def test_syntax_error_names_the_line() -> None:
    with pytest.raises(TokenizerError, match="syntax error at template line 2"):
        render_chat("ok\n{% for m in messages %}", USER)


def test_tokenizer_without_template_asks_for_a_name() -> None:
    md: dict[str, object] = {
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt2",
        "tokenizer.ggml.tokens": ["a", "<|im_start|>", "<|im_end|>"],
        "tokenizer.ggml.token_type": [1, 3, 3], "tokenizer.ggml.merges": []}
    tok = tokenizer_from_metadata(md, "none.gguf")
    with pytest.raises(TokenizerError, match="pass template=NAME"):
        tok.render_chat(USER)
    assert tok.render_chat(USER, template="chatml").startswith("<|im_start|>user\n")
