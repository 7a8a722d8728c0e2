"""``wpgate init``: bootstrap a repository so that ``wpgate check`` and ``mkdocs build --strict``
pass at once.

Writes only what is missing and never overwrites a file: the configuration (a ``[tool.wpgate]``
table appended to an existing ``pyproject.toml``, else a ``wpgate.toml``) with gate settings for
the languages found in the repository, a ``.gitignore`` entry for the built site, the
provenance record, the changelog, the
work-package registry folder, the evidence folder's README, ``mkdocs.yml`` with the wpgate
plugin, a pull-request template that keeps the clean-room statement (WPG109) and a
``.pre-commit-config.yaml`` of ``repo: local`` hooks (installing them clones nothing). Each
planned file is a :class:`Scaffold`; :func:`init_repository` reports what it wrote, what it
appended to and what it kept.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from wpgate._documents import ReadRefusedError, read_bounded, resolve_inside
from wpgate._git import work_tree_prefix
from wpgate.options import GATE_LANGUAGES, ConfigError, DocsLayout, TrailerOptions, toml_string

__all__ = [
    "InitResult",
    "Scaffold",
    "config_text",
    "detect_languages",
    "init_repository",
    "plan_scaffolds",
    "survey",
]

_CONFIG = """
{top}
# The first governed commit: set it once the repository has one, and `wpgate check` lints the
# trailers of every commit from it to HEAD (and the pre-push hook those being pushed).
# history_start = "<40-hex commit id>"

[{prefix}trailers]
# The trailers every commit must carry, of the four wpgate checks (WP, Provenance,
# Assumptions, Gate).
required = {required}

[{prefix}gates]
{found}
{examples}
languages = {languages}
# Other test files: a glob = a regular expression whose group `name` is a test's name.
# patterns = {{ "t/*.t" = '^ok \\d+ - (?P<name>.+)$' }}
# `Gate: ci:<job>` names a job of .github/workflows/*.yml, or one listed here.
# ci_jobs = ["integration"]
"""

#: Per language: the files that show it is used (a name, or a glob on file names) and an
#: example gate, in the order ``languages`` lists them.
_DETECT: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "python",
        ("pyproject.toml", "setup.py", "setup.cfg", "test_*.py", "*_test.py"),
        "tests/test_x.py::test_y",
    ),
    ("go", ("go.mod", "*_test.go"), "pkg/x_test.go::TestY"),
    ("rust", ("Cargo.toml",), "src/lib.rs::tests::it_works"),
    (
        "javascript",
        ("package.json", "*.test.[jt]s", "*.spec.[jt]s", "*.test.[jt]sx", "*.spec.[jt]sx"),
        'test/x.test.js::"adds two numbers"',
    ),
    ("bats", ("*.bats",), 'test/x.bats::"prints the version"'),
)
#: The files that hold tests (Rust's are in its sources): where one is found, ``required``
#: includes ``Gate``.
_TEST_FILES = (
    "test_*.py",
    "*_test.py",
    "*_test.go",
    "*.rs",
    "*.test.[jt]s",
    "*.spec.[jt]s",
    "*.test.[jt]sx",
    "*.spec.[jt]sx",
    "*.bats",
)
# Folders never searched for test files: dependencies, build outputs, the built site.
_SKIPPED = frozenset({"node_modules", "vendor", "target", "site", "build", "dist", "__pycache__"})
#: The most files the language detection looks at (a huge tree is sampled, not read whole).
_DETECT_FILES = 20_000

_PROVENANCE = """# Provenance

Every outside source this project uses, and under what terms. A commit's `Provenance:` trailer
cites ids from the *Sources* table; `wpgate provenance` checks this file.

## Sources

| ID | Reference | Licence | Role |
| --- | --- | --- | --- |

## Placeholders

Ids reserved and withdrawn; a trailer that cites one is refused.

| ID | Status |
| --- | --- |

## First-use log

A source appears once, on the day it was first used.

