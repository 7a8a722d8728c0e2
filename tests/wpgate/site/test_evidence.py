"""Evidence blocks: options, measurements, tables and block replacement."""

from __future__ import annotations

import html

import pytest

from wpgate.errors import EvidenceBlockError
from wpgate.site import _evidence
from wpgate.site._evidence import (
    EvidenceBlock,
    Pick,
    build_table,
    parse_block,
    picks,
)

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
        path="docs/evidence/a.json",
        select="results.fit",
        columns=picks("eager", "replay"),
        chart="bar",
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


@pytest.mark.parametrize(
    "measurement",
    [
        {"median": 2, "min": 3, "max": 1},  # the range reversed
        {"median_ms": -5, "min_ms": 16, "max_ms": 20},  # the median below the range
    ],
)
def test_a_median_outside_its_range_is_refused_naming_the_file(
    measurement: dict[str, float],
) -> None:
    document = {"results": {"a": measurement, "b": {"median": 1, "min": 1, "max": 2}}}
    for block in (
        EvidenceBlock(path="docs/evidence/x.json", select="results"),
        EvidenceBlock(path="docs/evidence/x.json", select="results", columns=(Pick("a", "a"),)),
    ):
        with pytest.raises(EvidenceBlockError, match=r"^docs/evidence/x\.json: a measurement's"):
            build_table({"results": {"row": document["results"]}}, block)
    assert _evidence.as_measurement({"median": -5, "min": -6, "max": -4}) is not None


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
    block = EvidenceBlock(path="x", select="results.fit", columns=picks("eager", "replay"))
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
            EvidenceBlock(path="x", select="results.fit", columns=picks("a", "b")),
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


# -- rows, columns and series picked by dotted path -------------------------------------------

TRAIN = {
    "results": {
        "batches": {
            "4": {
                "pairs": [
                    {
                        "stock": {
                            "it_ms": {"median": 160.0, "min": 150.0, "max": 170.0},
                            "losses": [3.0, 2.0, None, 1.0],
                        },
                        "ours": {
                            "it_ms": {"median": 50.0, "min": 45.0, "max": 55.0},
                            "losses": [3.0, 2.5, 1.5, 0.5],
                        },
                    }
                ]
            },
            "16": {
                "pairs": [
                    {
                        "stock": {"it_ms": {"median": 170.0, "min": 160.0, "max": 180.0}},
                        "ours": {"it_ms": {"median": 85.0, "min": 80.0, "max": 90.0}},
                    }
                ]
            },
        },
        "sets": {
            "n": {
                "variants": [
                    {
                        "variant": "ultralytics MuSGD",
                        "median_ms": 12.0,
                        "min_ms": 11.0,
                        "max_ms": 13.0,
                    },
                    {
                        "variant": "musgd.ultralytics both",
                        "median_ms": 1.0,
                        "min_ms": 0.9,
                        "max_ms": 1.5,
                    },
                ]
            },
        },
        "curve": {
            "x_label": "iteration",
            "y_label": "loss",
            "series": {"a": [1, 2, 3], "b": {"x": [0, 10, 20], "y": [3, 2, 1]}},
        },
        "bad": {
            "text": [1.0, "two", 3.0],
            "empty": [],
            "nulls": [None, None],
            "skew": {"x": [1, 2], "y": [1, 2, 3]},
            "flag": [1, True],
        },
    }
}


def test_rows_and_columns_pick_dotted_paths() -> None:
    block = parse_block(
        "path: t.json\nselect: results.batches\n"
        "rows: {batch 4: 4.pairs.0, batch 16: 16.pairs.0}\n"
        "columns: {stock: stock.it_ms, ours: ours.it_ms}\nratio: true\n"
    )
    assert block.rows == (Pick("batch 4", "4.pairs.0"), Pick("batch 16", "16.pairs.0"))
    table = build_table(TRAIN, block)
    assert table.columns == ("stock", "ours")
    assert [(r.label, r.saved_percent, r.ratio) for r in table.rows] == [
        ("batch 4", 68.75, 3.2),
        ("batch 16", 50.0, 2.0),
    ]
    lines = html.unescape(_evidence.format_table(table, digits=1)).splitlines()
    assert lines[0].endswith("| Time saved (ours relative to stock) | Speed-up (stock ÷ ours) |")
    assert lines[2] == "| batch 4 | 160.0 (150.0–170.0) | 50.0 (45.0–55.0) | 68.75% | 3.20× |"


def test_list_items_are_reached_by_their_label_even_with_dots() -> None:
    block = parse_block(
        "path: t.json\nselect: results.sets\n"
        "columns: {Ultralytics: variants.ultralytics MuSGD, ours: variants.musgd.ultralytics both}"
    )
    table = build_table(TRAIN, block)
    assert [(r.label, [v.median for v in r.values if v]) for r in table.rows] == [
        ("n", [12.0, 1.0])
    ]
    assert _evidence.select(TRAIN, "results.sets.n.variants.musgd.ultralytics both.max_ms") == 1.5
    # A flat table of picked rows keeps the picked labels.
    flat = build_table(
        TRAIN,
        parse_block(
            "path: t.json\nselect: results.sets.n.variants\n"
            "rows: {stock: ultralytics MuSGD, ours: 1}\nbaseline: stock\nratio: true\n"
        ),
    )
    assert [(r.label, r.ratio) for r in flat.rows] == [("stock", None), ("ours", 12.0)]


