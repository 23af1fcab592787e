"""llama.cpp's references on the original quantized files (fixtures/llamacpp/quantized_*.json),
read into typed objects: the oracle of the integer (Q8-activation) path.

Made by ``tools/make_llamacpp_references.py --only quantized`` (how and with which settings:
fixtures/llamacpp/README.md). ``load_quantized(key)`` checks the file's shape as it reads and
raises ``FixtureError`` naming the file and field on anything unexpected.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

FIXTURES = Path(__file__).parent / "fixtures" / "llamacpp"
# fixture key -> hub model name
QUANTIZED_MODELS = {"smollm2": "smollm2-135m", "qwen2": "qwen2.5-coder-0.5b",
                    "gemma3": "gemma3-270m"}
TOP_K = 16


class FixtureError(ValueError):
    """A fixture file that is not what its reader expects."""


@dataclass(frozen=True)
class RunComparison:
    """A second llama.cpp run of the same prompt (1 thread, or no weight repacking) against
    the exact run: its ids, and the largest logit difference while both were fed the same tokens."""

    new_ids: list[int]
    same_ids: bool
    agree_prefix: int
    steps_compared: int                         # steps both runs were fed the same tokens
    max_abs_logit_diff: float                   # over the vocabulary and those steps
    max_abs_logit_diff_per_step: list[float]    # (steps_compared,) rounded to 1e-4


@dataclass(frozen=True)
class QuantizedCase:
    """One prompt: llama.cpp's greedy run on the quantized file (F32 K/V, flash attention off).

    Step i's logits are those after the prompt (i = 0) or after new_ids[i-1] (i > 0)."""

    kind: str                                   # "plain" or "chat"
    prompt_text: str
    prompt_ids: list[int]
    new_ids: list[int]                          # (S,) chosen ids, S <= 48
    stop_reason: str                            # "max_new_tokens" or "end_of_generation_token"
    top2_margin: list[float]                    # (S,) chosen logit - runner-up logit
    runner_up_ids: list[int]                    # (S,)
    top_ids: npt.NDArray[np.int64]              # (S, 16) best ids per step, best first
    top_logits: npt.NDArray[np.float64]         # (S, 16) their logits, rounded to 1e-4
    new_text: str
    agree_with_f32_prefix: int                  # leading ids equal to the F32 copy's run
    one_thread: RunComparison
    no_repack: RunComparison | None             # None: the default load repacked nothing
    default_context_ids: list[int]              # llama.cpp's default context (F16 K/V)

    @property
    def prompt_top_ids(self) -> npt.NDArray[np.int64]:
        """The 16 best ids at the prompt's last position."""
        return np.asarray(self.top_ids[0], dtype=np.int64)

    @property
    def prompt_top_logits(self) -> npt.NDArray[np.float64]:
        return np.asarray(self.top_logits[0], dtype=np.float64)


@dataclass(frozen=True)
class QuantizedReference:
    """llama.cpp's runs of one model's original quantized file on the 7 fixture prompts."""

    key: str
    model: str                                  # hub name
    file: str                                   # file name in the hub cache
    sha256: str
    nbytes: int
    tensor_types: dict[str, int]
    llama_cpp_version: str
    repack: bool                                # llama.cpp's default load repacked some weights
    settings: dict[str, Any]
    n_vocab: int
    cases: list[QuantizedCase]


