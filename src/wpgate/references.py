"""What a trailer may cite, and the static resolver of gates.

:class:`References` holds the ids read from the repository's governance documents (the reading
itself lives in :mod:`wpgate._docs`). :class:`GateResolver` checks the gates a ``Gate:``
trailer or a work-package page names, without importing or running anything:

- ``path::name[::name...]``: the file exists inside the repository and defines the named test.
  Python files are read by syntax tree (functions, classes, methods; ``test_x[a-b]``
  parameters resolve to their function); Go, Rust, JavaScript/TypeScript and bats files by the
  scanners of :mod:`wpgate._gate_languages`; other files by the patterns an adopter configures
  per glob (``[tool.wpgate.gates] patterns``), which are tried first. A name with spaces is
  quoted: ``test/x.test.js::"adds two numbers"``.
- ``path``: a whole test file, which must exist and define at least one test.
- ``ci:<job>``: a CI job, one of the job ids of the workflow files (``ci_workflows``, GitHub
  Actions' ``.github/workflows/*.yml`` by default) or of the configured ``ci_jobs``.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from wpgate._documents import ReadRefusedError, read_bounded
from wpgate._record import field, frozen
from wpgate.options import GateOptions

if TYPE_CHECKING:
    import ast

    from wpgate._gate_languages import Language

__all__ = ["GateResolver", "References", "resolve_node_id", "split_node_ids", "workflow_jobs"]

# A node id: anything but separators, where a [parameter part] or a "quoted name" may hold
# separators too. A bracket or quote that is never closed keeps the rest of the value, so that
# the gate is reported whole (what is unclosed named) instead of as pieces read as other gates.
_NODE_ID = re.compile(r'(?:[^\s;,\["]+|\[[^\]]*(?:\]|$)|"[^"]*(?:"|$))+')
_PARAMETERS = re.compile(r"\[[^\]]*\]")
_QUOTED = re.compile(r'"[^"]*"')
# A gate's `::` separators, found past its quoted names (which may hold `::` themselves).
_PART_SEPARATOR = re.compile(r'"[^"]*"|::')
_CI_PREFIX = "ci:"


@frozen(eq=False)
class References:
    """Ids that exist in the repository: work packages, sources, placeholders, assumptions.

    Compared and hashed by identity: the rules cache their verdicts per value and per
    ``References`` object, so a process that lints again with freshly loaded documents starts
    new cache entries instead of comparing four sets on every lookup (or reusing a verdict
    that the new documents might change).
    """

    wp_ids: frozenset[str] = field(default_factory=frozenset)
    #: Work-package page names that are no regular file (a FIFO, a directory), with why.
    wp_refused: Mapping[str, str] = field(default_factory=dict)
    provenance_ids: frozenset[str] = field(default_factory=frozenset)
    placeholder_ids: frozenset[str] = field(default_factory=frozenset)
    assumption_ids: frozenset[str] = field(default_factory=frozenset)
    #: Where the assumptions are read from (``[tool.wpgate.docs] assumptions``), and why that
    #: file could not be read (None when it was: missing, not UTF-8): the findings name it,
    #: and say why a cited id cannot be looked up.
    assumptions_path: str = "docs/ASSUMPTIONS.md"
    assumptions_unread: str | None = None
    #: Where the provenance table is read from (``[tool.wpgate.docs] provenance``), and why it
    #: could not be read (None when it was): a cited id is then not looked up in vain.
    provenance_path: str = "docs/PROVENANCE.md"
    provenance_unread: str | None = None


def gate_file(node_id: str) -> str | None:
    """The repository path of the file a gate names, None for a CI job (``ci:<job>``)."""
    if node_id.startswith(_CI_PREFIX):
        return None
    return PurePosixPath(_parts(node_id)[0]).as_posix()


def split_node_ids(value: str) -> list[str]:
    """The gates of a ``Gate:`` value, separated by ``;``, ``,`` or spaces outside ``[...]``
    and ``"..."``."""
    return _NODE_ID.findall(value)


def _names(body: list[ast.stmt]) -> dict[str, list[ast.stmt]]:
    """Functions and classes defined directly in ``body``, with each class's own body."""
    import ast  # loaded by python_names, once a gate names a Python file

    found: dict[str, list[ast.stmt]] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found[node.name] = []
        elif isinstance(node, ast.ClassDef):
            found[node.name] = node.body
        elif isinstance(node, ast.If | ast.Try):
            # Tests defined under `if sys.version_info...:` or `try:` are still collected.
            for block in (node.body, node.orelse, *getattr(node, "handlers", ())):
                inner = block.body if isinstance(block, ast.ExceptHandler) else block
                found.update(_names(inner))
    return found


