"""The ``models`` marker: a test that needs a pulled hub model (SmolLM2, Qwen, Gemma) or
llama.cpp's vocabulary files, so that ``pytest -m "not models"`` runs the rest, on the
embedded tiny models and the fixtures, in a few minutes (``make test`` runs everything).

A test needs them when it, or a fixture or helper of its module that it names, reaches
``real_models.hub_model`` / ``llama_cpp_vocab`` or ``llmnb.hub.path`` / ``pull``: read from
each module's syntax tree once, following names within the module and the helpers it imports
from another test module. The notebook bite test
runs the notebooks, which load SmolLM2, and is marked whole.
"""
from __future__ import annotations

import ast
import inspect
import sys
from types import ModuleType

import pytest

GATES = {"hub_model", "llama_cpp_vocab", "path", "pull"}   # the calls that reach a pulled file
WHOLE = {"test_notebook_bite"}                            # modules that need them in every test
_needing: dict[str, set[str]] = {}


def _called(node: ast.AST) -> set[str]:
    """Names a function calls or mentions: hub_model(...), hub.path(...), a helper's name."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Name) and f.id in GATES - {"path", "pull"}:
                out.add("@gate")
            if (isinstance(f, ast.Attribute) and f.attr in {"path", "pull"}
                    and isinstance(f.value, ast.Name) and f.value.id == "hub"):
                out.add("@gate")
        if isinstance(n, ast.Name):
            out.add(n.id)
        if isinstance(n, ast.arg):
            out.add(n.arg)                   # a fixture asked for by parameter name
    return out


def needing(module: ModuleType) -> set[str]:
    """The module's top-level functions (tests, fixtures, helpers) that reach a gate."""
    name = module.__name__
    if name not in _needing:
        tree = ast.parse(inspect.getsource(module))
        uses = {f.name: _called(f) for f in tree.body
                if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}
        found = {f for f, names in uses.items() if "@gate" in names}
        _needing[name] = found                                 # (an import circle stops here)
        for node in tree.body:                                 # helpers from another test module
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("test_"):
                other = sys.modules.get(node.module or "")
                if other is not None:
                    found |= {a.asname or a.name for a in node.names
                              if a.name in needing(other)}
        grew = True
        while grew:
            more = {f for f, names in uses.items() if f not in found and names & found}
            found |= more
            grew = bool(more)
        _needing[name] = found
    return _needing[name]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "models: needs a pulled hub model or llama.cpp's "
                                       "vocabulary files (deselect with -m 'not models')")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not isinstance(item, pytest.Function) or item.module is None:
            continue
        short = item.module.__name__.rsplit(".", 1)[-1]
        if short in WHOLE or item.originalname in needing(item.module) or any(
                _fixture_needs(d.func) for defs in item._fixtureinfo.name2fixturedefs.values()
                for d in defs):
            item.add_marker(pytest.mark.models)


def _fixture_needs(func: object) -> bool:
    """Whether a fixture (defined in any test module: some import another's) reaches a gate."""
    module = inspect.getmodule(func)
    name = getattr(func, "__name__", "")
    return (module is not None and module.__name__.rsplit(".", 1)[-1].startswith("test_")
            and name in needing(module))
