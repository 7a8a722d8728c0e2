"""Evidence blocks: a fenced ``wpgate-evidence`` block in a page becomes a table (and a chart).

A page asks for a rendering with a fenced block whose body is YAML::

    ```wpgate-evidence
    path: docs/evidence/musgd-step-cuda.json   # repository-relative, inside the repository
    select: results.arms                       # dotted path into the JSON (default: results)
    columns: [eager, replay]                   # paired layout; omit for one row per measurement
    baseline: eager                            # flat layout: "time saved" relative to this row
    chart: true                                # also draw an SVG bar chart (or `chart: line`)
    caption: Optimizer step, nano detector
    label: variant                             # list items' label key (default: name, label,
    ```                                        #   variant or arm, the first one present)

A *measurement* is a mapping with ``median``/``min``/``max`` keys, optionally suffixed by a unit
(``median_ms``, ``min_ms``, ``max_ms``), or a bare list of samples. ``rows``, ``columns`` and
``series`` take a list of keys or a mapping of label → dotted path, so a block can pick what it
shows from any file. ``chart: line`` draws series of numbers (loss per iteration) instead of a
table. Everything here is pure: the plugin reads the files and reports the errors.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from wpgate.errors import EvidenceBlockError
from wpgate.site._escape import escape_markdown

FENCE_RE = re.compile(
    r"^(?P<fence>`{3,})[ \t]*wpgate-evidence[ \t]*\n(?P<body>.*?)^(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
_KNOWN_KEYS = frozenset(
    {
        "path",
        "select",
        "columns",
        "baseline",
        "chart",
        "caption",
        "digits",
        "unit",
        "table",
        "label",
        "rows",
        "ratio",
        "series",
        "x_label",
        "y_label",
        "smooth",
    }
)
#: Keys that only a table uses, and keys that only a line chart uses.
_TABLE_KEYS = ("columns", "baseline", "rows", "ratio", "digits", "unit", "label")
_LINE_KEYS = ("series", "x_label", "y_label", "smooth")
#: The keys a list item's row label is read from, first present wins (benchmarks write `variant`).
LABEL_KEYS = ("name", "label", "variant", "arm")
_UNIT_NAMES = {"ms": "ms", "s": "s", "us": "µs", "ns": "ns", "mib": "MiB", "gib": "GiB"}
_MAX_DIGITS = 9


@dataclass(frozen=True)
class Pick:
    """A row, column or series: the name the page shows and the dotted path it is read from."""

    name: str
    path: str


def picks(*names: str) -> tuple[Pick, ...]:
    """Picks read from the keys of the same names (``rows: [a, b]``)."""
    return tuple(Pick(name, name) for name in names)


@dataclass(frozen=True)
class EvidenceBlock:
    """The options of one ``wpgate-evidence`` block.

    ``chart`` is ``""`` (none), ``"bar"`` (with the table) or ``"line"`` (series, no table).
    """

    path: str
    select: str = "results"
    columns: tuple[Pick, ...] = ()
    baseline: str | None = None
    chart: str = ""
    table: bool = True
    caption: str = ""
    digits: int = 3
    unit: str | None = None
    label: str | None = None
    rows: tuple[Pick, ...] = ()
    ratio: bool = False
    series: tuple[Pick, ...] = ()
    x_label: str | None = None
    y_label: str | None = None
    smooth: int = 1


@dataclass(frozen=True)
class Measurement:
    """Median and range of one measured quantity."""

    median: float
    low: float
    high: float
    unit: str

    def format(self, digits: int) -> str:
        """``median (min–max)``, the house notation for a measured range."""
        return f"{self.median:.{digits}f} ({self.low:.{digits}f}–{self.high:.{digits}f})"


@dataclass(frozen=True)
class EvidenceRow:
    """One table row: a label, one measurement per column, and the time saved (a percentage)."""

    label: str
    values: tuple[Measurement | None, ...]
    saved_percent: float | None
    ratio: float | None = None


@dataclass(frozen=True)
class EvidenceTable:
    """What a block renders: column names, rows, the unit and the time-saved reference."""

    columns: tuple[str, ...]
    rows: tuple[EvidenceRow, ...]
    unit: str
    saved_note: str | None
    ratio_note: str | None = None


@dataclass(frozen=True)
class Series:
    """One line of a line chart; a ``None`` in ``y`` is a gap (JSON ``null``: not measured)."""

    name: str
    x: tuple[float, ...]
    y: tuple[float | None, ...]


@dataclass(frozen=True)
class LineChart:
    """What a ``chart: line`` block draws."""

    series: tuple[Series, ...]
    x_label: str
    y_label: str


def _parse_picks(data: Mapping[str, Any], key: str, example: str) -> tuple[Pick, ...]:
    """``data[key]`` as picks: a list of keys, or a mapping of label to dotted path."""
    value = data.get(key)
    if value is None:
        return ()
    scalar = (str, int, float)
    if isinstance(value, Mapping) and all(
        isinstance(k, scalar) and isinstance(v, scalar) and not isinstance(v, bool)
        for k, v in value.items()
    ):
        return tuple(Pick(str(k), str(v)) for k, v in value.items())
    if isinstance(value, list) and all(
        isinstance(v, scalar) and not isinstance(v, bool) for v in value
    ):
        return picks(*(str(v) for v in value))
    raise EvidenceBlockError(
        f"`{key}` must be a list of keys or a mapping of label: dotted.path, e.g. `{example}`"
    )


def _chart_kind(value: Any) -> str:
    """The ``chart`` option as ``""``, ``"bar"`` or ``"line"``."""
    if isinstance(value, bool):
        return "bar" if value else ""
    if value in ("bar", "line"):
        return str(value)
    raise EvidenceBlockError("`chart` must be true or false, `bar` or `line`")


def _optional_str(data: Mapping[str, Any], key: str) -> str | None:
    """``data[key]`` as a string, None when absent."""
    return None if data.get(key) is None else str(data[key])


def _keys_apply(keys: list[str]) -> str:
    """The keys as the subject of a message: `a` applies, `a`, `b` apply."""
    return f"{', '.join(f'`{k}`' for k in keys)} {'applies' if len(keys) == 1 else 'apply'}"


def _them(keys: list[str]) -> str:
    """``it`` or ``them``, for the keys of a message."""
    return "it" if len(keys) == 1 else "them"


def parse_block(body: str) -> EvidenceBlock:
    """The options of a block body (YAML mapping); raises EvidenceBlockError when invalid."""
    try:
        data = yaml.safe_load(body)
    except yaml.YAMLError as exc:
        raise EvidenceBlockError(
            f"the wpgate-evidence block is not valid YAML ({exc}); write one `key: value` a line"
        ) from None
    if not isinstance(data, Mapping) or "path" not in data:
        raise EvidenceBlockError(
            "a wpgate-evidence block needs at least `path: docs/evidence/<file>.json`"
        )
    unknown = sorted(set(map(str, data)) - _KNOWN_KEYS)
    if unknown:
        raise EvidenceBlockError(
            f"unknown key(s) {', '.join(unknown)} in a wpgate-evidence block; "
            f"known keys: {', '.join(sorted(_KNOWN_KEYS))}"
        )
    chart = _chart_kind(data.get("chart", False))
    given = set(map(str, data))
    if chart == "line":
        misplaced = [k for k in (*_TABLE_KEYS, "table") if k in given]
        if misplaced:
            raise EvidenceBlockError(
                f"{_keys_apply(misplaced)} to tables; a `chart: line` block draws series only "
                f"(remove {_them(misplaced)}, or write a second block for a table)"
            )
    else:
        misplaced = [k for k in _LINE_KEYS if k in given]
        if misplaced:
            raise EvidenceBlockError(
                f"{_keys_apply(misplaced)} to line charts only; add `chart: line`, or remove "
                f"{_them(misplaced)}"
            )
    if isinstance(data.get("columns"), str):
        raise EvidenceBlockError(
            "`columns` must be a list of keys, e.g. `columns: [eager, replay]`"
        )
    columns = _parse_picks(data, "columns", "columns: [eager, replay]")
    if len(columns) == 1:
        raise EvidenceBlockError("`columns` needs at least two keys to compare, or none at all")
    digits = data.get("digits", 3)
    if not isinstance(digits, int) or isinstance(digits, bool) or not 0 <= digits <= _MAX_DIGITS:
        raise EvidenceBlockError(f"`digits` must be an integer from 0 to {_MAX_DIGITS}")
    for flag in ("table", "ratio"):
        if not isinstance(data.get(flag, True), bool):
            raise EvidenceBlockError(f"`{flag}` must be true or false")
    smooth = data.get("smooth", 1)
    if not isinstance(smooth, int) or isinstance(smooth, bool) or smooth < 1:
        raise EvidenceBlockError(
            "`smooth` must be a whole number of points (1: as measured; 10: running mean of 10)"
        )
    if columns and data.get("baseline") is not None:
        raise EvidenceBlockError(
            "`baseline` applies to the flat layout only; with `columns` the time saved is "
            "always the last column relative to the first"
        )
    if data.get("ratio") and not columns and data.get("baseline") is None:
        raise EvidenceBlockError(
            "`ratio: true` needs something to divide by: `columns` (first ÷ last) or `baseline`"
        )
    return EvidenceBlock(
        path=str(data["path"]),
        select=str(data.get("select", "results")),
        columns=columns,
        baseline=_optional_str(data, "baseline"),
        chart=chart,
        table=chart != "line" and bool(data.get("table", True)),
        caption=str(data.get("caption") or ""),
        digits=digits,
        unit=_optional_str(data, "unit"),
        label=_optional_str(data, "label"),
        rows=_parse_picks(data, "rows", "rows: {batch 4: batches.4, batch 16: batches.16}"),
        ratio=bool(data.get("ratio", False)),
        series=_parse_picks(data, "series", "series: {stock: runs.0.losses, ours: runs.1.losses}"),
        x_label=_optional_str(data, "x_label"),
        y_label=_optional_str(data, "y_label"),
        smooth=smooth,
    )


def _child(node: Any, parts: Sequence[str], keys: Sequence[str]) -> tuple[Any, int] | None:
    """The child of ``node`` the leading ``parts`` name, and how many parts that took.

    A list item is reached by its index first (``runs.0``), else by its label. A key or a label
    may itself hold dots (``musgd.ultralytics both``): the longest run of parts that names a
    child wins.
    """
    if isinstance(node, list) and parts[0].isdigit() and int(parts[0]) < len(node):
        return node[int(parts[0])], 1
    for size in range(len(parts), 0, -1):
        name = ".".join(parts[:size])
        if isinstance(node, Mapping) and name in node:
            return node[name], size
        if isinstance(node, list):
            for item in node:
                if _item_label(item, keys) == name:
                    return item, size
    return None


def select(document: Any, dotted: str, *, what: str = "", keys: Sequence[str] = LABEL_KEYS) -> Any:
    """The value at a dotted path (``results.arms``).

    A list item is reached by its index (``runs.0``) or by its label (``variants.replay``, the
    first of ``keys`` it holds). ``what`` names the option the path came from, for the message.
    """
    what = what or f"`select: {dotted}`"
    node: Any = document
    parts = dotted.split(".") if dotted else []
    done = 0
    while done < len(parts):
        found = _child(node, parts[done:], keys)
        if found is None:
            walked = ".".join(parts[: done + 1])
            raise EvidenceBlockError(
                f"{what}: the evidence file has no `{walked}`; point it at a key the file holds"
            )
        node, size = found
        done += size
    return node


def _number(value: Any) -> float | None:
    """``value`` as a float when it is a real number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def as_measurement(value: Any, unit: str | None = None) -> Measurement | None:
    """``value`` read as a measurement, or None when it is not one."""
    if isinstance(value, list) and value and all(_number(v) is not None for v in value):
        samples = [float(v) for v in value]
        return Measurement(statistics.median(samples), min(samples), max(samples), unit or "")
    if not isinstance(value, Mapping):
        return None
    for key in value:
        if not (isinstance(key, str) and key.startswith("median")):
            continue
        suffix = key[len("median") :]
        median, low, high = (
            _number(value.get(f"{name}{suffix}")) for name in ("median", "min", "max")
        )
        if median is not None and low is not None and high is not None:
            if not low <= median <= high:
                # A table would print it and a chart's whiskers would point backwards.
                raise _DisorderedError(
                    f"a measurement's median{suffix} ({median:g}) is not between its "
                    f"min{suffix} ({low:g}) and max{suffix} ({high:g}); fix the evidence file "
                    "(rerun the benchmark that writes it)"
                )
            found = _UNIT_NAMES.get(suffix.lstrip("_").lower(), suffix.lstrip("_"))
            return Measurement(median, low, high, unit or found)
    return None


