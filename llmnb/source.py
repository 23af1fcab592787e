"""``llmnb.source``: the Python source of a module, class or function of the package.

mypyc-compiled functions have no source for ``inspect`` (or Jupyter's ``??``), but every
module ships its ``.py`` file beside the compiled one; this reads that file, so notebooks
show the code that runs without keeping a second copy of it.
"""
from __future__ import annotations

import ast
import importlib.util
import types
from pathlib import Path

from llmnb.errors import UsageError


def source_path(module: str) -> Path:
    """The shipped ``.py`` file of `module` (e.g. ``"llmnb.ar.sampling"``), compiled or not."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise UsageError(f"source: no module named {module!r}")
    origin = Path(spec.origin)
    if spec.submodule_search_locations is not None:
        return origin.with_name("__init__.py")
    return origin.with_name(module.rsplit(".", 1)[-1] + ".py")


def source(obj: object) -> str:
    """Source text of a module, class or function, given as the object or a dotted name
    (``llmnb.source("llmnb.ar.sampling.Sampler.probs")``)."""
    if isinstance(obj, str):
        dotted = obj
    elif isinstance(obj, types.ModuleType):
        dotted = obj.__name__
    else:
        dotted = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):      # the longest prefix that is a module
        try:
            found = importlib.util.find_spec(".".join(parts[:cut])) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            text = source_path(".".join(parts[:cut])).read_text(encoding="utf-8")
            return _member(text, parts[cut:], dotted)
    raise UsageError(f"source: no module in {dotted!r}")


Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _member(text: str, names: list[str], dotted: str) -> str:
    """The lines of the (nested) definition `names` in module `text`, decorators included."""
    if not names:
        return text
    body: list[ast.stmt] = ast.parse(text).body
    node: Definition | None = None
    for name in names:
        node = next((n for n in body if isinstance(n, Definition) and n.name == name), None)
        if node is None:
            raise UsageError(f"source: {dotted!r} has no definition {name!r}")
        body = node.body
    assert node is not None
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return "\n".join(text.splitlines()[first - 1:node.end_lineno])
