"""Evidence rules on fixture repositories: one test per rule, with exact findings."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from git_helpers import isolated_git

from wpgate._config import Config
from wpgate._docs import lint_evidence
from wpgate._evidence_tree import load_evidence
from wpgate._model import Finding
from wpgate.docs_options import EvidenceOptions
from wpgate.rules import evidence as rules

PAGE = "docs/page.md"


def _commit(root: Path, message: str) -> str:
    isolated_git(root, "add", "-A")
    isolated_git(root, "commit", "-q", "-m", message)
    return isolated_git(root, "rev-parse", "HEAD")


def _evidence(root: Path, commit: str | None, name: str = "a.json", **extra: object) -> None:
    digest = hashlib.sha256((root / "src/m.py").read_bytes()).hexdigest()
    document: dict[str, object] = {
        "schema": "wpgate-evidence/1",
        "environment": {"torch": "2.9.1+cu129", "gpu": "NVIDIA H200"},
        "git_commit": commit,
        "sources": {"src/m.py": digest},
        "results": {
            "step": {"median_ms": 188.0952, "min_ms": 187.93, "max_ms": 192.7},
            "saved": 0.1001,
            "repeats": 5,
        },
    }
    document.update(extra)
    (root / "docs/evidence").mkdir(parents=True, exist_ok=True)
    (root / "docs/evidence" / name).write_text(json.dumps(document, indent=2), encoding="utf-8")


def _page(root: Path, claim: str) -> None:
    (root / PAGE).write_text(f"# Page\n\nIntro.\n\n{claim}\n", encoding="utf-8")


CLAIM = (
    "[MEASURED] Five runs on torch 2.9.1, an NVIDIA H200: 188.1 ms (187.9–192.7) per step, "
    "10.01% saved ([evidence](evidence/a.json))."
)


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose first commit holds the measured source, its evidence and a claim."""
    isolated_git(tmp_path, "init", "-q")
    (tmp_path / "src").mkdir()
    (tmp_path / "src/m.py").write_text("X = 1\n", encoding="utf-8")
    first = _commit(tmp_path, "feat: m")
    _evidence(tmp_path, first)
    _page(tmp_path, CLAIM)
    _commit(tmp_path, "docs: evidence")
    return tmp_path, first


def _ids(findings: list[Finding]) -> list[tuple[str, int, str]]:
    return [(f.path, f.line, f.rule_id) for f in findings]


def test_clean_claim(repo: tuple[Path, str]) -> None:
    root, _ = repo
    assert lint_evidence(root) == []


def test_a_link_to_a_page_in_a_claim_is_no_citation(repo: tuple[Path, str]) -> None:
    """An audit: `see [the roadmap](ROADMAP.md)` beside the evidence link was taken as a
    citation of a missing evidence file (WPG403). Only a link to a .json file cites."""
    root, _ = repo
    _page(root, CLAIM.replace("))", "); see [the roadmap](ROADMAP.md#phase-1) and [x](y.md))"))
    assert lint_evidence(root) == []
    _page(root, "[MEASURED] 188.1 ms, see [the roadmap](ROADMAP.md).")  # and no evidence at all
    assert [f.rule_id for f in lint_evidence(root)] == ["WPG401"]


def test_wpg401_claim_without_evidence_and_json_outside_the_folder(repo: tuple[Path, str]) -> None:
    root, _ = repo
    (root / "other.json").write_text("{}", encoding="utf-8")
    _page(root, "[MEASURED] No citation at all.\n\n[MEASURED] Wrong place `other.json`.")
    findings = lint_evidence(root)
    assert _ids(findings) == [(PAGE, 5, "WPG401"), (PAGE, 7, "WPG401")]
    assert "cites no evidence file" in findings[0].message
    assert "is not under docs/evidence/" in findings[1].message


