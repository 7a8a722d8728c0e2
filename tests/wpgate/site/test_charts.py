"""Evidence charts: SVG that is self-contained, deterministic and safe to inline."""

from __future__ import annotations

import re

from wpgate.site._charts import format_chart_html, render_chart_svg, render_line_svg
from wpgate.site._evidence import EvidenceRow, EvidenceTable, LineChart, Measurement, Series

TABLE = EvidenceTable(
    columns=("eager", "replay"),
    rows=(
        EvidenceRow(
            "batch 4",
            (Measurement(99.0, 98.5, 99.2, "s"), Measurement(79.5, 79.1, 80.0, "s")),
            19.7,
        ),
        EvidenceRow(
            "<script>$x$ --> <img src=x>", (Measurement(88.0, 87.1, 88.2, "s"), None), None
        ),
    ),
    unit="s",
    saved_note="replay relative to eager",
)


def test_svg_is_inline_ready_and_deterministic() -> None:
    first = render_chart_svg(TABLE, salt="a")
    assert first.startswith("<svg")
    assert first.rstrip().endswith("</svg>")
    assert render_chart_svg(TABLE, salt="a") == first
    # Labels are drawn as paths: no text node, no script, no outside reference.
    assert "<script" not in first
    assert "<img" not in first
    assert "http://" not in first.replace("http://www.w3.org/", "")
    assert "https://" not in first


def test_salt_keeps_ids_apart() -> None:
    ids_a = set(re.findall(r'id="([^"]+)"', render_chart_svg(TABLE, salt="a")))
    ids_b = set(re.findall(r'id="([^"]+)"', render_chart_svg(TABLE, salt="b")))
    assert ids_a
    assert not ids_a & ids_b
    # Every reference still points at an element of its own chart.
    svg = render_chart_svg(TABLE, salt="a")
    refs = set(re.findall(r'(?:href="|url\()#([^")]+)', svg))
    assert refs
    assert refs <= ids_a


def test_figure_block_has_no_blank_line_and_escapes_caption() -> None:
    html = format_chart_html("<svg>\n\n<g/>\n</svg>", "a <b> & c")
    assert "\n\n" not in html
    assert html.startswith('<figure class="wpgate-chart">')
    assert "<figcaption>a &lt;b&gt; &amp; c</figcaption>" in html


LINES = LineChart(
    series=(
        Series("stock <script>", (1.0, 2.0, 3.0, 4.0), (3.0, 2.0, None, 1.0)),
        Series("_ours $x$", (1.0, 2.0, 3.0, 4.0), (3.0, 2.5, 1.5, 0.5)),
    ),
    x_label="iteration",
    y_label="loss <b>",
)


def _text_of(svg: str) -> str:
    """Everything outside the tags and the style sheet (glyphs are paths: nothing is left)."""
    return re.sub(r"<[^>]*>", "", re.sub(r"<style.*?</style>", "", svg, flags=re.S)).strip()


def test_line_svg_is_inline_ready_deterministic_and_draws_every_series() -> None:
    svg = render_line_svg(LINES, salt="c")
    assert svg.startswith("<svg")
    assert svg == render_line_svg(LINES, salt="c")
    assert "<script" not in svg
    assert "<b>" not in svg
    assert not _text_of(svg)
    # Two data lines (matplotlib names them line2d_N), plus the two legend samples.
    data_lines = re.findall(r'<g id="wpgc-line2d_\d+">\s*<path d="M ', svg)
    assert len(data_lines) >= 4
    refs = set(re.findall(r'(?:href="|url\()#([^")]+)', svg))
    assert refs <= set(re.findall(r'id="([^"]+)"', svg))


def test_line_legend_keeps_a_name_that_starts_with_an_underscore() -> None:
    # matplotlib leaves out a label starting with "_" unless it is given explicitly; a third
    # legend entry changes the drawing, so the SVG differs from a chart of one named series.
    both = render_line_svg(LINES, salt="d")
    one = render_line_svg(LineChart(LINES.series[:1], "iteration", "loss <b>"), salt="d")
    legend_both = re.search(r'<g id="wpgd-legend_1">(.*?)</g>\s*</g>\s*</g>', both, re.S)
    legend_one = re.search(r'<g id="wpgd-legend_1">(.*?)</g>\s*</g>\s*</g>', one, re.S)
    assert legend_both
    assert legend_one
    assert legend_both.group(1).count("<path") > legend_one.group(1).count("<path")