| Date | Source | Used for |
| --- | --- | --- |
"""

_ASSUMPTIONS = """# Assumptions

Things the project takes as true without having proved them. A commit's `Assumptions:` trailer
cites ids from this table (`Assumptions: A1, A2`) or says `Assumptions: none`.

| ID | Assumption | Why we hold it | How it would be checked |
| --- | --- | --- | --- |
"""

_CHANGELOG = """# Changelog

All notable changes to this project are documented here. The format follows
[Keep a Changelog](https://keepachangelog.com/en/1.1.0/).

## [Unreleased]
"""

_WORK_PACKAGES_INDEX = """# Work packages

One page per work package, `wp-NNN.md`; `wpgate new-wp NNN --title "..." --phase N` writes a
new one that passes `wpgate wp`. The site's roadmap lists them all.
"""

_EVIDENCE_README = """# Evidence

Every measurement the documentation quotes lives here as one JSON file (`wpgate-evidence/1`:
`schema`, `environment`, `git_commit`, `sources`, `results`) written by the script that took
it. A paragraph that starts with the tag `[MEASURED]` is a claim: it cites a file here, and
`wpgate evidence` checks that its numbers are in that file.
"""

_INDEX = """# {name}

This site is built by mkdocs with the wpgate plugin: the [roadmap](ROADMAP.md) lists every work
package; evidence blocks render the measured numbers as tables and charts.
"""

# PR mode lints the title and this body as the squash commit (WPG109 keeps the statement).
_PULL_REQUEST = """<!-- What the change does and why; end with the trailers the configuration's
`required` names (WP:, Provenance:, and Gate: where it is required). -->

{statement} this change was written from specifications, papers and official documentation,
not copied from other projects' code, and every source it used is in the provenance table.
"""

_MKDOCS = """site_name: {name}
docs_dir: {docs_dir}
site_dir: site

theme:
  name: material
  # No Google Fonts: the built site makes no request to an outside host.
  font: false

plugins:
  - search
  - wpgate

markdown_extensions:
  - admonition
  - attr_list
  - tables

validation:
  links:
    not_found: warn
    anchors: warn
"""

_PRE_COMMIT = """# wpgate hooks as `repo: local`: installing them clones nothing. They run the
# `wpgate` on PATH, so commit from the environment where wpgate is installed.
default_install_hook_types: [pre-commit, commit-msg, pre-push]
repos:
  - repo: local
    hooks:
      - id: wpgate-docs
        name: wpgate docs (provenance, work packages, evidence claims, changelog)
        entry: wpgate docs
        language: system
        files: {files}
        stages: [pre-commit]
        pass_filenames: false
        # Every commit, not only one touching these files: a change to the code a claim
        # measured makes the claim stale, and claims may be outside them (README.md).
        always_run: true
      - id: wpgate-trailers
        name: wpgate commit message (subject and trailers)
        entry: wpgate trailers
        language: system
        stages: [commit-msg]
      - id: wpgate-history
        name: wpgate pushed history
        entry: wpgate trailers --pushed
        language: system
        stages: [pre-push]
        pass_filenames: false
        always_run: true
        verbose: true  # shows its line when it passes (what it checked, or how to enable it)
"""


@dataclass(frozen=True)
class Scaffold:
    """One file ``init`` writes: its repository path, its text, and whether it is appended."""

    path: str
    text: str
    append: bool = False
    #: Already there (the file, or what an appended text would add): kept, not written.
    present: bool = False
    #: What an appended text adds, as the report names it (``[tool.wpgate]``).
    adds: str = ""


@dataclass(frozen=True)
class InitResult:
    """What ``init`` did: the files it wrote, those it appended to and those it left as they
    were."""

    written: tuple[str, ...]
    kept: tuple[str, ...]
    #: What the user should add by hand (an existing ``.pre-commit-config.yaml`` without
    #: wpgate's hooks), or ``""``.
    advice: str = ""
    #: The existing files ``init`` added to, each with what it added:
    #: ``(("pyproject.toml", "[tool.wpgate]"),)``.
    appended: tuple[tuple[str, str], ...] = ()


def detect_languages(root: Path) -> tuple[str, ...]:
    """The languages whose marker files or test files are in ``root`` (hidden folders,
    dependencies and build outputs skipped), in :data:`_DETECT` order."""
    return survey(root)[0]


def survey(root: Path) -> tuple[tuple[str, ...], bool]:
    """:func:`detect_languages`, and whether any test file is there (:data:`_TEST_FILES`): a
    ``pyproject.toml`` shows Python is used, not that a test exists to gate a commit on."""
    found: set[str] = set()
    tests = False
    seen = 0
    for _folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIPPED)
        for file in files:
            found.update(
                language
                for language, markers, _ in _DETECT
                if any(fnmatch.fnmatchcase(file, marker) for marker in markers)
            )
            tests = tests or any(fnmatch.fnmatchcase(file, glob) for glob in _TEST_FILES)
        seen += len(files)
        if seen >= _DETECT_FILES or (len(found) == len(_DETECT) and tests):
            break
    return tuple(language for language, _, _ in _DETECT if language in found), tests


def config_text(languages: tuple[str, ...], *, pyproject: bool, tests: bool | None = None) -> str:
    """The configuration ``init`` writes: ``[tool.wpgate]`` tables for ``pyproject.toml``,
    top-level tables for ``wpgate.toml``; the gate settings for ``languages``; ``Gate``
    required where ``tests`` were found (by default, where a language was)."""
    tests = bool(languages) if tests is None else tests
    examples = "\n".join(
        f"#   Gate: {example}" for language, _, example in _DETECT if language in languages
    )
    if languages and not tests:
        examples += '\n#   (no test files yet: add "Gate" to `required` once there are tests)'
    required = ["WP", "Provenance", "Gate"] if tests else ["WP", "Provenance"]
    found = "# The test files a `Gate:` may name, found in this repository by `wpgate init`:"
    if not languages:
        found = (
            "# The test files a `Gate:` may name: `wpgate init` found none in this repository,\n"
            "# so every language is listed as a start (keep those it will use):"
        )
        examples = '#   (no test files yet: add "Gate" to `required` once there are tests)'
    return _CONFIG.format(
        top="[tool.wpgate]" if pyproject else "# wpgate's configuration (wpgate.toml)",
        prefix="tool.wpgate." if pyproject else "",
        required=_toml_list(required),
        found=found,
        examples=examples,
        languages=_toml_list(list(languages or GATE_LANGUAGES)),
    ).lstrip("\n")


def _toml_list(items: list[str]) -> str:
    """``["a", "b"]``."""
    return "[" + ", ".join(map(toml_string, items)) + "]"


# Python-Markdown's backslash escapes; `<` and `&` would start raw HTML or an entity.
_MARKDOWN_ESCAPED = frozenset("\\`*_{}[]()>#+-.!")
_MARKDOWN_ENTITIES = {"<": "&lt;", "&": "&amp;"}


def _markdown_text(text: str) -> str:
    """``text`` escaped for a Markdown heading, so that it renders as itself."""
    return "".join(
        _MARKDOWN_ENTITIES.get(char) or (f"\\{char}" if char in _MARKDOWN_ESCAPED else char)
        for char in text
    )


def _name_problem(name: str, source: str = "--name") -> str:
    """Why ``name`` cannot be the site's name (blank, or with a line break or another control
    character, which no Markdown heading keeps on one line), or ``""``."""
    if not name.strip():
        return (
            f"{source} {name!r} is blank; pass --name with the site's name, or leave --name out "
            "to use the folder's name"
        )
    for char in name:
        # Cc: control characters; Zl, Zp: line and paragraph separators; Cs: a lone surrogate
        # (bytes of the command line that are not UTF-8), which no file can hold.
        if unicodedata.category(char) in {"Cc", "Zl", "Zp", "Cs"}:
            return (
                f"{source} {name[:40]!r} holds the control character U+{ord(char):04X}; pass "
                "--name with the site's name on one line of printable characters"
            )
    return ""


def _site_ignored(gitignore: Path) -> bool:
    """Whether ``.gitignore`` already ignores the built site (``site/``, ``/site/``...)."""
    try:
        lines = read_bounded(gitignore.parent, gitignore.name).decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    return any(line.strip() in {"site", "site/", "/site", "/site/"} for line in lines)


def _appendable(root: Path, rel: str) -> str:
    """The text of ``rel``, which ``init`` appends to; ValueError saying why it cannot be read
    (a FIFO or a link to ``/dev/zero`` would block or never end a plain read)."""
    try:
        return read_bounded(root, rel).decode("utf-8")
    except ReadRefusedError as exc:
        raise ValueError(f"{exc}; then run `wpgate init` again") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{rel} is not valid UTF-8 (byte {exc.start}); re-save it as UTF-8, then run "
            "`wpgate init` again"
        ) from exc
    except OSError as exc:
        raise ValueError(f"{rel} cannot be read ({exc.strerror}); check its permissions") from exc


def _docs_dir(layout: DocsLayout) -> str:
    """The folder that holds the documents (the first component of the provenance path)."""
    return layout.provenance.split("/", 1)[0] if "/" in layout.provenance else "docs"


def plan_scaffolds(
    root: Path,
    name: str,
    layout: DocsLayout,
    config_source: str = "",
    statement: str = TrailerOptions().clean_room_statement,
) -> list[Scaffold]:
    """Every file ``init`` would write for a repository called ``name``, in writing order.

    The configuration goes to ``config_source`` when it exists (and is kept); else it is
    appended to an existing ``pyproject.toml`` or written as ``wpgate.toml``. The pull-request
    template keeps ``statement``, the clean-room statement WPG109 asks of a pull request.
    """
    docs_dir = _docs_dir(layout)
    # The hook's pattern, a YAML single-quoted string (no escapes but a doubled quote).
    files = f"^({re.escape(docs_dir)}/|{re.escape(layout.changelog)}$)".replace("'", "''")
    pyproject = (root / "pyproject.toml").exists()
    if config_source:
        config = Scaffold(config_source, "", present=True)
    else:
        languages, tests = survey(root)
        text = config_text(languages, pyproject=pyproject, tests=tests)
        file = "pyproject.toml" if pyproject else "wpgate.toml"
        config = Scaffold(file, text, pyproject, adds="[tool.wpgate]")
    gitignore = root / ".gitignore"
    return [
        config,
        Scaffold(
            ".gitignore",
            "# The site mkdocs builds (`mkdocs build`); the wpgate plugin writes nothing else.\n"
            "/site/\n",
            append=gitignore.exists(),
            present=_site_ignored(gitignore),
            adds="/site/",
        ),
        Scaffold(layout.provenance, _PROVENANCE),
        Scaffold(layout.assumptions, _ASSUMPTIONS),
        Scaffold(layout.changelog, _CHANGELOG),
        Scaffold(f"{layout.work_packages}/index.md", _WORK_PACKAGES_INDEX),
        Scaffold(f"{layout.evidence}/README.md", _EVIDENCE_README),
        Scaffold(f"{docs_dir}/index.md", _INDEX.format(name=_markdown_text(name))),
        # A JSON (TOML basic) string is a YAML double-quoted scalar: `: `, `#`, quotes survive.
        Scaffold(
            "mkdocs.yml", _MKDOCS.format(name=toml_string(name), docs_dir=toml_string(docs_dir))
        ),
        Scaffold(".github/pull_request_template.md", _PULL_REQUEST.format(statement=statement)),
        Scaffold(".pre-commit-config.yaml", _PRE_COMMIT.format(files=f"'{files}'")),
    ]


_PLUGIN_ENTRY = re.compile(r"^[ \t]*-[ \t]*[\"']?wpgate\b|^[ \t]+wpgate[ \t]*:", re.MULTILINE)


def _kept_text_without(root: Path, path: str, entry: re.Pattern[str]) -> str | None:
    """The text of the kept file ``path`` when ``entry`` is not in it; None when it is, or
    when the file cannot be read (no advice is better than a wrong one)."""
    try:
        text = read_bounded(root, path).decode("utf-8", "replace")
    except OSError:
        return None
    return None if entry.search(text) else text


def _plugin_advice(root: Path, kept: list[str]) -> str:
    """How to add the site plugin to a kept ``mkdocs.yml`` that does not list it, or ``""``.
    The user's file is never rewritten."""
    if "mkdocs.yml" not in kept or _kept_text_without(root, "mkdocs.yml", _PLUGIN_ENTRY) is None:
        return ""
    return (
        "mkdocs.yml exists without the wpgate plugin (kept as it is). Add it under `plugins:` "
        "(with `search`, which listing plugins turns off otherwise) and use the material "
        "theme, so the site publishes the work packages and evidence:\n"
        "theme:\n  name: material\nplugins:\n  - search\n  - wpgate"
    )


