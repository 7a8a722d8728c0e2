"""Tests for the front-matter parser."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from wpgate.parsers.front_matter import parse_front_matter


def test_valid_front_matter_with_key_lines_and_body() -> None:
    front = parse_front_matter('---\nid: "001"\ntitle: x\n---\n# Body\n', "p.md")
    assert front.data == {"id": "001", "title": "x"}
    assert front.key_lines == {"id": 2, "title": 3}
    assert front.body == "# Body"
    assert front.body_line == 5
    assert front.findings == ()


def test_malformed_yaml_reports_the_file_line() -> None:
    front = parse_front_matter("---\nid: 1\ntitle: [unclosed\nphase: 2\n---\n", "p.md")
    assert front.data is None
    (finding,) = front.findings
    assert (finding.path, finding.rule_id) == ("p.md", "WPG301")
    assert finding.line in (4, 5)
    assert "not valid YAML" in finding.message


def test_duplicate_key_is_refused_at_its_line() -> None:
    front = parse_front_matter("---\nid: a\ntitle: b\nid: c\n---\n", "p.md")
    assert [(f.line, f.message) for f in front.findings] == [
        (4, "the key `id` appears twice in the front matter; keep one")
    ]


def test_missing_unclosed_and_non_mapping() -> None:
    assert parse_front_matter("# no front matter\n", "p.md").findings[0].line == 1
    assert "never closed" in parse_front_matter("---\nid: 1\n", "p.md").findings[0].message
    assert "mapping" in parse_front_matter("---\n- a\n- b\n---\n", "p.md").findings[0].message
    assert "empty" in parse_front_matter("---\n---\n", "p.md").findings[0].message


@given(st.text(max_size=200))
def test_never_raises(text: str) -> None:
    front = parse_front_matter("---\n" + text + "\n---\n", "p.md")
    assert (front.data is None) == bool(front.findings)


def test_alias_bomb_and_deep_nesting_stay_cheap() -> None:
    levels = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    front = parse_front_matter("---\n" + "\n".join(levels) + "\n---\n", "p.md")
    assert front.findings == ()
    deep = parse_front_matter("---\nid: " + "[" * 5000 + "]" * 5000 + "\n---\n", "p.md")
    assert [(f.line, f.rule_id) for f in deep.findings] == [(2, "WPG301")]
