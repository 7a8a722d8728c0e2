"""The rule registry: unique ids and names, and idempotent registration on import."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from wpgate._model import Finding, Rule, RuleRegistry


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
