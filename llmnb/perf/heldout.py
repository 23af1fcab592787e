"""The tiny models' held-out prompts, what counts as a valid answer, and tallies of
``llmnb.diffuse`` runs over them (``llmnb bench cache`` and ``llmnb bench ladder``).

``data/eval/tiny_heldout.jsonl`` holds one object per line: `prompt`, `family`, `modes` (how
many valid answers; 1 = a single-answer prompt) and what makes an answer valid, one of two ways:

- `answers`, every valid answer (and `answer`, the first): the answer families. The text is
  valid when, stripped, it equals one of them, stripped. An older file with only `answer` reads
  as one answer, one mode.
- `rule` and its arguments: the rule families, whose valid answers follow from the prompt's own
  list `items` (written as the items joined by ", "). ``copy``: the items as given;
  ``reverse``: in reverse order; ``replace``: every `old` written as `new`; ``alphabetical``:
  sorted; ``distinct``: any `k` different items of the list, in any order (so it has
  len(items)!/(len(items)-k)! valid answers, the only rule with several).

``is_valid(row, text)`` decides validity for both, on a ``Prompt`` or on one line's dict; the
text is what the model decoded up to its end of text. Single- and multi-answer prompts are
reported apart (the multi-answer ones are where steps, schedulers and caches differ), and so are
the rule and the answer families. Every validity figure carries its 95% interval
(``llmnb.perf.intervals``).
"""
from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from math import perm
from pathlib import Path
from typing import Any

from llmnb.diffusion.engine import DiffusionResult, diffuse
from llmnb.errors import UsageError
from llmnb.model.model import Model, load
from llmnb.perf.inputs import need_data_dir
from llmnb.perf.intervals import paired, proportion
from llmnb.perf.threads import threads
from llmnb.perf.worker import run_worker

KINDS = ("single", "multi")
# How validity is decided, the two groups every table keeps apart.
CHECKS = ("answers", "rule")
# Each rule and the arguments it takes besides `items`.
RULES: dict[str, tuple[str, ...]] = {"copy": (), "reverse": (), "replace": ("old", "new"),
                                     "alphabetical": (), "distinct": ("k",)}
SEPARATOR = ", "   # between the items of a rule family's answer


@dataclass(frozen=True)
class Prompt:
    """One held-out prompt: its valid `answers`, or the `rule` (with its arguments) that
    decides validity; `modes` is how many valid answers it has."""

    prompt: str
    family: str
    answers: tuple[str, ...]
    modes: int
    rule: str = ""                  # "" for an answer family
    items: tuple[str, ...] = ()     # the list the rule works on
    old: str = ""                   # replace: the item to replace ...
    new: str = ""                   # ... and what to write instead
    k: int = 0                      # distinct: how many different items to name

    @property
    def kind(self) -> str:
        return "multi" if self.modes > 1 else "single"

    @property
    def checked_by(self) -> str:
        """"rule" for the rule families, "answers" for the answer families."""
        return "rule" if self.rule else "answers"

    def valid(self, text: str) -> bool:
        """``is_valid`` on this prompt."""
        return is_valid(self, text)


def _strings(d: Mapping[str, Any], name: str, what: str) -> tuple[str, ...]:
    v = d.get(name)
    if not isinstance(v, list) or not v or not all(isinstance(a, str) for a in v):
        raise ValueError(f"{name}: expected {what}, got {v!r}")
    return tuple(v)


def _string(d: Mapping[str, Any], name: str) -> str:
    v = d.get(name)
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"{name}: expected a non-empty string, got {v!r}")
    return v


def rule_modes(rule: str, items: tuple[str, ...], k: int = 0) -> int:
    """How many valid answers a rule has on `items`: one, or for ``distinct`` every ordered
    choice of `k` different items."""
    return perm(len(items), k) if rule == "distinct" else 1


def row_prompt(d: Mapping[str, Any]) -> Prompt:
    """The ``Prompt`` of one held-out line (a dict); ValueError "field: expected ..." when a
    field is missing or wrong."""
    if not isinstance(d, Mapping):
        raise ValueError(f"line: expected a JSON object, got {d!r}")
    prompt = _string(d, "prompt")
    family = d.get("family", "")
    if not isinstance(family, str):
        raise ValueError(f"family: expected a string, got {family!r}")
    modes = d.get("modes")
    if modes is not None and (isinstance(modes, bool) or not isinstance(modes, int)):
        raise ValueError(f"modes: expected a whole number, got {modes!r}")
    if "rule" in d:
        if "answers" in d or "answer" in d:
            raise ValueError("rule: expected either answers or rule, not both")
        p = _rule_prompt(d, prompt, family)
    else:
        if "answers" in d:
            answers = _strings(d, "answers", "a non-empty list of strings")
        elif "answer" in d:
            answers = (_string(d, "answer"),)
        else:
            raise ValueError("answers: expected a list of valid answers (or a rule)")
        p = Prompt(prompt, family, answers, len(answers))
    if modes is not None and modes != p.modes:
        raise ValueError(f"modes: expected {p.modes} (the number of valid answers), got {modes}")
    return p


