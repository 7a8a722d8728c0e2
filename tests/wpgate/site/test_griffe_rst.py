"""The Griffe extension: reST roles and literal-block marks as Markdown."""

from __future__ import annotations

from pathlib import Path

import griffe

from wpgate.site.griffe_rst import RstLeftovers, rst_to_markdown


def test_roles_become_code_spans() -> None:
    text = (
        "See :func:`musgd.orthogonalize`, :class:`~torch.optim.SGD`, :py:meth:`MuSGD.step` "
        "and :attr:`the buffer <musgd.MuSGD.state>`."
    )
    assert rst_to_markdown(text) == (
        "See `musgd.orthogonalize`, `torch.optim.SGD`, `MuSGD.step` and `the buffer`."
    )


def test_literal_block_marks_go_and_the_block_stays() -> None:
    text = "For each parameter ``W``::\n\n    m <- momentum*m + g\n\n::\n\n    W <- W - lr*U\n"
    assert rst_to_markdown(text) == (
        "For each parameter ``W``:\n\n    m <- momentum*m + g\n\n\n    W <- W - lr*U\n"
    )


def test_plain_markdown_is_left_alone() -> None:
    text = "Args:\n    x: a value, e.g. `a::b` or ``x[::2]``.\n\n| a | b |\n"
    assert rst_to_markdown(text) == text


def test_the_extension_rewrites_docstrings_as_griffe_loads_them(tmp_path: Path) -> None:
    root = tmp_path
    (root / "rstpkg").mkdir()
    (root / "rstpkg" / "__init__.py").write_text(
        '"""Uses :func:`rstpkg.f`::\n\n    f()\n\nThen more.\n"""\n\n'
        'def f() -> None:\n    """Like :class:`~int`."""\n',
        encoding="utf-8",
    )
    extensions = griffe.load_extensions(RstLeftovers)
    package = griffe.load("rstpkg", search_paths=[str(root)], extensions=extensions)
    assert package.docstring is not None
    assert package.docstring.value == "Uses `rstpkg.f`:\n\n    f()\n\nThen more."
    assert package["f"].docstring.value == "Like `int`."
