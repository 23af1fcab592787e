"""Hostile chat templates: refused or bounded, always one TokenizerError naming the limit.

A GGUF's tokenizer.chat_template is code from the file. jinja2's sandbox keeps it away from
Python internals; llmnb.tokenizer.sandbox bounds its time and memory (SandboxLimits). Each
attack here would otherwise read interpreter state, run for hours or allocate gigabytes;
each is refused before the work is done (the tests run in well under a second each).
test_chat.py has the first sandbox cases (an MRO walk, mutating the messages).
"""
from __future__ import annotations

import pytest

from llmnb.errors import EXIT_MODEL
from llmnb.tokenizer import TokenizerError, render_chat
from llmnb.tokenizer.sandbox import SandboxLimits

USER = [{"role": "user", "content": "hi"}]


def refused(template: str, match: str, limits: SandboxLimits | None = None) -> TokenizerError:
    with pytest.raises(TokenizerError, match=match) as e:
        render_chat(template, USER, source="evil.gguf", limits=limits)
    assert str(e.value).startswith("evil.gguf: tokenizer.chat_template: expected a template")
    assert e.value.exit_code == EXIT_MODEL
    return e.value


# --- reaching Python internals ------------------------------------------------------------------

@pytest.mark.parametrize("walk", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ messages.__class__.__base__.__subclasses__() }}",
    "{{ raise_exception.__globals__['__builtins__'] }}",
    "{{ strftime_now.__globals__.datetime }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ (''|attr('__class__')).__mro__ }}",
    "{{ ''['__class__']['__mro__'] }}",
    "{{ messages[0].__class__.__dict__ }}",
    "{{ self._TemplateReference__context.environment }}",
    "{{ ''.format.__self__ }}",
    "{{ '{0.__class__.__mro__}'.format('') }}",
    "{% set x = ''.__class__ %}{{ x.__subclasses__() }}",
])
def test_attribute_walks_reach_nothing(walk: str) -> None:
    try:
        out = render_chat(walk, USER)
    except TokenizerError as e:   # refused, or undefined (compiled functions have no __globals__)
        assert "unsafe" in str(e) or "undefined" in str(e).lower(), str(e)
        return
    assert out == "", out   # an undefined value: nothing from Python's internals is printed


# --- loops and time -------------------------------------------------------------------------------

