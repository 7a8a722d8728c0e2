"""``wpgate init``: a fresh repository passes ``wpgate check``, ``mkdocs build --strict`` and a
commit through the installed pre-commit hooks."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from git_helpers import git, new_repository

from wpgate._config import load_config
from wpgate._init import config_text, detect_languages, plan_scaffolds, survey
from wpgate.cli import main
from wpgate.options import GATE_LANGUAGES, DocsLayout, GateOptions, TrailerOptions

_IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
_BIN = Path(sys.executable).parent


def _tool_missing(module: str) -> bool:
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, check=False
    )
    return done.returncode != 0


def test_init_writes_every_scaffold_then_keeps_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "--root", str(tmp_path), "--name", "Demo"]) == 0
    out = capsys.readouterr().out
    planned = [s.path for s in plan_scaffolds(tmp_path, "Demo", DocsLayout())]
    for path in planned:
        assert f"wrote {path}" in out
        assert (tmp_path / path).is_file()
    assert 'site_name: "Demo"' in (tmp_path / "mkdocs.yml").read_text(encoding="utf-8")
    # The table an `Assumptions:` trailer cites (the guide names it; an audit found it unmade).
    assert "docs/ASSUMPTIONS.md" in planned
    assert "| ID | Assumption |" in (tmp_path / "docs/ASSUMPTIONS.md").read_text(encoding="utf-8")
    (tmp_path / "CHANGELOG.md").write_text("# mine\n\n## [Unreleased]\n", encoding="utf-8")
    # A second run writes nothing: it keeps every file, edits included.
    assert main(["init", "--root", str(tmp_path)]) == 0
    again = capsys.readouterr().out
    assert "wrote" not in again
    assert all(f"kept  {path}" in again for path in planned)
    assert (tmp_path / "CHANGELOG.md").read_text(encoding="utf-8").startswith("# mine")


def test_init_appends_to_a_pyproject_without_a_wpgate_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"', encoding="utf-8")
    (tmp_path / ".gitignore").write_text("*.log\n", encoding="utf-8")
    assert main(["init", "--root", str(tmp_path)]) == 0
    # It says what it added to the files it did not write.
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == [
        "appended [tool.wpgate] to pyproject.toml",
        "appended /site/ to .gitignore",
        "wrote docs/PROVENANCE.md",
    ]
    assert not [line for line in out if line.startswith("wrote") and ".gitignore" in line]
    assert "wrote pyproject.toml" not in out
    data = tomllib.loads((tmp_path / "pyproject.toml").read_text(encoding="utf-8"))
    assert data["project"] == {"name": "x"}
    # Python is used, but no test file is there yet to gate a commit on.
    assert data["tool"]["wpgate"]["trailers"]["required"] == ["WP", "Provenance"]


def test_init_follows_an_existing_docs_layout(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.wpgate.docs]\nprovenance = "notes/PROVENANCE.md"\n'
        'work_packages = "notes/wp"\nengineering = "notes/eng"\nevidence = "notes/ev"\n'
        'claims = ["notes/**/*.md"]\n',
        encoding="utf-8",
    )
    before = (tmp_path / "pyproject.toml").read_text(encoding="utf-8")
    assert main(["init", "--root", str(tmp_path)]) == 0
    assert (tmp_path / "pyproject.toml").read_text(encoding="utf-8") == before
    for path in ("notes/PROVENANCE.md", "notes/wp/index.md", "notes/ev/README.md"):
        assert (tmp_path / path).is_file(), path
    assert 'docs_dir: "notes"' in (tmp_path / "mkdocs.yml").read_text(encoding="utf-8")
    assert main(["check", "--root", str(tmp_path)]) == 0


def test_init_quotes_a_docs_folder_and_changelog_of_any_name(tmp_path: Path) -> None:
    # The folder's and the changelog's names come from the adopter's layout: YAML must read
    # them back as themselves, and the docs hook's pattern must match exactly those files.
    import re

    import yaml

    folder = "my docs: 'x' #1"
    (tmp_path / "wpgate.toml").write_text(
        f'[docs]\nprovenance = "{folder}/PROVENANCE.md"\nchangelog = "NEWS.md"\n'
        f'claims = ["{folder}/**/*.md"]\n',
        encoding="utf-8",
    )
    assert main(["init", "--root", str(tmp_path), "--name", "n"]) == 0
    mkdocs = yaml.safe_load((tmp_path / "mkdocs.yml").read_text(encoding="utf-8"))
    assert mkdocs["docs_dir"] == folder
    hooks = yaml.safe_load((tmp_path / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    (docs_hook,) = [h for h in hooks["repos"][0]["hooks"] if h["id"] == "wpgate-docs"]
    pattern = re.compile(docs_hook["files"])
    assert pattern.match(f"{folder}/PROVENANCE.md")
    assert pattern.match("NEWS.md")
    assert not pattern.match("NEWSxmd")
    assert not pattern.match("src/NEWS.md")


def test_init_refuses_a_malformed_pyproject(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool\n", encoding="utf-8")
    assert main(["init", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    # One line, one reason, one fix: the parser's message is not wrapped in a second one.
    assert re.fullmatch(
        r"wpgate: error: pyproject\.toml: is not valid TOML \([^\n]*\); fix the syntax; then "
        r"run `wpgate init` again\n",
        err,
    )
    assert err.count("is not valid TOML") == err.count("fix") == 1
    assert not (tmp_path / "mkdocs.yml").exists()


@pytest.mark.parametrize(
    ("name", "text", "start"),
    [
        ("pyproject.toml", "[tool.wpgate.docs]\nwork_packages = 3\n", "pyproject.toml: "),
        ("wpgate.toml", "[docs]\nwork_packages = 3\n", "wpgate.toml: "),
    ],
)
def test_init_names_the_bad_key_of_the_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, start: str
) -> None:
    (tmp_path / name).write_text(text, encoding="utf-8")
    assert main(["init", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"wpgate: error: {start}")
    assert "work_packages: must be a string" in err
    assert err.endswith("; then run `wpgate init` again\n")


def test_new_wp_in_a_fresh_repository_writes_its_phase_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "--root", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["new-wp", "001", "--title", "One", "--phase", "2", "--root", str(tmp_path)]) == 0
    written = capsys.readouterr().out.split()
    assert written == ["docs/work_packages/wp-001.md", "docs/engineering/phase-02.md"]
    assert main(["wp", "--root", str(tmp_path)]) == 0
    # Once a phase page exists, a typo in the phase is refused instead of a second page.
    assert main(["new-wp", "002", "--title", "Two", "--phase", "3", "--root", str(tmp_path)]) == 2
    assert "write docs/engineering/phase-03.md first" in capsys.readouterr().err


def test_check_counts_no_page_when_the_registry_folder_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["wp", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "WPG303" in out
    assert "0 pages checked" in out


@pytest.mark.slow
def test_fresh_repository_checks_builds_and_commits_through_the_hooks(tmp_path: Path) -> None:
    missing = [m for m in ("mkdocs", "material", "pre_commit") if _tool_missing(m)]
    if missing and not _IN_CI:
        pytest.skip(f"needs {', '.join(missing)} (pip install -e '.[docs,dev]')")
    root = new_repository(tmp_path)
    env = {
        **os.environ,
        "PATH": f"{_BIN}{os.pathsep}{os.environ['PATH']}",
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-cache"),
        "NO_MKDOCS_2_WARNING": "1",
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, check=False)

    assert run(sys.executable, "-m", "wpgate", "init").returncode == 0
    done = run(sys.executable, "-m", "wpgate", "check")
    assert done.returncode == 0, done.stdout + done.stderr
    new_wp = run(sys.executable, "-m", "wpgate", "new-wp", "001", "--title", "T", "--phase", "1")
    assert new_wp.returncode == 0, new_wp.stderr
    done = run(sys.executable, "-m", "wpgate", "check")
    assert done.returncode == 0, done.stdout + done.stderr
    build = run(sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", "../site")
    assert build.returncode == 0, build.stderr
    assert (tmp_path / "site" / "roadmap" / "index.html").is_file()

    install = run(sys.executable, "-m", "pre_commit", "install")
    assert install.returncode == 0, install.stdout + install.stderr
    (root / "tests").mkdir()
    (root / "tests/test_smoke.py").write_text("def test_smoke():\n    pass\n", encoding="utf-8")
    git(root, "add", "-A")
    # The commit-msg hook refuses a message without trailers...
    bad = run("git", "commit", "-q", "-m", "chore: bootstrap wpgate")
    assert bad.returncode != 0
    assert "WPG104" in bad.stdout + bad.stderr
    # ...and lets a governed one through, after the docs hook ran on the new pages.
    message = (
        "chore: bootstrap wpgate\n\nWP: 001\nProvenance: none (scaffold from wpgate init)\n"
        "Gate: tests/test_smoke.py::test_smoke\n"
    )
    good = run("git", "commit", "-q", "-m", message)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "wpgate docs" in good.stdout + good.stderr
    assert git(root, "log", "--format=%s") == "chore: bootstrap wpgate"


def _files(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def test_detect_languages_by_marker_and_test_files(tmp_path: Path) -> None:
    assert detect_languages(tmp_path) == ()
    _files(
        tmp_path,
        {
            "go.mod": "module x\n",
            "web/app.spec.ts": "",
            "test/cli.bats": "",
            "node_modules/dep/setup.py": "",  # dependencies are not the repository's languages
            ".hidden/Cargo.toml": "",
        },
    )
    assert detect_languages(tmp_path) == ("go", "javascript", "bats")


def test_init_writes_a_wpgate_toml_with_the_languages_found(tmp_path: Path) -> None:
    _files(tmp_path, {"Cargo.toml": "[package]\n", "src/lib.rs": ""})
    assert main(["init", "--root", str(tmp_path)]) == 0
    assert not (tmp_path / "pyproject.toml").exists()
    config = load_config(tmp_path)
    assert config.source == "wpgate.toml"
    assert GateOptions.from_config(config).languages == ("rust",)
    assert TrailerOptions.from_config(config).required == ("WP", "Provenance", "Gate")
    assert "#   Gate: src/lib.rs::tests::it_works" in (tmp_path / "wpgate.toml").read_text()


def test_init_without_tests_does_not_require_a_gate(tmp_path: Path) -> None:
    for pyproject in (False, True):
        text = config_text((), pyproject=pyproject)
        data = tomllib.loads(text)
        table = data["tool"]["wpgate"] if pyproject else data
        assert table["trailers"]["required"] == ["WP", "Provenance"]
        assert table["gates"]["languages"] == list(GATE_LANGUAGES)
        # Nothing was found: the comment says so instead of claiming the five were.
        assert (
            "# The test files a `Gate:` may name: `wpgate init` found none in this repository,\n"
            "# so every language is listed as a start (keep those it will use):\n"
        ) in text
        assert "found in this repository by `wpgate init`:" not in text


def test_init_says_which_languages_it_found(tmp_path: Path) -> None:
    text = config_text(("go",), pyproject=False)
    assert (
        "# The test files a `Gate:` may name, found in this repository by `wpgate init`:\n"
        "#   Gate: pkg/x_test.go::TestY\n"
        'languages = ["go"]\n'
    ) in text


def test_init_writes_a_pull_request_template_that_keeps_the_clean_room_statement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "--root", str(tmp_path)]) == 0
    template = tmp_path / ".github/pull_request_template.md"
    body = template.read_text(encoding="utf-8")
    statement = TrailerOptions().clean_room_statement
    assert f"\n{statement} this change was written from specifications" in body
    capsys.readouterr()
    # The guide's CI step: title, blank line, body; the author adds the trailers at the end.
    pr = tmp_path / "pr.txt"
    trailers = "WP: none\nProvenance: none (our own design)\n"
    pr.write_text(f"feat: a change\n\n{body}\n{trailers}", encoding="utf-8")
    assert main(["trailers", "--pr", str(pr), "--root", str(tmp_path)]) == 0, capsys.readouterr()
    # Without the statement, WPG109 fails the pull request.
    pr.write_text(f"feat: a change\n\nA change.\n\n{trailers}", encoding="utf-8")
    assert main(["trailers", "--pr", str(pr), "--root", str(tmp_path)]) == 1
    assert "WPG109" in capsys.readouterr().out
    # An edited template is kept, as every other file init writes.
    template.write_text("mine\n", encoding="utf-8")
    assert main(["init", "--root", str(tmp_path)]) == 0
    assert "kept  .github/pull_request_template.md (exists)" in capsys.readouterr().out
    assert template.read_text(encoding="utf-8") == "mine\n"


def test_init_writes_the_configured_clean_room_statement_into_the_template(
    tmp_path: Path,
) -> None:
    (tmp_path / "wpgate.toml").write_text(
        '[trailers]\nclean_room_statement = "Sources declared:"\n', encoding="utf-8"
    )
    assert main(["init", "--root", str(tmp_path)]) == 0
    body = (tmp_path / ".github/pull_request_template.md").read_text(encoding="utf-8")
    assert "\nSources declared: this change" in body
    assert TrailerOptions().clean_room_statement not in body


_SITE_NAMES = [
    "My Project: v2",
    "#hash",
    "a # comment",
    "'single' and \"double\" quotes",
    "back\\slash \\n",
    "Ünïcødé — 名前 🚀",
    "*emphasis* _under_ `code` [link](x) <b>bold</b> &amp; {: .cls} 1. +-!",
    "- a list item?",
    "null",
    "yes",
    "@at %percent &anchor *alias |pipe >fold",
]


@pytest.mark.parametrize("name", _SITE_NAMES)
def test_init_writes_any_printable_site_name_as_itself(tmp_path: Path, name: str) -> None:
    import yaml

    assert main(["init", "--root", str(tmp_path), "--name", name]) == 0
    site = yaml.safe_load((tmp_path / "mkdocs.yml").read_text(encoding="utf-8"))
    assert site["site_name"] == name
    assert site["docs_dir"] == "docs"
    heading = (tmp_path / "docs/index.md").read_text(encoding="utf-8").splitlines()[0]
    markdown = pytest.importorskip("markdown")
    rendered = markdown.markdown(heading, extensions=["attr_list"])
    assert rendered == f"<h1>{html.escape(name, quote=False)}</h1>"


@pytest.mark.parametrize(
    ("name", "shown", "code"),
    [
        ("My\nProject", "'My\\nProject'", "U+000A"),
        ("tab\there", "'tab\\there'", "U+0009"),
        ("bell\a", "'bell\\x07'", "U+0007"),
        ("line\u2028separator", "'line\\u2028separator'", "U+2028"),
    ],
    ids=["newline", "tab", "bell", "line-separator"],
)
def test_init_refuses_a_site_name_with_a_control_character(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, shown: str, code: str
) -> None:
    assert main(["init", "--root", str(tmp_path), "--name", name]) == 2
    assert capsys.readouterr().err == (
        f"wpgate: error: --name {shown} holds the control character {code}; pass --name with "
        "the site's name on one line of printable characters\n"
    )
    assert not list(tmp_path.iterdir())  # nothing written


def test_init_refuses_a_folder_name_with_a_control_character(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "two\nlines"
    root.mkdir()
    assert main(["init", "--root", str(root)]) == 2
    assert capsys.readouterr().err == (
        "wpgate: error: the folder's name 'two\\nlines' holds the control character U+000A; "
        "pass --name with the site's name on one line of printable characters\n"
    )
    assert main(["init", "--root", str(root), "--name", "Two lines"]) == 0


def test_init_ignores_the_built_site_once(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("*.log", encoding="utf-8")
    assert main(["init", "--root", str(tmp_path)]) == 0
    assert (tmp_path / ".gitignore").read_text(encoding="utf-8").splitlines() == [
        "*.log",
        "",
        "# The site mkdocs builds (`mkdocs build`); the wpgate plugin writes nothing else.",
        "/site/",
    ]
    before = (tmp_path / ".gitignore").read_text(encoding="utf-8")
    assert main(["init", "--root", str(tmp_path)]) == 0
    assert (tmp_path / ".gitignore").read_text(encoding="utf-8") == before
    other = tmp_path / "other"
    other.mkdir()
    (other / ".gitignore").write_text("site/\n", encoding="utf-8")
    assert main(["init", "--root", str(other)]) == 0
    assert (other / ".gitignore").read_text(encoding="utf-8") == "site/\n"


def _init_in_subprocess(root: Path) -> subprocess.CompletedProcess[str]:
    """``wpgate init --root ROOT`` in a child process with a deadline (a plain read of a FIFO
    waits for a writer and /dev/zero never ends: a hang fails the test instead)."""
    return subprocess.run(
        [sys.executable, "-m", "wpgate", "init", "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")},
        check=False,
    )


def _make_gitignore_fifo(root: Path) -> None:
    os.mkfifo(root / ".gitignore")


def _link_gitignore_to_dev_zero(root: Path) -> None:
    (root / ".gitignore").symlink_to("/dev/zero")


def _write_latin1_gitignore(root: Path) -> None:
    (root / ".gitignore").write_bytes(b"caf\xe9/\n")


def _link_mkdocs_yml_to_nothing(root: Path) -> None:
    (root / "mkdocs.yml").symlink_to(root.parent / "outside.yml")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and /dev/zero")
@pytest.mark.parametrize(
    ("make", "error"),
    [
        (
            _make_gitignore_fifo,
            ".gitignore is a FIFO (named pipe), not a regular file; replace it; then run "
            "`wpgate init` again",
        ),
        (
            _link_gitignore_to_dev_zero,
            ".gitignore is a symbolic link that leads out of the repository (to /dev/zero); "
            "replace it with the file itself; then run `wpgate init` again",
        ),
        (
            _write_latin1_gitignore,
            ".gitignore is not valid UTF-8 (byte 3); re-save it as UTF-8, then run "
            "`wpgate init` again",
        ),
        (
            _link_mkdocs_yml_to_nothing,
            "mkdocs.yml is a symbolic link to {outside}, which does not exist; remove the "
            "link, then run `wpgate init` again",
        ),
    ],
    ids=["fifo", "dev-zero", "latin-1", "link-to-nothing"],
)
def test_init_refuses_a_file_it_cannot_add_to_before_writing_anything(
    tmp_path: Path, make: Callable[[Path], None], error: str
) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    make(root)
    before = sorted(p.name for p in root.iterdir())
    done = _init_in_subprocess(root)
    assert done.returncode == 2, done.stdout + done.stderr
    outside = tmp_path / "outside.yml"
    assert done.stderr == f"wpgate: error: {error.format(outside=outside)}\n"
    assert sorted(p.name for p in root.iterdir()) == before  # nothing written
    assert not outside.exists()  # never written through the link


def test_init_keeps_an_existing_wpgate_toml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n', encoding="utf-8")
    (tmp_path / ".wpgate.toml").write_text('[docs]\nprovenance = "notes/PROVENANCE.md"\n')
    assert main(["init", "--root", str(tmp_path)]) == 0
    assert "kept  .wpgate.toml (exists)" in capsys.readouterr().out
    assert (tmp_path / "pyproject.toml").read_text(encoding="utf-8") == '[project]\nname = "x"\n'
    assert (tmp_path / "notes/PROVENANCE.md").is_file()


# A Go, a Rust and a JavaScript repository: its files, a gate that names a test in them and one
# that names a test they lack. No toolchain is needed: gates resolve statically.
_ADOPTERS = {
    "go": (
        {
            "go.mod": "module example.com/calc\n\ngo 1.22\n",
            "calc/add.go": "package calc\n\nfunc Add(a, b int) int { return a + b }\n",
            "calc/add_test.go": (
                'package calc\n\nimport "testing"\n\n'
                'func TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal("sum")\n\t}\n}\n'
            ),
        },
        "calc/add_test.go::TestAdd",
        "calc/add_test.go::TestSubtract",
    ),
    "rust": (
        {
            "Cargo.toml": '[package]\nname = "calc"\nversion = "0.1.0"\nedition = "2021"\n',
            "src/lib.rs": (
                "pub fn add(a: i32, b: i32) -> i32 { a + b }\n\n#[cfg(test)]\nmod tests {\n"
                "    use super::*;\n\n    #[test]\n    fn adds() { assert_eq!(add(1, 2), 3); }\n}\n"
            ),
        },
        "src/lib.rs::tests::adds",
        "src/lib.rs::tests::subtracts",
    ),
    "javascript": (
        {
            "package.json": '{"name": "calc", "scripts": {"test": "node --test"}}\n',
            "sum.js": "module.exports = (a, b) => a + b;\n",
            "test/sum.test.js": (
                'const test = require("node:test");\nconst sum = require("../sum");\n\n'
                'test("adds two numbers", () => {\n  if (sum(1, 2) !== 3) throw new Error();\n});\n'
            ),
        },
        'test/sum.test.js::"adds two numbers"',
        'test/sum.test.js::"subtracts"',
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("language", sorted(_ADOPTERS))
def test_a_repository_in_another_language_adopts_wpgate_through_the_hooks(
    tmp_path: Path, language: str
) -> None:
    if _tool_missing("pre_commit") and not _IN_CI:
        pytest.skip("needs pre-commit (pip install -e '.[dev]')")
    import wpgate

    files, good_gate, missing_gate = _ADOPTERS[language]
    root = _files(new_repository(tmp_path), files)
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(root, "remote", "add", "origin", str(remote))
    env = {
        **os.environ,
        "PATH": f"{_BIN}{os.pathsep}{os.environ['PATH']}",
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-cache"),
        # The hooks run `wpgate` from PATH: make it this tree's wpgate, the code under test.
        "PYTHONPATH": str(Path(wpgate.__file__).resolve().parents[1]),
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, check=False)

    init = run(sys.executable, "-m", "wpgate", "init")
    assert init.returncode == 0, init.stderr
    assert load_config(root).source == "wpgate.toml"  # no pyproject.toml in this repository
    assert "/site/" in (root / ".gitignore").read_text(encoding="utf-8").splitlines()
    new_wp = run(sys.executable, "-m", "wpgate", "new-wp", "001", "--title", "T", "--phase", "1")
    assert new_wp.returncode == 0, new_wp.stderr
    install = run(sys.executable, "-m", "pre_commit", "install")
    assert install.returncode == 0, install.stdout + install.stderr
    git(root, "add", "-A")

    def message(gate: str) -> str:
        return f"chore: adopt wpgate\n\nWP: 001\nProvenance: none (wpgate init)\nGate: {gate}\n"

    refused = run("git", "commit", "-q", "-m", message(missing_gate))
    assert refused.returncode != 0
    output = refused.stdout + refused.stderr
    assert "WPG107" in output
    assert "is not a test in" in output
    assert run("git", "rev-parse", "--verify", "-q", "HEAD").returncode != 0  # nothing committed
    good = run("git", "commit", "-q", "-m", message(good_gate))
    assert good.returncode == 0, good.stdout + good.stderr
    assert git(root, "log", "--format=%s") == "chore: adopt wpgate"
    # An ungoverned commit, then a push to a remote this clone has no tracking refs of: with no
    # history_start the pre-push hook skips the trailer lint instead of linting all history.
    assert run("git", "commit", "-q", "--no-verify", "--allow-empty", "-m", "wip").returncode == 0
    pushed = run("git", "push", "-q", "origin", "main")
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    # pre-commit hides a passing hook's output unless the hook is verbose: the line saying how
    # to enable the lint must reach the adopter.
    assert "--pushed skipped: history_start is not set" in pushed.stdout + pushed.stderr


def _link_docs_out(root: Path) -> None:
    (root.parent / "elsewhere").mkdir()
    (root / "docs").symlink_to(root.parent / "elsewhere")


def _link_work_packages_out(root: Path) -> None:
    (root.parent / "elsewhere").mkdir()
    (root / "docs").mkdir()
    (root / "docs/work_packages").symlink_to(root.parent / "elsewhere")


def _docs_is_a_file(root: Path) -> None:
    (root / "docs").write_text("not a folder\n", encoding="utf-8")


def _link_changelog_out(root: Path) -> None:
    (root.parent / "elsewhere").mkdir()
    (root.parent / "elsewhere/CHANGELOG.md").write_text("# theirs\n", encoding="utf-8")
    (root / "CHANGELOG.md").symlink_to(root.parent / "elsewhere/CHANGELOG.md")


def _changelog_fifo(root: Path) -> None:
    os.mkfifo(root / "CHANGELOG.md")


def _index_is_a_directory(root: Path) -> None:
    (root / "docs/index.md").mkdir(parents=True)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and symbolic links")
@pytest.mark.parametrize(
    ("make", "error"),
    [
        (
            _link_docs_out,
            "docs is a symbolic link that leads out of the repository (to {elsewhere}), so "
            "docs/PROVENANCE.md would be written outside it; replace the link with a folder, "
            "then run `wpgate init` again",
        ),
        (
            _link_work_packages_out,
            "docs/work_packages is a symbolic link that leads out of the repository (to "
            "{elsewhere}), so docs/work_packages/index.md would be written outside it; replace "
            "the link with a folder, then run `wpgate init` again",
        ),
        (
            _docs_is_a_file,
            "docs is a file, not a folder, so docs/PROVENANCE.md cannot go in it; then run "
            "`wpgate init` again",
        ),
        (
            _link_changelog_out,
            "CHANGELOG.md is a symbolic link that leads out of the repository (to "
            "{elsewhere}/CHANGELOG.md); replace it with the file itself; then run `wpgate init` "
            "again",
        ),
        (
            _changelog_fifo,
            "CHANGELOG.md is a FIFO (named pipe), not a regular file; replace it; then run "
            "`wpgate init` again",
        ),
        (
            _index_is_a_directory,
            "docs/index.md is a directory, not a regular file; replace it; then run "
            "`wpgate init` again",
        ),
    ],
    ids=["docs-out", "registry-out", "docs-file", "changelog-out", "fifo", "directory"],
)
def test_init_refuses_a_path_it_cannot_write_through_before_writing_anything(
    tmp_path: Path, make: Callable[[Path], None], error: str
) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    make(root)

    def tree() -> list[str]:
        return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))

    before = tree()
    done = _init_in_subprocess(root)
    assert done.returncode == 2, done.stdout + done.stderr
    elsewhere = (tmp_path / "elsewhere").resolve()
    assert done.stderr == f"wpgate: error: {error.format(elsewhere=elsewhere)}\n"
    assert tree() == before  # nothing written, in the repository or outside it


_USER_HOOKS = (
    "repos:\n  - repo: https://example.com/hooks\n    rev: v1\n    hooks:\n      - id: x\n"
)


def test_init_says_which_hooks_to_add_to_a_pre_commit_config_without_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".wpgate.toml").write_text(
        '[docs]\nprovenance = "notes/PROVENANCE.md"\nchangelog = "HISTORY.md"\n', encoding="utf-8"
    )
    (tmp_path / ".pre-commit-config.yaml").write_text(_USER_HOOKS, encoding="utf-8")
    assert main(["init", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / ".pre-commit-config.yaml").read_text(encoding="utf-8") == _USER_HOOKS
    assert "kept  .pre-commit-config.yaml (exists)" in out
    assert ".pre-commit-config.yaml exists without wpgate's hooks" in out
    block = out[out.index("  - repo: local") : out.index("Then install")]
    # What is printed is what init would have written, for this repository's layout: pasted
    # under `repos:` it makes the three hooks.
    import yaml

    hooks = yaml.safe_load("repos:\n" + block)["repos"][0]["hooks"]
    assert [h["id"] for h in hooks] == ["wpgate-docs", "wpgate-trailers", "wpgate-history"]
    assert hooks[0]["files"] == r"^(notes/|HISTORY\.md$)"
    assert "pre-commit install -t pre-commit -t commit-msg -t pre-push" in out


def test_init_says_nothing_of_a_pre_commit_config_that_has_wpgates_hooks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _USER_HOOKS + "  - repo: local\n    hooks:\n      - id: wpgate-trailers\n"
    (tmp_path / ".pre-commit-config.yaml").write_text(text, encoding="utf-8")
    assert main(["init", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "kept  .pre-commit-config.yaml (exists)" in out
    assert "wpgate's hooks" not in out
    assert "repo: local" not in out
    assert (tmp_path / ".pre-commit-config.yaml").read_text(encoding="utf-8") == text


def test_init_in_a_sub_project_says_what_to_add_at_the_top_of_the_work_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pre-commit and GitHub read their files at the top of the work tree: init for a
    sub-project writes neither under its root, and prints the hooks for the top, each run with
    the sub-project's --root (quoted for its space) and the docs hook's pattern under it."""
    git(tmp_path, "init", "-q")
    sub = tmp_path / "services" / "my api"
    sub.mkdir(parents=True)
    assert main(["init", "--root", str(sub)]) == 0
    out = capsys.readouterr().out
    assert not (sub / ".pre-commit-config.yaml").exists()
    assert not (sub / ".github").exists()
    assert not (tmp_path / ".pre-commit-config.yaml").exists()  # nothing outside --root
    assert "services/my api is below the top of the git work tree" in out
    block = out[out.index("  - repo: local") : out.index("then `pre-commit install")]
    import yaml

    hooks = yaml.safe_load("repos:\n" + block)["repos"][0]["hooks"]
    assert [(h["id"], h["entry"]) for h in hooks] == [
        ("wpgate-docs", "wpgate docs --root 'services/my api'"),
        ("wpgate-trailers", "wpgate trailers --root 'services/my api'"),
        ("wpgate-history", "wpgate trailers --pushed --root 'services/my api'"),
    ]
    assert re.match(hooks[0]["files"], "services/my api/docs/PROVENANCE.md")
    assert re.match(hooks[0]["files"], "services/my api/CHANGELOG.md")
    assert not re.match(hooks[0]["files"], "docs/PROVENANCE.md")
    assert "Clean-room acknowledged:" in out[out.index("pull_request_template.md") :]


