"""Commit-message parser with `git interpret-trailers` semantics.

Pure functions: text (or bytes) in, records out. The trailer block is found the way git's commit
readers find it (``trailer.c``, documented in git-interpret-trailers(1)): git log's
``%(trailers)`` and ``git commit -s`` read a stored or to-be-committed message whole, so
:func:`parse_message` applies no divider by default; only ``git interpret-trailers`` on a patch
e-mail (``divider=True``, and :func:`parse_trailers`) ends the message at a line that starts with
``---`` followed by whitespace or the end of the line. A NUL byte ends the message, as git reads
it as a C string (``git commit`` refuses such a message). Trailing comment and blank lines
are ignored; the block is the last paragraph after the title, and it counts only if all of its
lines are trailers, or it holds a git-generated trailer (``Signed-off-by: ``, ``(cherry picked
from commit ``) and at least 25% of its lines are trailers. A trailer line starts with a key of
ASCII letters, digits and ``-`` (whitespace allowed before the ``:``); lines that start with
whitespace continue the previous trailer. One deliberate difference from git 2.39: a line whose
separator is followed by ``//`` (``Key://x``, a URL) is not reported as a trailer, as the
governance spec requires; it still counts as one where git decides whether the last paragraph
is a trailer block, so the block git finds is the block wpgate finds.

git's commit readers skip the blank lines before the title (``git interpret-trailers`` on a
file does not: ``whole_file``); an old ``Conflicts:`` block is ignored only when its
``Conflicts:`` line ends with a newline. :class:`TrailerSyntax` carries git's
``trailer.separators`` and ``trailer.<name>.key`` configuration, read once per run by
:func:`wpgate._git.reading_settings`.

Every step is a single pass over the lines, so parsing is linear in the size of the message.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping

from wpgate._record import field, frozen, replace

__all__ = [
    "DEFAULT_SYNTAX",
    "DecodedText",
    "Message",
    "Trailer",
    "TrailerSyntax",
    "decode_message",
    "parse_message",
    "parse_trailers",
]

# git's own isspace() (sane_ctype): only these four, never Unicode or \v / \f.
_GIT_SPACE = " \t\n\r"
_LINE_SPACE = " \t\r"
_GIT_GENERATED_PREFIXES = ("Signed-off-by: ", "(cherry picked from commit ")
_SCISSORS = "------------------------ >8 ------------------------"
# A key is [A-Za-z0-9-]+ then optional spaces/tabs, then the separator; git's find_separator().
# Lines are matched as git matches them; a value starting with `//` (a URL) is dropped after.
_TRAILER_FAST = re.compile(r"([A-Za-z0-9-]+)[ \t]*:(.*)")
# The same, for every line of a paragraph at once (no CR in it: the fast path refuses CRs).
_TRAILER_LINES = re.compile(r"^([A-Za-z0-9-]+)[ \t]*:(.*)$", re.MULTILINE)
# A paragraph every line of which is one (checked without a match object per line).
_ALL_TRAILER_LINES = re.compile(r"(?:[A-Za-z0-9-]+[ \t]*:[^\n]*\n)*[A-Za-z0-9-]+[ \t]*:[^\n]*")
_URL = "//"
_CONTINUATION_FOLD = re.compile(r"\n[ \t\n\r]*")
_BLANK_LINE = re.compile(r"^[ \t\r]*$", re.MULTILINE)


@frozen
class TrailerSyntax:
    """git's configuration that changes which lines are trailers (git-interpret-trailers(1)).

    ``separators`` is ``trailer.separators`` (the characters that may end a key; ``:`` by
    default). ``items`` are the configured trailers in configuration order: for each
    ``trailer.<name>.*`` the name and its ``trailer.<name>.key`` (None without one). A line
    whose key, as written before its separator, is a case-insensitive prefix of an item's name
    or key is a user-configured trailer: it makes its paragraph a trailer block at 25%
    trailers, as ``Signed-off-by: `` does. A trailer whose key (trimmed) is such a prefix is
    reported under the item's key.
    """

    separators: str = ":"
    items: tuple[tuple[str, str | None], ...] = ()

    def is_default(self) -> bool:
        """Whether this is git's reading without configuration."""
        return self.separators == ":" and not self.items

    def item_for(self, token: str) -> tuple[str, str | None] | None:
        """The first configured item ``token`` is a prefix of (ignoring case), or None."""
        folded = token.lower()
        for name, key in self.items:
            if name.lower().startswith(folded) or (
                key is not None and key.lower().startswith(folded)
            ):
                return name, key
        return None


