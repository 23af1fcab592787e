"""Chat templates: render a model's Jinja chat template the way Hugging Face transformers does.

A GGUF carries its chat template as Jinja text (``tokenizer.chat_template``). Like transformers'
``apply_chat_template``, llmnb renders it in jinja2's ``ImmutableSandboxedEnvironment`` (the
template comes from a file and may be hostile: attribute walks such as ``__class__`` and
mutation of the inputs are refused) with ``trim_blocks`` and ``lstrip_blocks`` on, the
``loopcontrols`` extension, a ``tojson`` filter that keeps non-ASCII text, and the globals
``raise_exception`` and ``strftime_now``. The variables are ``messages``,
``add_generation_prompt``, ``bos_token``, ``eos_token`` and any extra keyword. The sandbox
does not bound time or memory, so ``llmnb.tokenizer.sandbox`` adds limits (``SandboxLimits``:
wall time, loop iterations, string/list/output length, integer size); a template beyond them is
refused.

Built-in templates (the models' own, from their ``tokenizer_config.json``) are used when a
file has none, e.g. diffuse-cpp's GGUFs, which carry no tokenizer at all.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Final

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from llmnb.tokenizer.errors import TokenizerError
from llmnb.tokenizer.sandbox import (
    SandboxLimits, bound_environment, compile_bounded, render_bounded,
)

# Plain ChatML (<|im_start|>role\ncontent<|im_end|>\n), no default system prompt.
CHATML: Final = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Meta Llama 3 Instruct: BOS, then <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>.
LLAMA3: Final = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)

# GSAI-ML/LLaDA-8B-Instruct: the Llama 3 layout with BOS <|startoftext|>; its template appends
# the assistant header unconditionally (add_generation_prompt is ignored), kept as the model has it.
LLADA: Final = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
)

# Dream-org/Dream-v0-Instruct-7B: ChatML (Qwen2.5 tokenizer) with the default system prompt
# "You are a helpful assistant." when the conversation does not start with a system message.
DREAM: Final = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

BUILTIN_TEMPLATES: Final[dict[str, str]] = {
    "chatml": CHATML, "llama3": LLAMA3, "llada": LLADA, "dream": DREAM,
}
# The BOS text each built-in template expects when the vocabulary cannot say.
BUILTIN_BOS: Final[dict[str, str]] = {"llama3": "<|begin_of_text|>", "llada": "<|startoftext|>"}


def builtin_template(name: str) -> str:
    """The Jinja text of a built-in template, by name (``chatml``, ``llama3``, ``llada``,
    ``dream``)."""
    text = BUILTIN_TEMPLATES.get(name.lower())
    if text is None:
        raise TokenizerError("chat template", name,
                             "one of " + ", ".join(sorted(BUILTIN_TEMPLATES)))
    return text


# -- the sandboxed environment -----------------------------------------------------------

def raise_exception(message: str) -> str:
    """Called by templates to refuse their input (e.g. roles out of order)."""
    raise jinja2.TemplateError(message)


def tojson(value: object, ensure_ascii: bool = False, indent: int | None = None,
           separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    """``tojson`` as transformers defines it: plain ``json.dumps``, non-ASCII kept, no HTML
    escaping."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt: str) -> str:
    """The current local time formatted (templates print today's date with it)."""
    return datetime.now().strftime(fmt)


def make_environment() -> ImmutableSandboxedEnvironment:
    """The Jinja environment transformers uses for chat templates (minus its
    ``{% generation %}`` tag, which only marks assistant spans for training masks), with
    llmnb's resource guards installed (``sandbox.bound_environment``)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    bound_environment(env)
    return env


@functools.lru_cache(maxsize=1)
def environment() -> ImmutableSandboxedEnvironment:
    """The one sandboxed environment every template is compiled in."""
    return make_environment()


@functools.lru_cache(maxsize=32)       # a process meets a few templates: the last 32 are kept
def _compiled(template: str) -> jinja2.Template:
    return compile_bounded(environment(), template)


def compile_template(template: str, source: str = "chat template") -> jinja2.Template:
    """Parse ``template`` once (cached by its text); a syntax error becomes ``TokenizerError``."""
    try:
        return _compiled(template)
    except jinja2.TemplateSyntaxError as e:
        raise TokenizerError(source, "tokenizer.chat_template",
                             f"valid Jinja; syntax error at template line {e.lineno}: {e.message}"
                             ) from None


def render_chat(template: str, messages: Sequence[Mapping[str, object]],
                add_generation_prompt: bool = True, *, bos_token: str = "", eos_token: str = "",
                source: str = "chat template", limits: SandboxLimits | None = None,
                **extra: object) -> str:
    """Render ``messages`` (dicts with ``role`` and ``content``) with the Jinja ``template``.

    Template errors — syntax, a sandbox violation, a resource limit (``limits``, default
    ``SandboxLimits()``), ``raise_exception``, an undefined variable used wrongly, deep
    recursion — raise ``TokenizerError`` naming ``source``.
    """
    compiled = compile_template(template, source)
    context: dict[str, object] = dict(extra)
    context["messages"] = [dict(m) for m in messages]
    context["add_generation_prompt"] = add_generation_prompt
    context["bos_token"] = bos_token
    context["eos_token"] = eos_token
    try:
        text = render_bounded(compiled, context, limits)
    except jinja2.exceptions.SecurityError as e:
        raise TokenizerError(source, "tokenizer.chat_template",
                             f"a template the sandbox allows; it refused: {e}") from None
    except RecursionError:
        raise TokenizerError(source, "tokenizer.chat_template",
                             "a template that renders these messages; it recursed too deeply"
                             ) from None
    except MemoryError:
        raise TokenizerError(source, "tokenizer.chat_template",
                             "a template that renders these messages; it ran out of memory"
                             ) from None
    except Exception as e:  # noqa: BLE001 - the template is untrusted code: any failure is its own
        # TemplateError covers raise_exception() and undefined variables; TypeError a message
        # field of the wrong type (e.g. content None added to a str); OverflowError a range
        # beyond the sandbox's 100,000 items.
        raise TokenizerError(source, "tokenizer.chat_template",
                             f"a template that renders these messages; it raised "
                             f"{type(e).__name__}: {e}") from None
    return text
