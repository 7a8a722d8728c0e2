"""The rule registry: unique ids and names, and idempotent registration on import."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from wpgate._model import MAX_MESSAGE, Finding, Rule, RuleRegistry, with_severity


def _check() -> Iterator[Finding]:
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
