"""One test per work-package rule, with exact findings."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

from wpgate._docs import Phase, WorkPackageRegistry, load_work_packages
from wpgate._model import Finding
from wpgate.docs_options import WorkPackageOptions
from wpgate.parsers.work_packages import WorkPackage, format_work_package
from wpgate.rules import work_packages as rules

D = "docs/work_packages"
LINES = {
    "id": 2,
    "title": 3,
    "phase": 4,
    "status": 5,
    "depends_on": 6,
    "gate": 7,
    "reason": 8,
    "superseded_by": 8,
}


def _wp(
    wp_id: str,
    *,
    status: str = "todo",
    depends_on: tuple[str, ...] = (),
    phase: int = 1,
    gate: tuple[str, ...] = (),
    reason: str | None = None,
    superseded_by: str | None = None,
    name: str | None = None,
) -> WorkPackage:
    return WorkPackage(
        wp_id,
        f"WP {wp_id}",
        phase,
        status,
        depends_on,
        gate,
        reason,
        superseded_by,
        f"{D}/{name or f'wp-{wp_id}.md'}",
        key_lines=LINES,
    )


def _registry(*packages: WorkPackage, findings: tuple[Finding, ...] = ()) -> WorkPackageRegistry:
    return WorkPackageRegistry(
        packages, findings, {1: Phase(1, "One", "docs/engineering/phase-01.md")}
    )


def test_clean_registry() -> None:
    registry = _registry(_wp("001"), _wp("002", depends_on=("001",)))
    assert [f for rule in rules.CHECKS for f in rule.check(registry, WorkPackageOptions())] == []


def test_wpg301_and_wpg302_pass_parse_findings_through(tmp_path: Path) -> None:
    folder = tmp_path / D
    folder.mkdir(parents=True)
    (folder / "wp-001.md").write_text("---\ntitle: [oops\n---\n", encoding="utf-8")
    (folder / "wp-002.md").write_text(
        format_work_package("002", "ok", 1).replace("status: todo", "status: nope"),
        encoding="utf-8",
    )
    (folder / "wp-003.md").write_bytes(b"---\nid: \xff\n---\n")
    (folder / "index.md").write_text("not a package", encoding="utf-8")
    registry = load_work_packages(tmp_path)
    assert [
        (f.path, f.line, f.rule_id)
        for f in rules.check_front_matter(registry, WorkPackageOptions())
    ] == [
        (f"{D}/wp-001.md", 3, "WPG301"),
        (f"{D}/wp-003.md", 2, "WPG301"),
    ]
    assert [(f.path, f.line) for f in rules.check_schema(registry, WorkPackageOptions())] == [
        (f"{D}/wp-002.md", 5)
    ]
    assert registry.packages == ()


def test_wpg303_id_matches_file_and_is_unique() -> None:
    registry = _registry(_wp("001"), _wp("002", name="wp-003.md"), _wp("001", name="wp-001b.md"))
    assert [
        (f.path, f.message.split(";")[0]) for f in rules.check_ids(registry, WorkPackageOptions())
    ] == [
        (f"{D}/wp-003.md", "the id '002' does not match the file name wp-003.md"),
        (f"{D}/wp-001b.md", "the id '001' does not match the file name wp-001b.md"),
        (f"{D}/wp-001b.md", f"the id '001' is already used by {D}/wp-001.md"),
    ]


def test_wpg303_a_misspelled_page_name_is_read_and_reported_not_skipped(tmp_path: Path) -> None:
    """`WP-006.md`, `wp_007.md` and `wp-8.md` were meant as pages: each is read (its other
    findings count too) and its name reported; an index page beside them is still prose."""
    folder = tmp_path / D
    folder.mkdir(parents=True)
    for name, wp_id in (("WP-006.md", "006"), ("wp_007.md", "007"), ("wp-8.md", "008")):
        (folder / name).write_text(format_work_package(wp_id, "t", 1), encoding="utf-8")
    (folder / "index.md").write_text("not a package", encoding="utf-8")
    (folder / "wpgate-notes.md").write_text("not a package either", encoding="utf-8")
    registry = load_work_packages(tmp_path)
    assert sorted(p.id for p in registry.packages) == ["006", "007", "008"]
    assert sorted(
        (f.path, f.message.split(";")[0]) for f in rules.check_ids(registry, WorkPackageOptions())
    ) == [
        (f"{D}/WP-006.md", "the id '006' does not match the file name WP-006.md"),
        (f"{D}/wp-8.md", "the id '008' does not match the file name wp-8.md"),
        (f"{D}/wp_007.md", "the id '007' does not match the file name wp_007.md"),
    ]


def test_wpg304_dependencies_exist() -> None:
    registry = _registry(_wp("001", depends_on=("001", "009")))
    assert [
        (f.line, f.message.split(";")[0])
        for f in rules.check_dependencies_exist(registry, WorkPackageOptions())
    ] == [
        (6, "WP-001 depends on itself"),
        (6, "depends_on names WP-009, which has no page"),
    ]


def test_wpg304_a_dependency_whose_page_does_not_parse_is_not_called_missing() -> None:
    """Found by an outside audit: WP-002's page with a schema error was reported as absent."""
    broken = Finding(f"{D}/wp-002.md", 4, "WPG301", "status 'doing' is not a status")
    registry = _registry(_wp("001", depends_on=("002",)), findings=(broken,))
    (finding,) = rules.check_dependencies_exist(registry, WorkPackageOptions())
    assert finding.message == (
        "depends_on names WP-002, whose page wp-002.md could not be read as a work package "
        "(its own findings say why); fix that page"
    )


