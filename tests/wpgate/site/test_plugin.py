"""The plugin on a fixture docs tree: a real ``mkdocs build --strict`` of a small site."""

from __future__ import annotations

import html
import json
import re
import sys
import textwrap
from pathlib import Path

import pytest
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.exceptions import Abort

from wpgate._model import RULES
from wpgate.site._roadmap import expand_icons, status_badge

EVIL = '<script>alert("wp")</script> *star* [x](y) | pipe & amp'

EVIDENCE = {
    "schema": "wpgate-evidence/1",
    "git_commit": "abcdef0123456789" * 2 + "01234567",
    "environment": {"gpu": None, "cpu": "Fixture CPU", "torch": "2.13.0"},
    "sources": {},
    "results": {
        "arms": {
            "eager": {"median_ms": 4.0, "min_ms": 3.5, "max_ms": 5.0},
            "replay": {"median_ms": 3.0, "min_ms": 2.9, "max_ms": 3.3},
        },
        "fit": {
            "batch 4": {
                "eager": {"median_s": 99.092, "min_s": 98.506, "max_s": 99.243},
                "replay": {"median_s": 79.515, "min_s": 79.141, "max_s": 80.062},
            }
        },
        "runs": [
            {"arm": "stock", "losses": [9.0, 7.5, 6.0, None, 4.0]},
            {"arm": "ours", "losses": [9.0, 7.0, 5.5, 4.5, 4.0], "notes": ["a", "b"]},
        ],
    },
}

CLI_MODULE = '''
import click

@click.group()
def cli():
    """Fixture tool."""

@cli.command()
@click.option("--fast", is_flag=True, help="Go fast.")
def run(fast):
    """Run the fixture."""
'''

API_MODULE = '''
"""Fixture API."""
import absent_dependency_of_the_fixture  # read, never imported: the page builds without it

__all__ = ["scale"]

def scale(x: float, *, by: float = 2.0) -> float:
    """Multiply ``x`` by ``by``, as :func:`fixture_api.scale` says (here * is literal).

    Args:
        x: the value.
        by: the factor.
    """
    return x * by
'''


def _page(front: dict[str, object], body: str) -> str:
    lines = ["---", *(f"{k}: {json.dumps(v)}" for k, v in front.items()), "---", "", body]
    return "\n".join(lines) + "\n"


def _write_tree(root: Path, extra_wp2_body: str = "") -> Path:
    docs = root / "docs"
    (docs / "work_packages").mkdir(parents=True)
    (docs / "engineering").mkdir()
    (docs / "evidence").mkdir()
    (docs / "index.md").write_text(
        "# Fixture\n\nSee the [roadmap](ROADMAP.md).\n", encoding="utf-8"
    )
    (docs / "engineering" / "phase-01-start.md").write_text(
        '---\nphase: 1\ntitle: "Start & <go>"\n---\n\n# Phase 1 — Start\n\nThe beginning.\n',
        encoding="utf-8",
    )
    (docs / "evidence" / "run.json").write_text(json.dumps(EVIDENCE), encoding="utf-8")
    base = {"status": "done", "gate": []}
    (docs / "work_packages" / "wp-001.md").write_text(
        _page(
            {"id": "001", "title": EVIL, "phase": 1, "depends_on": [], **base}, "# WP-001\n\nFirst."
        ),
        encoding="utf-8",
    )
    wp2_body = textwrap.dedent(
        """\
        # WP-002 — Second

        Measured.

        ```wpgate-evidence
        path: docs/evidence/run.json
        select: results.arms
        baseline: eager
        chart: true
        caption: Step time
        ```

        ```wpgate-evidence
        path: docs/evidence/run.json
        select: results.fit
        columns: [eager, replay]
        ```

        ```wpgate-evidence
        path: docs/evidence/run.json
        select: results.runs
        chart: line
        series: {stock: stock.losses, ours: ours.losses}
        x_label: iteration
        caption: Loss <per> iteration
        ```
        """
    )
    (docs / "work_packages" / "wp-002.md").write_text(
        _page(
            {
                "id": "002",
                "title": "Second",
                "phase": 1,
                "status": "in-progress",
                "depends_on": ["001"],
                "gate": [],
            },
            wp2_body + extra_wp2_body,
        ),
        encoding="utf-8",
    )
    (docs / "work_packages" / "wp-003.md").write_text(
        _page(
            {
                "id": "003",
                "title": "Third",
                "phase": 2,
                "status": "blocked",
                "depends_on": ["001", "002"],
                "gate": [],
                "reason": "needs a GPU",
            },
            "No heading here.",
        ),
        encoding="utf-8",
    )
    (root / "fixture_cli.py").write_text(CLI_MODULE, encoding="utf-8")
    (root / "fixture_api.py").write_text(API_MODULE, encoding="utf-8")
    config = root / "mkdocs.yml"
    config.write_text(
        textwrap.dedent(
            """\
            site_name: Fixture
            theme:
              name: material
              font: false
            plugins:
              - mkdocstrings:
                  handlers:
                    python:
                      paths: ["."]
                      options:
                        show_source: false
                        extensions: [wpgate.site.griffe_rst]
              - wpgate:
                  cli_group: fixture_cli:cli
                  cli_name: fixture
                  api_module: fixture_api
                  rules_module: wpgate._model
            markdown_extensions: [admonition, tables, attr_list]
            """
        ),
        encoding="utf-8",
    )
    return config


