"""Evidence blocks: a fenced ``wpgate-evidence`` block in a page becomes a table (and a chart).

A page asks for a rendering with a fenced block whose body is YAML::

    ```wpgate-evidence
    path: docs/evidence/musgd-step-cuda.json   # repository-relative, inside the repository
    select: results.arms                       # dotted path into the JSON (default: results)
    columns: [eager, replay]                   # paired layout; omit for one row per measurement
    baseline: eager                            # flat layout: "time saved" relative to this row
    chart: true                                # also draw an SVG bar chart
    caption: Optimizer step, nano detector
    label: variant                             # list items' label key (default: name, label,
    ```                                        #   variant or arm, the first one present)

A *measurement* is a mapping with ``median``/``min``/``max`` keys, optionally suffixed by a unit
(``median_ms``, ``min_ms``, ``max_ms``), or a bare list of samples. Everything here is pure: the
plugin reads the files and reports the errors.
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
    }
)
#: The keys a list item's row label is read from, first present wins (benchmarks write `variant`).
LABEL_KEYS = ("name", "label", "variant", "arm")
_UNIT_NAMES = {"ms": "ms", "s": "s", "us": "µs", "ns": "ns", "mib": "MiB", "gib": "GiB"}
_MAX_DIGITS = 9


@dataclass(frozen=True)
class EvidenceBlock:
    """The options of one ``wpgate-evidence`` block."""

    path: str
    select: str = "results"
    columns: tuple[str, ...] = ()
    baseline: str | None = None
    chart: bool = False
    table: bool = True
    caption: str = ""
    digits: int = 3
    unit: str | None = None
    label: str | None = None


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


@dataclass(frozen=True)
class EvidenceTable:
    """What a block renders: column names, rows, the unit and the time-saved reference."""

    columns: tuple[str, ...]
    rows: tuple[EvidenceRow, ...]
    unit: str
    saved_note: str | None


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
    columns = data.get("columns") or ()
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        raise EvidenceBlockError(
            "`columns` must be a list of keys, e.g. `columns: [eager, replay]`"
        )
    if len(columns) == 1:
        raise EvidenceBlockError("`columns` needs at least two keys to compare, or none at all")
    digits = data.get("digits", 3)
    if not isinstance(digits, int) or isinstance(digits, bool) or not 0 <= digits <= _MAX_DIGITS:
        raise EvidenceBlockError(f"`digits` must be an integer from 0 to {_MAX_DIGITS}")
    for flag in ("chart", "table"):
        if not isinstance(data.get(flag, True), bool):
            raise EvidenceBlockError(f"`{flag}` must be true or false")
    if columns and data.get("baseline") is not None:
        raise EvidenceBlockError(
            "`baseline` applies to the flat layout only; with `columns` the time saved is "
            "always the last column relative to the first"
        )
    return EvidenceBlock(
        path=str(data["path"]),
        select=str(data.get("select", "results")),
        columns=tuple(columns),
        baseline=None if data.get("baseline") is None else str(data["baseline"]),
        chart=bool(data.get("chart", False)),
        table=bool(data.get("table", True)),
        caption=str(data.get("caption") or ""),
        digits=digits,
        unit=None if data.get("unit") is None else str(data["unit"]),
        label=None if data.get("label") is None else str(data["label"]),
    )


def select(document: Mapping[str, Any], dotted: str) -> Any:
    """The value at a dotted path (``results.arms``); list items by index (``runs.0``)."""
    node: Any = document
    walked: list[str] = []
    for part in dotted.split(".") if dotted else []:
        walked.append(part)
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise EvidenceBlockError(
                f"`select: {dotted}`: the evidence file has no `{'.'.join(walked)}`; "
                "point `select` at a key the file holds"
            )
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


def build_table(document: Mapping[str, Any], block: EvidenceBlock) -> EvidenceTable:
    """The table a block asks for, from a loaded evidence document."""
    node = select(document, block.select)
    keys = LABEL_KEYS if block.label is None else (block.label,)
    if block.columns:
        rows = []
        for label, child in _labelled(node, keys):
            if not isinstance(child, Mapping):
                continue
            values = tuple(as_measurement(child.get(c), block.unit) for c in block.columns)
            if any(v is not None for v in values):
                rows.append(EvidenceRow(label, values, _saved(values[0], values[-1])))
        if not rows:
            raise EvidenceBlockError(
                f"`select: {block.select}` holds no entry with measurements under "
                f"{', '.join(block.columns)}; check `select` and `columns` against the file"
            )
        note = f"{block.columns[-1]} relative to {block.columns[0]}"
        unit = next((v.unit for r in rows for v in r.values if v is not None), "")
        return EvidenceTable(block.columns, tuple(rows), unit, note)
    flat = _flat_rows(node, "", block.unit, keys)
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
        EvidenceRow(label, (m,), None if label == block.baseline else _saved(reference, m))
        for label, m in flat
    ]
    flat_note = None if block.baseline is None else f"relative to {block.baseline}"
    return EvidenceTable(("value",), tuple(rows), flat[0][1].unit, flat_note)


def format_table(table: EvidenceTable, digits: int) -> str:
    """The table as GitHub-flavoured Markdown; every label from the file is escaped."""
    unit = f" [{table.unit}]" if table.unit else ""
    if table.columns == ("value",):
        heads = ["Measurement", f"Median (range){unit}"]
    else:
        heads = ["Row", *(f"{name}{unit}, median (range)" for name in table.columns)]
    if table.saved_note is not None:
        heads.append(f"Time saved ({table.saved_note})")
    heads = [escape_markdown(h) for h in heads]
    lines = ["| " + " | ".join(heads) + " |", "|" + " --- |" * len(heads)]
    for row in table.rows:
        cells = [escape_markdown(row.label)]
        cells.extend("—" if v is None else v.format(digits) for v in row.values)
        if table.saved_note is not None:
            cells.append("—" if row.saved_percent is None else f"{row.saved_percent:.2f}%")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