def _rule_prompt(d: Mapping[str, Any], prompt: str, family: str) -> Prompt:
    rule = d["rule"]
    if rule not in RULES:
        raise ValueError(f"rule: expected one of {', '.join(RULES)}, got {rule!r}")
    takes = RULES[rule]
    items = _strings(d, "items", "a non-empty list of item strings")
    for item in items:
        if item != item.strip() or not item or SEPARATOR.strip() in item:
            raise ValueError(f"items: expected items without surrounding spaces or "
                             f"{SEPARATOR.strip()!r}, got {item!r}")
    extra = sorted(set(d) & {a for args in RULES.values() for a in args} - set(takes))
    if extra:
        raise ValueError(f"{extra[0]}: expected no {extra[0]} for rule {rule}")
    old = new = ""
    k = 0
    if rule == "replace":
        old, new = _string(d, "old"), _string(d, "new")
        if old not in items or new == old:
            raise ValueError(f"old: expected an item of the list other than new, got {old!r}")
    if rule == "distinct":
        given = d.get("k")
        if isinstance(given, bool) or not isinstance(given, int) or not 1 <= given <= len(items):
            raise ValueError(f"k: expected a whole number from 1 to {len(items)}, got {given!r}")
        k = given
        if len(set(items)) != len(items):
            raise ValueError("items: expected different items for rule distinct")
    return Prompt(prompt, family, (), rule_modes(rule, items, k), rule, items, old, new, k)


def read_heldout(path: Path) -> list[Prompt]:
    """The prompts of a held-out file (answer lines, old one-answer lines and rule lines); a
    malformed line raises one UsageError naming the file, the line and the field."""
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(row_prompt(json.loads(line)))
        except ValueError as e:   # json.JSONDecodeError is one
            raise UsageError(f"{path}:{n}: {e}") from None
    return out


def expected(row: Prompt) -> str | None:
    """The one valid answer of a single-answer rule (None for ``distinct`` and answer rows)."""
    items = row.items
    if row.rule == "copy":
        return SEPARATOR.join(items)
    if row.rule == "reverse":
        return SEPARATOR.join(reversed(items))
    if row.rule == "replace":
        return SEPARATOR.join(row.new if x == row.old else x for x in items)
    if row.rule == "alphabetical":
        return SEPARATOR.join(sorted(items))
    return None


def is_valid(row: Prompt | Mapping[str, Any], text: str) -> bool:
    """Whether `text` (decoded up to the end of text) is a valid answer to `row`, a ``Prompt``
    or the dict of one held-out line. The text is stripped of surrounding white space; then an
    answer family's text must equal one of its answers (stripped), a single-answer rule's text
    must be its one answer exactly, and ``distinct``'s must be `k` different items of the list
    joined by ", "."""
    if not isinstance(row, Prompt):
        try:
            row = row_prompt(row)
        except ValueError as e:
            raise UsageError(f"held-out row {row!r}: {e}") from None
    got = text.strip()
    if not row.rule:
        return got in {a.strip() for a in row.answers}
    if row.rule == "distinct":
        named = got.split(SEPARATOR)
        return (len(named) == row.k == len(set(named))
                and all(item in row.items for item in named))
    return got == expected(row)