def _item_label(item: Any, keys: Sequence[str]) -> str | None:
    """The label of a list item: its first of ``keys`` holding a string or number."""
    if not isinstance(item, Mapping):
        return None
    for key in keys:
        value = item.get(key)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return str(value)
    return None


def _labelled(node: Any, keys: Sequence[str] = LABEL_KEYS) -> list[tuple[str, Any]]:
    """The children of a mapping, or of a list of mappings labelled by their ``keys``.

    An item with none of ``keys`` is labelled by its index.
    """
    if isinstance(node, Mapping):
        return [(str(k), v) for k, v in node.items()]
    if isinstance(node, list):
        out = []
        for index, item in enumerate(node):
            name = _item_label(item, keys)
            out.append((str(index) if name is None else name, item))
        return out
    return []


def _flat_rows(
    node: Any, prefix: str, unit: str | None, keys: Sequence[str] = LABEL_KEYS
) -> list[tuple[str, Measurement]]:
    """Every measurement under ``node``, labelled by its key path joined with `` / ``."""
    found = as_measurement(node, unit)
    if found is not None:
        return [(prefix or "value", found)]
    rows: list[tuple[str, Measurement]] = []
    for key, child in _labelled(node, keys):
        rows.extend(_flat_rows(child, f"{prefix} / {key}" if prefix else key, unit, keys))
    return rows


