"""Escaping of untrusted text (front matter, evidence labels) for Markdown and HTML output."""

from __future__ import annotations

import html
import re

from wpgate.parsers.markdown import code_spans

# Left as they are: they can start neither Markdown syntax nor HTML markup.
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ,:;-.?/=%@'")


def escape_markdown(text: str) -> str:
    """``text`` as inline Markdown that renders literally.

    Every ASCII character that is not a letter, a digit or plain punctuation becomes a numeric
    character reference: Python-Markdown passes references through untouched, so neither HTML
    (``<script>``) nor Markdown syntax (``*``, ``[``, ``|`` in a table cell) survives, and the
    browser still shows the original characters. Newlines fold into spaces; a leading hyphen,
    or the full stop after leading digits, that would open a list or a rule is escaped too.
    """
    return _escape_block_start(_escape_chars(" ".join(text.split())))


# Every other ASCII character as its numeric character reference; str.translate applies the
# table in C (a registry's pages escape hundreds of thousands of characters).
_REFERENCES = {code: f"&#{code};" for code in range(128) if chr(code) not in _SAFE}


# A list item or a rule where a line begins: "- x", "---", "- - -" and "12. x" (hyphen and full
# stop are safe elsewhere; the text is one line, so only its start can open a block).
_BLOCK_START_RE = re.compile(r"-|([0-9]+)\.")


def _escape_chars(text: str) -> str:
    """Each character of ``text`` that could start markup as a numeric character reference."""
    return text.translate(_REFERENCES)


def _escape_block_start(line: str) -> str:
    """``line`` (escaped Markdown) with a leading list or rule marker's hyphen or full stop as a
    numeric character reference, so that it stays inline text."""
    start = _BLOCK_START_RE.match(line)
    if start is None:
        return line
    digits = start.group(1) or ""
    return f"{digits}&#{ord(line[len(digits)])};{line[start.end() :]}"


def escape_html(text: str) -> str:
    """``text`` escaped for an HTML text node or a quoted attribute, whitespace folded."""
    return html.escape(" ".join(text.split()), quote=True)


def escape_markdown_keep_code(text: str) -> str:
    """Like :func:`escape_markdown`, but inline code spans stay code (Markdown escapes them)."""
    flat = " ".join(text.split())
    out, last = [], 0
    for span in code_spans(flat):  # linear time, CommonMark's pairing of backtick runs
        out.extend([_escape_chars(flat[last : span.start]), flat[span.start : span.end]])
        last = span.end
    out.append(_escape_chars(flat[last:]))
    return _escape_block_start("".join(out))
