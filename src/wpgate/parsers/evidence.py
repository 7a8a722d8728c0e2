"""Evidence files (``wpgate-evidence/1`` JSON) and ``[MEASURED]`` claims in Markdown.

Evidence file schema - one JSON object, written by a benchmark under ``docs/evidence/``:

``schema`` (required)
    ``"wpgate-evidence/1"``.
``environment`` (required)
    an object describing where it ran (Python, torch, GPU, driver, CPU, ...).
``git_commit`` (required)
    the 40-hex commit the benchmark ran from, or ``null`` when unknown. When the tree was dirty
    the writer either records ``null`` or the HEAD commit together with ``"git_dirty": true``;
    then the source hashes, not the commit, are what binds the numbers to code.
``git_dirty`` (optional)
    ``true``, ``false`` or ``null``.
``sources`` (required)
    ``{"repository/relative/path.py": "<sha256 hex>"}`` - each file the measurement ran on.
``results`` (required)
    any JSON: the numbers.

Other keys (``kind``, ``created``, ``command``, ...) are allowed and ignored.

A claim is the text from a ``[MEASURED]`` tag (outside code) to the next tag or the end of its
paragraph. Inside a claim:

- a Markdown link ``[text](target)`` to a ``.json`` file or an inline-code path ending in
  ``.json`` cites a file (a link to anything else is an ordinary link);
  links are relative to the page, inline-code paths to the repository root; a reference-style
  link (``[text][label]``, ``[label][]`` or ``[label]``) cites its label's definition
  (``[label]: target``, anywhere on the page outside fenced code);
- every number in the prose must be found in the cited evidence (inline code is exempt: it holds
  names and markers, not measurements);
- ``covers <commit>`` names the commit the measurement covers (a stale claim stays valid);
- the inline-code marker ```identical A..B -- path ...``` says the paths do not differ between
  commits A and B (verified with ``git diff``);
- the inline-code marker ```collected N -- path ...``` says pytest collects N tests from the
  paths (verified by collecting).
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import unquote

from wpgate._model import Finding
from wpgate.parsers.markdown import CodeSpan, code_spans, inline_links

SCHEMA = "wpgate-evidence/1"
TAG = "[MEASURED]"
#: Rule id of evidence-file schema findings.

_HEX40_RE = re.compile(r"^[0-9a-f]{40}$")
_HEX64_RE = re.compile(r"^[0-9a-f]{64}$")
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# A reference-style link's definition, on a line of its own: ``[label]: target "title"``.
_DEFINITION_RE = re.compile(
    r"^ {0,3}\[(?P<label>[^\]\n]+)\]:[ \t]*(?P<target><[^<>\n]*>|\S+)"
    r"(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^)\n]*\)))?[ \t]*$",
    re.MULTILINE,
)
# A reference-style link: ``[text][label]``, ``[label][]`` (the text is the label), or a bare
# ``[label]`` (not an inline link's text, nor a definition's label). Texts and labels hold no
# bracket: one that stops at the next `[` as well as at `]` keeps a run of unclosed `[` linear.
_REFERENCE_RE = re.compile(
    r"!?\[(?P<text>[^\[\]]*)\]\[(?P<label>[^\[\]]*)\]|\[(?P<bare>[^\[\]]+)\](?![(\[:])"
)
_NOT_A_LINE_BREAK_RE = re.compile(r"[^\n]")
_COVERS_RE = re.compile(r"\bcovers\s+`?([0-9a-f]{7,40})\b`?", re.IGNORECASE)
# The range ``A..B`` is one word, split at its first ``..`` (:func:`_commit_range`): a lazy
# ``(\S+?)\.\.(\S+)`` would take quadratic time on a word of many ``..``.
_IDENTICAL_RE = re.compile(r"^identical\s+(\S+)\s+--\s+(.+)$")
_COLLECTED_RE = re.compile(r"^collected\s+([0-9]+)\s+--\s+(.+)$")
# Inline code that opens as a marker: one that does not parse is a finding, not prose.
_MARKER_START_RE = re.compile(r"^(identical|collected)\s")
_DATE_RE = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ][\d:.]+Z?)?\b")
_NUMBER_RE = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)*")
_HEXISH_RE = re.compile(r"^[0-9a-f]{7,40}$")
_HEX_DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")  # a sha256, as `sources` records them
# A date or date-time string, whose fields are not measurements (2026-12-07T10:37:00+00:00).
_TIMESTAMP_RE = re.compile(
    r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?(Z|[+-]\d{2}:?\d{2})?$"
)
_URL_PREFIXES = ("http://", "https://", "mailto:", "ftp://", "#")


@dataclass(frozen=True)
class Evidence:
    """A valid evidence file: what it ran on and everything it recorded."""

    path: str
    git_commit: str | None
    git_dirty: bool | None
    environment: Mapping[str, Any]
    sources: Mapping[str, str]
    results: Any
    document: Mapping[str, Any] = field(repr=False, compare=False)
    source_lines: Mapping[str, int] = field(default_factory=dict, repr=False, compare=False)

    def line_of(self, source: str) -> int:
        """The line of ``source``'s entry in the file (1 when unknown)."""
        return self.source_lines.get(source, 1)