def _saved(reference: Measurement | None, other: Measurement | None) -> float | None:
    """Time saved by ``other`` relative to ``reference``, in percent of the reference median."""
    if reference is None or other is None or reference.median == 0:
        return None
    return 100.0 * (reference.median - other.median) / reference.median


def _ratio(reference: Measurement | None, other: Measurement | None) -> float | None:
    """``reference`` median over ``other`` median (how many times faster ``other`` is)."""
    if reference is None or other is None or other.median == 0:
        return None
    return reference.median / other.median


def _joined(base: str, path: str) -> str:
    """``path`` under the dotted path ``base``."""
    return f"{base}.{path}" if base else path


def _entries(document: Mapping[str, Any], block: EvidenceBlock) -> list[tuple[str, Any]]:
    """The labelled entries of the table: the ``rows`` picked; else the children of ``select``
    (paired layout) or ``select`` itself, unlabelled (flat layout)."""
    keys = LABEL_KEYS if block.label is None else (block.label,)
    if not block.rows:
        node = select(document, block.select, keys=keys)
        return _labelled(node, keys) if block.columns else [("", node)]
    return [
        (
            pick.name,
            select(
                document,
                _joined(block.select, pick.path),
                what=f"`rows: {pick.name}` (`{pick.path}` under `{block.select}`)",
                keys=keys,
            ),
        )
        for pick in block.rows
    ]


