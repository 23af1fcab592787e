"""The notebooks' drawn figures: every one a notebook shows exists, and each is what
tools/make_figures.py draws today (so a figure cannot drift from the code that makes it)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def _markdown_images() -> list[tuple[Path, str]]:
    found = []
    for nb in sorted(NOTEBOOKS.rglob("*.ipynb")):
        if ".ipynb_checkpoints" in nb.parts:
            continue
        for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "markdown":
                found += [(nb, src) for src in IMAGE.findall("".join(cell["source"]))]
    return found


def test_every_image_a_notebook_shows_is_a_committed_figure() -> None:
    images = _markdown_images()
    assert images, "no notebook shows a drawn figure"
    for nb, src in images:
        target = (nb.parent / src).resolve()
        assert target.parent == NOTEBOOKS / "figures", (f"{nb.name}: {src} is not in "
                                                        "notebooks/figures")
        assert target.is_file(), f"{nb.name}: {src} does not exist (run tools/make_figures.py)"


def test_committed_figures_are_what_make_figures_draws() -> None:
    pytest.importorskip("matplotlib")
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "make_figures.py"), "--check"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