#: git's reading without any ``trailer.*`` configuration.
DEFAULT_SYNTAX = TrailerSyntax()


@functools.lru_cache(maxsize=8)
def _patterns(separators: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The separator test and the trailer-line pattern for ``separators``."""
    if not separators:
        never = re.compile(r"(?!)")
        return never, never
    seps = "[" + "".join(re.escape(ch) for ch in separators) + "]"
    return (
        re.compile(rf"([A-Za-z0-9-]+[ \t]*){seps}"),
        re.compile(rf"^([A-Za-z0-9-]+)[ \t]*{seps}([^\n]*(?:\n[ \t\r][^\n]*)*)", re.MULTILINE),
    )


# The records below are made once per commit of a history (and a trailer per trailer line):
# their initialisers fill the instance dictionary with one update, as wpgate._model.Finding's
# does, instead of one object.__setattr__ call per field (a slotted record's only way, which
# cost a Message twice as many instructions). They stay frozen: assignment still raises.


@frozen
class Trailer:
    """One trailer: its key as written, its unfolded value and its 1-based line."""

    key: str
    value: str
    line: int

    def __init__(self, key: str, value: str, line: int) -> None:
        self.__dict__.update(key=key, value=value, line=line)


@frozen
class DecodedText:
    """Text decoded from bytes; ``error_line`` is the 1-based line of the first invalid byte.

    ``nul_line`` is the 1-based line of a NUL byte, where the text was cut (git stops there).
    """

    text: str
    error_line: int | None
    nul_line: int | None = None


@frozen
class Message:
    """A parsed commit message.

    ``lines`` are the lines of the text (``lines[n - 1]`` is line ``n``; in commit-msg mode the
    scissors line and what follows are cut). ``comment_char`` is set in commit-msg mode: lines
    that start with it are git comments, not part of the message.
    """

    subject: str
    subject_line: int
    lines: tuple[str, ...]
    trailers: tuple[Trailer, ...]
    comment_char: str | None = None
    encoding_error_line: int | None = None
    nul_line: int | None = None
    by_key: Mapping[str, tuple[Trailer, ...]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def __init__(
        self,
        subject: str,
        subject_line: int,
        lines: tuple[str, ...],
        trailers: tuple[Trailer, ...],
        comment_char: str | None = None,
        encoding_error_line: int | None = None,
        nul_line: int | None = None,
        by_key: Mapping[str, tuple[Trailer, ...]] | None = None,
    ) -> None:
        self.__dict__.update(
            subject=subject,
            subject_line=subject_line,
            lines=lines,
            trailers=trailers,
            comment_char=comment_char,
            encoding_error_line=encoding_error_line,
            nul_line=nul_line,
            by_key={} if by_key is None else by_key,
        )

    def text_lines(self) -> Iterator[tuple[int, str]]:
        """The message's own lines with their 1-based numbers, comment lines left out."""
        for number, line in enumerate(self.lines, 1):
            if self.comment_char is None or not line.startswith(self.comment_char):
                yield number, line

    def values(self, key: str) -> tuple[Trailer, ...]:
        """The trailers whose key equals ``key``, ignoring case (git compares keys that way)."""
        return self.by_key.get(key.lower(), ())


def decode_message(data: bytes) -> DecodedText:
    """Decode UTF-8, replacing invalid bytes, and report where the first invalid byte was.

    The text ends at the first NUL byte, where git's readers stop; its line is reported.
    """
    nul = data.find(b"\0")
    nul_line = None
    if nul >= 0:
        nul_line = data.count(b"\n", 0, nul) + 1
        data = data[:nul]
    try:
        return DecodedText(data.decode("utf-8"), None, nul_line)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return DecodedText(data.decode("utf-8", errors="replace"), line, nul_line)


def _is_blank(line: str) -> bool:
    """Whether a line holds only spaces, tabs and carriage returns (git's is_blank_line)."""
    return not line.strip(_LINE_SPACE)


def _line_index(text: str, offset: int) -> int:
    """0-based index of the line that holds character ``offset``."""
    return text.count("\n", 0, offset)


def _scissors_index(text: str, comment_char: str) -> int | None:
    """Index of the scissors line (git's wt_status_locate_end), or None."""
    marker = f"{comment_char} {_SCISSORS}\n"
    if text.startswith(marker):
        return 0
    offset = text.find("\n" + marker)
    return None if offset < 0 else _line_index(text, offset + 1)


def _divider_index(text: str, count: int) -> int:
    """Index of the first ``---`` divider line, or ``count`` (the number of lines)."""
    # git needs a whitespace byte after the dashes, so an unterminated final "---" is text.
    offset = text.find("---")
    while offset >= 0:
        if (offset == 0 or text[offset - 1] == "\n") and text[offset + 3 : offset + 4] in (
            " ",
            "\t",
            "\r",
            "\n",
        ):
            return min(count, _line_index(text, offset))
        offset = text.find("---", offset + 3)
    return count


def _ignored_tail(
    lines: list[str], end: int, comment_char: str | None, terminated: bool = True
) -> int:
    """Index where the trailing run of comment lines, empty lines and old Conflicts: starts.

    ``terminated``: whether the text ends with a newline. git recognises ``Conflicts:`` only as
    a whole line with its newline, so a final one without a newline is a trailer line.
    """
    last = len(lines) - 1 if not terminated else -1
    # git's ignore_non_trailer(): the last run of lines that are empty, comments, or an old
    # "Conflicts:" block with its tab-indented paths is not part of the message. Walk back over
    # every line that could belong to the run, then forward over that suffix, because a tab line
    # only belongs to the run after a "Conflicts:" line.
    first = end
    while first > 0:
        line = lines[first - 1]
        if (
            line
            and (line != "Conflicts:" or first - 1 == last)
            and line[0] != "\t"
            and (comment_char is None or not line.startswith(comment_char))
        ):
            break
        first -= 1
    start = first
    in_conflicts = False
    for index in range(first, end):
        line = lines[index]
        if line == "Conflicts:" and index != last:
            in_conflicts = True
        elif line.startswith("\t") and not in_conflicts:
            start = index + 1
    return start


def _title_end(
    text: str,
    lines: list[str],
    end: int,
    comment_char: str | None,
    first: int = 0,
    offset: int = 0,
) -> int:
    """Index of the first blank line at or after line ``first`` (the end of the title
    paragraph, which starts at line ``first``, character ``offset`` of ``text``), or ``end``."""
    match = _BLANK_LINE.search(text, offset)
    if match is None:
        return end
    index = _line_index(text, match.start())
    if comment_char is not None and comment_char in _LINE_SPACE:
        # A whitespace comment character makes "blank" lines comments; take git's slow path.
        index = next(
            (
                i
                for i in range(first, end)
                if not lines[i].startswith(comment_char) and _is_blank(lines[i])
            ),
            end,
        )
    return min(index, end)


def _trailer_block_start(
    text: str,
    lines: list[str],
    end: int,
    comment_char: str | None,
    syntax: TrailerSyntax = DEFAULT_SYNTAX,
    title_start: int = 0,
    title_offset: int = 0,
) -> int:
    """Index of the first line of the trailer block in ``lines[:end]``, or ``end`` if none.

    The title is the paragraph that starts at line ``title_start`` (git's commit readers skip
    the blank lines before it).
    """
    end_of_title = _title_end(text, lines, end, comment_char, title_start, title_offset)
    separator = _patterns(syntax.separators)[0]
    only_spaces = True
    recognized_prefix = False
    trailer_lines = non_trailer_lines = possible_continuation_lines = 0
    comment = comment_char if comment_char is not None else "\0"
    for index in range(end - 1, end_of_title - 1, -1):
        line = lines[index]
        first = line[:1]
        if first == comment:
            non_trailer_lines += possible_continuation_lines
            possible_continuation_lines = 0
            continue
        if not first or first in _LINE_SPACE:
            if line.strip(_LINE_SPACE):
                only_spaces = False
                possible_continuation_lines += 1
                continue
            if only_spaces:
                continue
            non_trailer_lines += possible_continuation_lines
            if recognized_prefix and trailer_lines * 3 >= non_trailer_lines:
                return index + 1
            if trailer_lines and not non_trailer_lines:
                return index + 1
            return end
        only_spaces = False
        if line.startswith(_GIT_GENERATED_PREFIXES):
            trailer_lines += 1
            possible_continuation_lines = 0
            recognized_prefix = True
        elif (found := separator.match(line)) is not None:
            trailer_lines += 1
            possible_continuation_lines = 0
            # The key as written, spaces before the separator included, names a configured
            # trailer: it counts as git-generated ones do.
            if syntax.items and syntax.item_for(found.group(1)) is not None:
                recognized_prefix = True
        else:
            non_trailer_lines += 1 + possible_continuation_lines
            possible_continuation_lines = 0
    return end


def _collect(
    lines: list[str],
    start: int,
    end: int,
    comment_char: str | None,
    syntax: TrailerSyntax = DEFAULT_SYNTAX,
) -> tuple[Trailer, ...]:
    """Trailers of ``lines[start:end]`` with continuation lines folded into their trailer.

    A key that names a configured trailer with a ``key`` is reported as that key, as git does.
    """
    # One regex pass over the block: a trailer line and the whitespace-led lines under it. A
    # whitespace-led line under a non-trailer line can never start a match, as in git.
    block = "\n".join(lines[start:end])
    trailers: list[Trailer] = []
    number, counted = start + 1, 0
    for match in _patterns(syntax.separators)[1].finditer(block):
        number += block.count("\n", counted, match.start())
        counted = match.start()
        key = match.group(1)
        value = match.group(2)
        if (comment_char is not None and key.startswith(comment_char)) or value.startswith(_URL):
            continue
        if "\n" in value:
            value = _CONTINUATION_FOLD.sub(" ", value)
        if syntax.items:
            item = syntax.item_for(key)
            key = key if item is None or item[1] is None else item[1]
        trailers.append(Trailer(key, value.strip(_GIT_SPACE), number))
    return tuple(trailers)


@functools.lru_cache(maxsize=8)
def _text_line_pattern(comment_char: str | None) -> re.Pattern[str]:
    """A line with a non-space character that is not a comment."""
    skip = "" if comment_char is None else f"(?!{re.escape(comment_char)})"
    return re.compile(rf"^{skip}[ \t\r]*[^ \t\r\n]", re.MULTILINE)


def _first_text_line(text: str, count: int, comment_char: str | None) -> int:
    """1-based number of the first non-blank, non-comment line, or ``count + 1``."""
    match = _text_line_pattern(comment_char).search(text)
    return count + 1 if match is None else min(count, _line_index(text, match.start())) + 1


def _index(trailers: tuple[Trailer, ...]) -> dict[str, tuple[Trailer, ...]]:
    """Trailers by lower-cased key, in message order."""
    simple: dict[str, tuple[Trailer, ...]] = {t.key.lower(): (t,) for t in trailers}
    if len(simple) == len(trailers):
        return simple  # the usual case: every key appears once
    by_key: dict[str, list[Trailer]] = {}
    for trailer in trailers:
        by_key.setdefault(trailer.key.lower(), []).append(trailer)
    return {key: tuple(found) for key, found in by_key.items()}


def _parse_plain(
    core: str,
    comment_char: str | None,
    skip: str | None,
    encoding_error_line: int | None,
    divider: bool = False,
) -> Message | None:
    """The common case without the general machinery, or None when the text needs it.

    Applies when the message has a plain subject on line 1, no divider (when ``divider`` is
    on: no ``---`` at all), no scissors line, no carriage return, and
    a last paragraph whose lines are neither comments nor whitespace-led (so no continuation
    and no whitespace-only line): then git's block rules reduce to "all lines are trailers, or a
    git-generated prefix with at least 25% trailers".
    """
    cut = core.rfind("\n\n")
    if (
        cut < 0
        or not core
        or core[0] in _GIT_SPACE
        or core[0] == comment_char
        or "\r" in core
        or (divider and "---" in core)
        or (comment_char is not None and _SCISSORS in core)
    ):
        return None
    paragraph = core[cut + 2 :]
    if (
        not paragraph
        or paragraph[0] in _GIT_SPACE
        or "\n " in paragraph
        or "\n\t" in paragraph
        or paragraph == "Conflicts:"
        or paragraph.endswith("\nConflicts:")
        or (
            comment_char is not None
            and (paragraph[0] == comment_char or f"\n{comment_char}" in paragraph)
        )
    ):
        return None
    lines = core.split("\n")
    cached = len(paragraph) <= _CACHED_PARAGRAPH
    size, block = _plain_block(paragraph) if cached else _read_plain_block(paragraph)
    first = len(lines) - size
    if block is not None:  # the usual case: every line of the last paragraph is a trailer
        # One loop in this frame (a comprehension is a call of its own in Python 3.11) makes
        # the trailers and their index by folded key; a key seen twice re-indexes them all.
        found: list[Trailer] = []
        by_key: dict[str, tuple[Trailer, ...]] = {}
        for offset, key, value, folded in block:
            trailer = Trailer(key, value, first + offset)
            found.append(trailer)
            by_key[folded] = (trailer,)
        trailers = tuple(found)
        if len(by_key) != len(trailers):
            by_key = _index(trailers)
    else:
        trailers = _mixed_block(lines[first:], first)
        by_key = _index(trailers)
    return Message(
        lines[0].rstrip(_LINE_SPACE),
        1,
        tuple(lines),
        trailers,
        skip,
        encoding_error_line,
        None,
        by_key,
    )


#: A history repeats its last paragraphs (runc's 4,879 come in 806 kinds, a sign-off by the same
#: person above all), so each distinct one is matched once per run (:func:`_plain_block`).
_PARAGRAPH_CACHE = 4096
#: The longest last paragraph kept in that cache (characters): a sign-off block is a few
#: hundred; a larger one is read each time, so that the cache never holds a huge message's
#: paragraph (and its trailers) after the message is gone.
_CACHED_PARAGRAPH = 4096


def _read_plain_block(
    paragraph: str,
) -> tuple[int, Iterable[tuple[int, str, str, str]] | None]:
    """The number of lines of a last paragraph too long to cache, and, when every line is a
    trailer line, its trailers as :func:`_plain_block` gives them, made one at a time as they
    are asked for: no list of every line's match is kept beside the trailers."""
    size = paragraph.count("\n") + 1
    if _ALL_TRAILER_LINES.fullmatch(paragraph) is None:
        return size, None
    return size, (
        (offset, match[1], match[2].strip(_GIT_SPACE), match[1].lower())
        for offset, match in enumerate(_TRAILER_LINES.finditer(paragraph), 1)
        if not match[2].startswith(_URL)
    )


@functools.lru_cache(maxsize=_PARAGRAPH_CACHE)
def _plain_block(
    paragraph: str,
) -> tuple[int, tuple[tuple[int, str, str, str], ...] | None]:
    """The number of lines of a last paragraph (no CR, comment or whitespace-led line in it),
    and, when every line is a trailer line, its trailers as ``(line within the paragraph, key,
    value, folded key)`` in order, URL values left out; None when some line is not one."""
    size, block = _read_plain_block(paragraph)
    return size, None if block is None else tuple(block)


def _mixed_block(block: list[str], first: int) -> tuple[Trailer, ...]:
    """The trailers of a last paragraph not every line of which is one (``first``: its index).

    Such a paragraph is a trailer block only when it holds a git-generated line and at least
    25% trailers (or generated lines); then its trailer lines count, and nothing otherwise.
    """
    matches = [_TRAILER_FAST.match(line) for line in block]
    generated = [line.startswith(_GIT_GENERATED_PREFIXES) for line in block]
    counted = sum(1 for m, g in zip(matches, generated, strict=True) if m is not None or g)
    if not (any(generated) and counted * 3 >= len(block) - counted):
        return ()
    return tuple(
        [
            Trailer(m[1], m[2].strip(_GIT_SPACE), number)
            for number, m in enumerate(matches, first + 1)
            if m is not None and not m[2].startswith(_URL)
        ]
    )


def parse_message(
    text: str,
    *,
    comment_char: str | None = "#",
    cleanup: bool = False,
    encoding_error_line: int | None = None,
    divider: bool = False,
    nul_line: int | None = None,
    syntax: TrailerSyntax = DEFAULT_SYNTAX,
    whole_file: bool = False,
) -> Message:
    """Parse a commit message as git's commit readers do.

    ``cleanup`` (commit-msg mode) first drops the scissors line with everything below it and all
    comment lines, as ``git commit`` does. ``comment_char`` is ``core.commentChar``; ``None``
    means no line is a comment. ``divider`` ends the message at a ``---`` line, as ``git
    interpret-trailers`` does for a patch e-mail (never for a commit). A NUL character ends the
    message (``nul_line`` records where :func:`decode_message` already cut one). ``syntax`` is
    git's ``trailer.*`` configuration. git's commit readers skip the blank lines before the
    title; ``whole_file`` reads the text as ``git interpret-trailers`` reads a file, where a
    leading blank line ends an empty title.
    """
    if "\0" in text:
        nul = text.index("\0")
        nul_line = text.count("\n", 0, nul) + 1
        text = text[:nul]
    # Trailing empty lines are always ignored (git's ignore_non_trailer), so one C-level rstrip
    # drops them; line numbers are unchanged because only the end is cut.
    core = text.rstrip("\n")
    skip = comment_char if cleanup else None
    fast = (
        _parse_plain(core, comment_char, skip, encoding_error_line, divider)
        if syntax.is_default()
        else None
    )
    if fast is None:
        fast = _parse_general(
            text,
            core,
            comment_char,
            cleanup,
            encoding_error_line,
            divider,
            syntax,
            not whole_file,
        )
    if nul_line is not None:
        fast = replace(fast, nul_line=nul_line)
    return fast


def _parse_general(
    text: str,
    core: str,
    comment_char: str | None,
    cleanup: bool,
    encoding_error_line: int | None,
    divider: bool = False,
    syntax: TrailerSyntax = DEFAULT_SYNTAX,
    skip_leading_blank: bool = True,
) -> Message:
    """Every step of git's algorithm, for any text (``core`` is ``text`` without trailing LFs)."""
    lines = core.split("\n") if core else []
    end = _divider_index(text, len(lines)) if divider else len(lines)
    if comment_char is not None:
        scissors = _scissors_index(text, comment_char)
        end = end if scissors is None else min(end, scissors)
        if cleanup and scissors is not None:
            del lines[scissors:]
    end = _ignored_tail(lines, end, comment_char, text.endswith("\n"))
    skip = comment_char if cleanup else None
    title = _text_line_pattern(skip).search(core) if skip_leading_blank else None
    title_offset = 0 if title is None else title.start()
    first = min(end, _line_index(core, title_offset))
    start = _trailer_block_start(core, lines, end, comment_char, syntax, first, title_offset)
    trailers = _collect(lines, start, end, comment_char, syntax)
    subject_line = _first_text_line(core, len(lines), skip)
    subject = lines[subject_line - 1].rstrip(_LINE_SPACE) if subject_line <= len(lines) else ""
    return Message(
        by_key=_index(trailers),
        subject=subject,
        subject_line=subject_line,
        lines=tuple(lines),
        trailers=trailers,
        comment_char=skip,
        encoding_error_line=encoding_error_line,
    )


def parse_trailers(
    text: str,
    *,
    comment_char: str | None = "#",
    divider: bool = True,
    syntax: TrailerSyntax = DEFAULT_SYNTAX,
) -> tuple[Trailer, ...]:
    """The trailers of ``text``, as ``git interpret-trailers --parse`` reports them.

    ``divider=False`` reads it as ``git interpret-trailers --no-divider`` does.
    """
    return parse_message(
        text, comment_char=comment_char, divider=divider, syntax=syntax, whole_file=True
    ).trailers
