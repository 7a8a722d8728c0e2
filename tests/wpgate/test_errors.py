"""The one error module: every error wpgate raises to a caller is declared in wpgate.errors."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

from wpgate import api, errors, evidence, options
from wpgate._config import ConfigError

SRC = Path(__file__).resolve().parents[2] / "src" / "wpgate"
BUILTIN_ERRORS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}


def _exception_classes(path: Path) -> list[str]:
    """The classes of ``path`` whose bases name an exception (a built-in or ``...Error``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
        if any(b in BUILTIN_ERRORS or b.endswith(("Error", "Exception")) for b in bases):
            found.append(node.name)
    return found


def test_the_probe_finds_exception_classes(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "class A(ValueError): pass\nclass B(x.MyError): pass\nclass C: pass\n", encoding="utf-8"
    )
    assert _exception_classes(module) == ["A", "B"]


def test_no_public_exception_class_is_declared_outside_the_error_module() -> None:
    outside = {
        f"{path.relative_to(SRC)}:{name}"
        for path in SRC.rglob("*.py")
        if path.name != "errors.py"
        for name in _exception_classes(path)
        if not name.startswith("_")
    }
    assert outside == set(), "declare these in src/wpgate/errors.py"
    declared = set(_exception_classes(SRC / "errors.py"))
    assert declared == set(errors.__all__)


@pytest.mark.parametrize("name", sorted(set(errors.__all__) - {"WpgateError"}))
def test_every_error_is_a_wpgate_error(name: str) -> None:
    assert issubclass(getattr(errors, name), errors.WpgateError)


def test_errors_keep_their_built_in_bases() -> None:
    # `except ValueError` around write_evidence or a site block still catches them.
    assert issubclass(errors.EvidenceError, ValueError)
    assert issubclass(errors.EvidenceBlockError, ValueError)
    assert issubclass(errors.ReferenceBuildError, RuntimeError)


def test_the_public_import_paths_still_work() -> None:
    assert options.ConfigError is errors.ConfigError is ConfigError
    assert evidence.EvidenceError is errors.EvidenceError
    assert api.GitError is errors.GitError


def test_a_config_error_names_its_key() -> None:
    error = errors.ConfigError("tool.wpgate.trailers.types", "must be a list of strings")
    assert (error.key, str(error)) == (
        "tool.wpgate.trailers.types",
        "pyproject.toml: tool.wpgate.trailers.types: must be a list of strings",
    )
