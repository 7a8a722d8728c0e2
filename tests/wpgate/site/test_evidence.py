"""Evidence blocks: options, measurements, tables and block replacement."""

from __future__ import annotations

import html

import pytest

from wpgate.errors import EvidenceBlockError
from wpgate.site import _evidence
from wpgate.site._evidence import EvidenceBlock, build_table, parse_block

DOC = {
    "schema": "wpgate-evidence/1",
    "git_commit": "0123456789abcdef0123",
    "environment": {"gpu": "NVIDIA H200", "cpu": "x86", "torch": "2.11.0"},
    "results": {
        "arms": {
            "eager": {"median_ms": 10.0, "min_ms": 9.5, "max_ms": 11.0, "steps": 50},
            "replay": {"median_ms": 8.0, "min_ms": 7.9, "max_ms": 8.4},
            "notes": "not a measurement",
        },
        "fit": [
            {
                "name": "batch 4",
                "eager": {"median_s": 99.092, "min_s": 98.506, "max_s": 99.243},
                "replay": {"median_s": 79.515, "min_s": 79.141, "max_s": 80.062},
            },
            {
                "name": "batch <16>",
                "eager": {"median_s": 88.009, "min_s": 87.149, "max_s": 88.255},
                "replay": {"median_s": 76.96, "min_s": 76.671, "max_s": 78.001},
            },
        ],
        "samples": [3.0, 1.0, 2.0, 10.0],
    },
}


def test_parse_block_defaults_and_options() -> None:
    block = parse_block(
        "path: docs/evidence/a.json\nselect: results.fit\ncolumns: [eager, replay]\nchart: true\n"
    )
    assert block == EvidenceBlock(
        path="docs/evidence/a.json", select="results.fit", columns=("eager", "replay"), chart=True
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("select: results\n", "needs at least `path:"),
        ("path: [unclosed\n", "not valid YAML"),
        ("path: a.json\ncolour: red\n", "unknown key(s) colour"),
        ("path: a.json\ncolumns: eager\n", "`columns` must be a list"),
        ("path: a.json\ncolumns: [eager]\n", "at least two keys"),
        ("path: a.json\ndigits: 12\n", "`digits` must be an integer"),
        ("path: a.json\nchart: maybe\n", "`chart` must be true or false"),
        ("path: a.json\ncolumns: [a, b]\nbaseline: a\n", "flat layout only"),
    ],
)
def test_parse_block_errors_say_how_to_fix(body: str, message: str) -> None:
    with pytest.raises(EvidenceBlockError, match=None) as info:
        parse_block(body)
    assert message in str(info.value)


def test_measurement_from_suffixed_keys_and_samples() -> None:
    m = _evidence.as_measurement({"median_mib": 829.8, "min_mib": 821.0, "max_mib": 829.8})
    assert m == _evidence.Measurement(829.8, 821.0, 829.8, "MiB")
    assert _evidence.as_measurement([3.0, 1.0, 2.0, 10.0]) == _evidence.Measurement(
        2.5, 1.0, 10.0, ""
    )
    assert _evidence.as_measurement({"median": 1, "min": 1}) is None
    assert _evidence.as_measurement({"median": True, "min": 0, "max": 1}) is None
    assert _evidence.as_measurement("fast") is None


def test_flat_table_with_baseline_reports_time_saved() -> None:
    table = build_table(DOC, EvidenceBlock(path="x", select="results.arms", baseline="eager"))
    assert [(r.label, r.saved_percent) for r in table.rows] == [("eager", None), ("replay", 20.0)]
    text = html.unescape(_evidence.format_table(table, digits=3))
    assert text.splitlines() == [
        "| Measurement | Median (range) [ms] | Time saved (relative to eager) |",
        "| --- | --- | --- |",
        "| eager | 10.000 (9.500–11.000) | — |",
        "| replay | 8.000 (7.900–8.400) | 20.00% |",
    ]


