"""Tests for the unreleased-section parser."""

from __future__ import annotations

from wpgate.parsers.changelog import parse_unreleased

TEXT = """# Changelog

## [Unreleased]

### Added
- `wpgate check` and `--format json`; ``a `tick` b``.

```
`not a name`
```

## [0.1.0] - 2026-01-01
- `old_name`
"""


def test_names_of_the_unreleased_section_only() -> None:
    section = parse_unreleased(TEXT)
    assert section.line == 3
    assert [(n.text, n.line) for n in section.names] == [
        ("wpgate check", 6),
        ("--format json", 6),
        ("a `tick` b", 6),
    ]


def test_missing_section() -> None:
    assert parse_unreleased("# Changelog\n\n## 1.0\n", "C.md").line == 0
