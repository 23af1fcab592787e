"""A bench's measurement in a fresh interpreter: its own thread settings, its own memory."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


def run_worker(module: str, call: str, what: str, pythonpath: str | None = None) -> Any:
    """Evaluate `call` (a function of `module`) in a fresh interpreter; its JSON result.
    ``-P`` keeps the current folder off the import path: run from the repository root, the
    worker still imports the installed (compiled) llmnb, not the source tree beside it.
    `pythonpath`, when given, is the worker's whole PYTHONPATH ("" for none); by default it
    inherits this process's environment."""
    code = f"import json; from {module} import *; print(json.dumps({call}))"
    env = None
    if pythonpath is not None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
    r = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                       env=env)
    if r.returncode != 0:
        raise RuntimeError(f"bench {what}: {call} failed: {r.stderr.strip()[-800:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])
