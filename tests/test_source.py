"""llmnb.source shows the code of compiled and interpreted modules alike."""
from __future__ import annotations

import pytest

import llmnb
from llmnb.ar.sampling import Sampler, softmax
from llmnb.errors import UsageError


def test_source_of_functions_methods_classes_and_modules() -> None:
    assert llmnb.source(softmax).startswith("def softmax(")
    assert llmnb.source("llmnb.ar.sampling.Sampler.probs").lstrip().startswith("def probs(")
    assert llmnb.source(Sampler).startswith("@mypyc_attr")       # decorators included
    assert '"""Samplers' in llmnb.source(llmnb.ar.sampling)
    assert llmnb.source("llmnb.ar").startswith('"""Autoregressive')


def test_source_of_unknown_names_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no definition 'nope'"):
        llmnb.source("llmnb.ar.sampling.nope")
    with pytest.raises(UsageError, match="no module"):
        llmnb.source("nothing.here")