def _lookup(node: Any, path: str, keys: Sequence[str]) -> Any:
    """The value at ``path`` under ``node``, None when there is none."""
    try:
        return select(node, path, keys=keys)
    except EvidenceBlockError:
        return None


class _DisorderedError(EvidenceBlockError):
    """A measurement whose median is not between its min and max (its file is named above)."""


def build_table(document: Mapping[str, Any], block: EvidenceBlock) -> EvidenceTable:
    """The table a block asks for, from a loaded evidence document."""
    try:
        return _build_table(document, block)
    except _DisorderedError as exc:
        raise EvidenceBlockError(f"{block.path}: {exc}") from None


def _build_table(document: Mapping[str, Any], block: EvidenceBlock) -> EvidenceTable:
    keys = LABEL_KEYS if block.label is None else (block.label,)
    entries = _entries(document, block)
    if block.columns:
        names = tuple(c.name for c in block.columns)
        rows = []
        for label, child in entries:
            if not isinstance(child, Mapping):
                continue
            values = tuple(
                as_measurement(_lookup(child, c.path, keys), block.unit) for c in block.columns
            )
            if any(v is not None for v in values):
                ratio = _ratio(values[0], values[-1]) if block.ratio else None
                rows.append(EvidenceRow(label, values, _saved(values[0], values[-1]), ratio))
        if not rows:
            raise EvidenceBlockError(
                f"`select: {block.select}` holds no entry with measurements under "
                f"{', '.join(c.path for c in block.columns)}; check `select` and `columns` "
                "against the file"
            )
        note = f"{names[-1]} relative to {names[0]}"
        ratio_note = f"{names[0]} ÷ {names[-1]}" if block.ratio else None
        unit = next((v.unit for r in rows for v in r.values if v is not None), "")
        return EvidenceTable(names, tuple(rows), unit, note, ratio_note)
    # Picked rows keep their own labels; otherwise every measurement is labelled by its path.
    flat = [m for label, child in entries for m in _flat_rows(child, label, block.unit, keys)]
    if not flat:
        raise EvidenceBlockError(
            f"`select: {block.select}` holds no measurement (a mapping with median/min/max, "
            "e.g. median_ms/min_ms/max_ms, or a list of samples); check `select`"
        )
    reference = None
    if block.baseline is not None:
        matches = [m for label, m in flat if label == block.baseline]
        if not matches:
            raise EvidenceBlockError(
                f"`baseline: {block.baseline}` is not a row of this table; rows are: "
                + ", ".join(label for label, _ in flat)
            )
        reference = matches[0]
    rows = [
        EvidenceRow(
            label,
            (m,),
            None if label == block.baseline else _saved(reference, m),
            None if label == block.baseline or not block.ratio else _ratio(reference, m),
        )
        for label, m in flat
    ]
    flat_note = None if block.baseline is None else f"relative to {block.baseline}"
    ratio_note = f"{block.baseline} ÷ row" if block.ratio else None
    return EvidenceTable(("value",), tuple(rows), flat[0][1].unit, flat_note, ratio_note)