def spread(prompts: list[Prompt], kind: str, n: int,
           checked_by: str | None = None) -> list[Prompt]:
    """`n` prompts of one kind, evenly spaced through the file (all families, or only those
    whose validity is `checked_by`: "answers" or "rule"); all of them when `n` <= 0 or the file
    has no more."""
    if checked_by is not None and checked_by not in CHECKS:
        raise UsageError(f"checked_by: expected one of {', '.join(CHECKS)}, got {checked_by!r}")
    of_kind = [p for p in prompts
               if p.kind == kind and checked_by in (None, p.checked_by)]
    if n <= 0 or n >= len(of_kind):
        return of_kind
    return [of_kind[i * len(of_kind) // n] for i in range(n)]


@dataclass
class Tally:
    """Totals of one setting's runs over a list of prompts, and each prompt's outcome (valid or
    not, in prompt order), so that two settings run on the same prompts can be paired."""

    prompts: int = 0
    seconds: float = 0.0           # sum of the denoising loops' wall times
    forwards: int = 0              # NFE
    positions: int = 0             # generated positions (the canvases)
    content: int = 0               # tokens before the first end of text
    rows: int = 0                  # positions the forwards recomputed
    valid: int = 0
    same: int = 0                  # tokens equal to the reference run's, position by position
    remasked: int = 0
    steps: list[int] = field(default_factory=list)    # forwards, prompt by prompt
    outcomes: list[bool] = field(default_factory=list)  # valid or not, prompt by prompt

    def add(self, res: DiffusionResult, prompt: Prompt, reference: list[int] | None) -> None:
        """Count one ``DiffusionResult`` of `prompt`; `reference` is the run to compare tokens
        with."""
        s = res.stats
        ok = prompt.valid(res.text)
        self.prompts += 1
        self.seconds += s.seconds
        self.forwards += res.steps_taken
        self.steps.append(res.steps_taken)
        self.positions += len(res.tokens)
        self.content += s.content_tokens
        self.rows += sum(s.active_positions)
        self.valid += ok
        self.outcomes.append(ok)
        ref = res.tokens if reference is None else reference
        self.same += sum(a == b for a, b in zip(res.tokens, ref))
        self.remasked += sum(s.remasked)

    def row(self) -> dict[str, Any]:
        """The figures every table reports for it; `outcomes` as a string of 1 (valid) and 0,
        prompt by prompt."""
        n, f = max(self.prompts, 1), max(self.forwards, 1)
        low, high = proportion(self.valid, self.prompts) if self.prompts else (0.0, 0.0)
        return {"prompts": self.prompts, "valid": self.valid, "validity": self.valid / n,
                "validity_low": low, "validity_high": high,
                "fidelity": self.same / max(self.positions, 1), "nfe": self.forwards / n,
                "tokens_per_forward": self.positions / f, "useful_per_forward": self.content / f,
                "rows_per_forward": self.rows / f, "seconds": self.seconds / n,
                "tok_s": self.positions / self.seconds if self.seconds else 0.0,
                "useful_tok_s": self.content / self.seconds if self.seconds else 0.0,
                "outcomes": "".join("1" if ok else "0" for ok in self.outcomes)}

    def paired_with(self, reference: Tally) -> dict[str, Any]:
        """Its validity paired with `reference`'s on the same prompts (``intervals.paired``): the
        prompts only the reference answered and only this one did, the 95% interval of the
        difference in points, the exact McNemar p-value and the verdict at ``MARGIN``."""
        p = paired(reference.outcomes, self.outcomes)
        return {"only_ref": p.only_ref, "only_other": p.only_other,
                "validity_delta": 100 * (p.other_valid - p.ref_valid) / p.n,
                "delta_low": 100 * p.low, "delta_high": 100 * p.high, "p_value": p.p_value,
                "verdict": p.verdict, "margin": 100 * p.margin}


def kinds(model_path: str, heldout: str, per_kind: int, warm_up: dict[str, Any],
          checked_by: str | None = None) -> Iterator[tuple[Model, str, list[Prompt]]]:
    """The model (loaded once, one thread, warmed up by one run with `warm_up`) and up to
    `per_kind` prompts of each kind that the file has (all of them when `per_kind` <= 0); of
    every family, or only those whose validity is `checked_by` ("answers" or "rule"; see
    ``spread``)."""
    prompts = read_heldout(Path(heldout))
    with threads(1):
        m = load(model_path)
        diffuse(m, prompts[0].prompt, **warm_up)
        for kind in KINDS:
            chosen = spread(prompts, kind, per_kind, checked_by)
            if chosen:
                yield m, kind, chosen


def run_settings(m: Model, prompts: list[Prompt], settings: dict[str, dict[str, Any]],
                 reference: dict[str, str]) -> tuple[dict[str, Tally], dict[str, list[list[int]]]]:
    """Each setting (``diffuse`` arguments) on each of `prompts`, tallied against the tokens of
    the setting `reference` names (listed before it, or itself); the tallies and the tokens.
    Prompt by prompt, every setting in turn: a noisy neighbour on a shared machine slows all
    settings alike, not the few that ran while it was busy, so the speed-ups compare like
    with like."""
    order = list(settings)
    late = [n for n in order if order.index(reference[n]) > order.index(n)]
    if late:
        raise UsageError(f"run_settings: the reference of {', '.join(late)} is listed after it; "
                         f"expected each reference first")
    tallies = {name: Tally() for name in settings}
    tokens: dict[str, list[list[int]]] = {name: [] for name in settings}
    for i, p in enumerate(prompts):
        for name, kw in settings.items():
            res = diffuse(m, p.prompt, **kw)
            tokens[name].append(res.tokens)
            tallies[name].add(res, p, tokens[reference[name]][i])
    return tallies, tokens


def on_tiny_models(module: str, worker: str, what: str, per_kind: int) -> list[dict[str, Any]]:
    """`worker`(model path, held-out path, per_kind) of bench `module`, for tiny-llada then
    tiny-dream, each in a fresh subprocess; their rows."""
    d = need_data_dir(what)
    rows: list[dict[str, Any]] = []
    for name in ("tiny-llada", "tiny-dream"):
        call = (f"{worker}({str(d / 'models' / (name + '.gguf'))!r}, "
                f"{str(d / 'eval' / 'tiny_heldout.jsonl')!r}, {per_kind})")
        rows += run_worker(module, call, what)
    return rows
