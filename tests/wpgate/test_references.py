"""Tests for the static pytest node-id resolver."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from wpgate.references import GateResolver, References, resolve_node_id, split_node_ids

TEST_FILE = """
import sys

class TestThing:
    def test_method(self):
        pass

    class TestInner:
        def test_deep(self):
            pass

def test_function():
    pass

async def test_async():
    pass

if sys.version_info >= (3, 11):
    def test_guarded():
        pass
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(TEST_FILE, encoding="utf-8")
    (tmp_path / "tests" / "test_broken.py").write_text("def (:\n", encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    "node_id",
    [
        "tests/test_x.py",
        "tests/test_x.py::test_function",
        "tests/test_x.py::test_function[a-b, c]",
        "tests/test_x.py::test_async",
        "tests/test_x.py::test_guarded",
        "tests/test_x.py::TestThing",
        "tests/test_x.py::TestThing::test_method",
        "tests/test_x.py::TestThing::TestInner::test_deep",
    ],
)
def test_resolves(root: Path, node_id: str) -> None:
    assert resolve_node_id(root, node_id) is None


@pytest.mark.parametrize(
    ("node_id", "why"),
    [
        (
            "tests/none.py::test_a",
            "`tests/none.py` does not exist; fix the path or add the test file",
        ),
        ("tests", "`tests` must name a Python test file (`tests/test_x.py::test_y`)"),
        ("/etc/x.py", "`/etc/x.py` must start with a repository-relative file path"),
        ("../x.py", "`../x.py` must start with a repository-relative file path"),
        (
            "tests/test_x.py::test_missing",
            "`test_missing` is not defined in `tests/test_x.py`; fix the node id or add the test",
        ),
        (
            "tests/test_x.py::test_function::test_method",
            "`test_method` is not defined in `tests/test_x.py::test_function`; fix the node id "
            "or add the test",
        ),
        ("tests/test_x.py::", "`tests/test_x.py::` has an empty part after `::`; remove it"),
        (
            "tests/test_broken.py::t",
            "`tests/test_broken.py` cannot be parsed (SyntaxError); fix the file",
        ),
    ],
)
def test_does_not_resolve(root: Path, node_id: str, why: str) -> None:
    assert resolve_node_id(root, node_id) == why


def test_link_out_of_the_repository_is_refused(
    root: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("outside") / "test_o.py"
    outside.write_text("def test_o():\n    pass\n", encoding="utf-8")
    (root / "tests" / "test_link.py").symlink_to(outside)
    assert resolve_node_id(root, "tests/test_link.py::test_o") == (
        "tests/test_link.py is a symbolic link that leads out of the repository (to "
        f"{outside.resolve()}); replace it with the file itself"
    )


def test_each_file_is_parsed_once(root: Path) -> None:
    resolver = GateResolver(root)
    assert resolver.resolve("tests/test_x.py::test_function") is None
    (root / "tests" / "test_x.py").unlink()
    assert resolver.resolve("tests/test_x.py::TestThing") is None  # cached tree


def test_split_node_ids() -> None:
    assert split_node_ids("a.py::t[x, y]; b.py::c,d.py  e.py::f[1][2]") == [
        "a.py::t[x, y]",
        "b.py::c",
        "d.py",
        "e.py::f[1][2]",
    ]
    assert split_node_ids(" ; ") == []


def test_references_are_cache_keys_by_identity() -> None:
    a = References(wp_ids=frozenset({"001"}), provenance_ids=frozenset({"R1"}))
    b = dataclasses.replace(a)
    assert a != b  # equal sets, another load: a rule's cached verdict for `a` is not reused
    assert {a: 1}.get(b) is None
    assert {a: 1}[a] == 1
    assert b.wp_ids == a.wp_ids
