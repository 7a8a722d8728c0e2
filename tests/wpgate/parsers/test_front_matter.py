"""Tests for the front-matter parser."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from wpgate.parsers.front_matter import parse_front_matter


def test_valid_front_matter_with_key_lines_and_body() -> None:
    front = parse_front_matter('---\nid: "001"\ntitle: x\n---\n# Body\n', "p.md", "WPG301")
    assert front.data == {"id": "001", "title": "x"}
    assert front.key_lines == {"id": 2, "title": 3}
    assert front.body == "# Body"
    assert front.body_line == 5
    assert front.findings == ()


def test_malformed_yaml_reports_the_file_line() -> None:
    front = parse_front_matter("---\nid: 1\ntitle: [unclosed\nphase: 2\n---\n", "p.md", "WPG301")
    assert front.data is None
    (finding,) = front.findings
    assert (finding.path, finding.rule_id) == ("p.md", "WPG301")
    assert finding.line in (4, 5)
    assert "not valid YAML" in finding.message


def test_duplicate_key_is_refused_at_its_line() -> None:
    front = parse_front_matter("---\nid: a\ntitle: b\nid: c\n---\n", "p.md", "WPG301")
    assert [(f.line, f.message) for f in front.findings] == [
        (4, "the key `id` appears twice in the front matter; keep one")
    ]


def test_missing_unclosed_and_non_mapping() -> None:
    assert parse_front_matter("# no front matter\n", "p.md", "WPG301").findings[0].line == 1
    assert (
        "never closed" in parse_front_matter("---\nid: 1\n", "p.md", "WPG301").findings[0].message
    )
    assert (
        "mapping"
        in parse_front_matter("---\n- a\n- b\n---\n", "p.md", "WPG301").findings[0].message
    )
    assert "empty" in parse_front_matter("---\n---\n", "p.md", "WPG301").findings[0].message


@given(st.text(max_size=200))
def test_never_raises(text: str) -> None:
    front = parse_front_matter("---\n" + text + "\n---\n", "p.md", "WPG301")
    assert (front.data is None) == bool(front.findings)


def test_alias_bomb_and_deep_nesting_stay_cheap() -> None:
    levels = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    front = parse_front_matter("---\n" + "\n".join(levels) + "\n---\n", "p.md", "WPG301")
    assert front.data is None
    assert [(f.line, f.rule_id) for f in front.findings] == [(3, "WPG301")]
    assert "alias" in front.findings[0].message
    deep = parse_front_matter("---\nid: " + "[" * 5000 + "]" * 5000 + "\n---\n", "p.md", "WPG301")
    assert [(f.line, f.rule_id) for f in deep.findings] == [(2, "WPG301")]


def test_merge_key_and_scalar_aliases_are_refused_at_their_line() -> None:
    merged = parse_front_matter("---\nbase: &b {k: 1}\nid:\n  <<: *b\n---\n", "p.md", "WPG301")
    scalar = parse_front_matter("---\nid: &x '001'\ntitle: *x\n---\n", "p.md", "WPG301")
    assert [f.line for f in merged.findings] == [4]
    assert [f.line for f in scalar.findings] == [3]
    anchor_only = parse_front_matter("---\nid: &x '001'\n---\n", "p.md", "WPG301")
    assert anchor_only.findings == ()
    assert anchor_only.data == {"id": "001"}
