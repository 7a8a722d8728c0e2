"""Each rule is declared once: its id, name and summary in ``wpgate.rules.DECLARED`` alone."""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import wpgate.rules
from wpgate._model import RULES, Finding
from wpgate.rules import DECLARED, RuleInfo, declared, register_all

SRC = Path(__file__).resolve().parents[3] / "src" / "wpgate"
DECLARATION = SRC / "rules" / "__init__.py"
_ID_RE = re.compile(r"\bWPG\d{3}\b")


def _id_literals(paths: list[Path]) -> Counter[tuple[str, str]]:
    """``(id, file)`` of every string constant that is a rule id, in code (AST, not prose)."""
    found: Counter[tuple[str, str]] = Counter()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            value = node.value if isinstance(node, ast.Constant) else None
            if isinstance(value, str) and _ID_RE.fullmatch(value):
                found[(value, path.name)] += 1
    return found


def test_the_probe_counts_id_literals_in_code(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('X = "WPG101"\nf(rule="WPG101")\n# WPG102 in a comment\n')
    assert _id_literals([module]) == Counter({("WPG101", "m.py"): 2})


def test_each_rule_id_is_written_once_in_the_code() -> None:
    found = _id_literals(sorted(SRC.rglob("*.py")))
    assert found == Counter({(rule_id, DECLARATION.name): 1 for rule_id in DECLARED}), (
        "a rule id is written outside wpgate.rules; use its constant (e.g. SUBJECT_FORMAT)"
    )


def test_prose_names_only_declared_rules() -> None:
    # Comments, docstrings and help texts may name a rule by id as an example; the id must exist.
    unknown = {
        f"{path.relative_to(SRC)}: {rule_id}"
        for path in SRC.rglob("*.py")
        for rule_id in _ID_RE.findall(path.read_text(encoding="utf-8"))
        if rule_id not in DECLARED
    }
    assert unknown == set()


def test_every_declared_rule_is_registered_as_declared() -> None:
    register_all()
    assert {r.rule_id: (r.name, r.summary) for r in RULES} == {
        i.rule_id: (i.name, i.summary) for i in DECLARED.values()
    }


@pytest.mark.parametrize("info", list(DECLARED.values()), ids=list(DECLARED))
def test_each_rule_is_named_by_its_constant(info: RuleInfo) -> None:
    constant = info.name.upper().replace("-", "_")
    assert getattr(wpgate.rules, constant) == info.rule_id
    assert constant in wpgate.rules.__all__
    assert re.fullmatch(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*", info.name)


def test_declared_attaches_a_check_to_its_declaration() -> None:
    def check(subject: object, options: object) -> Iterator[Finding]:
        yield from ()

    rule = declared("WPG102", check, options={"max_subject_length": 72})
    assert (rule.rule_id, rule.name, rule.summary, rule.check) == (
        "WPG102",
        "subject-length",
        DECLARED["WPG102"].summary,
        check,
    )
    assert (rule.enabled_by_default, rule.options) == (True, {"max_subject_length": 72})
    with pytest.raises(KeyError):
        declared("WPG999", check)