def _build(config: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(config.parent))
    site = config.parent / "site"
    build(load_config(str(config), site_dir=str(site), strict=True))
    return site


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fixture")
    config = _write_tree(root)
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _build(config, monkeypatch)


def _article(site: Path, page: str) -> str:
    text = (site / page / "index.html").read_text(encoding="utf-8")
    return text[text.index("<article") : text.index("</article>")]


def _hrefs(fragment: str) -> list[tuple[str, str]]:
    return [
        (html.unescape(re.sub(r"<[^>]+>", "", label)), href)
        for href, label in re.findall(r'<a href="([^"]+)"[^>]*>(.*?)</a>', fragment)
    ]


def _first_column(fragment: str) -> list[str]:
    return [
        _hrefs(cell)[0][1] for cell in re.findall(r"<tr>\s*<td>(.*?)</td>", fragment, re.DOTALL)
    ]


def _header(site: Path, page: str) -> str:
    article = _article(site, page)
    return article[article.index("<blockquote>") : article.index("</blockquote>")]


def test_header_of_a_dependency_shows_computed_needed_by(site: Path) -> None:
    header = _header(site, "work_packages/wp-001")
    status = header.split("Status: <strong>", 1)[1].split("</strong>", 1)[0]
    assert status == expand_icons(status_badge("done"))
    needed = header.split("Needed by", 1)[1].split("</p>", 1)[0]
    assert _hrefs(needed) == [("WP-002", "../wp-002/"), ("WP-003", "../wp-003/")]
    links = _hrefs(header)
    assert links[0] == ("Phase 1 — Start & <go>", "../../engineering/phase-01-start/")
    assert ("Roadmap", "../../roadmap/") in links
    assert ("WP-002", "../wp-002/") in links


def test_header_of_a_dependant_links_its_dependencies(site: Path) -> None:
    header = _header(site, "work_packages/wp-003")
    depends = header.split("Depends on", 1)[1].split("Needed by", 1)[0]
    assert _hrefs(depends) == [("WP-001", "../wp-001/"), ("WP-002", "../wp-002/")]
    assert "Reason: needs a GPU" in header
    # Phase 2 has no page of its own: the plugin generated one and links it.
    assert ("Phase 2", "../../engineering/phase-02/") in _hrefs(header)
    # No leading heading: the header goes on top, then the body.
    article = _article(site, "work_packages/wp-003")
    assert article.index("<blockquote>") < article.index("No heading here.")


def test_front_matter_text_is_escaped_everywhere(site: Path) -> None:
    page = (site / "work_packages" / "wp-001" / "index.html").read_text(encoding="utf-8")
    roadmap = (site / "roadmap" / "index.html").read_text(encoding="utf-8")
    for text in (page, roadmap):
        assert '<script>alert("wp")' not in text
        assert "<em>star</em>" not in text
        assert 'href="y"' not in text
    title = re.search(r"<title>(.*?)</title>", page, re.DOTALL)
    assert title is not None
    assert html.unescape(title.group(1)).startswith(f"WP-001 — {EVIL}")
    # The navigation shows the same, escaped, text.
    assert html.escape(f"WP-001 — {EVIL}") in page
    # The theme's own page-status badge does not mistake the package status for one of its own.
    assert "md-status" not in page
    # So does a phase title, which the phase page's navigation entry carries.
    assert "<go>" not in page
    assert "Phase 1 — Start &amp; &lt;go&gt;" in page


