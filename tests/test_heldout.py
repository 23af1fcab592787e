"""The held-out set and its one definition of validity (``llmnb.perf.heldout.is_valid``): each
rule accepts its answer and refuses the near misses (an item repeated, missing, out of place,
extra text, a different separator); a malformed line is refused with its file, line and field;
the shipped file has at least 150 prompts of each kind and shares no instance with the
training corpus that ``tools/tiny_corpus.py`` generates."""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from llmnb.errors import UsageError
from llmnb.perf.heldout import Prompt, is_valid, read_heldout, row_prompt, spread

ROOT = Path(__file__).parent.parent
HELDOUT = ROOT / "data" / "eval" / "tiny_heldout.jsonl"
sys.path.insert(0, str(ROOT / "tools"))
import tiny_corpus  # noqa: E402

ITEMS = ["Mars", "Pear", "Red", "Monday"]


def rule(name: str, **args: Any) -> dict[str, Any]:
    return {"prompt": "p", "family": name, "rule": name, "items": ITEMS} | args


# (row, valid texts, invalid texts)
CASES: list[tuple[dict[str, Any], list[str], list[str]]] = [
    (rule("copy"),
     ["Mars, Pear, Red, Monday", "  Mars, Pear, Red, Monday\n"],
     ["Mars, Pear, Red", "Mars, Pear, Red, Monday, Monday", "Mars, Pear, Monday, Red",
      "Mars, Pear, Red, Monday.", "Mars,Pear,Red,Monday", "Mars, Pear,  Red, Monday",
      "Mars Pear Red Monday", "Mars, Pear, Red and Monday", "mars, pear, red, monday", ""]),
    (rule("reverse"),
     ["Monday, Red, Pear, Mars"],
     ["Mars, Pear, Red, Monday", "Monday, Red, Pear", "Monday, Red, Pear, Mars, Mars",
      "Monday, Pear, Red, Mars", "The list: Monday, Red, Pear, Mars", "Monday, Red, Pear , Mars"]),
    (rule("replace", items=["Mars", "Red", "Mars", "Pear"], old="Mars", new="Lemon"),
     ["Lemon, Red, Lemon, Pear"],
     ["Lemon, Red, Mars, Pear", "Mars, Red, Mars, Pear", "Lemon, Red, Pear",
      "Lemon, Red, Lemon, Pear, Lemon", "Red, Lemon, Lemon, Pear", "Lemon, Red, Lemon, Pear!"]),
    (rule("alphabetical"),
     ["Mars, Monday, Pear, Red"],
     ["Mars, Pear, Red, Monday", "Red, Pear, Monday, Mars", "Mars, Monday, Pear",
      "Mars, Mars, Monday, Pear, Red", "Mars, Monday, Pear, Red, Red",
      "Mars, Monday, Pear, Red x"]),
    (rule("distinct", k=2),
     ["Mars, Pear", "Pear, Mars", "Monday, Red", " Red, Mars \n"],
     ["Mars, Mars", "Mars", "Mars, Pear, Red", "Mars, Lemon", "Mars and Pear", "Mars,Pear",
      "Mars, Pear.", "Mars,  Pear", "Mars, Pear, ", ""]),
    (rule("distinct", k=3),
     ["Mars, Pear, Red", "Monday, Mars, Red"],
     ["Mars, Pear", "Mars, Pear, Pear", "Mars, Pear, Red, Monday", "Mars, Pear and Red"]),
    ({"prompt": "Name a planet.", "family": "pick", "answers": ["Mars", " Venus "], "modes": 2},
     ["Mars", " Venus\n"],
     ["Mars and Mars", "Mars Venus", "Earth", "Mars."]),
]


@pytest.mark.parametrize("row,good,bad", CASES, ids=[c[0]["family"] + str(c[0].get("k", ""))
                                                     for c in CASES])
def test_each_rule_accepts_its_answers_and_refuses_near_misses(
        row: dict[str, Any], good: list[str], bad: list[str]) -> None:
    p = row_prompt(row)
    for text in good:
        assert is_valid(row, text) and is_valid(p, text) and p.valid(text), text
    for text in bad:
        assert not is_valid(row, text) and not is_valid(p, text), text


def test_modes_and_kinds_follow_the_rule() -> None:
    assert row_prompt(rule("copy")).modes == 1
    assert row_prompt(rule("distinct", k=2)).modes == 12          # 4 x 3 ordered choices
    assert row_prompt(rule("distinct", k=3)).kind == "multi"
    assert (row_prompt(rule("reverse")).checked_by,
            row_prompt({"prompt": "p", "answers": ["a"]}).checked_by) == ("rule", "answers")