def test_nested_loops_are_refused_past_the_iteration_budget() -> None:
    refused("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            "looped more than 1,000,000 times")
    small = SandboxLimits(iterations=1000)
    refused("{% for i in range(40) %}{% for j in range(40) %}{% endfor %}{% endfor %}",
            "looped more than 1,000 times", small)
    assert render_chat("{% for i in range(30) %}{% for j in range(30) %}{% endfor %}{% endfor %}ok",
                       USER, limits=small) == "ok"


def test_the_budget_is_per_render() -> None:
    small = SandboxLimits(iterations=1000)
    template = "{% for i in range(600) %}{% endfor %}{{ messages | length }}"
    assert [render_chat(template, USER, limits=small) for _ in range(3)] == ["1"] * 3


def test_ranges_beyond_the_sandbox_maximum_are_refused() -> None:
    refused("{{ range(10**9) | list | length }}", "Range too big")
    refused("{% for m in messages * 100000000 %}{% endfor %}", "repetition with \\*")


def test_a_slow_template_is_stopped_at_the_time_limit() -> None:
    slow = "{% for i in range(100000) %}{{ 'x' ~ i }}{% endfor %}"
    refused(slow, "ran longer than 0.001 s", SandboxLimits(seconds=0.001))


def test_deep_recursion_is_refused() -> None:
    refused("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursed too deeply")
    refused("{% for x in [1] recursive %}{{ loop([x]) }}{% endfor %}", "recursed too deeply")


# --- memory: every way to grow a value is sized first -------------------------------------------

@pytest.mark.parametrize("template,match", [
    ("{{ 'x' * 10**10 }}", "repetition with \\* would make 10,000,000,000 items"),
    ("{{ 10**10 * 'x' }}", "repetition with \\*"),
    ("{{ ([1] * 10**9) | length }}", "repetition with \\*"),
    ("{{ 2 ** 100000 }}", "integer power"),
    ("{% set ns = namespace(n=3) %}{% for i in range(40) %}{% set ns.n = ns.n * ns.n %}"
     "{% endfor %}", "an integer of about"),
    ("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
     "{% endfor %}", "a value of 33,554,432 items"),
    ("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
     "{% endfor %}", "concatenation with \\+"),
    ("{{ '{:>999999999}'.format('a') }}", "format width of 999999999"),
    ("{{ '{0:>{1}}'.format('a', 999999999) }}", "format width of 999,999,999"),
    ("{{ '{x:>{w}}'.format(x='a', w=999999999) }}", "format width of 999,999,999"),
    ("{{ '%999999999s' % 'a' }}", "format width"),
    ("{{ '%*s' % (999999999, 'a') }}", "format width of 999,999,999"),
    ("{{ '%*s' | format(999999999, 'a') }}", "format width of 999,999,999"),
    ("{{ '%999999999s' | format('a') }}", "format width"),
    ("{{ 'a' | center(999999999) }}", "center would make"),
    ("{{ 'a'.ljust(999999999) }}", "str.ljust would make"),
    ("{{ 'a'.zfill(999999999) }}", "str.zfill would make"),
    ("{{ ('\\t' * 1000).expandtabs(100000) }}", "str.expandtabs would make"),
    ("{{ ('a\\n' * 1000000) | indent(1000) }}", "indent would make"),
    ("{{ ('a' * 10000) | replace('a', 'b' * 10000) }}", "replace would make 100,000,000"),
    ("{{ ('a' * 10000).replace('a', 'b' * 10000) }}", "replace would make"),
    ("{{ (['x' * 1000000] * 1000) | join }}", "join would make 1,000,000,000"),
    ("{{ ''.join(['x' * 1000000] * 1000) }}", "join would make"),
    ("{{ messages | tojson(indent=100000000) }}", "tojson indent 100000000"),
    ("{{ 'a b' | wordwrap(1, wrapstring='x' * 100000) }}", "wordwrap string"),
    ("{{ [1] | batch(100000000, 'x') | list | length }}", "batch would make"),
    ("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "wrote more than 16,777,216"),
    ("{% for i in range(100000) %}" + "x" * 1000 + "{% endfor %}", "wrote more than 16,777,216"),
    ("{{ [['x' * 1000000] * 100] * 100 }}", "wrote more than 16,777,216"),
])
def test_giant_values_are_refused_before_they_are_built(template: str, match: str) -> None:
    refused(template, match)


def test_smaller_text_limits_apply_to_strings_and_output() -> None:
    tight = SandboxLimits(text=1000)
    refused("{{ 'x' * 1001 }}", "1,001 items, more than 1,000", tight)
    refused("{% for i in range(20) %}{{ 'x' * 100 }}{% endfor %}", "wrote more than 1,000", tight)
    fits = "{% for i in range(9) %}{{ 'x' * 100 }}{% endfor %}"
    assert len(render_chat(fits, USER, limits=tight)) == 900


@pytest.mark.parametrize("capture", [
    "{% set x %}BODY{% endset %}{{ x | length }}",
    "{% filter upper %}BODY{% endfilter %}",
    "{% macro m() %}BODY{% endmacro %}{{ m() | length }}",
    "{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}BODY{% endcall %}",
])
def test_text_captured_in_blocks_counts_too(capture: str) -> None:
    """Blocks that capture their text (set, filter, macros, call) are not streamed out: what
    they write is counted as it is written, so none grows past the limit unseen."""
    body = "{% for i in range(100000) %}" + "z" * 1000 + "{% endfor %}"
    refused(capture.replace("BODY", body), "wrote more than 16,777,216 characters")
    assert render_chat(capture.replace("BODY", "{% for i in range(3) %}ab{% endfor %}"), USER) in (
        "6", "ABABAB", "ababab")


def test_lipsum_is_not_offered() -> None:
    refused("{{ lipsum(n=1000000) }}", "'lipsum' is undefined")


def test_other_template_failures_are_tokenizer_errors_not_crashes() -> None:
    refused("{{ 1 / 0 }}", "ZeroDivisionError")
    refused("{{ 10.0 ** 1000 }}", "OverflowError")
    refused("{{ messages[0].content + 1 }}", "TypeError")


# --- what real templates need still works ---------------------------------------------------------

def test_a_tool_calling_style_template_renders_exactly() -> None:
    template = (
        "{% set ns = namespace(n=0) %}"
        "{% for m in messages %}{% set ns.n = ns.n + 1 %}"
        "{{ '<|%s|>' % m['role'] }}{{ m['content'] | trim }}"
        "{% if not loop.last %}{{ '\\n' }}{% endif %}{% endfor %}"
        "{{ '\\n' ~ (tools | tojson(indent=2)) }}"
        "{{ '\\n{:>4}|{:<3}|'.format(ns.n, 'ok') ~ ([1, 2, 3] | join(',')) ~ ('-' * 3) }}"
        "{{ '\\n' ~ ('a b c' | replace(' ', '_') | center(9)) ~ (2 ** 10) }}")
    messages = [{"role": "system", "content": " be brief "}, {"role": "user", "content": "hi"}]
    out = render_chat(template, messages, tools=[{"name": "f"}])
    assert out == ('<|system|>be brief\n<|user|>hi\n[\n  {\n    "name": "f"\n  }\n]\n'
                   '   2|ok |1,2,3---\n  a_b_c  1024')