def test_paired_table_matches_the_house_notation() -> None:
    block = EvidenceBlock(path="x", select="results.fit", columns=("eager", "replay"))
    text = _evidence.format_table(build_table(DOC, block), digits=3)
    lines = text.splitlines()
    assert html.unescape(lines[0]) == (
        "| Row | eager [s], median (range) | replay [s], median (range) "
        "| Time saved (replay relative to eager) |"
    )
    assert lines[2] == "| batch 4 | 99.092 (98.506–99.243) | 79.515 (79.141–80.062) | 19.76% |"
    # Labels from the file are escaped; 12.55% is (88.009 − 76.960) / 88.009.
    assert (
        lines[3]
        == "| batch &#60;16&#62; | 88.009 (87.149–88.255) | 76.960 (76.671–78.001) | 12.55% |"
    )


def test_nested_rows_are_labelled_by_path() -> None:
    table = build_table(DOC, EvidenceBlock(path="x", select="results"))
    assert [r.label for r in table.rows] == [
        "arms / eager",
        "arms / replay",
        "fit / batch 4 / eager",
        "fit / batch 4 / replay",
        "fit / batch <16> / eager",
        "fit / batch <16> / replay",
        "samples",
    ]


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (EvidenceBlock(path="x", select="results.nope"), "has no `results.nope`"),
        (EvidenceBlock(path="x", select="results.arms.notes"), "holds no measurement"),
        (
            EvidenceBlock(path="x", select="results.arms", baseline="graph"),
            "rows are: eager, replay",
        ),
        (
            EvidenceBlock(path="x", select="results.fit", columns=("a", "b")),
            "no entry with measurements",
        ),
    ],
)
def test_build_table_errors(block: EvidenceBlock, message: str) -> None:
    with pytest.raises(EvidenceBlockError) as info:
        build_table(DOC, block)
    assert message in str(info.value)


def test_select_indexes_lists() -> None:
    assert _evidence.select(DOC, "results.fit.1.name") == "batch <16>"


def test_replace_blocks_replaces_only_evidence_fences() -> None:
    page = (
        "intro\n\n```wpgate-evidence\npath: a.json\n```\n\n```python\nx = 1\n```\n\n"
        "````wpgate-evidence\npath: b.json\n````\n"
    )
    out = _evidence.replace_blocks(page, lambda body: f"<<{parse_block(body).path}>>")
    assert out == "intro\n\n<<a.json>>\n\n```python\nx = 1\n```\n\n<<b.json>>\n"


def test_describe_source() -> None:
    assert list(_evidence.describe_source(DOC)) == [
        "commit 0123456789ab",
        "NVIDIA H200",
        "PyTorch 2.11.0",
    ]
    assert list(_evidence.describe_source({})) == []


def test_list_rows_are_labelled_by_the_benchmarks_own_variant_names() -> None:
    # The optimizer benchmark writes `variant`, the training benchmark `arm`: rows read as
    # those names, never as list indices.
    doc = {
        "results": {
            "variants": [
                {"variant": "bucketed eager", "median_ms": 20.0, "min_ms": 18.0, "max_ms": 25.0},
                {"variant": "capture_updates", "median_ms": 2.0, "min_ms": 1.9, "max_ms": 3.0},
                {"median_ms": 1.0, "min_ms": 1.0, "max_ms": 1.0},
            ],
            "arms": [
                {"arm": "eager", "step": {"median_ms": 80.0, "min_ms": 70.0, "max_ms": 90.0}},
                {"arm": "replay", "step": {"median_ms": 60.0, "min_ms": 55.0, "max_ms": 65.0}},
            ],
        }
    }
    table = build_table(doc, EvidenceBlock(path="e.json", select="results.variants"))
    assert [r.label for r in table.rows] == ["bucketed eager", "capture_updates", "2"]
    arms = build_table(doc, EvidenceBlock(path="e.json", select="results.arms"))
    assert [r.label for r in arms.rows] == ["eager / step", "replay / step"]
    # `label:` picks the key when an item carries several candidates.
    both = {"results": [{"name": "n", "variant": "v", "median": 1, "min": 1, "max": 1}]}
    assert build_table(both, EvidenceBlock(path="e.json")).rows[0].label == "n"
    picked = build_table(both, EvidenceBlock(path="e.json", label="variant"))
    assert [r.label for r in picked.rows] == ["v"]
    assert parse_block("path: e.json\nlabel: arm\n").label == "arm"
