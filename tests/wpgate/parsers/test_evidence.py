"""Tests for the evidence-file and claim parsers."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from linear_time import assert_linear, needs_clocks

from wpgate.parsers.evidence import evidence_numbers, parse_claims, parse_evidence

SHA = "a" * 64
COMMIT = "b" * 40


def _document(**changes: object) -> str:
    document: dict[str, object] = {
        "schema": "wpgate-evidence/1",
        "environment": {"torch": "2.9.1+cu129"},
        "git_commit": COMMIT,
        "sources": {"src/m.py": SHA},
        "results": {"median_ms": 188.0952, "repeats": 5},
    }
    document.update(changes)
    return json.dumps(document, indent=2)


def test_valid_file() -> None:
    parsed = parse_evidence(_document(), "docs/evidence/a.json", rule_id="WPG404")
    assert parsed.findings == ()
    assert parsed.evidence is not None
    assert parsed.evidence.git_commit == COMMIT
    assert parsed.evidence.sources == {"src/m.py": SHA}
    assert parsed.evidence.line_of("src/m.py") == 8


def test_invalid_files_say_what_is_wrong() -> None:
    broken = parse_evidence("{\n  'x': 1\n}", "e.json", rule_id="WPG404")
    assert (broken.findings[0].line, broken.findings[0].rule_id) == (2, "WPG404")
    assert "not valid JSON" in broken.findings[0].message
    bad = parse_evidence(
        _document(schema="v0", git_commit="abc", sources={"../x.py": "zz"}),
        "e.json",
        rule_id="WPG404",
    )
    assert bad.evidence is None
    assert [f.message for f in bad.findings] == [
        "invalid evidence file: `schema` must be \"wpgate-evidence/1\", not 'v0'",
        "invalid evidence file: `git_commit` must be a 40-hex commit or null, not 'abc'",
        "invalid evidence file: `sources` path '../x.py' must be repository-relative, without `..`",
        "invalid evidence file: `sources['../x.py']` must be a 64-hex sha256, not 'zz'",
    ]
    no_schema = json.loads(_document())
    del no_schema["schema"]
    assert [
        f.message
        for f in parse_evidence(json.dumps(no_schema), "e.json", rule_id="WPG404").findings
    ] == ['invalid evidence file: `schema` is missing; add `"schema": "wpgate-evidence/1"`']
    assert (
        "`results` is missing"
        in parse_evidence(
            json.dumps(
                {
                    "schema": "wpgate-evidence/1",
                    "environment": {},
                    "git_commit": None,
                    "sources": {},
                }
            ),
            "e.json",
            rule_id="WPG404",
        )
        .findings[0]
        .message
    )
    assert (
        parse_evidence("[1]", "e.json", rule_id="WPG404")
        .findings[0]
        .message.startswith("an evidence file")
    )


def test_numbers_include_numbers_inside_strings() -> None:
    numbers, strings = evidence_numbers(json.loads(_document()))
    assert {Decimal("188.0952"), Decimal(5)} <= numbers
    assert Decimal("2.9") not in numbers  # a version is text, not a number
    assert "2.9.1+cu129" in strings


PAGE = """# Page

Intro with 99 numbers that are not claims and `[MEASURED]` in code.

[MEASURED] Five runs on torch 2.9.1 take 188.1 ms (187.9–192.7), 10.01% saved,
WP-197b R12 623edc0 on 2026-11-29 are not numbers; see [evidence](../evidence/a.json) and
`docs/evidence/b.json`. `identical abc1234..def5678 -- src/m.py src/n.py` and
`collected 228 -- tests/x`; covers 623edc0. [MEASURED] Second: 1,834 images
[link](../../etc/secret.json).

```
[MEASURED] inside a fence is not a claim
```
"""


def test_claims_with_citations_numbers_and_markers() -> None:
    first, second = parse_claims(PAGE, "docs/page/x.md")
    assert (first.line, second.line) == (5, 8)
    assert [(c.target, c.page_relative, c.line) for c in first.citations] == [
        ("../evidence/a.json", True, 6),
        ("docs/evidence/b.json", False, 7),
    ]
    assert [(n.text, n.decimals, n.percent, n.line) for n in first.numbers] == [
        ("188.1", 1, False, 5),
        ("187.9", 1, False, 5),
        ("192.7", 1, False, 5),
        ("10.01", 2, True, 5),
    ]
    assert [v.text for v in first.versions] == ["2.9.1"]
    assert first.covers == ("623edc0",)
    (marker,) = first.identical
    assert (marker.base, marker.head, marker.paths, marker.line) == (
        "abc1234",
        "def5678",
        ("src/m.py", "src/n.py"),
        7,
    )
    (count,) = first.counts
    assert (count.count, count.paths, count.line) == (228, ("tests/x",), 8)
    assert [n.value for n in second.numbers] == [Decimal(1834)]
    assert [c.target for c in second.citations] == ["../../etc/secret.json"]


def test_text_without_tag_has_no_claims() -> None:
    assert parse_claims("plain 1 2 3\n", "x.md") == ()


@given(st.text(max_size=300))
def test_claim_parser_never_raises(text: str) -> None:
    parse_claims("[MEASURED] " + text, "x.md")


REFERENCES = """# Page

[MEASURED] Full 188.1 ms ([runs][Run 2]), collapsed [train][] and bare [floor]; the rounds
[1.19, 1.23] are not a link, nor [unknown][nope] or `[code][train]`.
[Run  2]: ../evidence/a.json