def test_a_link_written_from_the_root_is_fixed_to_the_one_relative_to_its_page(
    repo: tuple[Path, str],
) -> None:
    # docs/page.md linking `docs/evidence/a.json` means docs/docs/evidence/a.json: the fix is
    # the link that reaches the file of that name from the page, not a file written there.
    root, _ = repo
    _page(root, "[MEASURED] 188.1 ms ([evidence](docs/evidence/a.json)).")
    findings = lint_evidence(root)
    assert _ids(findings) == [(PAGE, 5, "WPG401"), (PAGE, 5, "WPG403")]
    fix = "docs/evidence/a.json exists: link it as [evidence](evidence/a.json)"
    assert findings[0].message == (
        "`docs/evidence/a.json` resolves to docs/docs/evidence/a.json, which is not under "
        f"docs/evidence/ (a link is relative to its page); {fix}"
    )
    assert findings[1].message.endswith(f"which does not exist; {fix}")
    # A claim with no citation is shown the link from its own page.
    (root / "docs/work_packages").mkdir()
    (root / "docs/work_packages/wp-001.md").write_text(
        "# WP\n\n[MEASURED] No citation.\n", encoding="utf-8"
    )
    nested = [f for f in lint_evidence(root) if f.path == "docs/work_packages/wp-001.md"]
    assert len(nested) == 1
    assert "(from this page: [evidence](../evidence/<file>.json))" in nested[0].message