@pytest.mark.parametrize("row,field", [
    ({"family": "copy", "rule": "copy", "items": ITEMS}, "prompt"),
    ({"prompt": "p", "answers": []}, "answers"),
    ({"prompt": "p", "answers": ["a", 3]}, "answers"),
    ({"prompt": "p"}, "answers"),
    ({"prompt": "p", "answers": ["a", "b"], "modes": 1}, "modes"),
    ({"prompt": "p", "rule": "shuffle", "items": ITEMS}, "rule"),
    ({"prompt": "p", "rule": "copy", "items": ITEMS, "answers": ["x"]}, "rule"),
    ({"prompt": "p", "rule": "copy", "items": []}, "items"),
    ({"prompt": "p", "rule": "copy", "items": ["Mars, Pear"]}, "items"),
    ({"prompt": "p", "rule": "copy", "items": [" Mars"]}, "items"),
    ({"prompt": "p", "rule": "copy", "items": ITEMS, "k": 2}, "k"),
    ({"prompt": "p", "rule": "replace", "items": ITEMS, "old": "Lemon", "new": "Red"}, "old"),
    ({"prompt": "p", "rule": "replace", "items": ITEMS, "old": "Mars"}, "new"),
    ({"prompt": "p", "rule": "distinct", "items": ITEMS}, "k"),
    ({"prompt": "p", "rule": "distinct", "items": ITEMS, "k": 5}, "k"),
    ({"prompt": "p", "rule": "distinct", "items": ["Mars", "Mars"], "k": 1}, "items"),
    ({"prompt": "p", "rule": "distinct", "items": ITEMS, "k": 2, "modes": 6}, "modes"),
])
def test_a_malformed_line_names_the_file_the_line_and_the_field(
        tmp_path: Path, row: dict[str, Any], field: str) -> None:
    path = tmp_path / "heldout.jsonl"
    path.write_text(json.dumps({"prompt": "fine", "answer": "ok"}) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(UsageError, match=rf"heldout.jsonl:2: {field}: expected"):
        read_heldout(path)
    with pytest.raises(UsageError, match=rf"{field}: expected"):
        is_valid(row, "Mars")


def test_a_line_that_is_not_json_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "heldout.jsonl"
    path.write_text('{"prompt": "a", "answer": "b"}\n{"prompt": \n')
    with pytest.raises(UsageError, match=r"heldout.jsonl:2: "):
        read_heldout(path)


def test_the_file_has_150_prompts_of_each_kind_and_every_family_of_both_groups() -> None:
    prompts = read_heldout(HELDOUT)
    kinds = Counter(p.kind for p in prompts)
    assert kinds["single"] >= 150 and kinds["multi"] >= 150, kinds
    by = Counter((p.checked_by, p.family) for p in prompts)
    assert {f for c, f in by if c == "rule"} == set(tiny_corpus.RULE_FAMILIES)
    assert {f for c, f in by if c == "answers"} == set(tiny_corpus.FAMILIES)
    assert all(p.rule == p.family for p in prompts if p.rule)
    assert len({p.prompt for p in prompts}) == len(prompts)
    assert [p.row() for p in tiny_corpus.heldout_examples()] == [
        json.loads(line) for line in HELDOUT.open()]          # the file is the generator's


def test_training_and_heldout_share_no_instance_and_agree_on_validity() -> None:
    held = tiny_corpus.heldout_examples()
    train = tiny_corpus.training_examples(20000)
    held_instances = {e.instance for e in held if e.instance is not None}
    train_instances = {e.instance for e in train if e.instance is not None}
    assert len(train_instances) > 1000 and set(tiny_corpus.RULE_FAMILIES) == {
        i.rule for i in train_instances}
    assert not held_instances & train_instances
    assert not {e.prompt for e in held} & {e.prompt for e in train}
    for e in train:          # every training answer of a rule family is valid by the rule
        if e.instance is not None:
            assert is_valid(e.instance.row() | {"prompt": e.prompt}, e.answer), e


def test_rule_items_are_one_token_each() -> None:
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(str(ROOT / "data" / "models" / "tiny-tokenizer.json"))
    counts = tiny_corpus.item_tokens(tok)
    assert counts and set(counts.values()) == {1}, counts


def test_prompt_keeps_its_positional_form() -> None:
    p = Prompt("q", "f", ("a",), 1)
    assert (p.rule, p.items, p.checked_by, p.valid(" a ")) == ("", (), "answers", True)


def test_spread_can_keep_one_group_of_families() -> None:
    prompts = read_heldout(HELDOUT)
    rule = spread(prompts, "multi", 10, checked_by="rule")
    answers = spread(prompts, "multi", 0, checked_by="answers")
    assert len(rule) == 10 and {p.family for p in rule} == {"distinct"}
    assert len(answers) == 108 and all(p.checked_by == "answers" for p in answers)
    assert len(spread(prompts, "single", 0)) == 383
    with pytest.raises(UsageError, match="checked_by: expected"):
        spread(prompts, "single", 5, checked_by="rules")