@dataclass(frozen=True)
class EvidenceParse:
    """An evidence file's record (None when invalid) and the problems with it."""

    path: str
    evidence: Evidence | None
    findings: tuple[Finding, ...]


@dataclass(frozen=True)
class Citation:
    """A file a claim cites: the target as written and whether it is page- or root-relative."""

    target: str
    page_relative: bool
    line: int


@dataclass(frozen=True)
class Number:
    """A number written in a claim's prose: its text, value, decimals and percent sign."""

    text: str
    value: Decimal
    decimals: int
    percent: bool
    line: int


@dataclass(frozen=True)
class IdenticalMarker:
    """``identical A..B -- paths``: the paths do not differ between commits A and B."""

    base: str
    head: str
    paths: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class CountMarker:
    """``collected N -- paths``: pytest collects N tests from the paths."""

    count: int
    paths: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class MalformedMarker:
    """Inline code that starts as a marker (``identical`` or ``collected`` and a space) but is
    not one in form: a typo there would leave the claim unchecked."""

    kind: str
    text: str
    line: int


@dataclass(frozen=True)
class Claim:
    """One ``[MEASURED]`` claim: where it is, what it cites, its numbers and its markers."""

    path: str
    line: int
    text: str
    citations: tuple[Citation, ...]
    numbers: tuple[Number, ...]
    versions: tuple[Number, ...]
    covers: tuple[str, ...]
    identical: tuple[IdenticalMarker, ...]
    counts: tuple[CountMarker, ...]
    malformed: tuple[MalformedMarker, ...] = ()


#: The most characters a JSON number of an evidence file may have (a 40-digit count is already
#: beyond any measurement); Python refuses to convert integers of more than 4,300 digits at all.
MAX_NUMBER_CHARS = 40


class _BadNumberError(ValueError):
    """A JSON number an evidence file may not hold (not finite, or unreasonably long)."""


def _finite_float(text: str) -> float:
    """A JSON fraction as a float; too long or not finite (``1e999``) is refused."""
    value = float(text) if len(text) <= MAX_NUMBER_CHARS else float("inf")
    if value in (float("inf"), float("-inf")):
        raise _BadNumberError(f"the number {text[:20]}... is too large to be a measurement")
    return value


def _bounded_int(text: str) -> int:
    """A JSON integer; more than :data:`MAX_NUMBER_CHARS` characters is refused."""
    if len(text) > MAX_NUMBER_CHARS:
        raise _BadNumberError(
            f"an integer of {len(text)} digits ({text[:12]}...) is too large to be a measurement"
        )
    return int(text)


def _refuse_constant(name: str) -> float:
    """``NaN``, ``Infinity`` and ``-Infinity``: Python's json accepts them, JSON does not."""
    raise _BadNumberError(f"`{name}` is not a JSON number; record a finite number or null")


