"""Work-package rules (WPG3xx, governance spec §3): pure checks over the parsed registry."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import PurePosixPath
from typing import Any, Protocol

from wpgate._model import Finding, Rule, register
from wpgate.docs_options import WorkPackageOptions
from wpgate.parsers.work_packages import WorkPackage, id_from_filename, sort_key
from wpgate.rules import (
    WP_DEPENDENCIES_ACYCLIC,
    WP_DEPENDENCIES_EXIST,
    WP_DONE_GATES_RESOLVE,
    WP_FRONT_MATTER,
    WP_ID_MATCHES_FILE,
    WP_PHASE_EXISTS,
    WP_SCHEMA,
    WP_STATUS_REASON,
    WP_SUPERSEDED_BY,
    declared,
)


class Registry(Protocol):
    """What the rules read from a loaded registry (``wpgate._docs.WorkPackageRegistry``)."""

    @property
    def packages(self) -> tuple[WorkPackage, ...]: ...
    @property
    def findings(self) -> tuple[Finding, ...]: ...
    @property
    def phases(self) -> Mapping[int, Any]: ...
    @property
    def engineering(self) -> str: ...
    @property
    def resolve_gate(self) -> GateResolver | None: ...


#: A gate resolver: the reason a gate (a test, test file or `ci:` job) does not resolve, or None.
GateResolver = Callable[[str], "str | None"]


def check_front_matter(registry: Registry, options: WorkPackageOptions) -> Iterator[Finding]:
    """Every page opens with valid YAML front matter holding a mapping."""
    yield from (f for f in registry.findings if f.rule_id == WP_FRONT_MATTER)


def check_schema(registry: Registry, options: WorkPackageOptions) -> Iterator[Finding]:
    """The front matter has the required keys with the right types and vocabulary."""
    yield from (f for f in registry.findings if f.rule_id == WP_SCHEMA)


def check_ids(registry: Registry, options: WorkPackageOptions) -> Iterator[Finding]:
    """The page is ``wp-<id>.md`` for its own id, and no id is used twice."""
    yield from (f for f in registry.findings if f.rule_id == WP_ID_MATCHES_FILE)
    seen: dict[str, str] = {}
    for package in registry.packages:
        name = PurePosixPath(package.path).name
        from_name = id_from_filename(name)
        if from_name != package.id:
            yield Finding(
                package.path,
                package.line_of("id"),
                WP_ID_MATCHES_FILE,
                f"the id {package.id!r} does not match the file name {name}; rename the file "
                f"to wp-{package.id}.md or fix the id",
            )
        if package.id in seen:
            yield Finding(
                package.path,
                package.line_of("id"),
                WP_ID_MATCHES_FILE,
                f"the id {package.id!r} is already used by {seen[package.id]}; give each "
                "package its own id",
            )
        else:
            seen[package.id] = package.path


def check_dependencies_exist(registry: Registry, options: WorkPackageOptions) -> Iterator[Finding]:
    """Every ``depends_on`` id names another package of the registry."""
    ids = {p.id for p in registry.packages}
    # A page that is there but could not be read as a package has findings of its own.
    unread = {PurePosixPath(f.path).name for f in registry.findings}
    for package in registry.packages:
        for dependency in package.depends_on:
            if dependency == package.id:
                yield Finding(
                    package.path,
                    package.line_of("depends_on"),
                    WP_DEPENDENCIES_EXIST,
                    f"WP-{package.id} depends on itself; remove {dependency!r} from depends_on",
                )
            elif dependency not in ids and f"wp-{dependency}.md" in unread:
                yield Finding(
                    package.path,
                    package.line_of("depends_on"),
                    WP_DEPENDENCIES_EXIST,
                    f"depends_on names WP-{dependency}, whose page wp-{dependency}.md could not "
                    "be read as a work package (its own findings say why); fix that page",
                )
            elif dependency not in ids:
                yield Finding(
                    package.path,
                    package.line_of("depends_on"),
                    WP_DEPENDENCIES_EXIST,
                    f"depends_on names WP-{dependency}, which has no page; create "
                    f"wp-{dependency}.md (`wpgate new-wp`) or fix the id",
                )


def check_acyclic(registry: Registry, options: WorkPackageOptions) -> Iterator[Finding]:
    """The dependencies form no cycle (each cycle reported once, at its lowest id)."""
    packages = {p.id: p for p in registry.packages}
    edges = {
        wp_id: sorted({d for d in p.depends_on if d in packages and d != wp_id}, key=sort_key)
        for wp_id, p in packages.items()
    }
    state: dict[str, int] = {}  # 1 on the stack, 2 finished
    cycles: set[tuple[str, ...]] = set()
    for start in sorted(packages, key=sort_key):
        if state.get(start):
            continue
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(edges[start]))]
        path = [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                path.pop()
                continue
            if state.get(child) == 1:
                loop = path[path.index(child) :]
                lowest = min(range(len(loop)), key=lambda i: sort_key(loop[i]))
                cycles.add(tuple(loop[lowest:] + loop[:lowest]))
            elif not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append((child, iter(edges[child])))
    for cycle in sorted(cycles, key=lambda c: [sort_key(i) for i in c]):
        package = packages[cycle[0]]
        chain = " -> ".join(f"WP-{i}" for i in (*cycle, cycle[0]))
        yield Finding(
            package.path,
            package.line_of("depends_on"),
            WP_DEPENDENCIES_ACYCLIC,
            f"dependency cycle {chain}; a package cannot (indirectly) depend on itself - remove "
            "one of these dependencies",
        )


def check_gates(registry: Registry, options: WorkPackageOptions) -> Iterator[Finding]:
    """A ``done`` package has at least one gate, and every gate resolves statically.

    Gates are resolved by ``registry.resolve_gate``; a registry without one is not checked.
    """
    resolve = registry.resolve_gate
    if resolve is None:
        return
    for package in registry.packages:
        if package.status != "done":
            continue
        if not package.gate:
            yield Finding(
                package.path,
                package.line_of("gate"),
                WP_DONE_GATES_RESOLVE,
                f"WP-{package.id} is done but names no gate; list the tests that prove it "
                '(`gate: ["tests/x/test_y.py::test_z"]`, any language `wpgate` reads)',
            )
        for node_id in package.gate:
            problem = resolve(node_id)
            if problem is not None:
                yield Finding(
                    package.path,
                    package.line_of("gate"),
                    WP_DONE_GATES_RESOLVE,
                    f"the gate {node_id!r} does not resolve: {problem}",
                )


def check_phases(registry: Registry, options: WorkPackageOptions) -> Iterator[Finding]:
    """Each package's phase has a page ``docs/engineering/phase-NN*.md``."""
    for package in registry.packages:
        if package.phase not in registry.phases:
            yield Finding(
                package.path,
                package.line_of("phase"),
                WP_PHASE_EXISTS,
                f"phase {package.phase} has no page; add {registry.engineering}/"
                f"phase-{package.phase:02d}.md (a `-<slug>` may follow the number; `wpgate "
                "new-wp` writes the page of a registry's first phase) or fix the phase",
            )