@pytest.mark.parametrize(
    ("mkdocs", "advised"),
    [
        ("site_name: x\nplugins:\n  - search\n", True),
        ("site_name: x\n", True),
        ("site_name: x\nplugins:\n  - search\n  - wpgate\n", False),
        ("site_name: x\nplugins:\n  - wpgate:\n      enabled: true\n", False),
        ("site_name: x\nplugins:\n  search: {}\n  wpgate: {}\n", False),
    ],
)
def test_init_says_how_to_add_the_plugin_to_a_kept_mkdocs_yml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mkdocs: str, advised: bool
) -> None:
    (tmp_path / "mkdocs.yml").write_text(mkdocs, encoding="utf-8")
    assert main(["init", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "mkdocs.yml").read_text(encoding="utf-8") == mkdocs
    assert ("mkdocs.yml exists without the wpgate plugin" in out) is advised
    if advised:
        import yaml

        block = out[out.index("theme:\n") : out.index("next:")]
        assert yaml.safe_load(block) == {
            "theme": {"name": "material"},
            "plugins": ["search", "wpgate"],
        }


def test_init_refuses_a_blank_site_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--root", str(tmp_path), "--name", "   "]) == 2
    assert "'   ' is blank; pass --name with the site's name" in capsys.readouterr().err
    assert not (tmp_path / "mkdocs.yml").exists()


def test_a_project_file_without_test_files_does_not_require_a_gate(tmp_path: Path) -> None:
    """Found by an outside audit: a `pyproject.toml` alone made init require `Gate`, so the
    first commit of a repository with no tests failed WPG107 (the guide says it would not)."""
    _files(tmp_path, {"pyproject.toml": '[project]\nname = "x"\nversion = "0"\n'})
    assert survey(tmp_path) == (("python",), False)
    assert main(["init", "--root", str(tmp_path)]) == 0
    config = load_config(tmp_path)
    assert TrailerOptions.from_config(config).required == ("WP", "Provenance")
    assert GateOptions.from_config(config).languages == ("python",)
    text = (tmp_path / "pyproject.toml").read_text(encoding="utf-8")
    assert '#   (no test files yet: add "Gate" to `required` once there are tests)' in text
    _files(tmp_path / "again", {"pyproject.toml": "", "tests/test_a.py": ""})
    assert survey(tmp_path / "again") == (("python",), True)