def _top_level_advice(prefix: str, pull_request: str, layout: DocsLayout) -> str:
    """What to add at the top of the work tree for a sub-project at ``prefix``
    (``services/api/``): the hooks, each run with ``--root`` there and the docs hook's pattern
    under it, and the pull-request template's statement."""
    sub = prefix.rstrip("/")
    docs = re.escape(prefix + _docs_dir(layout))
    files = f"^({docs}/|{re.escape(prefix + layout.changelog)}$)".replace("'", "''")
    hooks = _PRE_COMMIT.format(files=f"'{files}'")
    for command in ("wpgate docs", "wpgate trailers --pushed", "wpgate trailers"):
        hooks = hooks.replace(
            f"entry: {command}\n", f"entry: {command} --root {shlex.quote(sub)}\n"
        )
    entries = hooks[hooks.index("  - repo: local") :]
    statement = pull_request.split("-->", 1)[-1].strip()
    return (
        f"{sub} is below the top of the git work tree, where pre-commit reads "
        ".pre-commit-config.yaml and GitHub reads .github/ (init writes only under --root). "
        f"At the top, add under `repos:` of .pre-commit-config.yaml\n{entries}"
        "then `pre-commit install -t pre-commit -t commit-msg -t pre-push`; and keep this "
        f"statement in .github/pull_request_template.md:\n{statement}"
    )