def parse_evidence(text: str, path: str, *, rule_id: str) -> EvidenceParse:
    """Parse and validate the evidence JSON ``text`` of the file at repository-relative ``path``."""

    def bad(message: str, line: int = 1) -> EvidenceParse:
        return EvidenceParse(path, None, (Finding(path, line, rule_id, message),))

    try:
        document = json.loads(
            text,
            parse_float=_finite_float,
            parse_int=_bounded_int,
            parse_constant=_refuse_constant,
        )
    except json.JSONDecodeError as exc:
        return bad(f"not valid JSON ({exc.msg}, column {exc.colno}); rewrite the file", exc.lineno)
    except _BadNumberError as exc:
        return bad(f"not a valid evidence file: {exc}")
    except RecursionError:
        return bad("the JSON nests too deeply to read; rewrite the file")
    if not isinstance(document, dict):
        return bad("an evidence file must hold one JSON object")
    problems: list[str] = []
    if "schema" not in document:
        problems.append(f'`schema` is missing; add `"schema": "{SCHEMA}"`')
    elif document["schema"] != SCHEMA:
        problems.append(f'`schema` must be "{SCHEMA}", not {document["schema"]!r}')
    environment = document.get("environment")
    if not isinstance(environment, dict):
        problems.append("`environment` must be an object describing where the benchmark ran")
    commit = document.get("git_commit", ...)
    if commit is ...:
        problems.append("`git_commit` is missing; record the 40-hex commit, or null when unknown")
    elif commit is not None and not (isinstance(commit, str) and _HEX40_RE.match(commit)):
        problems.append(f"`git_commit` must be a 40-hex commit or null, not {commit!r}")
    dirty = document.get("git_dirty")
    if dirty is not None and not isinstance(dirty, bool):
        problems.append(f"`git_dirty` must be true, false or null, not {dirty!r}")
    sources = document.get("sources")
    if not isinstance(sources, dict):
        problems.append("`sources` must map each measured file's path to its sha256 hex")
        sources = {}
    for source, digest in sources.items():
        if source.startswith("/") or ".." in source.split("/") or "\\" in source:
            problems.append(f"`sources` path {source!r} must be repository-relative, without `..`")
        if not (isinstance(digest, str) and _HEX64_RE.match(digest)):
            problems.append(f"`sources[{source!r}]` must be a 64-hex sha256, not {digest!r}")
    if "results" not in document:
        problems.append("`results` is missing; record the measured numbers under `results`")
    if problems:
        return EvidenceParse(
            path,
            None,
            tuple(Finding(path, 1, rule_id, f"invalid evidence file: {p}") for p in problems),
        )
    return EvidenceParse(
        path,
        Evidence(
            path=path,
            git_commit=commit if isinstance(commit, str) else None,
            git_dirty=dirty,
            environment=environment,  # type: ignore[arg-type]
            sources={str(k): str(v) for k, v in sources.items()},
            results=document["results"],
            document=document,
            source_lines=_key_lines(text, sources),
        ),
        (),
    )


def _key_lines(text: str, keys: Mapping[str, Any]) -> dict[str, int]:
    """The 1-based line of each key's first ``"key":`` occurrence in the JSON ``text``."""
    lines: dict[str, int] = {}
    for key in keys:
        index = text.find(json.dumps(key))
        if index >= 0:
            lines[str(key)] = text.count("\n", 0, index) + 1
    return lines


def iter_values(document: Any) -> Iterator[Any]:
    """Every scalar in a JSON document, keys included (depth-first)."""
    stack = [document]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            stack.extend(current.keys())
            stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)
        else:
            yield current


# The parts of an evidence document whose numbers a claim may quote.
_MEASURED_KEYS = ("results", "environment")