def python_names(source: bytes | str, filename: str = "<test>") -> frozenset[str]:
    """Every function and class of a Python file, nested ones as ``Class::method``; a
    SyntaxError when it does not parse."""
    import ast  # only a gate naming a Python file needs the parser

    found: set[str] = set()

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for name, inner in _names(body).items():
            found.add(prefix + name)
            walk(inner, f"{prefix}{name}::")

    walk(ast.parse(source, filename=filename).body, "")
    return frozenset(found)


def _python_parameters(name: str) -> str:
    """A pytest name without its parameters: ``test_x[a-b]`` is ``test_x``."""
    return name.split("[", 1)[0]


def _is_python_test(name: str) -> bool:
    """What pytest collects by default: ``test*`` functions, ``Test*`` classes."""
    return name.rsplit("::", 1)[-1].startswith(("test", "Test"))


# The language scanners (``wpgate._gate_languages``, a dozen regular expressions and their
# records) are loaded when a gate first names a file: a history whose commits name no gate, or
# only CI jobs, never needs them.


@functools.cache
def _python() -> Language:
    """The built-in Python language: files read by syntax tree (:func:`python_names`)."""
    from wpgate._gate_languages import Language

    return Language(
        "python", ("*.py",), python_names, "tests/test_x.py::test_y", _python_parameters
    )


@functools.cache
def _built_in() -> tuple[Language, ...]:
    """Every built-in language, whether or not the configuration turns it on."""
    from wpgate._gate_languages import LANGUAGES

    return (_python(), *LANGUAGES)


_JOBS_KEY = re.compile(r"^jobs\s*:\s*(?:#.*)?$")
_JOB_ID = re.compile(r"""^(?P<indent>[ \t]+)(?P<quote>["']?)(?P<id>[\w.-]+)(?P=quote)\s*:""")


def workflow_jobs(text: str) -> frozenset[str]:
    """The job ids of a GitHub Actions workflow: the keys one level under ``jobs:``."""
    jobs: set[str] = set()
    inside, indent = False, ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not line[0].isspace():
            inside, indent = bool(_JOBS_KEY.match(line)), ""
            continue
        if not inside:
            continue
        match = _JOB_ID.match(line)
        width = len(line) - len(line.lstrip())
        if not indent and match is not None:
            indent = match["indent"]
        if match is not None and width == len(indent):
            jobs.add(match["id"])
    return frozenset(jobs)


def _parts(node_id: str) -> list[str]:
    """The ``::`` parts of a gate; a quoted name is one part, whatever it holds
    (``web/x.test.js::"sum::adds two"`` is the file and ``"sum::adds two"``). A file part
    may be quoted (``"tests/a b/test_x.py"::test_y``), and so may a whole gate, whose
    ``::`` then still separate its parts (``"tests/a b/test_x.py::test_y"``): the file comes
    without its quotes."""
    if node_id.count('"') == 2 and node_id[0] == node_id[-1] == '"':
        node_id = node_id[1:-1]  # a whole gate quoted for the spaces in it
    if '"' not in node_id:
        return node_id.split("::")
    parts: list[str] = []
    start = 0
    for match in _PART_SEPARATOR.finditer(node_id):
        if match.group() == "::":
            parts.append(node_id[start : match.start()])
            start = match.end()
    parts.append(node_id[start:])
    parts[0] = _unquoted(parts[0])
    return parts


def _unquoted(name: str) -> str:
    """A gate part without the quotes that let it hold spaces."""
    return name[1:-1] if len(name) >= 2 and name[0] == name[-1] == '"' else name


def _within(name: str, scope: str) -> bool:
    """Whether test ``name`` is inside ``scope`` (``tests::it_works`` is inside ``tests``)."""
    return name.startswith(f"{scope}::")


def _matches(path: str, globs: Iterable[str]) -> bool:
    """Whether ``path`` (repository-relative) matches a glob; a glob without ``/`` is matched
    against the file name too."""
    name = path.rsplit("/", 1)[-1]
    return any(
        fnmatch.fnmatchcase(path, glob) or ("/" not in glob and fnmatch.fnmatchcase(name, glob))
        for glob in globs
    )