_AGAIN = "then run `wpgate init` again"
_HOOK_IDS = re.compile(r"^[ \t-]*id:[ \t]*[\"']?wpgate-(?:docs|trailers|history)\b", re.MULTILINE)


def _unwritable(root: Path, rel: str) -> str:
    """Why ``init`` cannot write ``rel`` (a folder on its way that is a file, or a symbolic link
    leading out of the repository or to nothing), or ``""``."""
    parts = rel.split("/")
    for depth in range(1, len(parts)):
        folder = "/".join(parts[:depth])
        path = root / folder
        if not path.is_symlink() and not path.exists():
            return ""  # init creates it and everything under it
        if resolve_inside(root, "", folder)[1] is not None:
            return (
                f"{folder} is a symbolic link that leads out of the repository (to "
                f"{path.resolve()}), so {rel} would be written outside it; replace the link "
                f"with a folder, {_AGAIN}"
            )
        if not path.is_dir():
            what = f"a symbolic link to {path.readlink()}" if path.is_symlink() else "a file"
            return f"{folder} is {what}, not a folder, so {rel} cannot go in it; {_AGAIN}"
    return ""


def _kept_refusal(root: Path, rel: str) -> str:
    """Why the existing ``rel`` (kept by ``init``) is no regular file inside the repository,
    or ``""``: read as every linter reads it, so that what is kept will also be read."""
    try:
        read_bounded(root, rel)
    except ReadRefusedError as exc:
        return f"{exc}; {_AGAIN}"
    except OSError:
        return ""  # unreadable for other reasons: the linters say so when they run
    return ""


