"""Real models for tests: the pulled file, or a skip that says which command pulls it.

`make test` pulls every model first and sets LLMNB_REQUIRE_MODELS=1, so there a missing
model is a failure, not a silent skip.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmnb import hub


def hub_model(name: str) -> Path:
    try:
        return hub.path(name)
    except hub.HubError as e:
        if os.environ.get("LLMNB_REQUIRE_MODELS") == "1":
            pytest.fail(str(e))
        pytest.skip(str(e))
