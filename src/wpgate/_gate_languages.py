"""The test names a test file defines, per language: pure scanners, text in, names out.

Each scanner reads a file's text statically (nothing is compiled, imported or run) and returns
the names a ``Gate: path::name`` may use. They skip comments and string literals, so a test in a
comment or a string does not count, and are otherwise tolerant: a file they cannot follow gives
fewer names, never an error. What each accepts:

- **Python** (``*.py``; by syntax tree, in :mod:`wpgate.references`): every function and class,
  with methods and nested classes as ``Class::method``.
- **Go** (``*_test.go``): ``func TestXxx(t *testing.T)``, ``func BenchmarkXxx(b *testing.B)``,
  ``func FuzzXxx(f *testing.F)`` (``Xxx`` not starting with a lower-case letter, the testing
  package under any import name) and ``func ExampleXxx()``; ``TestMain`` is not a test. A
  subtest (``TestX/case``) resolves to its function: subtest names are made at run time.
- **Rust** (``*.rs``): ``fn name`` under an attribute whose last path segment is ``test`` or
  ends in ``_test`` (``#[test]``, ``#[tokio::test]``, ``#[tokio::test(flavor = "...")]``,
  ``#[wasm_bindgen_test]``), other attributes (``#[should_panic]``, ``#[ignore]``) between
  them; named both ``name`` and by its module path, ``tests::name``, as cargo does.
- **JavaScript/TypeScript** (``*.js``, ``*.jsx``, ``*.mjs``, ``*.cjs``, ``*.ts``, ``*.tsx``,
  ``*.mts``, ``*.cts``): ``test(...)``, ``it(...)``, ``describe(...)`` and ``suite(...)``, with
  ``.only``, ``.skip``, ``.todo``, ``.concurrent``, ``.failing``, ``.sequential`` or
  ``.fails``, whose first argument is a string literal (quotes or a backtick without
  ``${}``). A test inside ``describe("A")`` is named ``t``, ``A t`` (the full name Jest and
  Vitest print) and ``A::t``. ``x.test(...)`` (a method call, e.g. a regex) is not a test.
- **bats** (``*.bats``): ``@test "name" {``.

Configured patterns (``[tool.wpgate.gates] patterns``) add a regular expression per file glob.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = [
    "LANGUAGES",
    "Language",
    "bats_tests",
    "go_tests",
    "javascript_tests",
    "pattern_tests",
    "rust_tests",
]

_COMMENT = r"(?P<comment>//[^\n]*|/\*[\s\S]*?(?:\*/|\Z))"
_DOUBLE = r'"(?:\\[\s\S]|[^"\\\n])*"'
_SINGLE = r"'(?:\\[\s\S]|[^'\\\n])*'"
_CHAR = r"'(?:\\[^'\n]+|[^'\\\n])'"  # Go runes and Rust chars; a Rust lifetime is not one
_BACKTICK = r"`[^`]*`"
_RAW_RUST = r'r(?P<hashes>#*)"[\s\S]*?"(?P=hashes)'

_GO_TOKENS = re.compile(rf"{_COMMENT}|(?P<string>{_DOUBLE}|{_CHAR}|{_BACKTICK})")
_RUST_TOKENS = re.compile(rf"{_COMMENT}|(?P<string>{_RAW_RUST}|{_DOUBLE}|{_CHAR})")
_JS_TOKENS = re.compile(
    rf"{_COMMENT}|(?P<string>{_DOUBLE}|{_SINGLE}|{_BACKTICK})|(?P<ident>[A-Za-z_$][\w$]*)"
    r"|(?P<space>\s+)|(?P<punct>[\s\S])"
)


def _blanked(text: str, tokens: re.Pattern[str]) -> str:
    """``text`` with comments and string literals replaced by spaces (newlines kept)."""

    def blank(match: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", match.group(0))

    return tokens.sub(lambda m: blank(m) if m.lastgroup in ("comment", "string") else m[0], text)


# --------------------------------------------------------------------------- Go

_GO_FUNC = re.compile(
    r"\bfunc\s+(?P<name>(?P<kind>Test|Benchmark|Fuzz)(?:[^\W\da-z]\w*|\d\w*)?)\s*"
    r"\(\s*(?:\w+\s+)?\*\s*\w+\s*\.\s*(?P<type>[TBF])\s*\)"
    r"|\bfunc\s+(?P<example>Example(?:[^\W\da-z]\w*|_\w*)?)\s*\(\s*\)"
)
_GO_TYPE = {"Test": "T", "Benchmark": "B", "Fuzz": "F"}


def go_tests(text: str) -> frozenset[str]:
    """The tests, benchmarks, fuzz targets and examples of a ``*_test.go`` file."""
    names: set[str] = set()
    for match in _GO_FUNC.finditer(_blanked(text, _GO_TOKENS)):
        if match["example"]:
            names.add(match["example"])
        elif _GO_TYPE[match["kind"]] == match["type"]:
            names.add(match["name"])
    return frozenset(names)


def go_subtest(name: str) -> str:
    """The function a Go gate names: ``TestX/case`` runs inside ``TestX``."""
    return name.split("/", 1)[0]


# --------------------------------------------------------------------------- Rust

_RUST_ITEM = re.compile(
    r"#\s*(?P<inner>!)?\s*\[(?P<attr>[^\[\]]*(?:\[[^\[\]]*\][^\[\]]*)*)\]"
    r"|\bmod\s+(?P<mod>\w+)\s*\{|\bfn\s+(?P<fn>\w+)|(?P<open>\{)|(?P<close>\})|(?P<end>;)"
)
_ATTR_PATH = re.compile(r"^\s*(?P<path>[\w:\s]+?)\s*(?:\(|=|$)")


def _is_test_attribute(attr: str) -> bool:
    """``test``, ``tokio::test(...)``, ``wasm_bindgen_test``: a test runner's attribute."""
    match = _ATTR_PATH.match(attr)
    if match is None:
        return False
    last = match["path"].replace(" ", "").rsplit("::", 1)[-1]
    return last == "test" or last.endswith("_test")