def evidence_numbers(document: Any) -> tuple[frozenset[Decimal], tuple[str, ...]]:
    """The numbers a document records under ``results`` and ``environment`` (where the
    measurement ran: a claim may quote a load average or a core count), as JSON numbers and as
    numbers written as tokens of their own inside strings (not the digits of a hash, a version,
    a word or a date), and the strings of the whole document (where a claim's versions are
    looked up). The schema name, the command, the commit and the source hashes are not
    measurements: their numbers (``1`` of ``wpgate-evidence/1``) back no claim."""
    numbers: set[Decimal] = set()
    measured = (
        [document.get(key) for key in _MEASURED_KEYS] if isinstance(document, dict) else [document]
    )
    for value in iter_values(measured):
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, (int, float)):
            try:
                numbers.add(Decimal(repr(value)) if isinstance(value, float) else Decimal(value))
            except InvalidOperation:  # inf and nan are not numbers a claim can quote
                continue
        elif isinstance(value, str) and not _TIMESTAMP_RE.match(value):  # a date's fields
            numbers.update(token.value for token in _tokens(value) if token.value is not None)
    strings = tuple(v for v in iter_values(document) if isinstance(v, str))
    return frozenset(numbers), strings


def version_prefixes(strings: Iterable[str]) -> frozenset[str]:
    """The dotted versions written in ``strings`` (``2.13.0`` of ``2.13.0+cpu``) with each of
    their leading parts of two or more components (``2.13``)."""
    found: set[str] = set()
    for value in strings:
        for match in _NUMBER_RE.finditer(value):
            parts = match.group(0).split(".")
            if len(parts) < 3 or _in_a_name(value, match.start(), match.end()):
                continue
            found.update(".".join(parts[:k]) for k in range(2, len(parts) + 1))
    return frozenset(found)


def _paragraphs(text: str) -> Iterator[tuple[int, list[str]]]:
    """Paragraphs (runs of non-blank lines outside fenced code) with their first line number."""
    fence: str | None = None
    start = 0
    current: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = _FENCE_RE.match(line)
        if fence is not None:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = None
            continue
        if match or not line.strip():
            if current:
                yield start, current
            current = []
            if match:
                fence = match.group(1)
            continue
        if not current:
            start = number
        current.append(line)
    if current:
        yield start, current


def _line_finder(text: str, first_line: int) -> Callable[[int], int]:
    """The file line of a character of ``text``, whose first line is ``first_line``: a binary
    search over its line breaks, so that a lookup for each of many tags, links or numbers does
    not count the breaks before it again."""
    breaks = [match.start() for match in re.finditer("\n", text)]
    return lambda position: first_line + bisect.bisect_left(breaks, position)


def _label(text: str) -> str:
    """A reference label as Markdown matches it: case and runs of white space do not count."""
    return " ".join(text.split()).casefold()


def _definitions(text: str) -> dict[str, str]:
    """The page's reference-style link definitions (outside fenced code), label to target; the
    first definition of a label wins, as in CommonMark."""
    found: dict[str, str] = {}
    for _, lines in _paragraphs(text):
        for match in _DEFINITION_RE.finditer("\n".join(lines)):
            found.setdefault(_label(match.group("label")), match.group("target").strip("<>"))
    return found


def parse_claims(text: str, path: str) -> tuple[Claim, ...]:
    """Every ``[MEASURED]`` claim in the Markdown ``text`` of the page at ``path``."""
    if TAG not in text:
        return ()
    claims: list[Claim] = []
    definitions = _definitions(text)
    for first_line, lines in _paragraphs(text):
        paragraph = "\n".join(lines)
        if TAG not in paragraph:
            continue
        line_of = _line_finder(paragraph, first_line)
        tags = _outside(
            [m.start() for m in re.finditer(re.escape(TAG), paragraph)], code_spans(paragraph)
        )
        for index, start in enumerate(tags):
            end = tags[index + 1] if index + 1 < len(tags) else len(paragraph)
            segment = paragraph[start + len(TAG) : end]
            claims.append(_parse_claim(path, line_of(start), segment, definitions))
    return tuple(claims)


def _outside(positions: list[int], spans: Sequence[CodeSpan]) -> list[int]:
    """The ``positions`` (in order) that no span (in order, not overlapping) holds: one walk
    over both, so that many tags and many spans take linear time."""
    kept: list[int] = []
    index = 0
    for position in positions:
        while index < len(spans) and spans[index].end <= position:
            index += 1
        if index == len(spans) or position < spans[index].start:
            kept.append(position)
    return kept