def test_roadmap_has_a_row_per_package_by_phase(site: Path) -> None:
    article = _article(site, "roadmap")
    phases = re.findall(r"<h2[^>]*>(.*?)</h2>", article, re.DOTALL)
    assert [html.unescape(re.sub(r"<[^>]+>", "", p)).strip() for p in phases] == [
        "Phase 1 — Start & <go>",
        "Phase 2",
    ]
    rows = re.findall(r"<tr>\s*<td>(.*?)</td>\s*<td>.*?</td>\s*<td>(.*?)</td>", article, re.DOTALL)
    assert [(_hrefs(link)[0][1], status) for link, status in rows] == [
        ("../work_packages/wp-001/", expand_icons(status_badge("done"))),
        ("../work_packages/wp-002/", expand_icons(status_badge("in-progress"))),
        ("../work_packages/wp-003/", expand_icons(status_badge("blocked"))),
    ]


def test_phase_pages_list_their_packages(site: Path) -> None:
    existing = _article(site, "engineering/phase-01-start")
    assert "The beginning." in existing
    assert _first_column(existing) == ["../../work_packages/wp-001/", "../../work_packages/wp-002/"]
    generated = _article(site, "engineering/phase-02")
    assert _first_column(generated) == ["../../work_packages/wp-003/"]


