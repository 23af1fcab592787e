"""Resource limits for chat templates, on top of jinja2's sandbox.

jinja2's ``ImmutableSandboxedEnvironment`` stops a hostile template from reaching Python
internals (``__class__``, ``__globals__``, ``__subclasses__``) or mutating its inputs, but not
from using all the time and memory there is: nested ``range`` loops, ``'x' * 10**10``,
a string doubled in a loop with ``~``, ``'{:>999999999}'.format(x)``, ``10 ** 10 ** 10``.
A GGUF's ``tokenizer.chat_template`` is untrusted, so llmnb renders it within limits
(``SandboxLimits``): wall time, loop iterations, the length of any string or list built and
of all the text written, the size of integers. Every place where a template can repeat work or grow
a value is checked before the work is done:

* loops: each ``for`` iterable is wrapped (an AST rewrite) to count iterations and check time;
* writing: every piece a template writes, literal text or ``{{ }}``, is counted (an AST
  rewrite), also inside blocks it captures (``{% set %}``, ``{% filter %}``, macros), so
  no buffer grows past ``text`` unseen;
* ``~`` (concatenation): each operand is checked (an AST rewrite), so growth per step is bounded;
* ``*``, ``**``, ``+``, ``%``: intercepted binary operators, sizes computed before the operation;
* calls and filters: time checked; widths (``center``, ``indent``, ``ljust``, ``batch`` ...),
  format strings (``str.format`` when looked up), ``replace`` and ``join`` sized before the
  call, every result sized after it;
* recursion: Python's own limit (``RecursionError``); ``lipsum`` is removed.

A template beyond a limit raises ``jinja2.exceptions.SecurityError`` naming the limit.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment


@dataclass(frozen=True)
class SandboxLimits:
    """What one render may use."""

    seconds: float = 5.0             # wall-clock time
    iterations: int = 1_000_000      # loop iterations, all loops together
    text: int = 1 << 24              # items in any string or list built; characters written in all
    int_bits: int = 4096             # bits of an integer built with * or **
    indent: int = 64                 # tojson's indent and wordwrap's wrap string


class Budget:
    """One render's account: the deadline and the iterations used so far."""

    def __init__(self, limits: SandboxLimits) -> None:
        self.limits = limits
        self.deadline = time.monotonic() + limits.seconds
        self.iterations = 0
        self.written = 0     # characters written, to the output and into captured blocks

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise SecurityError(f"the template ran longer than {self.limits.seconds:g} s")

    def loop(self, iterable: Iterable[Any]) -> Iterator[Any]:
        for item in iterable:
            self.iterations += 1
            if self.iterations > self.limits.iterations:
                raise SecurityError(f"the template looped more than {self.limits.iterations:,} "
                                    "times")
            self.tick()
            yield item


_BUDGET: ContextVar[Budget | None] = ContextVar("llmnb_template_budget", default=None)
_DEFAULT = SandboxLimits()
_NUMBER = re.compile(r"\d+")
_NESTED_FIELD = re.compile(r"\{[^{}]*\{")   # a str.format field whose spec has a field inside


def _limits() -> SandboxLimits:
    b = _BUDGET.get()
    return _DEFAULT if b is None else b.limits


def _tick() -> None:
    b = _BUDGET.get()
    if b is not None:
        b.tick()