def _pattern_language(glob: str, regex: str) -> Language:
    """An adopter's ``glob = regex`` as a language: each match's group ``name`` is a test."""
    from wpgate._gate_languages import Language, pattern_tests

    compiled = re.compile(regex, re.MULTILINE)
    return Language(
        f"pattern {glob!r}", (glob,), functools.partial(pattern_tests, compiled), f"{glob}::<name>"
    )


class GateResolver:
    """Resolves gates against the files under ``root``; each file is read and scanned once.

    ``read`` replaces the working tree as the source of a file's bytes (e.g. one commit's tree,
    read from git): it raises ``FileNotFoundError`` for a file that is not there. ``options``
    are ``[tool.wpgate.gates]`` (the defaults when None).
    """

    def __init__(
        self,
        root: Path,
        read: Callable[[str], bytes] | None = None,
        options: GateOptions | None = None,
    ) -> None:
        self._root = root.resolve()
        self._read = self._read_file if read is None else read
        self._options = GateOptions() if options is None else options
        self._scanned: dict[str, frozenset[str] | str] = {}
        self._answers: dict[str, str | None] = {}
        self._jobs: frozenset[str] | None = None
        self._unread_workflows: list[str] = []

    def _read_file(self, rel: str) -> bytes:
        """A file of the working tree, read by :func:`~wpgate._documents.read_bounded` (refused
        when it leads out of the repository, is no regular file, or is too large)."""
        return read_bounded(self._root, rel)

    @functools.cached_property
    def _languages(self) -> tuple[Language, ...]:
        """The configured patterns, then the built-in languages turned on, in that order."""
        from wpgate._gate_languages import languages_named

        patterns = [_pattern_language(glob, regex) for glob, regex in self._options.patterns]
        builtin = [_python()] if "python" in self._options.languages else []
        return (*patterns, *builtin, *languages_named(self._options.languages))

    @property
    def _example(self) -> str:
        """A gate of the first language a gate may name, to show the form in a message."""
        return (self._languages[0] if self._languages else _python()).example

    def _language(self, rel: str) -> Language | None:
        """The first configured pattern, then built-in language, whose globs match ``rel``."""
        return next((lang for lang in self._languages if _matches(rel, lang.globs)), None)

    def _tests(self, rel: str, language: Language) -> frozenset[str] | str:
        """The test names of a file, or why it cannot be read."""
        cached = self._scanned.get(rel)
        if cached is not None:
            return cached
        result: frozenset[str] | str
        try:
            data = self._read(rel)
            result = (
                python_names(data, rel)
                if language is _python()
                else language.scan(data.decode("utf-8-sig"))
            )
        except FileNotFoundError:
            result = f"`{rel}` does not exist; fix the path or add the test file"
        except (IsADirectoryError, ReadRefusedError) as exc:
            directory = (self._root / rel).is_dir()
            result = (
                f"`{rel}` is a directory; name a test file (`{language.example}`)"
                if directory
                else str(exc)
            )
        except UnicodeDecodeError:
            result = f"`{rel}` is not valid UTF-8; re-save it as UTF-8"
        except (OSError, SyntaxError, ValueError) as exc:
            result = f"`{rel}` cannot be parsed ({exc.__class__.__name__}); fix the file"
        self._scanned[rel] = result
        return result

    def resolve(self, node_id: str) -> str | None:
        """Why ``node_id`` does not resolve, or None when it does."""
        # Parameters do not change what a node id resolves to, so the answer is shared.
        plain = "[" in node_id and '"' not in node_id
        key = _PARAMETERS.sub("", node_id) if plain else node_id
        if key not in self._answers:
            self._answers[key] = self._resolve(node_id)
        return self._answers[key]

    def _resolve(self, node_id: str) -> str | None:
        """Resolve one gate (uncached)."""
        if node_id.startswith(_CI_PREFIX):
            return self._resolve_job(node_id[len(_CI_PREFIX) :])
        path, *parts = _parts(node_id)
        problem = self._form_problem(node_id, path)
        if problem is not None:
            return problem
        rel = PurePosixPath(path).as_posix()
        if self._read == self._read_file and (self._root / rel).is_dir():
            return f"`{rel}` is a directory; name a test file in it (`{self._example}`)"
        language = self._language(rel)
        off = next((lang for lang in _built_in() if _matches(rel, lang.globs)), None)
        if language is None and off is not None:
            return (
                f"`{rel}` is a {off.name} test file, but {off.name} is not among the "
                "[tool.wpgate.gates] languages; add it there"
            )
        if language is None:
            return (
                f"`{rel}` is not a test file wpgate can read (Python `*.py`, Go `*_test.go`, "
                "Rust `*.rs`, JavaScript/TypeScript, bats `*.bats`); name one, or describe its "
                "tests in [tool.wpgate.gates] patterns"
            )
        return self._resolve_in(rel, language, parts, node_id)

    def _form_problem(self, node_id: str, path: str) -> str | None:
        """Why ``node_id`` is not written as a gate (its file part ``path``), None when it is."""
        bare = _QUOTED.sub("", node_id)  # a quoted name may hold brackets
        if bare.count("[") > bare.count("]"):
            return (
                f"`{node_id}` opens a parameter part with `[` and never closes it; close it "
                "(`path::test_x[param]`)"
            )
        if node_id.count('"') % 2:
            return (
                f'`{node_id}` opens a quoted name with `"` and never closes it; close it '
                '(`path::"a name with spaces"`)'
            )
        pure = PurePosixPath(path)
        if not path or pure.is_absolute() or ".." in pure.parts:
            return (
                f"`{node_id}` must start with a repository-relative file path; name the file "
                f"from the repository root, with no leading `/` and no `..` (`{self._example}`)"
            )
        return None

    def _resolve_in(
        self, rel: str, language: Language, parts: list[str], node_id: str
    ) -> str | None:
        """Why the names ``parts`` are not tests of file ``rel`` (None when they are)."""
        names = self._tests(rel, language)
        if isinstance(names, str):
            return names
        if not parts:
            tests = [n for n in names if _is_python_test(n)] if language is _python() else names
            return None if tests else f"`{rel}` defines no test; name a file that has one"
        walked: list[str] = []
        for index, part in enumerate(parts):
            name = language.normalize(_unquoted(part))
            if not name:
                return f"`{node_id}` has an empty part after `::`; remove it"
            walked.append(name)
            joined = "::".join(walked)
            # A part before the last may be a scope only (a Rust module), not a test itself.
            last = index == len(parts) - 1
            if joined not in names and (last or not any(_within(n, joined) for n in names)):
                where = "::".join([rel, *walked[:-1]])
                # Python's names are every function and class; the other readers' are tests.
                what = "defined" if language is _python() else "a test"
                return f"`{name}` is not {what} in `{where}`; fix the node id or add the test"
        if language is _python() and not _is_python_test("::".join(walked)):
            return (
                f"`{walked[-1]}` is defined in `{rel}` but is not a test (pytest collects "
                "`test*` functions and `Test*` classes); name a test"
            )
        return None

    def _resolve_job(self, job: str) -> str | None:
        """Why ``ci:<job>`` names no known CI job (None when it does)."""
        if not job:
            return "`ci:` names no job; write `ci:<job id>`"
        if self._jobs is None:
            self._jobs = self._workflow_jobs() | frozenset(self._options.ci_jobs)
        if job in self._jobs:
            return None
        where = ", ".join(self._options.ci_workflows)
        unread = "".join(f" (not read: {why})" for why in self._unread_workflows)
        return (
            f"`{job}` is not a job of the CI workflows ({where}) nor of [tool.wpgate.gates] "
            f"ci_jobs{unread}; fix the job id or add the job"
        )

    def _workflow_jobs(self) -> frozenset[str]:
        """The job ids of every workflow file of the working tree (read through ``read``).

        A workflow that cannot be read names no job; why is kept for the job's finding.
        """
        jobs: set[str] = set()
        for glob in self._options.ci_workflows:
            for path in sorted(self._root.glob(glob)):
                rel = path.relative_to(self._root).as_posix()
                try:
                    jobs |= workflow_jobs(self._read(rel).decode("utf-8-sig"))
                except FileNotFoundError:
                    continue  # not in the tree that is read (a commit's own)
                except ReadRefusedError as exc:
                    self._unread_workflows.append(str(exc))
                except (OSError, ValueError) as exc:
                    self._unread_workflows.append(f"`{rel}` cannot be read ({exc})")
        return frozenset(jobs)


def resolve_node_id(root: Path, node_id: str, options: GateOptions | None = None) -> str | None:
    """Why ``node_id`` does not resolve under ``root`` (None when it does); one-off helper."""
    return GateResolver(root, options=options).resolve(node_id)