def format_table(table: EvidenceTable, digits: int) -> str:
    """The table as GitHub-flavoured Markdown; every label from the file is escaped."""
    unit = f" [{table.unit}]" if table.unit else ""
    if table.columns == ("value",):
        heads = ["Measurement", f"Median (range){unit}"]
    else:
        heads = ["Row", *(f"{name}{unit}, median (range)" for name in table.columns)]
    if table.saved_note is not None:
        heads.append(f"Time saved ({table.saved_note})")
    if table.ratio_note is not None:
        heads.append(f"Speed-up ({table.ratio_note})")
    heads = [escape_markdown(h) for h in heads]
    lines = ["| " + " | ".join(heads) + " |", "|" + " --- |" * len(heads)]
    for row in table.rows:
        cells = [escape_markdown(row.label)]
        cells.extend("—" if v is None else v.format(digits) for v in row.values)
        if table.saved_note is not None:
            cells.append("—" if row.saved_percent is None else f"{row.saved_percent:.2f}%")
        if table.ratio_note is not None:
            cells.append("—" if row.ratio is None else f"{row.ratio:.2f}×")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _series_values(values: Any, where: str) -> tuple[float | None, ...]:
    """A JSON list as the y (or x) values of a series: numbers, ``null`` for a gap."""
    if not isinstance(values, list) or not values:
        raise EvidenceBlockError(
            f"{where} is {'empty' if values == [] else 'not a list of numbers'}; point it at "
            "a list of numbers"
        )
    out: list[float | None] = []
    for index, value in enumerate(values):
        number = _number(value)
        if number is None and value is not None:
            raise EvidenceBlockError(
                f"{where} holds {value!r} at index {index}, not a number; a series is numbers "
                "(`null` for a point not measured)"
            )
        out.append(number)
    if all(v is None for v in out):
        raise EvidenceBlockError(f"{where} holds no number (only `null`); point it at a series")
    return tuple(out)


