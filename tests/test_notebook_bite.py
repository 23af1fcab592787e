"""Every notebook check in ``tests/notebook_bite.py``'s table bites: with its package function
made wrong, the checked cell fails on an assert (not on some other error), and as written it
passes. Each notebook's rows run in a fresh interpreter on the source tree's ``.py`` files, so
that a replaced function reaches every caller (see that module's docstring)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest

import notebook_bite as bite

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted({b.notebook for b in bite.BITES})


def test_every_row_names_one_code_cell_and_a_function_that_exists() -> None:
    for b in bite.BITES:
        cells = bite.code_cells(b.notebook)
        bite.find_cell(cells, b.cell, b.notebook)          # raises unless exactly one
        owner, name = bite._resolve(b.target)
        assert callable(getattr(owner, name)), b.target
    for notebook, markers in bite.SKIP.items():
        for m in markers:
            bite.find_cell(bite.code_cells(notebook), m, notebook)


def test_the_runner_reports_a_bite_and_a_change_the_check_cannot_see(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import numpy as np\nfrom llmnb.softmax import softmax"),
                nbformat.v4.new_code_cell("z = np.array([1.0, 2.0, 3.0])\np = np.exp(z - z.max())\n"
                                          "p /= p.sum()\nassert np.allclose(softmax(z), p)")]
    nbformat.write(nb, tmp_path / "toy.ipynb")
    rows = [bite.Bite("toy", "p /= p.sum()", "llmnb.softmax:softmax", bite.scaled(1.5), "x1.5"),
            bite.Bite("toy", "p /= p.sum()", "llmnb.softmax:softmax", bite.scaled(1.0), "x1")]
    monkeypatch.setattr(bite, "NOTEBOOKS", tmp_path)
    monkeypatch.setattr(bite, "BITES", rows)
    monkeypatch.chdir(tmp_path)
    out = bite.run_notebook("toy")
    assert [r["outcome"] for r in out] == ["assert", "passed"]
    assert out[0]["line"] == "assert np.allclose(softmax(z), p)"
    import llmnb.softmax
    assert llmnb.softmax.softmax(np.array([0.0, 0.0])).sum() == 1.0      # put back afterwards



@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_each_check_fails_on_an_assert_when_its_function_is_wrong(notebook: str) -> None:
    import llmnb.kernels                 # the installed copy, whose numba cache the run shares
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg",
           "LLMNB_BITE_KERNELS": str(Path(llmnb.kernels.__file__).parent)}
    r = subprocess.run([sys.executable, "-P", str(ROOT / "tests" / "notebook_bite.py"), notebook],
                       capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    results: list[dict[str, Any]] = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(results) == sum(b.notebook == notebook for b in bite.BITES)
    missed = [f"{x['target']} ({x['what']}) in the cell with {x['cell']!r}: {x['outcome']} "
              f"{x['message'][:200]}" for x in results if x["outcome"] != "assert"]
    assert not missed, "checks that did not bite:\n" + "\n".join(missed)
