"""Execute every notebook and its solutions in place, in order, on this machine alone
(``make notebooks``): the saved outputs of one run, all from the same build and machine.

    python tools/run_notebooks.py                 # 00, its solutions, 01, its solutions, ...
    python tools/run_notebooks.py 07 11           # only these notebooks (and their solutions)
    python tools/run_notebooks.py --list          # what would run, in order

It refuses to start unless the installed llmnb is the compiled build (``make setup``), and
while another timing run holds the machine (``llmnb.perf.lock``: ``llmnb bench`` holds the
same lock). Each notebook runs in a fresh kernel from its own folder, under the lock; OpenBLAS's
two overrides (``OPENBLAS_CORETYPE``, ``OPENBLAS_L2_SIZE``) are unset, as for the benchmark
runs, so that BLAS picks its kernel for this CPU. A notebook is written back only when every
cell ran (temp file, then rename); the first failure stops the run with the cell and its error.
Consecutive stream outputs of a cell are merged into one, as a reader would see them. A run of
every notebook first measures the machine again (``machine.probe(refresh=True)``), under the
same lock: the notebooks all read that one measurement, made on the quiet machine of this run.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from llmnb.errors import LLMNBError
from llmnb.perf.lock import hold_machine
from llmnb.perf.machine import is_compiled, probe

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
CELL_TIMEOUT_S = 600                         # as nbval's in `make test`
OPENBLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def in_order(only: list[str]) -> list[Path]:
    """Each notebook followed by its solutions, by number; `only`: number prefixes to keep."""
    paths = []
    for nb in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        if only and not any(nb.name.startswith(p) for p in only):
            continue
        paths.append(nb)
        solutions = NOTEBOOKS / "solutions" / f"{nb.stem}_solutions.ipynb"
        if solutions.is_file():
            paths.append(solutions)
    return paths


def merge_streams(nb: Any) -> None:
    """One stream output per name where the kernel sent several in a row."""
    for cell in nb.cells:
        merged: list[Any] = []
        for out in cell.get("outputs", []):
            prev = merged[-1] if merged else None
            if (out.output_type == "stream" and prev is not None and prev.output_type == "stream"
                    and prev.name == out.name):
                prev.text += out.text
            else:
                merged.append(out)
        if "outputs" in cell:
            cell.outputs = merged


def execute(path: Path) -> float:
    """Run `path` in a fresh kernel from its folder and write it back; seconds taken."""
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as sockets:     # local sockets, not TCP, to the kernel
        km = KernelManager(kernel_name="python3", transport="ipc", ip=str(Path(sockets) / "k"))
        try:
            NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_S,
                           resources={"metadata": {"path": str(path.parent)}}).execute()
        finally:                                     # a client given its manager leaves it running
            if km.has_kernel:
                km.shutdown_kernel(now=True)
    seconds = time.perf_counter() - t0
    merge_streams(nb)
    tmp = path.with_name(f".{path.name}.tmp")
    nbformat.write(nb, tmp)
    os.replace(tmp, path)
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("only", nargs="*", help="notebook numbers to run (default: all), e.g. 07 11")
    ap.add_argument("--list", action="store_true", help="print what would run, in order")
    args = ap.parse_args(argv)
    paths = in_order(args.only)
    if not paths:
        print(f"run_notebooks: no notebook in {NOTEBOOKS} starts with {' or '.join(args.only)}",
              file=sys.stderr)
        return 2
    if args.list:
        print("\n".join(str(p.relative_to(ROOT)) for p in paths))
        return 0
    if not is_compiled():
        print("run_notebooks: the installed llmnb is not the compiled build; run `make setup` "
              "and start this with .venv/bin/python", file=sys.stderr)
        return 2
    for name in OPENBLAS_OVERRIDES:
        os.environ.pop(name, None)
    try:
        with hold_machine("make notebooks"):
            if not args.only:
                t0 = time.perf_counter()
                facts = probe(refresh=True)
                print(f"machine measured ({time.perf_counter() - t0:.0f} s): memory roof "
                      + ", ".join(f"{facts.read_gbs[n]:.1f} GB/s at {n} thread(s)"
                                  for n in facts.threads))
            total = 0.0
            for path in paths:
                print(f"{path.relative_to(ROOT)} ...", end=" ", flush=True)
                try:
                    seconds = execute(path)
                except CellExecutionError as e:
                    print("failed")
                    print(f"run_notebooks: {path.relative_to(ROOT)}: {e}", file=sys.stderr)
                    return 1
                total += seconds
                print(f"{seconds:.0f} s")
            print(f"{len(paths)} notebooks in {total / 60:.1f} min")
    except LLMNBError as e:
        print(f"run_notebooks: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