def rust_tests(text: str) -> frozenset[str]:
    """The ``#[test]`` functions of a Rust file, by name and by module path."""
    names: set[str] = set()
    scopes: list[str | None] = []  # one per open brace: a module's name, or None
    pending = False
    for match in _RUST_ITEM.finditer(_blanked(text, _RUST_TOKENS)):
        kind = match.lastgroup
        if kind == "attr" and not match["inner"]:
            pending = pending or _is_test_attribute(match["attr"])
        elif kind == "mod":
            scopes.append(match["mod"])
            pending = False
        elif kind == "fn":
            if pending:
                modules = [scope for scope in scopes if scope is not None]
                names.update((match["fn"], "::".join([*modules, match["fn"]])))
            pending = False
        elif kind == "open":
            scopes.append(None)
            pending = False
        elif kind == "close":
            if scopes:
                scopes.pop()
            pending = False
        elif kind == "end":
            pending = False
    return frozenset(names)


# --------------------------------------------------------------------------- JavaScript

_JS_CALLEES = frozenset({"test", "it", "describe", "suite"})
_JS_GROUPS = frozenset({"describe", "suite"})
_JS_MODIFIERS = frozenset({"only", "skip", "todo", "concurrent", "failing", "sequential", "fails"})


def _js_tokens(text: str) -> list[tuple[str, str]]:
    """``(kind, text)`` of each token but spaces and comments."""
    return [
        (str(match.lastgroup), match[0])
        for match in _JS_TOKENS.finditer(text)
        if match.lastgroup not in ("comment", "space")
    ]


def _js_string(token: str) -> str | None:
    """The value of a string literal token (None for a template with ``${}``)."""
    body = token[1:-1]
    if token[0] == "`" and "${" in body:
        return None
    return re.sub(r"\\(.)", r"\1", body)