def _hook_advice(root: Path, hooks: Scaffold) -> str:
    """The hook entries to add to an existing ``.pre-commit-config.yaml`` that has none of
    wpgate's, or ``""``. The user's file is never rewritten."""
    text = _kept_text_without(root, hooks.path, _HOOK_IDS)
    if text is None:
        return ""
    entries = hooks.text[hooks.text.index("  - repo: local") :]
    install = (
        "Then install the three hook types: "
        "`pre-commit install -t pre-commit -t commit-msg -t pre-push`."
    )
    if "default_install_hook_types" in text:
        install = (
            "Then run `pre-commit install` (its default_install_hook_types must list commit-msg)."
        )
    return (
        f"{hooks.path} exists without wpgate's hooks (kept as it is). Add under `repos:`\n"
        f"{entries}{install}"
    )


def init_repository(root: Path, name: str | None = None) -> InitResult:
    """Write every missing scaffold under ``root``; raises ValueError saying why it cannot.

    Nothing is written unless every file can be: a folder on a file's way that is a symbolic
    link out of the repository (or a file), and a kept file that is no regular file inside the
    repository (a FIFO, a directory, a link out), are refused before the first write.
    """
    if not root.is_dir():
        raise ValueError(f"{root} is not a directory; create it or pass --root")
    why = _name_problem(name) if name else _name_problem(root.resolve().name, "the folder's name")
    if why:
        raise ValueError(why)
    from wpgate._config import load_config

    try:
        # An existing configuration's docs table decides where the documents go.
        config = load_config(root)
    except ConfigError as exc:
        # The error already names the file, the key and the fix; say it once.
        raise ValueError(f"{exc}; {_AGAIN}") from exc
    layout = DocsLayout.from_config(config)
    statement = TrailerOptions.from_config(config).clean_room_statement
    plans = plan_scaffolds(root, name or root.resolve().name, layout, config.source, statement)
    # Everything that could stop init is found before the first file is written.
    for plan in plans:
        why = _unwritable(root, plan.path)
        if not why and plan.path != config.source and (root / plan.path).exists():
            why = _kept_refusal(root, plan.path)
        if why:
            raise ValueError(why)
    prefix = work_tree_prefix(root)
    advice = ""
    if prefix:
        # A sub-project: pre-commit and GitHub read these two at the top of the work tree,
        # outside the root init writes in; what to put there is said instead.
        advice = _top_level_advice(prefix, plans[-2].text, layout)
        plans = plans[:-2]
    kept = [p.path for p in plans if p.present or (not p.append and (root / p.path).exists())]
    if not prefix and plans[-1].path in kept:
        advice = _hook_advice(root, plans[-1])
    advice = "\n".join(filter(None, (advice, _plugin_advice(root, kept))))
    plans = [plan for plan in plans if plan.path not in kept]
    for plan in plans:
        if (root / plan.path).is_symlink() and not plan.append:
            raise ValueError(
                f"{plan.path} is a symbolic link to {(root / plan.path).readlink()}, which does "
                f"not exist; remove the link, {_AGAIN}"
            )
    existing = {plan.path: _appendable(root, plan.path) for plan in plans if plan.append}
    written: list[str] = []
    appended: list[tuple[str, str]] = []
    for plan in plans:
        target = root / plan.path
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if plan.append:
                before = existing[plan.path]
                separator = "" if before.endswith("\n") or not before else "\n"
                target.write_text(f"{before}{separator}\n{plan.text}", encoding="utf-8")
            else:
                target.write_text(plan.text, encoding="utf-8")
        except OSError as exc:
            raise ValueError(
                f"cannot write {plan.path} ({exc.strerror}); check permissions"
            ) from exc
        if plan.append:
            appended.append((plan.path, plan.adds))
        else:
            written.append(plan.path)
    return InitResult(tuple(written), tuple(kept), advice, tuple(appended))
