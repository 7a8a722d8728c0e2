"""Escaping front-matter and evidence text for Markdown and HTML."""

from __future__ import annotations

import html

import markdown
from hypothesis import given
from hypothesis import strategies as st
from linear_time import assert_linear, needs_clocks

from wpgate.site._escape import (
    _escape_chars,
    escape_html,
    escape_markdown,
    escape_markdown_keep_code,
)


def _render_inline(text: str) -> str:
    """``text`` through Python-Markdown (tables on, as on the site), unwrapped from ``<p>``."""
    out: str = markdown.markdown(text, extensions=["tables", "attr_list", "admonition"])
    assert out.startswith("<p>")
    assert out.endswith("</p>")
    return out[3:-4]


def test_script_tag_and_markdown_specials_render_literally() -> None:
    title = '<script>alert("x")</script> *bold* _em_ [link](http://x) `code` | a & b #1'
    rendered = _render_inline(escape_markdown(title))
    assert "<script" not in rendered
    assert "<em>" not in rendered
    assert "<strong>" not in rendered
    assert "<a " not in rendered
    assert "<code>" not in rendered
    assert html.unescape(rendered) == title


@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1))
def test_any_text_renders_as_itself(text: str) -> None:
    folded = " ".join(text.split())
    if not folded:
        return
    rendered = _render_inline(escape_markdown(text))
    assert "<" not in rendered.replace("&lt;", "")
    assert html.unescape(rendered) == folded


def test_escape_html_quotes_and_folds_whitespace() -> None:
    assert escape_html("a <b>\n \"c\" & 'd'") == "a &lt;b&gt; &quot;c&quot; &amp; &#x27;d&#x27;"


def test_keep_code_escapes_around_code_spans() -> None:
    text = "Use `Name <email>` not <b>Name</b> * ``a`b``"
    rendered = _render_inline(escape_markdown_keep_code(text))
    assert rendered.startswith("Use <code>Name &lt;email&gt;</code> not &#60;b&#62;")
    assert rendered.endswith("<code>a`b</code>")
    assert "<b>" not in rendered


def test_every_ascii_character_that_could_start_markup_becomes_a_reference() -> None:
    safe = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ,:;-.?/=%@'")
    for code in range(0x250):
        char = chr(code)
        expected = char if char in safe or code > 127 else f"&#{code};"
        assert _escape_chars(f"a{char}b") == f"a{expected}b", code


def test_a_leading_list_or_rule_marker_stays_text() -> None:
    """Hyphen and full stop are left as they are elsewhere, but at the start of the text they
    would open a list ("- 0", hypothesis found it) or a rule ("---")."""
    for text in ("- 0", "---", "- - -", "1. x", "12345. y", "- `code` here"):
        for escape in (escape_markdown, escape_markdown_keep_code):
            rendered = _render_inline(escape(text))
            assert "<li>" not in rendered
            assert html.unescape(rendered.replace("<code>", "`").replace("</code>", "`")) == text
    assert escape_markdown("a - b 1. c") == "a - b 1. c"


def test_code_spans_are_kept_as_commonmark_pairs_them() -> None:
    """A run of backticks is closed only by a run of the same length (``x`` here is code); the
    text around and between spans is escaped."""
    assert escape_markdown_keep_code("a* ``x`y`` b_") == "a&#42; ``x`y`` b&#95;"
    assert escape_markdown_keep_code("`open ``x``") == "&#96;open ``x``"


@needs_clocks
def test_keeping_code_takes_linear_time_on_a_line_of_backticks() -> None:
    """A docstring of backticks (the site escapes the project's docstrings) built the site in
    cubic time with the old ``(`+)(.+?)\\1`` expression: 2,000 took seconds."""
    assert_linear(escape_markdown_keep_code, lambda size: "`" * size, 20_000)