def _js_call(tokens: list[tuple[str, str]], index: int) -> tuple[str, str, int] | None:
    """``(callee, name, index of "(")`` when a test call starts at ``tokens[index]``."""
    kind, callee = tokens[index]
    if kind != "ident" or callee not in _JS_CALLEES:
        return None
    if index and tokens[index - 1] == ("punct", "."):
        return None  # `pattern.test("x")` is a method, not a test
    at = index + 1
    while (
        at + 1 < len(tokens)
        and tokens[at] == ("punct", ".")
        and tokens[at + 1][1] in (_JS_MODIFIERS)
    ):
        at += 2
    if at + 1 >= len(tokens) or tokens[at] != ("punct", "(") or tokens[at + 1][0] != "string":
        return None
    name = _js_string(tokens[at + 1][1])
    return None if name is None else (callee, name, at)


def javascript_tests(text: str) -> frozenset[str]:
    """The tests and groups of a JavaScript or TypeScript test file (Jest, Vitest, Mocha,
    ``node:test``)."""
    tokens = _js_tokens(text)
    names: set[str] = set()
    groups: list[tuple[str, int]] = []  # (name, paren depth inside its call)
    depth = 0
    for index, (kind, value) in enumerate(tokens):
        if kind == "punct" and value == "(":
            depth += 1
        elif kind == "punct" and value == ")":
            depth -= 1
            while groups and groups[-1][1] > depth:
                groups.pop()
        call = _js_call(tokens, index)
        if call is None:
            continue
        callee, name, _ = call
        path = [group for group, _ in groups]
        names.update((name, " ".join([*path, name]), "::".join([*path, name])))
        if callee in _JS_GROUPS:
            groups.append((name, depth + 1))
    return frozenset(names)


# --------------------------------------------------------------------------- bats, patterns

_BATS_TEST = re.compile(
    r"""^[ \t]*@test[ \t]+(?:"(?P<double>(?:\\.|[^"\\\n])*)"|'(?P<single>[^'\n]*)'"""
    r"""|(?P<bare>[^\s{]+))[ \t]*\{""",
    re.MULTILINE,
)


def bats_tests(text: str) -> frozenset[str]:
    """The ``@test "name" {`` blocks of a bats file."""
    names = set()
    for match in _BATS_TEST.finditer(text):
        double = match["double"]
        names.add(
            re.sub(r"\\(.)", r"\1", double)
            if double is not None
            else match["single"]
            if match["single"] is not None
            else match["bare"]
        )
    return frozenset(names)


def pattern_tests(pattern: re.Pattern[str], text: str) -> frozenset[str]:
    """The ``name`` group of each match of an adopter's pattern (multi-line mode)."""
    return frozenset(
        match["name"].strip() for match in pattern.finditer(text) if match["name"] is not None
    )


# --------------------------------------------------------------------------- the registry


def _same(name: str) -> str:
    """A gate's name as the scanner names it."""
    return name


@dataclass(frozen=True)
class Language:
    """One kind of test file: its globs (``fnmatch``, ``*`` crossing folders), its scanner,
    how a gate's name maps to a scanned one, and an example gate for messages."""

    name: str
    globs: tuple[str, ...]
    scan: Callable[[str], frozenset[str]]
    example: str
    normalize: Callable[[str], str] = _same


#: The built-in languages except Python (read by syntax tree in :mod:`wpgate.references`).
LANGUAGES: tuple[Language, ...] = (
    Language("go", ("*_test.go",), go_tests, "pkg/x_test.go::TestY", go_subtest),
    Language("rust", ("*.rs",), rust_tests, "src/lib.rs::tests::it_works"),
    Language(
        "javascript",
        tuple(f"*.{ext}" for ext in ("js", "jsx", "mjs", "cjs", "ts", "tsx", "mts", "cts")),
        javascript_tests,
        'test/x.test.js::"adds two numbers"',
    ),
    Language("bats", ("*.bats",), bats_tests, 'test/x.bats::"prints the version"'),
)


def languages_named(names: tuple[str, ...]) -> Iterator[Language]:
    """The built-in languages (but Python) among ``names``, in registry order."""
    return (language for language in LANGUAGES if language.name in names)
