"""Tests for the static pytest node-id resolver."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wpgate._record import replace
from wpgate.options import GateOptions
from wpgate.references import (
    GateResolver,
    References,
    resolve_node_id,
    split_node_ids,
    workflow_jobs,
)

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
    (tmp_path / "tests" / "helpers.py").write_text("def make():\n    pass\n", encoding="utf-8")
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
        ("tests", "`tests` is a directory; name a test file in it (`tests/test_x.py::test_y`)"),
        (
            "tests/data",
            "`tests/data` is not a test file wpgate can read (Python `*.py`, Go `*_test.go`, "
            "Rust `*.rs`, JavaScript/TypeScript, bats `*.bats`); name one, or describe its tests "
            "in [tool.wpgate.gates] patterns",
        ),
        ("tests/helpers.py", "`tests/helpers.py` defines no test; name a file that has one"),
        (
            "/etc/x.py",
            "`/etc/x.py` must start with a repository-relative file path; name the file from "
            "the repository root, with no leading `/` and no `..` (`tests/test_x.py::test_y`)",
        ),
        (
            "tests/../x.py",
            "`tests/../x.py` must start with a repository-relative file path; name the file "
            "from the repository root, with no leading `/` and no `..` (`tests/test_x.py::test_y`)",
        ),
        (
            "tests/test_x.py::test_function[a-b",
            "`tests/test_x.py::test_function[a-b` opens a parameter part with `[` and never "
            "closes it; close it (`path::test_x[param]`)",
        ),
        (
            'tests/test_x.py::"test_function',
            '`tests/test_x.py::"test_function` opens a quoted name with `"` and never closes '
            'it; close it (`path::"a name with spaces"`)',
        ),
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
        (  # found by an outside audit: any function of any file passed as a gate
            "tests/helpers.py::make",
            "`make` is defined in `tests/helpers.py` but is not a test (pytest collects `test*` "
            "functions and `Test*` classes); name a test",
        ),
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


def test_a_file_path_with_spaces_is_quoted_alone_or_with_the_whole_gate(tmp_path: Path) -> None:
    """A test file whose path holds a space: its quoted path, or the whole gate quoted, names
    it (both split from the `Gate:` value as one gate); unquoted, its pieces are other gates."""
    (tmp_path / "tests" / "with space").mkdir(parents=True)
    (tmp_path / "tests" / "with space" / "test_s.py").write_text("def test_sp():\n    pass\n")
    value = '"tests/with space/test_s.py"::test_sp "tests/with space/test_s.py::test_sp"'
    gates = split_node_ids(value)
    assert len(gates) == 2
    resolver = GateResolver(tmp_path)
    assert [resolver.resolve(gate) for gate in gates] == [None, None]
    assert resolver.resolve('"tests/with space/test_s.py::test_nope"') == (
        "`test_nope` is not defined in `tests/with space/test_s.py`; fix the node id or add "
        "the test"
    )
    assert split_node_ids("tests/with space/test_s.py::test_sp") == [
        "tests/with",
        "space/test_s.py::test_sp",
    ]


def test_split_node_ids() -> None:
    assert split_node_ids("a.py::t[x, y]; b.py::c,d.py  e.py::f[1][2]") == [
        "a.py::t[x, y]",
        "b.py::c",
        "d.py",
        "e.py::f[1][2]",
    ]
    assert split_node_ids(" ; ") == []
    assert split_node_ids('t/a.test.js::"adds two, fast"; ci:lint') == [
        't/a.test.js::"adds two, fast"',
        "ci:lint",
    ]
    # An unclosed quote keeps the rest of the value, so the gate is reported whole.
    assert split_node_ids('ci:lint t/a.test.js::"adds two') == ["ci:lint", 't/a.test.js::"adds two']
    assert split_node_ids("ci:lint t/x.py::t[a, b") == ["ci:lint", "t/x.py::t[a, b"]


def test_references_are_cache_keys_by_identity() -> None:
    a = References(wp_ids=frozenset({"001"}), provenance_ids=frozenset({"R1"}))
    b = replace(a)
    assert a != b  # equal sets, another load: a rule's cached verdict for `a` is not reused
    assert {a: 1}.get(b) is None
    assert {a: 1}[a] == 1
    assert b.wp_ids == a.wp_ids


@pytest.fixture
def polyglot(tmp_path: Path) -> Path:
    files = {
        "calc/add_test.go": "package calc\nfunc TestAdd(t *testing.T) {}\n",
        "calc/add.go": "package calc\nfunc TestNotInATestFile(t *testing.T) {}\n",
        "src/lib.rs": (
            "fn helper() {}\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn it_works() {}\n}\n"
        ),
        "web/sum.test.ts": (
            'describe("sum", () => { it("adds two numbers", () => {}); });\n'
            'test("keeps [brackets", () => {});\n'
            'test("reads a::b", () => {});\n'
        ),
        "test/cli.bats": '@test "prints the version" {\n  run x\n}\n',
        "t/basic.t": "ok 1 - parses input\n",
        "t/empty_test.go": "package t\n",
        ".github/workflows/ci.yml": (
            "name: ci\non: push\njobs:\n  lint:\n    runs-on: x\n    steps:\n"
            "      - run: make\n  'unit-tests':\n    runs-on: x\n"
        ),
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    "gate",
    [
        "calc/add_test.go::TestAdd",
        "calc/add_test.go::TestAdd/negative numbers",
        "calc/add_test.go",
        "src/lib.rs::tests::it_works",
        "src/lib.rs::it_works",
        'web/sum.test.ts::"sum adds two numbers"',
        'web/sum.test.ts::"keeps [brackets"',
        "web/sum.test.ts::sum::adds two numbers",
        # A quoted name is one part, `::` and all.
        'web/sum.test.ts::"sum::adds two numbers"',
        'web/sum.test.ts::"reads a::b"',
        'test/cli.bats::"prints the version"',
        "test/cli.bats",
        "ci:lint",
        "ci:unit-tests",
    ],
)
def test_resolves_in_every_language(polyglot: Path, gate: str) -> None:
    assert resolve_node_id(polyglot, gate) is None


@pytest.mark.parametrize(
    ("gate", "why"),
    [
        (
            "calc/add_test.go::TestSub",
            "`TestSub` is not a test in `calc/add_test.go`; fix the node id or add the test",
        ),
        ("calc/add.go::TestNotInATestFile", "`calc/add.go` is not a test file wpgate can read"),
        # A function that is no test (a helper) is there, but it is not a test.
        ("src/lib.rs::helper", "`helper` is not a test in `src/lib.rs`; fix the node id or"),
        ("t/empty_test.go", "`t/empty_test.go` defines no test; name a file that has one"),
        (
            "src/lib.rs::tests::missing",
            "`missing` is not a test in `src/lib.rs::tests`; fix the node id or add the test",
        ),
        ("t/basic.t::parses input", "`t/basic.t` is not a test file wpgate can read"),
        ("ci:deploy", "`deploy` is not a job of the CI workflows"),
        ("ci:", "`ci:` names no job; write `ci:<job id>`"),
    ],
)
def test_does_not_resolve_in_other_languages(polyglot: Path, gate: str, why: str) -> None:
    answer = resolve_node_id(polyglot, gate)
    assert answer is not None
    assert answer.startswith(why), answer


def test_configured_patterns_jobs_and_languages(polyglot: Path) -> None:
    options = GateOptions(
        patterns=(("t/*.t", r"^ok \d+ - (?P<name>.+)$"),),
        ci_jobs=("buildkite-e2e",),
        languages=("python", "go"),
    )
    resolver = GateResolver(polyglot, options=options)
    assert resolver.resolve("t/basic.t::parses input") is None
    assert resolver.resolve("ci:buildkite-e2e") is None
    assert resolver.resolve("ci:lint") is None
    assert resolver.resolve("calc/add_test.go::TestAdd") is None
    # Rust is not among the languages: its files are no longer read.
    assert resolver.resolve("src/lib.rs::it_works") == (
        "`src/lib.rs` is a rust test file, but rust is not among the [tool.wpgate.gates] "
        "languages; add it there"
    )


def test_a_pattern_comes_before_the_built_in_reader(polyglot: Path) -> None:
    options = GateOptions(patterns=(("*_test.go", r"^// case: (?P<name>\w+)"),))
    (polyglot / "calc" / "case_test.go").write_text("// case: alpha\n", encoding="utf-8")
    resolver = GateResolver(polyglot, options=options)
    assert resolver.resolve("calc/case_test.go::alpha") is None
    assert resolver.resolve("calc/add_test.go::TestAdd") is not None


def test_workflow_jobs_reads_the_keys_under_jobs() -> None:
    text = (
        "on:\n  push:\n    branches: [main]\njobs:\n  # a comment\n  build:\n    steps:\n"
        '      - name: x\n        with:\n          lint: true\n  "test-3.11":\n    needs: build\n'
        "env:\n  other: 1\n"
    )
    assert workflow_jobs(text) == {"build", "test-3.11"}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_job_not_found_names_the_workflows_that_could_not_be_read(polyglot: Path) -> None:
    workflows = polyglot / ".github" / "workflows"
    os.mkfifo(workflows / "pipe.yml")
    (workflows / "bad.yml").write_bytes(b"jobs:\n  e2e:\n    name: \xff\n")
    resolver = GateResolver(polyglot)
    assert resolver.resolve("ci:lint") is None  # the readable workflow still counts
    why = resolver.resolve("ci:e2e")
    assert why is not None
    assert why.startswith("`e2e` is not a job of the CI workflows"), why
    assert ".github/workflows/pipe.yml is a FIFO (named pipe), not a regular file" in why
    assert "`.github/workflows/bad.yml` cannot be read (" in why
    assert why.endswith("; fix the job id or add the job")
