"""The tiny models' held-out prompts, what counts as a valid answer, and tallies of
``llmnb.diffuse`` runs over them (``llmnb bench cache`` and ``llmnb bench ladder``).

``data/eval/tiny_heldout.jsonl`` holds one object per line: `prompt`, `family`, `answers`
(every valid answer), `modes` (how many; 1 = a single-answer prompt) and `answer` (the
first). An older file with only `answer` reads as one answer, one mode. An answer is valid
when the decoded text up to the end of text, stripped, equals one of `answers`, stripped.
Single- and multi-answer prompts are reported apart: the multi-answer ones are where
steps, schedulers and caches differ. Every validity figure carries its 95% interval
(``llmnb.perf.intervals``).
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class Prompt:
    """One held-out prompt."""

    prompt: str
    family: str
    answers: tuple[str, ...]
    modes: int

    @property
    def kind(self) -> str:
        return "multi" if self.modes > 1 else "single"

    def valid(self, text: str) -> bool:
        """``is_valid`` on this prompt's answers."""
        return is_valid(text, self.answers)


def read_heldout(path: Path) -> list[Prompt]:
    """The prompts of a held-out file, either format."""
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            answers = d["answers"] if "answers" in d else [d["answer"]]
            if not answers or not all(isinstance(a, str) for a in answers):
                raise ValueError("answers: expected a non-empty list of strings")
            out.append(Prompt(str(d["prompt"]), str(d.get("family", "")), tuple(answers),
                              int(d.get("modes", 1))))
        except (ValueError, KeyError, TypeError) as e:
            raise UsageError(f"{path}:{n}: expected an object with prompt and answers "
                             f"(or answer): {e}") from None
    return out


def is_valid(text: str, answers: tuple[str, ...]) -> bool:
    """The decoded text (up to the end of text), stripped, is one of the answers, stripped."""
    return text.strip() in {a.strip() for a in answers}


def spread(prompts: list[Prompt], kind: str, n: int) -> list[Prompt]:
    """`n` prompts of one kind, evenly spaced through the file (all families); all of them
    when `n` <= 0 or the file has no more."""
    of_kind = [p for p in prompts if p.kind == kind]
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
        """Count one ``DiffusionResult`` on `prompt`; `reference` is the run to compare tokens
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


def kinds(model_path: str, heldout: str, per_kind: int,
          warm_up: dict[str, Any]) -> Iterator[tuple[Model, str, list[Prompt]]]:
    """The model (loaded once, one thread, warmed up by one run with `warm_up`) and up to
    `per_kind` prompts of each kind that the file has (all of them when `per_kind` <= 0)."""
    prompts = read_heldout(Path(heldout))
    with threads(1):
        m = load(model_path)
        diffuse(m, prompts[0].prompt, **warm_up)
        for kind in KINDS:
            chosen = spread(prompts, kind, per_kind)
            if chosen:
                yield m, kind, chosen


def run_settings(m: Model, prompts: list[Prompt], settings: dict[str, dict[str, Any]],
                 reference: dict[str, str]) -> tuple[dict[str, Tally], dict[str, list[list[int]]]]:
    """Each setting (``diffuse`` arguments) over `prompts`, in order, tallied against the
    tokens of the setting `reference` names (run before it); the tallies and the tokens."""
    tallies: dict[str, Tally] = {}
    tokens: dict[str, list[list[int]]] = {}
    for name, kw in settings.items():
        tallies[name], tokens[name] = Tally(), []
        for i, p in enumerate(prompts):
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
