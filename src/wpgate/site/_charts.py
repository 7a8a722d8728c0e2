"""Evidence charts: horizontal bars of the medians with min–max whiskers, as inline SVG."""

from __future__ import annotations

import io
import re

from wpgate.site._escape import escape_html
from wpgate.site._evidence import EvidenceTable

_ROW_HEIGHT_IN = 0.45
_MIN_HEIGHT_IN = 1.6
_WIDTH_IN = 7.0
_XML_PROLOGUE_RE = re.compile(r"\A.*?(?=<svg\b)", re.DOTALL)
# The RDF metadata block only names outside vocabularies; a page does not need it.
_METADATA_RE = re.compile(r"\s*<metadata>.*?</metadata>", re.DOTALL)
_ID_RE = re.compile(r'\bid="([^"]+)"')
_REF_RE = re.compile(r'((?:href="|url\()#)([^")]+)')


def render_chart_svg(table: EvidenceTable, *, salt: str) -> str:
    """The table drawn as an SVG document (no XML prologue), deterministic for a given ``salt``.

    ``salt`` seeds matplotlib's SVG element ids, so two charts on one page never share an id.
    Needs matplotlib (the ``docs`` extra); raises ImportError with the install hint otherwise.
    """
    try:
        import matplotlib as mpl
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            'evidence charts need matplotlib; install it with: pip install "wpgate[docs]"'
        ) from exc

    # matplotlib reads `$...$` as mathtext; a label from a file is plain text.
    labels = [row.label.replace("$", r"\$") for row in table.rows]
    series = table.columns
    height = max(_MIN_HEIGHT_IN, _ROW_HEIGHT_IN * len(labels) * max(1, len(series)) + 1.0)
    # Glyphs as paths and no date: the SVG needs no font at view time and is byte-stable.
    with mpl.rc_context({"svg.hashsalt": salt, "svg.fonttype": "path", "font.size": 9}):
        figure = Figure(figsize=(_WIDTH_IN, height), layout="constrained")
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
                label=None if series == ("value",) else name.replace("$", r"\$"),
            )
        axes.set_yticks(range(len(labels)), labels=labels)
        axes.invert_yaxis()
        unit = f" [{table.unit}]" if table.unit else ""
        axes.set_xlabel(f"median{unit}, whiskers: min–max")
        if series != ("value",):
            axes.legend(loc="best")
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    svg = _METADATA_RE.sub("", _XML_PROLOGUE_RE.sub("", buffer.getvalue(), count=1))
    return _prefix_ids(svg, f"wpg{salt}-")


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
