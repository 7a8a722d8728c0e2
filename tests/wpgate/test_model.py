"""The rule registry: unique ids and names, and idempotent registration on import."""

from __future__ import annotations

import ast
import copy
import dataclasses
import importlib
import inspect
import pickle
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import wpgate.rules
from wpgate._git import Commit
from wpgate._model import (
    MAX_MESSAGE,
    RULES,
    Finding,
    Problem,
    Rule,
    RuleRegistry,
    switched_on,
    with_severity,
)
from wpgate._record import fields as record_fields
from wpgate._record import replace
from wpgate.parsers.front_matter import parse_front_matter
from wpgate.rules.trailers import CommitMessage
from wpgate.trailers import Trailer, parse_message


def _check(subject: object, options: object) -> Iterator[Finding]:
    yield from ()


def test_ensure_keeps_the_first_registration() -> None:
    registry = RuleRegistry()
    first = registry.ensure(Rule("WPG900", "first-name", "one", _check))
    again = registry.ensure(Rule("WPG900", "first-name", "again", _check))
    assert again is first
    assert registry.get("wpg900") is first
    assert registry.get("first-name") is first
    assert len(registry) == 1


def test_register_refuses_a_duplicate_id_or_name() -> None:
    registry = RuleRegistry()
    registry.register(Rule("WPG900", "a-name", "one", _check))
    with pytest.raises(ValueError, match="duplicate rule WPG900"):
        registry.register(Rule("WPG900", "other-name", "two", _check))
    with pytest.raises(ValueError, match="duplicate rule WPG901"):
        registry.register(Rule("WPG901", "a-name", "three", _check))


def test_finding_messages_are_capped() -> None:
    huge = Finding("p.md", 1, "WPG301", "x" * 312_000)
    assert len(huge.message) < MAX_MESSAGE + 40
    assert huge.message.endswith(f"... ({312_000 - MAX_MESSAGE} characters cut)")
    short = Finding("p.md", 1, "WPG301", "fine")
    assert short.message == "fine"
    assert with_severity(short, "warning").severity == "warning"
    assert with_severity(short, "error") is short


@pytest.mark.parametrize(
    ("record", "changed"),
    [
        (Finding("a.md", 2, "WPG301", "m"), {"line": 3}),
        (Commit("0" * 40, ("1" * 40,), "A <a@e>", b"fix: x\n"), {"author": "B <b@e>"}),
        (CommitMessage(parse_message("fix: x\n"), "0" * 12, author="A <a@e>"), {"parents": 2}),
        (parse_message("fix: x\n\nWP: 004\n"), {"subject": "fix: y"}),
        (Trailer("WP", "004", 3), {"value": "005"}),
    ],
)
def test_records_built_by_hand_written_initialisers_stay_frozen_values(
    record: object, changed: dict[str, object]
) -> None:
    # Finding, Commit, CommitMessage, Message and Trailer fill their fields in one step, not
    # the frozen record's __init__: they must still refuse assignment and compare, hash, copy
    # and replace by their fields exactly as generated ones do.
    name = next(iter(changed))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(record, name, changed[name])
    fields = {f.name: getattr(record, f.name) for f in record_fields(record)}
    assert type(record)(**fields) == record
    assert copy.copy(record) == record
    if not isinstance(record, CommitMessage):  # its References compare by identity
        assert pickle.loads(pickle.dumps(record)) == record
    other = replace(record, **changed)
    assert getattr(other, name) == changed[name]
    assert other != record
    assert hash(type(record)(**fields)) == hash(record)
    assert set(vars(record)) == set(fields)


def test_a_finding_orders_by_path_line_and_rule_ignoring_severity() -> None:
    first, second = Finding("a", 2, "WPG1", "z"), Finding("a", 10, "WPG0", "a", "warning")
    assert sorted([second, first]) == [first, second]
    assert Finding("a", 2, "WPG1", "z", "warning") == first
    assert repr(first) == "Finding(path='a', line=2, rule_id='WPG1', message='z', severity='error')"


def test_every_rule_module_exports_one_typed_tuple_holding_every_rule_it_registers() -> None:
    wpgate.rules.register_all()
    exported: dict[str, str] = {}
    for info in pkgutil.iter_modules(wpgate.rules.__path__):
        module = importlib.import_module(f"wpgate.rules.{info.name}")
        checks = module.CHECKS
        assert isinstance(checks, tuple), info.name
        assert checks, info.name
        for rule in checks:
            assert isinstance(rule, Rule), (info.name, rule)
            assert rule.rule_id not in exported, f"{rule.rule_id} in {exported.get(rule.rule_id)}"
            exported[rule.rule_id] = info.name
            # One check signature: the subject and the linter's options, nothing else.
            params = list(inspect.signature(rule.check).parameters)
            assert len(params) == 2, rule.rule_id
            assert params[1] == "options", rule.rule_id
            assert RULES.get(rule.rule_id) is rule
    assert sorted(exported) == [rule.rule_id for rule in RULES]


def test_switched_on_keeps_the_enabled_rules_or_each_rules_default() -> None:
    rules = (
        Rule("WPG900", "on-by-default", "one", _check),
        Rule("WPG901", "off-by-default", "two", _check, enabled_by_default=False),
    )
    assert [r.rule_id for r in switched_on(rules)] == ["WPG900"]
    assert [r.rule_id for r in switched_on(rules, lambda rule_id: rule_id == "WPG901")] == [
        "WPG901"
    ]


def test_parsers_and_readers_name_no_rule_id() -> None:
    # Rule ids live in the rules package: what reads or parses a document takes them as
    # arguments, so a parse problem is reported under whichever rule the caller names.
    src = Path(wpgate.rules.__file__).resolve().parents[1]
    paths = sorted((src / "parsers").glob("*.py")) + [
        src / name for name in ("_documents.py", "_evidence_tree.py", "project_index.py")
    ]
    named = [
        f"{path.name}:{node.lineno}: {node.value}"
        for path in paths
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"WPG\d{3}", node.value)
    ]
    assert named == []


def test_a_parse_problem_is_reported_under_the_rule_its_caller_names() -> None:
    front = parse_front_matter("# no front matter\n", "p.md", "WPG999")
    assert [f.rule_id for f in front.findings] == ["WPG999"]
    problem = Problem("p.md", 3, "cannot read p.md")
    assert problem.finding("WPG201") == Finding("p.md", 3, "WPG201", "cannot read p.md")