def _commit_range(text: str) -> tuple[str, str] | None:
    """``A..B`` as ``(A, B)``, split at the first ``..`` after A's first character; None where
    either side would be empty."""
    split = text.find("..", 1)
    if split < 0 or split + 2 == len(text):
        return None
    return text[:split], text[split + 2 :]


def _cited(target: str) -> str | None:
    """The evidence file a link's target cites on this site, or None for an empty or external
    one, or a link to anything but a ``.json`` file (a page the claim points the reader to)."""
    if not target or target.lower().startswith(_URL_PREFIXES):
        return None
    # A browser and the site read `%20` as a space: so does the citation.
    path = unquote(target.split("#", 1)[0])
    return path if path.lower().endswith(".json") else None


def _reference_label(match: re.Match[str]) -> str:
    """The label a reference-style link names: its own, or its text where it has none."""
    if match.group("bare") is not None:
        return match.group("bare")
    return match.group("label") or match.group("text")


def _parse_claim(path: str, line: int, segment: str, definitions: Mapping[str, str]) -> Claim:
    """The citations, numbers and markers of one claim's text."""
    citations: list[Citation] = []
    identical: list[IdenticalMarker] = []
    counts: list[CountMarker] = []
    malformed: list[MalformedMarker] = []

    line_of = _line_finder(segment, line)
    code = code_spans(segment)
    links = inline_links(segment, code)
    for link in links:
        cited = _cited(segment[link.target_start : link.target_end].strip("<>"))
        if cited is not None:
            citations.append(Citation(cited, True, line_of(link.start)))
    unlinked = _blank(_blank(segment, code), links)
    for match in _REFERENCE_RE.finditer(unlinked):
        target = definitions.get(_label(_reference_label(match)))
        cited = None if target is None else _cited(target)
        if cited is not None:
            citations.append(Citation(cited, True, line_of(match.start())))
    for span in code:
        content = segment[span.content_start : span.content_end].strip()
        if " " not in content and content.lower().endswith(".json"):
            citations.append(Citation(content, False, line_of(span.start)))
            continue
        marker = _IDENTICAL_RE.match(content)
        commits = None if marker is None else _commit_range(marker.group(1))
        if marker and commits:
            identical.append(
                IdenticalMarker(*commits, tuple(marker.group(2).split()), line_of(span.start))
            )
            continue
        marker = _COLLECTED_RE.match(content)
        if marker:
            counts.append(
                CountMarker(
                    int(marker.group(1)), tuple(marker.group(2).split()), line_of(span.start)
                )
            )
            continue
        started = _MARKER_START_RE.match(content)
        if started:
            malformed.append(MalformedMarker(started.group(1), content, line_of(span.start)))
    covers = tuple(m.group(1).lower() for m in _COVERS_RE.finditer(segment))
    numbers, versions = _numbers(segment, code, line_of, definitions)
    return Claim(
        path=path,
        line=line,
        text=" ".join(segment.split()),
        citations=tuple(citations),
        numbers=numbers,
        versions=versions,
        covers=covers,
        identical=tuple(identical),
        counts=tuple(counts),
        malformed=tuple(malformed),
    )


def _matched(pattern: re.Pattern[str], text: str, group: int | str = 0) -> list[tuple[int, int]]:
    """Where each match of ``pattern`` in ``text`` (or one group of it) lies."""
    return [match.span(group) for match in pattern.finditer(text)]


def _blank(text: str, spans: Iterable[tuple[int, ...]]) -> str:
    """``text`` with each span (``start, end, ...``; in order, not overlapping) replaced by
    spaces, its line breaks kept."""
    parts: list[str] = []
    last = 0
    for start, end, *_ in spans:
        parts.extend((text[last:start], _NOT_A_LINE_BREAK_RE.sub(" ", text[start:end])))
        last = end
    parts.append(text[last:])
    return "".join(parts)


