"""Tests for the unreleased-section parser."""

from __future__ import annotations

from linear_time import assert_linear, needs_clocks

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


def test_code_spans_of_a_line_follow_the_commonmark_rule() -> None:
    text = "## [Unreleased]\n- ``a` and `b`` then `c`` d` and `e\n- `f\ng`\n"
    assert [(n.text, n.line) for n in parse_unreleased(text).names] == [
        ("a` and `b", 2),  # `` opens and `` closes: the single backticks inside are code
        ("c`` d", 2),  # a run of two backticks does not close a span opened by one
    ]  # `e is literal, and a span does not cross lines here


def _runs_of_every_length(size: int) -> str:
    """A line of backtick runs of lengths 1, 2, 3, ... (no two alike: none closes another)."""
    runs: list[str] = []
    length, total = 1, 0
    while total < size:
        runs.append("`" * length + "a")
        total += length + 1
        length += 1
    return "## [Unreleased]\n- " + "".join(runs) + "\n"


@needs_clocks
def test_the_unreleased_section_takes_linear_time_on_unclosed_backtick_runs() -> None:
    # A regular expression took time growing with size ** 1.5 here: 20 s for the larger line.
    assert_linear(parse_unreleased, _runs_of_every_length, 320_000)