def _field(obj: dict[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    if name not in obj:
        raise FixtureError(f"{where}: field {name!r} is missing")
    value = obj[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise FixtureError(f"{where}: field {name!r} is {type(value).__name__}, expected "
                           f"{getattr(kind, '__name__', kind)}")
    return value


def _ints(obj: dict[str, Any], name: str, where: str) -> list[int]:
    values = _field(obj, name, list, where)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise FixtureError(f"{where}: field {name!r} must be a list of integers")
    return [int(v) for v in values]


def _floats(obj: dict[str, Any], name: str, where: str) -> list[float]:
    values = _field(obj, name, list, where)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise FixtureError(f"{where}: field {name!r} must be a list of numbers")
    return [float(v) for v in values]


def _comparison(obj: Any, where: str) -> RunComparison:
    if not isinstance(obj, dict):
        raise FixtureError(f"{where}: expected an object")
    per_step = _floats(obj, "max_abs_logit_diff_per_step", where)
    steps = _field(obj, "steps_compared", int, where)
    if len(per_step) != steps:
        raise FixtureError(f"{where}: field 'max_abs_logit_diff_per_step' has {len(per_step)} "
                           f"entries, expected steps_compared = {steps}")
    return RunComparison(new_ids=_ints(obj, "new_ids", where),
                         same_ids=_field(obj, "same_ids", bool, where),
                         agree_prefix=_field(obj, "agree_prefix", int, where),
                         steps_compared=steps,
                         max_abs_logit_diff=float(_field(obj, "max_abs_logit_diff",
                                                         (int, float), where)),
                         max_abs_logit_diff_per_step=per_step)


def _table(obj: dict[str, Any], name: str, steps: int, dtype: type, where: str) -> Any:
    rows = _field(obj, name, list, where)
    try:
        table: npt.NDArray[Any] = np.array(rows, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise FixtureError(f"{where}: field {name!r} is not a table of numbers ({e})") from None
    if table.shape != (steps, TOP_K):
        raise FixtureError(f"{where}: field {name!r} has shape {table.shape}, expected "
                           f"({steps}, {TOP_K}) (one row of {TOP_K} per new id)")
    return table


def _case(obj: Any, where: str) -> QuantizedCase:
    if not isinstance(obj, dict):
        raise FixtureError(f"{where}: expected an object")
    new_ids = _ints(obj, "new_ids", where)
    steps = len(new_ids)
    margin = _floats(obj, "top2_margin", where)
    runner_up = _ints(obj, "runner_up_ids", where)
    for name, values in (("top2_margin", margin), ("runner_up_ids", runner_up)):
        if len(values) != steps:
            raise FixtureError(f"{where}: field {name!r} has {len(values)} entries, expected "
                               f"{steps} (one per new id)")
    no_repack = obj.get("no_repack")
    default = _field(obj, "default_context", dict, where)
    return QuantizedCase(
        kind=_field(obj, "kind", str, where), prompt_text=_field(obj, "prompt_text", str, where),
        prompt_ids=_ints(obj, "prompt_ids", where), new_ids=new_ids,
        stop_reason=_field(obj, "stop_reason", str, where), top2_margin=margin,
        runner_up_ids=runner_up,
        top_ids=_table(obj, f"top{TOP_K}_ids", steps, np.int64, where),
        top_logits=_table(obj, f"top{TOP_K}_logits", steps, np.float64, where),
        new_text=_field(obj, "new_text", str, where),
        agree_with_f32_prefix=_field(obj, "agree_with_f32_prefix", int, where),
        one_thread=_comparison(obj.get("one_thread"), f"{where}.one_thread"),
        no_repack=None if no_repack is None else _comparison(no_repack, f"{where}.no_repack"),
        default_context_ids=_ints(default, "new_ids", f"{where}.default_context"))


def quantized_path(key: str) -> Path:
    if key not in QUANTIZED_MODELS:
        raise FixtureError(f"unknown fixture key {key!r}: expected one of "
                           f"{', '.join(QUANTIZED_MODELS)}")
    return FIXTURES / f"quantized_{key}.json"


def load_quantized(key: str, path: Path | None = None) -> QuantizedReference:
    """The quantized reference of fixture key `key` ("smollm2", "qwen2", "gemma3"), read
    from its committed file or from `path`."""
    path = quantized_path(key) if path is None else path
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise FixtureError(f"{path}: cannot read ({e})") from None
    where = path.name
    if not isinstance(doc, dict):
        raise FixtureError(f"{where}: expected a JSON object at the top")
    llama_cpp = _field(doc, "llama_cpp", dict, where)
    load = _field(doc, "model_load", dict, where)
    types = _field(doc, "tensor_types", dict, where)
    cases = _field(doc, "cases", list, where)
    return QuantizedReference(
        key=key, model=_field(doc, "model", str, where), file=_field(doc, "file", str, where),
        sha256=_field(doc, "sha256", str, where), nbytes=_field(doc, "bytes", int, where),
        tensor_types={str(k): int(v) for k, v in types.items()},
        llama_cpp_version=_field(llama_cpp, "version", str, f"{where}.llama_cpp"),
        repack=_field(load, "repack", bool, f"{where}.model_load"),
        settings=_field(doc, "settings", dict, where),
        n_vocab=_field(doc, "n_vocab", int, where),
        cases=[_case(c, f"{where}.cases[{i}]") for i, c in enumerate(cases)])