def _in_a_name(text: str, start: int, end: int) -> bool:
    """Whether the digits ``text[start:end]`` belong to a name, not a measurement: an identifier
    (R12, WP-197b, x86, #6, §3), a hash or an abbreviated commit (623edc0). The claims' numbers
    and the numbers inside an evidence file's strings are read by this one rule."""
    before = text[start - 1] if start else " "
    before2 = text[start - 2] if start > 1 else " "
    if before.isalpha() or before in "_#§" or (before == "-" and before2.isalnum()):
        return True
    word_start = start
    while word_start and (text[word_start - 1].isalnum() or text[word_start - 1] == "_"):
        word_start -= 1
    word_end = end
    while word_end < len(text) and (text[word_end].isalnum() or text[word_end] == "_"):
        word_end += 1
    word = text[word_start:word_end]
    return bool(_HEXISH_RE.match(word) or _HEX_DIGEST_RE.match(word)) and not word.isdigit()


@dataclass(frozen=True)
class _Token:
    """A number written in text: where it ends, its text (sign and exponent included), its
    value (None for a dotted version) and its decimals."""

    end: int
    text: str
    value: Decimal | None
    decimals: int


# A minus sign is the number's where it stands before the digits after a space, an opening
# bracket or the start (-7.5 ms, (-3%)), not between two numbers (1.19-1.49: a range).
_SIGN_BEFORE = " \t\n([{=:;,/~\u2248"
_EXPONENT_RE = re.compile(r"[eE][+-]?\d{1,4}(?![\w.])")


def _tokens(text: str) -> Iterator[_Token]:
    """The numbers of ``text`` that are not names (:func:`_in_a_name`), each with its sign
    and its exponent (``7.5e3`` is 7500, ``1e-5`` is 0.00001): the one reading of a number
    that claims and evidence strings share."""
    for match in _NUMBER_RE.finditer(text):
        start, end = match.span()
        if _in_a_name(text, start, end):
            continue
        body = match.group(0).rstrip(".,")
        end = start + len(body)
        plain = body.replace(",", "")
        exponent = _EXPONENT_RE.match(text, end) if "," not in body else None
        if exponent is not None:
            end = exponent.end()
        sign = (
            start
            and text[start - 1] in "-\u2212"
            and (start < 2 or text[start - 2] in _SIGN_BEFORE)
        )
        shown = ("-" if sign else "") + text[start:end]
        if plain.count(".") > 1:
            yield _Token(end, shown, None, 0)
            continue
        value = Decimal(plain)
        decimals = len(plain.partition(".")[2])
        if exponent is not None:
            power = int(exponent.group(0)[1:])
            value = value.scaleb(power)
            decimals = max(0, decimals - power)
        yield _Token(end, shown, -value if sign else value, decimals)


def _numbers(
    segment: str,
    code: Sequence[CodeSpan],
    line_of: Callable[[int], int],
    definitions: Mapping[str, str],
) -> tuple[tuple[Number, ...], tuple[Number, ...]]:
    """The numbers and the dotted versions written in a claim's prose (``code``: its spans;
    ``line_of``: the file line of a position)."""
    prose = _blank(segment, code)
    prose = _blank(prose, [(link.target_start, link.target_end) for link in inline_links(prose)])
    # A definition's line and a full reference's label (``[text][label]``, the label not shown)
    # name a link; they are not measurements.
    prose = _blank(prose, _matched(_DEFINITION_RE, prose))
    prose = _blank(
        prose,
        [
            match.span("label")
            for match in _REFERENCE_RE.finditer(prose)
            if match.group("label") and _label(match.group("label")) in definitions
        ],
    )
    prose = _blank(prose, _matched(_COVERS_RE, prose))
    prose = _blank(prose, _matched(_DATE_RE, prose))
    numbers: list[Number] = []
    versions: list[Number] = []
    for token in _tokens(prose):
        where = line_of(token.end)
        if token.value is None:
            versions.append(Number(token.text, Decimal(0), 0, False, where))
            continue
        after = prose[token.end] if token.end < len(prose) else " "
        numbers.append(Number(token.text, token.value, token.decimals, after == "%", where))
    return tuple(numbers), tuple(versions)