```
[floor]: ../evidence/fenced.json
```

[TRAIN]: <../evidence/a b.json> "the train runs"
[floor]: ../evidence/c%20d.json#median
[floor]: ../evidence/second-definition-ignored.json
[site]: https://example.com/evidence.json
"""


def test_reference_style_links_cite_their_definitions() -> None:
    (claim,) = parse_claims(REFERENCES, "docs/page/x.md")
    assert [(c.target, c.page_relative, c.line) for c in claim.citations] == [
        ("../evidence/a.json", True, 3),
        ("../evidence/a b.json", True, 3),
        ("../evidence/c d.json", True, 3),
    ]
    # A resolved full reference's label is not shown, so its 2 is no measurement; the numbers
    # in brackets that are no link stay numbers, and a definition's line holds none.
    assert [n.text for n in claim.numbers] == ["188.1", "1.19", "1.23"]


def test_a_reference_without_a_definition_cites_nothing() -> None:
    (claim,) = parse_claims("[MEASURED] 5 ms ([runs][ev]) and [run 2].\n", "x.md")
    assert claim.citations == ()
    assert [n.text for n in claim.numbers] == ["5", "2"]


def _numbers(text: str) -> list[str]:
    (claim,) = parse_claims(text, "x.md")
    return [number.text for number in claim.numbers]


def test_code_spans_of_a_claim_follow_the_commonmark_rule() -> None:
    # A run of another length closes nothing: `12 ms`` is no code span, so 12 is a measurement.
    assert _numbers("[MEASURED] took `12 ms`` on x\n") == ["12"]
    # A span may cross a line break of its paragraph and hold shorter runs of backticks.
    assert _numbers("[MEASURED] `a\n12` and ``x `14` y`` 13 ms\n") == ["13"]
    # An opener that nothing closes is literal: the span after it still cites its file.
    (claim,) = parse_claims("[MEASURED] ``x 12 ms and `y.json`\n", "x.md")
    assert [(c.target, c.page_relative) for c in claim.citations] == [("y.json", False)]
    assert [n.text for n in claim.numbers] == ["12"]
    # A tag inside a code span opens no claim; one after a literal opener does.
    assert len(parse_claims("[MEASURED] `[MEASURED]` 1\n", "x.md")) == 1
    assert len(parse_claims("[MEASURED] `` `x` [MEASURED] 1\n", "x.md")) == 2


def test_links_beside_unclosed_brackets_still_cite() -> None:
    page = (
        "[MEASURED] [[[ see [runs](a.json), [b][ref], [ref][] and [ref] [[ and [x [c](c.json)\n"
        "\n"
        "[ref]: b.json\n"
    )
    (claim,) = parse_claims(page, "x.md")
    assert [c.target for c in claim.citations] == ["a.json", "c.json", "b.json", "b.json", "b.json"]


def test_a_link_text_with_brackets_or_code_cites_its_file() -> None:
    """A link's text may hold balanced brackets and code (whose brackets do not count); a
    link written inside a code span is shown as code and cites nothing."""
    page = (
        "[MEASURED] 12 ms ([runs [1, 2]](a.json), [`x]`](b.json), [see ( c.json )]( c.json ))"
        " and `[d](d.json)` [e [f](f.json) g](e.json)\n"
    )
    (claim,) = parse_claims(page, "x.md")
    assert [c.target for c in claim.citations] == ["a.json", "b.json", "c.json", "f.json"]
    # A link's text is prose (its numbers are measurements); its destination is not.
    assert [n.text for n in claim.numbers] == ["12", "1", "2"]


def _claim_of(body: str) -> str:
    return "# Page\n\n[MEASURED] " + body + "\n"


@needs_clocks
@pytest.mark.parametrize("unit", ["`", "[", "![", "[](", "[a](<b ", '[a](b "', "[[a]("])
def test_claims_take_linear_time_on_runs_of_backticks_and_brackets(unit: str) -> None:
    # 20,000 backticks took minutes, 20,000 `[` seconds, 20,000 `[](` 22 s, before the parser
    # was linear.
    assert_linear(
        lambda text: parse_claims(text, "x.md"),
        lambda size: _claim_of(unit * (size // len(unit))),
        20_000,
    )


@needs_clocks
@pytest.mark.parametrize(
    ("hostile", "size"),
    [
        (lambda size: _claim_of("1\n" * (size // 2)), 80_000),
        (lambda size: _claim_of("[MEASURED] x\n" * (size // 13)), 120_000),
        (lambda size: _claim_of("`identical " + "a.." * (size // 3) + "`"), 20_000),
    ],
    ids=["numbers-on-many-lines", "claims-on-many-lines", "identical-marker-of-many-dots"],
)
def test_claims_take_linear_time_on_many_lines_numbers_and_markers(
    hostile: Callable[[int], str], size: int
) -> None:
    # Each number's and each claim's line was found by counting the line breaks before it, and
    # the `identical` marker's range was matched lazily: each quadratic, seconds at these sizes.
    assert_linear(lambda text: parse_claims(text, "x.md"), hostile, size)


def test_a_marker_range_is_split_at_its_first_two_dots() -> None:
    text = "[MEASURED] `identical a...b -- x` `identical ..b -- x` `identical a.. -- x`\n"
    (claim,) = parse_claims(text, "x.md")
    assert [(m.base, m.head, m.paths) for m in claim.identical] == [("a", ".b", ("x",))]