def test_a_row_that_points_nowhere_names_the_option_and_the_path() -> None:
    block = parse_block("path: t.json\nselect: results.batches\nrows: {batch 8: 8.pairs.0}\n")
    with pytest.raises(EvidenceBlockError) as info:
        build_table(TRAIN, block)
    assert str(info.value) == (
        "`rows: batch 8` (`8.pairs.0` under `results.batches`): the evidence file has no "
        "`results.batches.8`; point it at a key the file holds"
    )


# -- line charts ------------------------------------------------------------------------------


def test_line_chart_from_the_agreed_format() -> None:
    block = parse_block("path: t.json\nselect: results.curve\nchart: line\n")
    assert (block.chart, block.table) == ("line", False)
    chart = _evidence.build_line_chart(TRAIN, block)
    assert chart == _evidence.LineChart(
        (
            _evidence.Series("a", (1.0, 2.0, 3.0), (1.0, 2.0, 3.0)),
            _evidence.Series("b", (0.0, 10.0, 20.0), (3.0, 2.0, 1.0)),
        ),
        "iteration",
        "loss",
    )
    # The block's labels win over the file's.
    relabelled = parse_block("path: t.json\nselect: results.curve\nchart: line\ny_label: L\n")
    assert _evidence.build_line_chart(TRAIN, relabelled).y_label == "L"


def test_line_chart_from_named_arrays_with_gaps_and_smoothing() -> None:
    block = parse_block(
        "path: t.json\nselect: results.batches.4.pairs.0\nchart: line\n"
        "series: {stock: stock.losses, ours: ours.losses}\nx_label: iteration\n"
        "y_label: loss\nsmooth: 2\n"
    )
    chart = _evidence.build_line_chart(TRAIN, block)
    assert [s.name for s in chart.series] == ["stock", "ours"]
    # A `null` stays a gap; the running mean takes the numbers in its window.
    assert chart.series[0].y == (3.0, 2.5, None, 1.0)
    assert chart.series[1].y == (3.0, 2.75, 2.0, 1.0)
    assert chart.series[0].x == (1.0, 2.0, 3.0, 4.0)
    assert (chart.x_label, chart.y_label) == ("iteration", "loss (running mean of 2)")
    # A mapping of name to list under `select` is read directly.
    direct = parse_block("path: t.json\nselect: results.curve.series\nchart: line\n")
    assert [s.name for s in _evidence.build_line_chart(TRAIN, direct).series] == ["a", "b"]


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("text", "t.json: results.bad.text holds 'two' at index 1, not a number"),
        ("empty", "t.json: results.bad.empty is empty"),
        ("nulls", "t.json: results.bad.nulls holds no number"),
        ("skew", "t.json: results.bad.skew has 2 x values and 3 y values"),
        ("flag", "t.json: results.bad.flag holds True at index 1, not a number"),
    ],
)
def test_bad_series_name_the_file_and_the_key(key: str, message: str) -> None:
    block = parse_block(f"path: t.json\nselect: results.bad\nchart: line\nseries: [{key}]\n")
    with pytest.raises(EvidenceBlockError) as info:
        _evidence.build_line_chart(TRAIN, block)
    assert message in str(info.value)


def test_a_node_without_series_says_what_a_series_is() -> None:
    block = parse_block(
        "path: t.json\nselect: results.batches.4.pairs.0.stock.it_ms.median\nchart: line\n"
    )
    with pytest.raises(EvidenceBlockError, match="holds no series; point it at"):
        _evidence.build_line_chart(TRAIN, block)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "chart: line\ncolumns: [a, b]\n",
            "`columns` applies to tables; a `chart: line` block draws series only (remove it, or",
        ),
        ("chart: line\ntable: true\nrows: [a]\n", "`rows`, `table` apply to tables"),
        (
            "series: [a]\n",
            "`series` applies to line charts only; add `chart: line`, or remove it",
        ),
        ("smooth: 2\nx_label: x\n", "`x_label`, `smooth` apply to line charts only; add"),
        ("chart: line\nsmooth: 0\n", "`smooth` must be a whole number"),
        ("chart: line\nseries: losses\n", "`series` must be a list of keys or a mapping"),
        ("rows: {a: [1]}\n", "`rows` must be a list of keys or a mapping"),
        ("ratio: true\n", "`ratio: true` needs something to divide by"),
        ("chart: pie\n", "`chart` must be true or false, `bar` or `line`"),
    ],
)
def test_line_and_pick_options_are_checked(body: str, message: str) -> None:
    with pytest.raises(EvidenceBlockError) as info:
        parse_block("path: a.json\n" + body)
    assert message in str(info.value)


def test_a_list_index_wins_over_a_numeric_label() -> None:
    doc = {"runs": [{"name": "1", "v": "first"}, {"name": "0", "v": "second"}, {"name": "16"}]}
    # Item 1 is labelled "0" and item 0 "1": the index decides.
    assert _evidence.select(doc, "runs.1.v") == "second"
    assert _evidence.select(doc, "runs.0.v") == "first"
    # Past the end of the list, a number is a label.
    assert _evidence.select(doc, "runs.16") == {"name": "16"}
