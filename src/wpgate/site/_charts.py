"""Evidence charts as inline SVG: bars of the medians with min–max whiskers, or line series."""

from __future__ import annotations

import io
import math
import re
from typing import Any

from wpgate.site._escape import escape_html
from wpgate.site._evidence import EvidenceTable, LineChart

_ROW_HEIGHT_IN = 0.45
_MIN_HEIGHT_IN = 1.6
_WIDTH_IN = 7.0
_LINE_HEIGHT_IN = 3.4
_XML_PROLOGUE_RE = re.compile(r"\A.*?(?=<svg\b)", re.DOTALL)
# The RDF metadata block only names outside vocabularies; a page does not need it.
_METADATA_RE = re.compile(r"\s*<metadata>.*?</metadata>", re.DOTALL)
_ID_RE = re.compile(r'\bid="([^"]+)"')
_REF_RE = re.compile(r'((?:href="|url\()#)([^")]+)')


def _figure_class() -> Any:
    """matplotlib's ``Figure``; ImportError with the install hint when matplotlib is missing."""
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            'evidence charts need matplotlib; install it with: pip install "wpgate[docs]"'
        ) from exc
    return Figure


def _plain(text: str) -> str:
    """``text`` as matplotlib plain text: ``$...$`` would be mathtext."""
    return text.replace("$", r"\$")


def _svg(draw: Any, size: tuple[float, float], salt: str) -> str:
    """The figure ``draw(figure)`` fills, as an SVG document without prologue or metadata.

    ``salt`` seeds matplotlib's SVG element ids, and every id is prefixed with it, so two
    charts on one page never share an id. Glyphs are paths and there is no date: the SVG needs
    no font at view time and is byte-stable.
    """
    import matplotlib as mpl

    figure_class = _figure_class()
    with mpl.rc_context({"svg.hashsalt": salt, "svg.fonttype": "path", "font.size": 9}):
        figure = figure_class(figsize=size, layout="constrained")
        draw(figure)
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    svg = _METADATA_RE.sub("", _XML_PROLOGUE_RE.sub("", buffer.getvalue(), count=1))
    return _prefix_ids(svg, f"wpg{salt}-")


def render_chart_svg(table: EvidenceTable, *, salt: str) -> str:
    """The table drawn as an SVG document (no XML prologue), deterministic for a given ``salt``.

    Needs matplotlib (the ``docs`` extra); raises ImportError with the install hint otherwise.
    """
    _figure_class()
    labels = [_plain(row.label) for row in table.rows]
    series = table.columns
    height = max(_MIN_HEIGHT_IN, _ROW_HEIGHT_IN * len(labels) * max(1, len(series)) + 1.0)

    def draw(figure: Any) -> None:
        axes = figure.add_subplot()
        bar = 0.8 / max(1, len(series))
        for index, name in enumerate(series):
            ys, medians, below, above = [], [], [], []
            for position, row in enumerate(table.rows):
                value = row.values[index]
                if value is None:
                    continue
                ys.append(position + (index - (len(series) - 1) / 2) * bar)
                medians.append(value.median)
                below.append(value.median - value.low)
                above.append(value.high - value.median)
            axes.barh(
                ys,
                medians,
                height=bar * 0.9,
                xerr=[below, above],
                capsize=3,
                label=None if series == ("value",) else _plain(name),
            )
        axes.set_yticks(range(len(labels)), labels=labels)
        axes.invert_yaxis()
        unit = f" [{table.unit}]" if table.unit else ""
        axes.set_xlabel(f"median{unit}, whiskers: min–max")
        if series != ("value",):
            axes.legend(loc="best")

    return _svg(draw, (_WIDTH_IN, height), salt)


def render_line_svg(chart: LineChart, *, salt: str) -> str:
    """The series drawn as lines in one SVG document, deterministic for a given ``salt``.

    A ``None`` value is a gap in its line. Needs matplotlib, as :func:`render_chart_svg`.
    """
    _figure_class()

    def draw(figure: Any) -> None:
        axes = figure.add_subplot()
        handles = []
        for line in chart.series:
            ys = [math.nan if y is None else y for y in line.y]
            # One point alone draws no line: mark it.
            (handle,) = axes.plot(line.x, ys, linewidth=1.2, marker="o" if len(ys) == 1 else "")
            handles.append(handle)
        axes.set_xlabel(_plain(chart.x_label))
        axes.set_ylabel(_plain(chart.y_label))
        axes.grid(alpha=0.3)
        # Explicit labels: matplotlib would drop a name that starts with an underscore.
        axes.legend(handles, [_plain(line.name) for line in chart.series], loc="best")

    return _svg(draw, (_WIDTH_IN, _LINE_HEIGHT_IN), salt)


def _prefix_ids(svg: str, prefix: str) -> str:
    """Every element id and reference to it prefixed, so inlined charts never share an id."""
    ids = set(_ID_RE.findall(svg))

    def _ref(match: re.Match[str]) -> str:
        name = match.group(2)
        return f"{match.group(1)}{prefix}{name}" if name in ids else match.group(0)

    svg = _ID_RE.sub(lambda m: f'id="{prefix}{m.group(1)}"', svg)
    return _REF_RE.sub(_ref, svg)


def format_chart_html(svg: str, caption: str) -> str:
    """The SVG as a raw-HTML ``<figure>`` block Markdown passes through unchanged."""
    # Python-Markdown ends a raw HTML block at a blank line, so the SVG must have none.
    body = "\n".join(line for line in svg.splitlines() if line.strip())
    cap = f"<figcaption>{escape_html(caption)}</figcaption>" if caption else ""
    return f'<figure class="wpgate-chart">\n{body}\n{cap}</figure>'
