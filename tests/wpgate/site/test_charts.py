"""Evidence charts: SVG that is self-contained, deterministic and safe to inline."""

from __future__ import annotations

import re

from wpgate.site._charts import format_chart_html, render_chart_svg
from wpgate.site._evidence import EvidenceRow, EvidenceTable, Measurement

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