def test_evidence_renders_tables_chart_and_source(site: Path) -> None:
    article = _article(site, "work_packages/wp-002")
    cells = [html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", article)]
    assert cells[:6] == [
        "eager",
        "4.000 (3.500–5.000)",
        "—",
        "replay",
        "3.000 (2.900–3.300)",
        "25.00%",
    ]
    assert cells[6:] == ["batch 4", "99.092 (98.506–99.243)", "79.515 (79.141–80.062)", "19.76%"]
    assert article.count('<figure class="wpgate-chart">') == 2
    assert "<svg" in article
    # The line chart comes without a table, its caption escaped above it and under it.
    assert len(re.findall(r"<table>", article)) == 2
    assert article.count("Loss &#60;per&#62; iteration") == 1
    assert "<figcaption>Loss &lt;per&gt; iteration</figcaption>" in article
    assert ("run.json", "../../evidence/run.json") in _hrefs(article)
    assert "commit abcdef012345" in article


def test_reference_pages_are_generated(site: Path) -> None:
    cli = _article(site, "reference/cli")
    assert "fixture run" in cli
    assert "--fast" in cli
    api = _article(site, "reference/fixture_api")
    # mkdocstrings renders the page: the module's docstring, a section per member with its
    # signature and its arguments, the reST role as code.
    assert "Fixture API." in api
    assert 'id="fixture_api.scale"' in api
    assert "<code>fixture_api.scale</code> says" in api
    assert ":func:" not in api
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", api)).split())
    assert "scale ( x , * , by = 2.0 )" in text
    assert "by float the factor. 2.0" in text
    rule_pages = sorted(p.parent.name for p in (site / "reference" / "rules").glob("*/index.html"))
    assert rule_pages == sorted(r.rule_id.lower() for r in RULES)
    assert (site / "reference" / "rules" / "index.html").exists()


def test_bad_evidence_block_fails_the_strict_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    bad = "\n```wpgate-evidence\npath: docs/evidence/missing.json\n```\n"
    config = _write_tree(tmp_path, extra_wp2_body=bad)
    with pytest.raises(Abort):
        _build(config, monkeypatch)
    assert "evidence file docs/evidence/missing.json does not exist" in caplog.text
    assert "run the benchmark that writes it" in caplog.text


def test_a_bad_line_series_fails_the_strict_build_naming_file_and_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    bad = (
        "\n```wpgate-evidence\npath: docs/evidence/run.json\nselect: results.runs\n"
        "chart: line\nseries: {notes: ours.notes}\n```\n"
    )
    config = _write_tree(tmp_path, extra_wp2_body=bad)
    with pytest.raises(Abort):
        _build(config, monkeypatch)
    assert (
        "docs/evidence/run.json: results.runs.ours.notes holds 'a' at index 0, not a number"
        in caplog.text
    )


def test_evidence_outside_the_repository_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    bad = "\n```wpgate-evidence\npath: ../outside.json\n```\n"
    config = _write_tree(tmp_path, extra_wp2_body=bad)
    with pytest.raises(Abort):
        _build(config, monkeypatch)
    assert "evidence path: `../outside.json` uses `..`" in caplog.text


def test_missing_cli_module_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = _write_tree(tmp_path)
    config.write_text(
        config.read_text(encoding="utf-8").replace("fixture_cli:cli", "no_such_module:cli"),
        encoding="utf-8",
    )
    with pytest.raises(Abort):
        _build(config, monkeypatch)
    assert "wpgate: cannot import 'no_such_module' for the reference pages" in caplog.text


def test_api_page_is_read_from_source_never_imported(site: Path) -> None:
    # The fixture module imports a package that does not exist (as musgd imports torch): the
    # page was built all the same, and the module was never imported.
    assert "Fixture API." in _article(site, "reference/fixture_api")
    assert "fixture_api" not in sys.modules


def test_api_module_without_mkdocstrings_says_how_to_enable_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = _write_tree(tmp_path)
    text = config.read_text(encoding="utf-8")
    start, end = text.index("  - mkdocstrings:"), text.index("  - wpgate:")
    config.write_text(text[:start] + text[end:], encoding="utf-8")
    with pytest.raises(Abort):
        _build(config, monkeypatch)
    assert "api_module renders through mkdocstrings, which this site does not enable" in (
        caplog.text
    )


def test_a_site_without_api_module_needs_no_mkdocstrings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An adopter who does not install mkdocstrings: no api_module, no mkdocstrings plugin.
    config = _write_tree(tmp_path)
    text = config.read_text(encoding="utf-8").replace("      api_module: fixture_api\n", "")
    start, end = text.index("  - mkdocstrings:"), text.index("  - wpgate:")
    config.write_text(text[:start] + text[end:], encoding="utf-8")
    site = _build(config, monkeypatch)
    assert (site / "reference" / "cli" / "index.html").exists()
    assert not (site / "reference" / "fixture_api").exists()


def test_registry_problems_fail_the_strict_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = _write_tree(tmp_path)
    page = tmp_path / "docs" / "work_packages" / "wp-003.md"
    page.write_text(
        page.read_text(encoding="utf-8").replace('"blocked"', '"parked"'), encoding="utf-8"
    )
    with pytest.raises(Abort):
        _build(config, monkeypatch)
    assert "docs/work_packages/wp-003.md:5: WPG302 `status` 'parked' is not one of" in caplog.text


def test_invalid_evidence_file_names_the_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = _write_tree(tmp_path)
    (tmp_path / "docs" / "evidence" / "run.json").write_text(
        '{"schema": "other"}', encoding="utf-8"
    )
    with pytest.raises(Abort):
        _build(config, monkeypatch)
    assert "docs/evidence/run.json: invalid evidence file: `schema` must be" in caplog.text


def test_layout_from_pyproject_and_a_hand_written_roadmap_intro(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = "\n```wpgate-evidence\npath: bench/out.json\nselect: results.arms\n```\n"
    config = _write_tree(tmp_path, extra_wp2_body=outside)
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "out.json").write_text(json.dumps(EVIDENCE), encoding="utf-8")
    (tmp_path / "docs" / "work_packages").rename(tmp_path / "docs" / "wps")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.wpgate.docs]\nwork_packages = "docs/wps"\n', encoding="utf-8"
    )
    (tmp_path / "docs" / "ROADMAP.md").write_text("# Where we go\n\nOur plan.\n", encoding="utf-8")
    site = _build(config, monkeypatch)
    assert _first_column(_article(site, "roadmap")) == [
        "../wps/wp-001/",
        "../wps/wp-002/",
        "../wps/wp-003/",
    ]
    assert "Our plan." in _article(site, "roadmap")
    assert ("Roadmap", "../../roadmap/") in _hrefs(_header(site, "wps/wp-002"))
    # Evidence outside docs_dir is rendered and named, but not linked: it is not published.
    article = _article(site, "wps/wp-002")
    assert article.count("<table>") == 3
    assert "<em>Source: out.json · commit" in article