def check_reasons(registry: Registry, options: WorkPackageOptions) -> Iterator[Finding]:
    """A blocked or deferred package says why in ``reason``."""
    for package in registry.packages:
        if package.status in ("blocked", "deferred") and not package.reason:
            yield Finding(
                package.path,
                package.line_of("status"),
                WP_STATUS_REASON,
                f'WP-{package.id} is {package.status} without a `reason`; add `reason: "..."` '
                "saying what it waits for",
            )


def check_superseded(registry: Registry, options: WorkPackageOptions) -> Iterator[Finding]:
    """``superseded`` goes with ``superseded_by`` naming another existing package."""
    ids = {p.id for p in registry.packages}
    for package in registry.packages:
        target = package.superseded_by
        if package.status == "superseded":
            if target is None:
                yield Finding(
                    package.path,
                    package.line_of("status"),
                    WP_SUPERSEDED_BY,
                    f"WP-{package.id} is superseded without `superseded_by`; name the package "
                    "that replaces it",
                )
            elif target == package.id or target not in ids:
                yield Finding(
                    package.path,
                    package.line_of("superseded_by"),
                    WP_SUPERSEDED_BY,
                    f"superseded_by names WP-{target}, which is not another package of the "
                    "registry; fix the id",
                )
        elif target is not None:
            yield Finding(
                package.path,
                package.line_of("superseded_by"),
                WP_SUPERSEDED_BY,
                f"`superseded_by` is set but the status is {package.status}; set `status: "
                "superseded` or remove `superseded_by`",
            )


#: The work-package rules: each check reads the loaded registry (and, for wp-done-gates-resolve, the
#: gate resolver the runner put on it).
CHECKS: tuple[Rule[Registry, WorkPackageOptions], ...] = register(
    declared(WP_FRONT_MATTER, check_front_matter),
    declared(WP_SCHEMA, check_schema),
    declared(WP_ID_MATCHES_FILE, check_ids),
    declared(WP_DEPENDENCIES_EXIST, check_dependencies_exist),
    declared(WP_DEPENDENCIES_ACYCLIC, check_acyclic),
    declared(WP_DONE_GATES_RESOLVE, check_gates),
    declared(WP_PHASE_EXISTS, check_phases),
    declared(WP_STATUS_REASON, check_reasons),
    declared(WP_SUPERSEDED_BY, check_superseded),
)