def test_wpg402_hostile_citations_are_refused(
    repo: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    root, _ = repo
    outside = tmp_path_factory.mktemp("outside") / "secret.json"
    outside.write_text("{}", encoding="utf-8")
    (root / "docs/evidence/link.json").symlink_to(outside)
    _page(
        root,
        "[MEASURED] 1 [a](../../etc/secret.json)\n[b](/etc/secret.json)\n[c](evidence/link.json)\n"
        "`docs/../../x.json`",
    )
    findings = lint_evidence(root)
    refused = [(f.line, f.message) for f in findings if f.rule_id == "WPG402"]
    assert refused == [
        (
            5,
            "citation refused: `../../etc/secret.json` leads out of the repository; cite a file "
            "inside it",
        ),
        (
            6,
            "citation refused: `/etc/secret.json` is an absolute path; cite a path inside the "
            "repository",
        ),
        (
            7,
            "citation refused: `evidence/link.json` is a link that leads out of the repository; "
            "cite a real file",
        ),
        (
            8,
            "citation refused: `docs/../../x.json` uses `..`; cite the file without leaving its "
            "directory tree",
        ),
    ]
    tree = load_evidence(root)
    assert tree.files["docs/evidence/link.json"].evidence is None  # never read through the link


def test_an_evidence_file_that_links_out_of_the_repository_is_a_finding(
    repo: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """An audit: an uncited link under docs/evidence/ to a file outside was skipped in silence,
    while a linked page was flagged."""
    root, _ = repo
    outside = tmp_path_factory.mktemp("outside") / "secret.json"
    outside.write_text("{}", encoding="utf-8")
    (root / "docs/evidence/away.json").symlink_to(outside)
    assert [(f.path, f.rule_id) for f in lint_evidence(root)] == [
        ("docs/evidence/away.json", "WPG404")
    ]


def test_an_evidence_file_that_links_out_is_told_as_a_linked_page_is(
    repo: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """An audit: the finding for a link under docs/evidence/ to a file outside said "cite a real
    file", a citation's advice, for a file no claim cites; a linked page's finding names where
    the link leads and says to replace it with the file itself, and so does this one now."""
    root, _ = repo
    outside = (tmp_path_factory.mktemp("outside") / "secret.json").resolve()
    outside.write_text("{}", encoding="utf-8")
    (root / "docs/evidence/away.json").symlink_to(outside)
    page = outside.with_name("page.md")
    page.write_text("# Page\n", encoding="utf-8")
    (root / "docs/linked.md").symlink_to(page)
    found = {f.path: (f.rule_id, f.message) for f in lint_evidence(root)}
    assert found["docs/evidence/away.json"] == (
        "WPG404",
        f"docs/evidence/away.json is a symbolic link that leads out of the repository (to "
        f"{outside}); replace it with the file itself",
    )
    assert found["docs/linked.md"][1] == (
        f"docs/linked.md is a symbolic link that leads out of the repository (to {page}); "
        "replace it with the file itself"
    )


def test_wpg403_missing_file(repo: tuple[Path, str]) -> None:
    root, _ = repo
    _page(root, "[MEASURED] See [ok](../docs/evidence/a.json)\nand [it](evidence/gone.json).")
    findings = lint_evidence(root)
    assert _ids(findings) == [(PAGE, 6, "WPG403")]
    # The claim's page and line, the link as written and as resolved, and both ways out.
    assert findings[0].message == (
        "the [MEASURED] claim at docs/page.md:5 cites `evidence/gone.json`, looked for as "
        "docs/evidence/gone.json, which does not exist; write the evidence file at "
        "docs/evidence/gone.json (run the benchmark that records it) or correct the link to "
        "name an existing file"
    )


def test_wpg404_invalid_evidence_file(repo: tuple[Path, str]) -> None:
    root, _ = repo
    (root / "docs/evidence/bad.json").write_text('{"schema": "x"', encoding="utf-8")
    assert _ids(lint_evidence(root)) == [("docs/evidence/bad.json", 1, "WPG404")]


def test_wpg405_recorded_hashes_must_match_the_recorded_commit(repo: tuple[Path, str]) -> None:
    root, first = repo
    (root / "src/m.py").write_text("X = 2\n", encoding="utf-8")
    _evidence(root, first)  # hashes the modified file but records the old commit
    (root / "src/m.py").write_text("X = 1\n", encoding="utf-8")
    findings = lint_evidence(root)
    assert _ids(findings) == [("docs/evidence/a.json", 9, "WPG405"), (PAGE, 5, "WPG407")]
    assert "differs from the file at the recorded commit" in findings[0].message
    _evidence(root, first, git_dirty=True)  # declared dirty: the hashes are the anchor
    (root / "src/m.py").write_text("X = 2\n", encoding="utf-8")
    assert [f.rule_id for f in lint_evidence(root)] == ["WPG407"]
    _evidence(root, "f" * 40)
    assert "is not in this repository" in lint_evidence(root)[0].message


def test_wpg405_an_amended_commit_fails_here_as_it_does_in_a_clone(repo: tuple[Path, str]) -> None:
    root, _ = repo
    (root / "src/m.py").write_text("X = 3\n", encoding="utf-8")
    measured = _commit(root, "feat: m three")
    # The benchmark ran at `measured`; then its message was reworded (same tree, new name), and
    # the old object stays here, unreachable, while a clone lacks it.
    isolated_git(root, "commit", "-q", "--amend", "-m", "feat: m three, reworded")
    reworded = isolated_git(root, "rev-parse", "HEAD")
    assert isolated_git(root, "cat-file", "-t", measured) == "commit"
    _evidence(root, measured)
    _page(root, CLAIM + f" It covers {measured}.")
    (root / "src/m.py").write_text("X = 5\n", encoding="utf-8")  # the claim is now stale
    _commit(root, "docs: evidence at three; m moves on")
    findings = lint_evidence(root)
    assert _ids(findings) == [("docs/evidence/a.json", 1, "WPG405"), (PAGE, 5, "WPG407")]
    assert findings[0].message == (
        f"the recorded commit {measured[:12]} is here only as an unreachable object (an amend, "
        "a rebase or a reset left it behind), so a clone will not have it; "
        f'{reworded[:12]} in history has the same tree: record `"git_commit": "{reworded}"` '
        f'(keep the old name as `"git_commit_reworded_from": "{measured}"`)'
    )
    assert findings[1].message.endswith(
        f"name the commit in history with the same tree ({measured} -> {reworded})"
    )
    # The fix the message gives passes.
    (root / "src/m.py").write_text("X = 3\n", encoding="utf-8")
    _evidence(root, reworded, git_commit_reworded_from=measured)
    (root / "src/m.py").write_text("X = 5\n", encoding="utf-8")
    _page(root, CLAIM + f" It covers {reworded}.")
    assert lint_evidence(root) == []
    # With no commit of that tree in history, the way out is a new run.
    (root / "src/m.py").write_text("X = 4\n", encoding="utf-8")
    lost = _commit(root, "feat: m four")
    isolated_git(root, "reset", "-q", "--hard", "HEAD~1")
    (root / "src/m.py").write_text("X = 4\n", encoding="utf-8")
    _evidence(root, lost)
    _page(root, CLAIM)
    assert lint_evidence(root)[0].message.endswith(
        "re-run the benchmark from a commit in history, or push the branch that holds it"
    )


def test_wpg406_numbers_come_from_the_evidence(repo: tuple[Path, str]) -> None:
    root, _ = repo
    _page(
        root,
        CLAIM.replace("188.1", "188.2").replace("2.9.1", "3.0.1")
        + "\nBatch `640` px is code, so exempt.",
    )
    findings = lint_evidence(root)
    assert [(f.line, f.rule_id, f.message.split(" (")[0].split(";")[0]) for f in findings] == [
        (5, "WPG406", "188.2 is not recorded in docs/evidence/a.json"),
        (5, "WPG406", "3.0.1 does not appear in docs/evidence/a.json"),
    ]


def test_wpg406_digits_of_hashes_platforms_and_dates_are_not_measurements(
    repo: tuple[Path, str],
) -> None:
    """A number found only inside a hash, a platform string or a timestamp is a finding (the
    substring match that let these pass was found by an outside audit)."""
    root, first = repo
    _evidence(
        root,
        first,
        created="2026-12-07T10:37:00+00:00",
        environment={"torch": "2.9.1+cu129", "platform": "Linux-6.18.44-fc-x86_64"},
        results={"step": {"median_ms": 188.0952}, "label": "f29ce87a 12.5 ms over 3 rounds"},
    )
    claims = {
        "6.18 ms": True,  # the platform's kernel version
        "20 runs": True,  # the year
        "37 runs": True,  # the minute
        "29 runs": True,  # digits inside a hash
        "87 runs": True,
        "12.5 ms": False,  # a number written as a token of its own in a string counts
        "3 rounds": False,
        "188.1 ms": False,
    }
    for text, flagged in claims.items():
        _page(root, f"[MEASURED] It takes {text} ([evidence](evidence/a.json)).")
        found = [f.message for f in lint_evidence(root) if f.rule_id == "WPG406"]
        assert bool(found) is flagged, (text, found)


def test_wpg406_signs_exponents_and_the_files_metadata_are_read(repo: tuple[Path, str]) -> None:
    """Found by an outside audit: `1 ms` passed on the `1` of the schema's name, and a sign or
    an exponent was dropped, so `-7.5 ms` and `7.5e3 ms` passed on a recorded 7.5."""
    root, first = repo
    _evidence(
        root,
        first,
        command=["python", "bench.py", "--runs", "42"],
        environment={"cpu_count": 16, "torch": "2.9.1"},
        results={"t_ms": 7.5, "delta_ms": -0.25, "tolerance": 1e-05, "note": "drift -3.5 ms"},
    )
    claims = {
        "7.5 ms": False,
        "-7.5 ms": True,  # a minus sign after a space is the number's
        "(-0.25 ms)": False,
        "0.25 ms": True,
        "7.5e3 ms": True,  # 7500
        "a tolerance of 1e-5": False,  # the recorded 1e-05
        "a tolerance of 1e-6": True,
        "-3.5 ms in a string": False,
        "1 ms": True,  # only the schema's name held a 1
        "42 runs": True,  # the command's
        "16 cores": False,  # the environment's: where it ran
        "7.5-7.5 ms": False,  # a range: the hyphen joins two numbers
    }
    for text, flagged in claims.items():
        _page(root, f"[MEASURED] It takes {text} ([evidence](evidence/a.json)).")
        found = [f.message for f in lint_evidence(root) if f.rule_id == "WPG406"]
        assert bool(found) is flagged, (text, found)


def test_an_evidence_file_with_a_space_in_its_name_can_be_cited(repo: tuple[Path, str]) -> None:
    """Found by an outside audit: `<evidence/work timing.json>` cited no file and
    `evidence/work%20timing.json` a file that does not exist, though both lead to it."""
    root, first = repo
    _evidence(root, first, name="work timing.json")
    for link in ("<evidence/work timing.json>", "evidence/work%20timing.json"):
        _page(root, f"[MEASURED] It takes 188.1 ms ([evidence]({link})).")
        assert lint_evidence(root) == [], link


def test_wpg406_a_version_prefix_and_an_all_digit_commit_are_recorded(
    repo: tuple[Path, str],
) -> None:
    root, first = repo
    _evidence(root, "1234567" + first[7:])
    _page(
        root,
        "[MEASURED] On torch 2.9 (2.9.1 exactly), 188.1 ms; it ran at 1234567 "
        "([evidence](evidence/a.json)).",
    )
    assert [f.message for f in lint_evidence(root) if f.rule_id == "WPG406"] == []
    _page(root, "[MEASURED] On torch 2.8, 188.1 ms at 1234568 ([evidence](evidence/a.json)).")
    assert sorted(
        f.message.split(" is not")[0] for f in lint_evidence(root) if f.rule_id == "WPG406"
    ) == ["1234568", "2.8"]


def test_wpg407_stale_claim_unless_it_names_the_commit(repo: tuple[Path, str]) -> None:
    root, first = repo
    (root / "src/m.py").write_text("X = 3\n", encoding="utf-8")
    second = _commit(root, "perf: change m")
    (finding,) = lint_evidence(root)
    assert (finding.path, finding.line, finding.rule_id) == (PAGE, 5, "WPG407")
    assert finding.message.startswith(
        "stale claim: docs/evidence/a.json measured src/m.py as they no longer are"
    )
    _page(root, CLAIM + f" This covers {first[:7]}.")
    assert lint_evidence(root) == []
    _page(root, CLAIM + f" This covers {second[:9]}.")
    (wrong,) = lint_evidence(root)
    assert wrong.rule_id == "WPG407"
    assert f"covers {second[:9]}, but docs/evidence/a.json's source hashes" in wrong.message
    _page(root, CLAIM + " This covers deadbee.")
    (unknown,) = lint_evidence(root)
    assert "covers deadbee, which git does not know here; name a commit" in unknown.message


def test_wpg407_a_measured_file_gone_from_the_tree_is_said_to_be_missing(
    repo: tuple[Path, str],
) -> None:
    root, _ = repo
    (root / "src/m.py").unlink()
    (finding,) = lint_evidence(root)
    assert (finding.path, finding.line, finding.rule_id) == (PAGE, 5, "WPG407")
    assert finding.message == (
        "stale claim: docs/evidence/a.json measured src/m.py, which does not exist in the "
        "working tree; restore it, re-run the benchmark to refresh the evidence, or write "
        "`covers <commit>` naming the commit the measurement covers"
    )


def test_wpg408_identical_marker_verified_with_git(repo: tuple[Path, str]) -> None:
    root, first = repo
    (root / "src/m.py").write_text("X = 3\n", encoding="utf-8")
    (root / "src/n.py").write_text("Y = 1\n", encoding="utf-8")
    second = _commit(root, "perf: change m")
    claim = CLAIM + f" covers {first[:7]}. `identical {first[:7]}..{second[:7]} -- src/m.py`"
    _page(root, claim)
    (finding,) = lint_evidence(root)
    assert (finding.rule_id, finding.line) == ("WPG408", 5)
    assert finding.message.startswith(f"src/m.py differ between {first[:7]} and {second[:7]}")
    _page(root, claim.replace(f"{first[:7]}..{second[:7]}", f"{second[:7]}..HEAD"))
    _commit(root, "docs: page")
    assert lint_evidence(root) == []
    _page(root, claim.replace(first[:7] + "..", "1234567.."))
    assert "which git does not know" in lint_evidence(root)[0].message
    isolated_git(root, "commit", "-q", "--amend", "-m", "docs: page, reworded")
    reworded = isolated_git(root, "rev-parse", "HEAD")
    dropped = isolated_git(root, "rev-parse", "HEAD@{1}")  # the amended commit, unreachable
    _page(root, claim.replace(f"{first[:7]}..{second[:7]}", f"{second[:7]}..{dropped}"))
    assert lint_evidence(root)[0].message == (
        f"`identical {second[:7]}..{dropped}` names {dropped}, which is here only as an "
        "unreachable object (an amend, a rebase or a reset left it behind), so a clone will not "
        f"have it; name the commit in history with the same tree ({dropped} -> {reworded})"
    )
    _page(root, claim.replace("-- src/m.py", "-- ../../etc"))
    assert "the marker path `../../etc` uses `..`" in lint_evidence(root)[0].message


def test_wpg409_count_marker_verified_by_collecting(repo: tuple[Path, str]) -> None:
    root, _ = repo
    (root / "tests").mkdir()
    (root / "tests/test_a.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('x', [1, 2])\ndef test_a(x):\n    pass\n\n"
        "def test_b():\n    pass\n",
        encoding="utf-8",
    )
    _page(
        root,
        CLAIM + "\n`collected 4 -- tests` and, one pytest run for both, `collected 3 -- tests`.",
    )
    findings = lint_evidence(root)
    assert [(f.line, f.rule_id, f.message) for f in findings] == [
        (
            6,
            "WPG409",
            "the claim says 4 tests are collected from tests, pytest collects 3; "
            "update the number (and the sentence around it)",
        ),
    ]
    assert lint_evidence(root, collect=False) == []


def test_wpg409_a_marker_hands_pytest_paths_only_and_says_why_collection_failed(
    repo: tuple[Path, str],
) -> None:
    """Found by an outside audit: a marker's `-p x` or `--basetemp=...` reached pytest as its
    options, and a failed collection said only its summary line, not the import behind it."""
    root, _ = repo
    (root / "tests").mkdir()
    (root / "tests/test_a.py").write_text("def test_a():\n    pass\n", encoding="utf-8")
    (root / "tests/test_b.py").write_text("import no_such_module\n", encoding="utf-8")
    for marker, why in (
        ("collected 1 -- -p tests/test_a.py", "the marker path `-p` starts with `-`"),
        ("collected 1 -- --basetemp=x tests/test_a.py", "`--basetemp=x` starts with `-`"),
        ("collected 1 -- tests/test_b.py", "No module named 'no_such_module'"),
    ):
        _page(root, CLAIM + f"\n`{marker}`.")
        messages = [f.message for f in lint_evidence(root) if f.rule_id == "WPG409"]
        assert len(messages) == 1, (marker, messages)
        assert why in messages[0], (marker, messages)


def _count_finding_without_pytest(
    repo: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> Finding:
    """The WPG409 finding of a `collected` marker where Python has no pytest (git still runs)."""
    import subprocess

    root, _ = repo
    run = subprocess.run

    def no_pytest(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if args[1:3] != ["-m", "pytest"]:
            return run(args, **kwargs)  # git
        return subprocess.CompletedProcess(args, 1, "", f"{args[0]}: No module named pytest\n")

    monkeypatch.setattr(subprocess, "run", no_pytest)
    _page(root, CLAIM + "\n`collected 1 -- tests`.")
    (finding,) = [f for f in lint_evidence(root) if f.rule_id == "WPG409"]
    return finding


def test_wpg409_without_pytest_says_to_install_it_or_skip_collecting(
    repo: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An audit: the finding quoted Python's `No module named pytest` as a collection failure."""
    finding = _count_finding_without_pytest(repo, monkeypatch)
    assert "pytest is not installed for " in finding.message
    assert "install pytest there, or run `wpgate evidence --no-collect`" in finding.message


def test_wpg409_without_pytest_names_the_setting_that_check_and_the_hooks_read(
    repo: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An audit: `wpgate check`, `wpgate docs` and the docs hook take no `--no-collect`, so the
    finding names the setting that turns collecting off for them too."""
    finding = _count_finding_without_pytest(repo, monkeypatch)
    assert finding.message.endswith(
        "or run `wpgate evidence --no-collect` (for `wpgate check`, `wpgate docs` and the "
        "hooks: `collect = false` in [tool.wpgate.evidence])"
    )


@pytest.mark.parametrize(
    ("marker", "rule"),
    [
        ("identical abc1234..HEAD", "WPG408"),  # no paths
        ("identical abc1234 -- src/m.py", "WPG408"),  # no range
        ("collected x -- tests", "WPG409"),  # no number
        ("collected 3 tests", "WPG409"),  # no paths
    ],
)
def test_a_marker_that_is_not_one_in_form_is_a_finding(
    repo: tuple[Path, str], marker: str, rule: str
) -> None:
    """An audit: such code spans were taken as prose, leaving the claim unchecked."""
    root, _ = repo
    _page(root, CLAIM + f"\n`{marker}`.")
    findings = [f for f in lint_evidence(root, collect=False) if f.rule_id == rule]
    assert [f.message.split(":")[0] for f in findings] == [f"`{marker}` is not a marker"]
    _page(root, CLAIM + "\n`identically` and `collected_tests` are names, not markers.")
    assert lint_evidence(root) == []


def test_switched_off_marker_rules_never_run_git_diff_or_pytest(
    repo: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """WPG408 and WPG409 off: their git diffs and pytest collections are not run at all."""
    root, first = repo
    from wpgate import _evidence_tree

    def refuse(*_args: object) -> None:
        raise AssertionError("a switched-off rule's work ran")

    _page(root, CLAIM + f"\n`collected 4 -- src` and `identical {first[:7]}..HEAD -- src/m.py`.")
    monkeypatch.setattr(_evidence_tree, "count_collected", refuse)
    monkeypatch.setattr(_evidence_tree, "paths_identical", refuse)
    assert lint_evidence(root, Config(root).ignoring(["WPG408", "WPG409"])) == []
    with pytest.raises(AssertionError, match="switched-off"):  # control: on, they do run
        lint_evidence(root, Config(root).ignoring(["WPG408"]))
    with pytest.raises(AssertionError, match="switched-off"):
        lint_evidence(root, Config(root).ignoring(["WPG409"]))


def test_checks_are_pure_over_a_tree_without_git(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src/m.py").write_text("X = 1\n", encoding="utf-8")
    _evidence(tmp_path, None)
    _page(tmp_path, CLAIM)
    tree = load_evidence(tmp_path)
    assert tree.git is False
    assert [f for rule in rules.CHECKS for f in rule.check(tree, EvidenceOptions())] == []
    (tmp_path / "src/m.py").write_text("X = 2\n", encoding="utf-8")
    assert _ids(lint_evidence(tmp_path)) == [(PAGE, 5, "WPG407")]


def test_without_git_a_claim_that_names_its_commit_is_taken_at_its_word(
    repo: tuple[Path, str],
) -> None:
    """--no-git cannot read a commit's files: a `covers` claim is not failed for it (found by an
    outside audit: a correct claim failed WPG407 only with --no-git)."""
    root, first = repo
    (root / "src/m.py").write_text("X = 2\n", encoding="utf-8")
    second = _commit(root, "feat: m again")
    # Measured on the second commit's files before it was made (no commit recorded), and
    # claimed as covering it.
    _evidence(root, None)
    _page(root, CLAIM.replace("saved (", f"saved; covers {second[:7]} ("))
    (root / "src/m.py").write_text("X = 3\n", encoding="utf-8")  # changed since
    assert _ids(lint_evidence(root)) == []
    assert _ids(lint_evidence(root, git=False)) == []
    _page(root, CLAIM.replace("saved (", f"saved; covers {first[:7]} ("))
    assert _ids(lint_evidence(root)) == [(PAGE, 5, "WPG407")]  # git says first differs