@pytest.mark.parametrize(
    ("name", "text", "named"),
    [
        ("pyproject.toml", "[tool.wpgate.docs]\n", "[tool.wpgate.docs] in pyproject.toml"),
        ("wpgate.toml", "[docs]\n", "[docs] in wpgate.toml"),
        (".wpgate.toml", "[docs]\n", "[docs] in .wpgate.toml"),
    ],
)
def test_a_registry_outside_docs_dir_names_the_file_that_put_it_there(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    name: str,
    text: str,
    named: str,
) -> None:
    config = _write_tree(tmp_path)
    (tmp_path / "docs" / "work_packages").rename(tmp_path / "wps")
    (tmp_path / name).write_text(f'{text}work_packages = "wps"\n', encoding="utf-8")
    with pytest.raises(Abort):
        _build(config, monkeypatch)
    docs = (tmp_path / "docs").resolve()
    assert (
        f"wpgate: wps/wp-001.md is outside the docs directory {docs}; point {named} "
        "(or docs_dir in mkdocs.yml) at one tree"
    ) in caplog.text


def test_malformed_pyproject_fails_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = _write_tree(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.wpgate\n", encoding="utf-8")
    with pytest.raises(Abort):
        _build(config, monkeypatch)
    assert "wpgate: pyproject.toml: is not valid TOML" in caplog.text


def _primary_nav(page_html: str) -> str:
    """The site navigation (the primary sidebar) of a page, nested sections included."""
    start = page_html.index('<div class="md-sidebar md-sidebar--primary"')
    return page_html[start : page_html.index('<div class="md-content"', start)]


def test_above_nav_limit_work_packages_leave_the_navigation(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = (site / "index.html").read_text(encoding="utf-8")
    assert "work_packages/wp-001/" in _primary_nav(default)  # 3 packages: under the limit
    config = _write_tree(tmp_path)
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace("  - wpgate:\n", "  - wpgate:\n      nav_limit: 2\n"))
    trimmed = _build(config, monkeypatch)  # strict: no page is left unreachable or broken
    for page in ("index.html", "roadmap/index.html", "work_packages/wp-002/index.html"):
        page_html = (trimmed / page).read_text(encoding="utf-8")
        assert "work_packages/" not in _primary_nav(page_html), page
    # Every package is still built and reached from the roadmap and its phase page.
    assert _first_column(_article(trimmed, "roadmap")) == [
        "../work_packages/wp-001/",
        "../work_packages/wp-002/",
        "../work_packages/wp-003/",
    ]
    assert "../../work_packages/wp-001/" in _article(trimmed, "engineering/phase-01-start")
    # The previous/next links of the head run over the pages still in the navigation.
    for page in ("index.html", "roadmap/index.html", "work_packages/wp-002/index.html"):
        page_html = (trimmed / page).read_text(encoding="utf-8")
        head = page_html[: page_html.index("</head>")]
        assert re.findall(r'<link rel="(?:prev|next)" href="[^"]*work_packages/', head) == []
    default_head = default[: default.index("</head>")]
    assert re.findall(r'<link rel="(?:prev|next)" href="[^"]*"', default_head)


def test_a_negative_nav_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = _write_tree(tmp_path)
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace("  - wpgate:\n", "  - wpgate:\n      nav_limit: -1\n"))
    with pytest.raises(Abort):
        _build(config, monkeypatch)
    assert "nav_limit must be 0 or more work packages, got -1" in caplog.text


def test_a_median_outside_its_range_fails_the_strict_build_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    bad = "\n```wpgate-evidence\npath: docs/evidence/bad.json\nchart: true\n```\n"
    config = _write_tree(tmp_path, extra_wp2_body=bad)
    document = {**EVIDENCE, "results": {"a": {"median": 2, "min": 3, "max": 1}}}
    (tmp_path / "docs" / "evidence" / "bad.json").write_text(json.dumps(document))
    with pytest.raises(Abort):
        _build(config, monkeypatch)
    assert "docs/evidence/bad.json: a measurement's median (2) is not between" in caplog.text