def _text_size(value: object, limit: int) -> int:
    """About len(str(value)), counted without building it (stops once past `limit`)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        value = list(value.items())
    if isinstance(value, (list, tuple)):
        total = 2
        for item in value:
            total += _text_size(item, limit) + 2
            if total > limit:
                break
        return total
    return 24   # a number (bounded by int_bits), None, an undefined value ...


def count_written(value: object) -> object:
    """`value` unchanged, its text counted against the budget before the template writes it
    (to the output, or into a ``{% set %}``/``{% filter %}``/macro block it captures)."""
    b = _BUDGET.get()
    if b is not None:
        b.written += _text_size(value, b.limits.text)
        if b.written > b.limits.text:
            raise SecurityError(f"the template wrote more than {b.limits.text:,} characters")
    return value


def check_size(value: object, what: str = "a value") -> object:
    """`value` unchanged, or SecurityError if it is a string or list longer than the limit."""
    limit = _limits().text
    if isinstance(value, (str, list, tuple)) and len(value) > limit:
        raise SecurityError(f"{what} of {len(value):,} items, more than {limit:,}")
    return value


def _check_count(n: int, what: str) -> None:
    limit = _limits().text
    if n > limit:
        raise SecurityError(f"{what} would make {n:,} items, more than {limit:,}")


def _check_format(fmt: object, args: object = ()) -> None:
    """A printf or str.format pattern: no width or precision beyond the text limit, written
    in the pattern or, when it takes widths from its arguments (``%*s``, ``{:{}}``), given."""
    if not isinstance(fmt, str):
        return
    limit = _limits().text
    for m in _NUMBER.finditer(fmt):
        if len(m.group()) > 9 or int(m.group()) > limit:
            raise SecurityError(f"a format width of {m.group()[:20]} characters")
    if "*" in fmt or _NESTED_FIELD.search(fmt):
        values = args.values() if isinstance(args, dict) else args if isinstance(args, tuple) \
            else (args,)
        for v in values:
            if isinstance(v, int) and v > limit:
                raise SecurityError(f"a format width of {v:,} characters")


def _check_replace(s: object, old: object, new: object) -> None:
    if isinstance(s, str) and isinstance(old, str) and isinstance(new, str):
        n = s.count(old) if old else len(s) + 1
        _check_count(len(s) + n * (len(new) - len(old)), "replace")


def _check_join(items: object, sep: object) -> None:
    if isinstance(items, (list, tuple)):
        seps = len(sep) * max(len(items) - 1, 0) if isinstance(sep, str) else 0
        _check_count(sum(len(x) for x in items if isinstance(x, str)) + seps, "join")


# --- binary operators ----------------------------------------------------------------------

def _mul(a: Any, b: Any) -> Any:
    for seq, n in ((a, b), (b, a)):
        if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
            _check_count(len(seq) * n, "repetition with *")
    if isinstance(a, int) and isinstance(b, int):
        bits = a.bit_length() + b.bit_length()
        if bits > _limits().int_bits:
            raise SecurityError(f"an integer of about {bits} bits")
    return a * b


def _pow(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1:
        limit = _limits().int_bits
        if b > limit or b * (abs(a).bit_length() - 1) > limit:
            raise SecurityError(f"an integer power with more than {limit} bits")
    return a ** b


def _add(a: Any, b: Any) -> Any:
    if isinstance(a, (str, list, tuple)) and isinstance(b, (str, list, tuple)):
        _check_count(len(a) + len(b), "concatenation with +")
    return a + b


def _mod(a: Any, b: Any) -> Any:
    _check_format(a, b)
    return a % b


# --- calls and filters ---------------------------------------------------------------------

_WIDTH_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})


def _check_method(obj: Any, args: tuple[Any, ...]) -> None:
    """Size a call of a str method before it runs (the sandbox allows str methods)."""
    owner = getattr(obj, "__self__", None)
    name = getattr(obj, "__name__", "")
    if not isinstance(owner, str):
        return
    if name in _WIDTH_METHODS and args and isinstance(args[0], int):
        n = args[0] * (owner.count("\t") + 1) if name == "expandtabs" else args[0]
        _check_count(n, f"str.{name}")
    elif name == "replace" and len(args) >= 2:
        _check_replace(owner, args[0], args[1])
    elif name == "join" and args:
        _check_join(args[0], owner)


def _check_filter(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Size a call of a width-taking filter before it runs."""
    strs = [a for a in args if isinstance(a, str)]
    ints = [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
    limits = _limits()
    if name in ("center", "truncate", "batch", "slice") and ints:
        _check_count(ints[0], name)
    elif name == "indent":
        width = kwargs.get("width", ints[0] if ints else 4)
        if isinstance(width, int) and strs:
            _check_count(len(strs[0]) + width * (strs[0].count("\n") + 1), "indent")
    elif name == "tojson":
        indent = kwargs.get("indent", ints[0] if ints else None)
        if isinstance(indent, int) and indent > limits.indent:
            raise SecurityError(f"tojson indent {indent}, more than {limits.indent}")
    elif name == "wordwrap":
        wrap = kwargs.get("wrapstring", strs[1] if len(strs) > 1 else "")
        if isinstance(wrap, str) and len(wrap) > limits.indent:
            raise SecurityError(f"a wordwrap string of {len(wrap)} characters")
    elif name == "format" and strs:
        _check_format(strs[0], args[args.index(strs[0]) + 1:] + tuple(kwargs.values()))
    elif name == "replace" and len(strs) >= 3:
        _check_replace(strs[0], strs[1], strs[2])
    elif name == "join":
        items = next((a for a in args if isinstance(a, (list, tuple))), None)
        _check_join(items, kwargs.get("d", strs[0] if strs else ""))


class GuardedFilter:
    """A filter that checks time and sizes around the real one (`f`)."""

    def __init__(self, name: str, f: Callable[..., Any]) -> None:
        self.name = name
        self.f = f
        # jinja passes context/environment to filters marked so: keep the mark
        self.jinja_pass_arg: Any = getattr(f, "jinja_pass_arg", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _tick()
        _check_filter(self.name, args, kwargs)
        return check_size(self.f(*args, **kwargs), f"the result of filter {self.name!r}")


def bound_environment(env: ImmutableSandboxedEnvironment) -> None:
    """Install the guards on `env` (after its own filters and globals are added)."""
    base_call = env.call

    def call(context: Any, obj: Any, *args: Any, **kwargs: Any) -> Any:
        _tick()
        _check_method(obj, args)
        return check_size(base_call(context, obj, *args, **kwargs), "the result of a call")

    base_wrap_format = env.wrap_str_format

    def wrap_str_format(value: Any) -> Any:   # the sandbox wraps str.format when it is looked up
        wrapped = base_wrap_format(value)
        if wrapped is None:
            return None
        fmt = getattr(value, "__self__", None)
        _check_format(fmt)

        def checked_format(*args: Any, **kwargs: Any) -> Any:
            _check_format(fmt, args + tuple(kwargs.values()))
            return wrapped(*args, **kwargs)
        return checked_format

    setattr(env, "call", call)
    setattr(env, "wrap_str_format", wrap_str_format)
    env.intercepted_binops = frozenset({"*", "**", "+", "%"})
    env.binop_table.update({"*": _mul, "**": _pow, "+": _add, "%": _mod})
    for name, f in list(env.filters.items()):
        env.filters[name] = GuardedFilter(name, f)
    env.globals.pop("lipsum", None)   # lipsum(n=10**6): a million paragraphs, no use in a chat
    setattr(env, "llmnb_loop", _loop)
    setattr(env, "llmnb_text", check_size)
    setattr(env, "llmnb_write", count_written)


def _loop(iterable: Iterable[Any]) -> Iterable[Any]:
    b = _BUDGET.get()
    return iterable if b is None else b.loop(iterable)


def compile_bounded(env: ImmutableSandboxedEnvironment, source: str) -> jinja2.Template:
    """Parse `source`, wrap every loop iterable, concatenation operand and written piece (text
    and ``{{ }}``) in a guard, compile."""
    tree = env.parse(source)
    for loop in tree.find_all(nodes.For):
        loop.iter = _guard_call("llmnb_loop", loop.iter)
    for concat in tree.find_all(nodes.Concat):
        concat.nodes = [_guard_call("llmnb_text", n) for n in concat.nodes]
    for output in tree.find_all(nodes.Output):
        output.nodes = [_guard_call("llmnb_write", n) for n in output.nodes]
    code = env.compile(tree)
    template: jinja2.Template = env.template_class.from_code(env, code, env.make_globals(None),
                                                              None)
    return template


def _guard_call(attribute: str, node: nodes.Node) -> nodes.Expr:
    """`environment.<attribute>(node)` as a template expression (no template name can shadow it)."""
    fn = nodes.EnvironmentAttribute(attribute, lineno=node.lineno)
    return nodes.Call(fn, [node], [], None, None, lineno=node.lineno)


def render_bounded(template: jinja2.Template, context: dict[str, Any],
                   limits: SandboxLimits | None = None) -> str:
    """Render within `limits` (default ``SandboxLimits()``)."""
    token = _BUDGET.set(Budget(limits if limits is not None else _DEFAULT))
    try:
        text: str = template.render(context)
        return text
    finally:
        _BUDGET.reset(token)