def test_wpg305_cycles_reported_once() -> None:
    registry = _registry(
        _wp("001", depends_on=("003",)),
        _wp("002", depends_on=("001",)),
        _wp("003", depends_on=("002",)),
        _wp("004", depends_on=("005",)),
        _wp("005", depends_on=("004",)),
        _wp("006", depends_on=("001",)),
    )
    assert [
        (f.path, f.message.split(";")[0])
        for f in rules.check_acyclic(registry, WorkPackageOptions())
    ] == [
        (f"{D}/wp-001.md", "dependency cycle WP-001 -> WP-003 -> WP-002 -> WP-001"),
        (f"{D}/wp-004.md", "dependency cycle WP-004 -> WP-005 -> WP-004"),
    ]


def test_wpg306_done_gates_resolve() -> None:
    registry = _registry(
        _wp("001", status="done"),
        _wp("002", status="done", gate=("tests/a.py::test_ok", "tests/a.py::test_gone")),
        _wp("003", status="todo", gate=("tests/a.py::test_gone",)),
    )

    def resolve(node_id: str) -> str | None:
        return None if node_id.endswith("ok") else "no test function test_gone in tests/a.py"

    assert [
        (f.path, f.message)
        for f in rules.check_gates(replace(registry, resolve_gate=resolve), WorkPackageOptions())
    ] == [
        (
            f"{D}/wp-001.md",
            "WP-001 is done but names no gate; list the tests that prove it "
            '(`gate: ["tests/x/test_y.py::test_z"]`, any language `wpgate` reads)',
        ),
        (
            f"{D}/wp-002.md",
            "the gate 'tests/a.py::test_gone' does not resolve: no test function "
            "test_gone in tests/a.py",
        ),
    ]


def test_wpg307_phase_exists() -> None:
    (finding,) = rules.check_phases(_registry(_wp("001", phase=7)), WorkPackageOptions())
    assert (finding.line, finding.message) == (
        4,
        "phase 7 has no page; add docs/engineering/phase-07.md (a `-<slug>` may follow the "
        "number; `wpgate new-wp` writes the page of a registry's first phase) or fix the phase",
    )
    elsewhere = dataclasses.replace(_registry(_wp("001", phase=7)), engineering="notes/eng")
    (finding,) = rules.check_phases(elsewhere, WorkPackageOptions())
    assert "add notes/eng/phase-07.md" in finding.message  # the configured folder


def test_wpg308_reason_for_blocked_and_deferred() -> None:
    registry = _registry(_wp("001", status="blocked"), _wp("002", status="deferred", reason="x"))
    assert [(f.path, f.line) for f in rules.check_reasons(registry, WorkPackageOptions())] == [
        (f"{D}/wp-001.md", 5)
    ]


def test_wpg309_superseded_by() -> None:
    registry = _registry(
        _wp("001", status="superseded"),
        _wp("002", status="superseded", superseded_by="009"),
        _wp("003", status="superseded", superseded_by="004"),
        _wp("004", superseded_by="003"),
    )
    assert [
        (f.path, f.message.split(";")[0])
        for f in rules.check_superseded(registry, WorkPackageOptions())
    ] == [
        (f"{D}/wp-001.md", "WP-001 is superseded without `superseded_by`"),
        (
            f"{D}/wp-002.md",
            "superseded_by names WP-009, which is not another package of the registry",
        ),
        (f"{D}/wp-004.md", "`superseded_by` is set but the status is todo"),
    ]