def _series(name: str, value: Any, where: str) -> Series:
    """One series from ``[y0, y1, ...]`` (x = 1..n) or ``{"x": [...], "y": [...]}``."""
    if isinstance(value, Mapping) and "y" in value:
        ys = _series_values(value["y"], f"{where}.y")
        if "x" not in value:
            return Series(name, tuple(float(i) for i in range(1, len(ys) + 1)), ys)
        xs = _series_values(value["x"], f"{where}.x")
        if len(xs) != len(ys):
            raise EvidenceBlockError(
                f"{where} has {len(xs)} x values and {len(ys)} y values; give one x per y"
            )
        if any(x is None for x in xs):
            raise EvidenceBlockError(f"{where}.x holds `null`; every point needs its x")
        return Series(name, tuple(x for x in xs if x is not None), ys)
    ys = _series_values(value, where)
    return Series(name, tuple(float(i) for i in range(1, len(ys) + 1)), ys)


def _smoothed(ys: Sequence[float | None], window: int) -> tuple[float | None, ...]:
    """The trailing running mean over ``window`` points; a gap stays a gap."""
    out: list[float | None] = []
    for index, value in enumerate(ys):
        recent = [v for v in ys[max(0, index - window + 1) : index + 1] if v is not None]
        out.append(None if value is None else sum(recent) / len(recent))
    return tuple(out)


def build_line_chart(document: Mapping[str, Any], block: EvidenceBlock) -> LineChart:
    """The series a ``chart: line`` block draws, from a loaded evidence document.

    The node at ``select`` is ``{"x_label", "y_label", "series": {name: values}}``, or a mapping
    of name to values; or the block names each series' dotted path under ``select`` in
    ``series``. Values are ``[y0, y1, ...]`` (x = 1..n) or ``{"x": [...], "y": [...]}``.
    """
    node = select(document, block.select)
    x_label = y_label = ""
    named: list[tuple[str, Any, str]] = []
    if block.series:
        for pick in block.series:
            full = _joined(block.select, pick.path)
            what = f"`series: {pick.name}` (`{pick.path}` under `{block.select}`)"
            named.append((pick.name, select(document, full, what=what), f"{block.path}: {full}"))
    else:
        if isinstance(node, Mapping) and isinstance(node.get("series"), Mapping):
            x_label, y_label = str(node.get("x_label") or ""), str(node.get("y_label") or "")
            base, node = _joined(block.select, "series"), node["series"]
        else:
            base = block.select
        if not isinstance(node, Mapping) or not node:
            raise EvidenceBlockError(
                f"{block.path}: `select: {block.select}` holds no series; point it at "
                "`{x_label, y_label, series: {name: [y, ...]}}` or a mapping of name to a "
                "list, or name each list with `series: {name: dotted.path}`"
            )
        named = [(str(k), v, f"{block.path}: {_joined(base, str(k))}") for k, v in node.items()]
    series = []
    for name, value, where in named:
        line = _series(name, value, where)
        if block.smooth > 1:
            line = Series(line.name, line.x, _smoothed(line.y, block.smooth))
        series.append(line)
    y_label = block.y_label if block.y_label is not None else y_label
    if block.smooth > 1:
        y_label = f"{y_label} (running mean of {block.smooth})".strip()
    x_label = block.x_label if block.x_label is not None else x_label
    return LineChart(tuple(series), x_label, y_label)


def replace_blocks(markdown: str, render: Callable[[str], str]) -> str:
    """``markdown`` with every ``wpgate-evidence`` block replaced by ``render(its body)``."""
    return FENCE_RE.sub(lambda match: render(match.group("body")), markdown)


def describe_source(document: Mapping[str, Any]) -> Sequence[str]:
    """Short facts about a run for the caption: commit, device, torch."""
    env = document.get("environment")
    env = env if isinstance(env, Mapping) else {}
    facts = []
    commit = document.get("git_commit")
    if isinstance(commit, str) and commit:
        facts.append(f"commit {commit[:12]}")
    device = env.get("gpu") or env.get("cpu")
    if device:
        facts.append(str(device))
    if env.get("torch"):
        facts.append(f"PyTorch {env['torch']}")
    return facts
