"""End to end: build the project's site, serve it on loopback, browse it in headless Chromium.

Follows every generated link on the roadmap and in each work-package header and fails on a
broken link (any HTTP error the server answers) or a browser console error (SEVERE log entry).
On an evidence page it checks that the charts render (size, drawn paths), that the table's rows
carry the benchmark's variant names, that the status icon is drawn, and every link of the page.
Skips, with the reason, only when Chromium is missing outside CI; in CI (``CI=true``) it runs.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest

REPO = Path(__file__).resolve().parents[3]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
_IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

pytestmark = pytest.mark.slow

if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()) and not _IN_CI:
    pytest.skip(
        "headless Chromium is not installed (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )


class _Recorder(http.server.SimpleHTTPRequestHandler):
    """Serves the built site and records every request's status."""

    statuses: list[tuple[str, int]]

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        self.statuses.append((self.path, int(code) if str(code).isdigit() else 0))

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reports failures itself."""


@pytest.fixture(scope="module")
def built_site() -> Iterator[Path]:
    """The project's site, built with --strict into a temporary folder."""
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    with tempfile.TemporaryDirectory(prefix="wpgate-site-") as tmp:
        config = load_config(str(REPO / "mkdocs.yml"), site_dir=tmp, strict=True)
        build(config)
        yield Path(tmp)


@contextlib.contextmanager
def _serve(directory: Path) -> Iterator[tuple[str, list[tuple[str, int]]]]:
    """An HTTP server for ``directory`` on 127.0.0.1 and a random free port."""
    statuses: list[tuple[str, int]] = []
    handler = type("Handler", (_Recorder,), {"statuses": statuses})
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(handler, directory=str(directory))
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/", statuses
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def server(built_site: Path) -> Iterator[tuple[str, list[tuple[str, int]]]]:
    """The built site, served."""
    with _serve(built_site) as served:
        yield served


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Headless Chromium through chromedriver, with a fresh profile and no outside traffic."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="wpgate-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in (
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            f"--user-data-dir={profile}",
        ):
            options.add_argument(flag)
        options.set_capability("goog:loggingOptions", {"browser": "ALL"})
        driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
        driver.set_page_load_timeout(30)
        try:
            yield driver
        finally:
            driver.quit()


def _visit(driver: object, url: str) -> list[str]:
    """Open ``url``; the console errors it produced."""
    driver.get(url)  # type: ignore[attr-defined]
    return [
        f"{url}: {entry['message']}"
        for entry in driver.get_log("browser")  # type: ignore[attr-defined]
        if entry.get("level") == "SEVERE"
    ]


def _hrefs(driver: object, css: str) -> list[str]:
    """Absolute hrefs of the links matched by ``css``."""
    from selenium.webdriver.common.by import By

    elements = driver.find_elements(By.CSS_SELECTOR, css)  # type: ignore[attr-defined]
    return [e.get_attribute("href") for e in elements if e.get_attribute("href")]


def _same_site(base: str, href: str) -> bool:
    """Whether ``href`` points into the served site (not an anchor-only or outside link)."""
    return urlsplit(href).netloc == urlsplit(base).netloc


def test_generated_links_resolve_without_console_errors(
    server: tuple[str, list[tuple[str, int]]], browser: object
) -> None:
    base, statuses = server
    errors = _visit(browser, urljoin(base, "roadmap/"))
    assert "Roadmap" in browser.title  # type: ignore[attr-defined]
    roadmap_links = [h for h in _hrefs(browser, "article a[href]") if _same_site(base, h)]
    wp_pages = sorted({h.split("#")[0] for h in roadmap_links if "/work_packages/" in h})
    assert wp_pages, "the roadmap links no work-package page"

    header_links: set[str] = set()
    for page in wp_pages:
        errors += _visit(browser, page)
        # The generated header is the first block quote of the article.
        found = _hrefs(browser, "article blockquote:first-of-type a[href]")
        assert any(h.rstrip("/").endswith("roadmap") for h in found), f"{page}: no roadmap link"
        header_links.update(h for h in found if _same_site(base, h))

    for href in sorted(set(roadmap_links) | header_links):
        errors += _visit(browser, href.split("#")[0])
        heading = browser.find_elements("css selector", "article h1")  # type: ignore[attr-defined]
        assert heading, f"{href}: the page has no title heading"

    _assert_clean(statuses, errors)
    # Every page the links led to was actually requested.
    requested = {path.split("?")[0] for path, _ in statuses}
    assert "/roadmap/" in requested
    assert len(requested) > len(wp_pages)


def test_harness_reports_broken_links_and_console_errors(browser: object, tmp_path: Path) -> None:
    # The checks above can fail: a page with a script error and a dead link trips both.
    (tmp_path / "index.html").write_text(
        '<!doctype html><title>t</title><a href="missing/">dead</a>'
        '<script>throw new Error("wpgate-e2e-probe")</script>',
        encoding="utf-8",
    )
    with _serve(tmp_path) as (base, statuses):
        errors = _visit(browser, base)
        for href in _hrefs(browser, "a[href]"):
            _visit(browser, href)
    assert any("wpgate-e2e-probe" in e for e in errors)
    assert ("/missing/", 404) in statuses


def _broken(statuses: list[tuple[str, int]]) -> list[str]:
    """Requests the server answered with an error."""
    return sorted({f"{path} -> HTTP {code}" for path, code in statuses if code >= 400})


def _assert_clean(statuses: list[tuple[str, int]], errors: list[str]) -> None:
    """No request failed and the browser logged no error."""
    assert not _broken(statuses), "broken links or assets:\n" + "\n".join(_broken(statuses))
    assert not errors, "browser console errors:\n" + "\n".join(errors)


def _size(element: object) -> tuple[int, int]:
    """The rendered width and height of ``element`` in CSS pixels."""
    size = element.size  # type: ignore[attr-defined]
    return int(size["width"]), int(size["height"])


def test_evidence_page_renders_its_chart_table_and_icons(
    server: tuple[str, list[tuple[str, int]]], browser: object
) -> None:
    from selenium.webdriver.common.by import By

    base, statuses = server
    page = urljoin(base, "work_packages/wp-002/")
    errors = _visit(browser, page)
    find = browser.find_elements  # type: ignore[attr-defined]

    charts = find(By.CSS_SELECTOR, "article figure.wpgate-chart svg")
    assert charts, f"{page}: no evidence chart"
    for chart in charts:
        width, height = _size(chart)
        assert width > 200, f"{page}: a chart renders {width} px wide"
        assert height > 100, f"{page}: a chart renders {height} px high"
        # The bars are drawn: the SVG holds filled paths, not an empty frame.
        assert len(chart.find_elements(By.CSS_SELECTOR, "path")) > 10

    tables = find(By.CSS_SELECTOR, "article table")
    assert tables, f"{page}: no evidence table"
    labels = [
        cell.text.strip()
        for cell in tables[0].find_elements(By.CSS_SELECTOR, "tbody td:first-child")
    ]
    # Rows carry the benchmark's own variant names, never list indices.
    assert "bucketed eager" in labels
    assert not [label for label in labels if label.isdigit()], labels

    icons = find(By.CSS_SELECTOR, "article blockquote .wpgate-status svg")
    assert icons, f"{page}: the status badge has no icon"
    assert all(w > 0 and h > 0 for w, h in map(_size, icons))

    for href in sorted({h.split("#")[0] for h in _hrefs(browser, "article a[href]")}):
        if not _same_site(base, href):
            continue
        if href.endswith(".json"):
            # An evidence file the page links: fetched, not shown (Chromium would ask the
            # server for a favicon for a non-HTML document).
            with urllib.request.urlopen(href, timeout=10) as response:
                assert response.status == 200
        else:
            errors += _visit(browser, href)
    _assert_clean(statuses, errors)


def test_adopters_guide_links_the_generated_configuration_reference(
    server: tuple[str, list[tuple[str, int]]], browser: object
) -> None:
    from selenium.webdriver.common.by import By

    base, statuses = server
    errors = _visit(browser, urljoin(base, "adopting/"))
    links = [h for h in _hrefs(browser, "article a[href]") if "reference/configuration" in h]
    assert links, "the adopter's guide does not link the configuration reference"
    errors += _visit(browser, links[0])
    keys = browser.find_elements(By.CSS_SELECTOR, "article table td:first-child code")  # type: ignore[attr-defined]
    names = {k.text for k in keys}
    assert {"roadmap", "config_reference", "history_start", "claims"} <= names
    _assert_clean(statuses, errors)


_PHONE_WIDTH = 390
_DESKTOP_WIDTH = 1280


def _overflowing_code(driver: object) -> list[str]:
    """Code blocks of the article whose text runs past their box (clipped or hidden)."""
    return driver.execute_script(  # type: ignore[attr-defined,no-any-return]
        "return [...document.querySelectorAll('article pre > code')]"
        ".filter(e => e.scrollWidth > e.clientWidth + 1)"
        ".map(e => e.scrollWidth + '>' + e.clientWidth + ': ' + e.textContent.slice(0, 60))"
    )


def _sideways(driver: object) -> tuple[int, int]:
    """The page's scroll width and the window's width: equal when nothing pushes it wider."""
    widths = driver.execute_script(  # type: ignore[attr-defined]
        "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    return int(widths[0]), int(widths[1])


def test_home_page_shows_the_measured_results(
    server: tuple[str, list[tuple[str, int]]], browser: object
) -> None:
    from selenium.webdriver.common.by import By

    base, statuses = server
    errors = _visit(browser, base)
    find = browser.find_elements  # type: ignore[attr-defined]
    tables = find(By.CSS_SELECTOR, "article table")
    heads = [" ".join(t.find_element(By.CSS_SELECTOR, "thead").text.split()) for t in tables]
    rows = {
        cell.text.strip()
        for table in tables
        for cell in table.find_elements(By.CSS_SELECTOR, "tbody td:first-child")
    }
    # The trainer iteration (batch 4 and 16) and the optimizer step (yolo26n/s/m), each with
    # its speed-up over the Ultralytics peer.
    assert {"batch 4", "batch 16", "yolo26n", "yolo26s", "yolo26m"} <= rows, rows
    assert sum("Speed-up" in head for head in heads) >= 2, heads
    charts = find(By.CSS_SELECTOR, "article figure.wpgate-chart svg")
    assert len(charts) >= 2, "the home page draws no chart of its results"
    for chart in charts:
        width, height = _size(chart)
        assert width > 200
        assert height > 100
    sources = [h for h in _hrefs(browser, "article a[href]") if h.endswith(".json")]
    assert any("musgd-ultralytics-train-" in h for h in sources)
    assert any("musgd-optimizer-step-yolo26-" in h for h in sources)
    _assert_clean(statuses, errors)


def test_line_chart_and_api_reference_render(
    server: tuple[str, list[tuple[str, int]]], browser: object
) -> None:
    from selenium.webdriver.common.by import By

    base, statuses = server
    errors = _visit(browser, urljoin(base, "ultralytics/"))
    find = browser.find_elements  # type: ignore[attr-defined]
    lines = find(By.CSS_SELECTOR, "article figure.wpgate-chart svg")
    assert lines, "the Ultralytics page has no loss chart"
    # A line chart: each curve is one long path (80 iterations), not a frame of bars.
    longest = max(
        len(p.get_attribute("d") or "") for p in lines[0].find_elements(By.CSS_SELECTOR, "path")
    )
    assert longest > 500
    errors += _visit(browser, urljoin(base, "reference/musgd/"))
    objects = find(By.CSS_SELECTOR, "article .doc.doc-object")
    assert len(objects) >= 5, "the API page is not rendered by mkdocstrings"
    article = find(By.CSS_SELECTOR, "article")[0].text
    assert "musgd.MuSGD" in article
    assert ":func:" not in article
    _assert_clean(statuses, errors)


@pytest.mark.parametrize("width", [_PHONE_WIDTH, _DESKTOP_WIDTH])
def test_code_blocks_wrap_and_pages_fit_the_window(
    server: tuple[str, list[tuple[str, int]]], browser: object, width: int
) -> None:
    base, _ = server
    browser.set_window_size(width, 900)  # type: ignore[attr-defined]
    try:
        problems = []
        pages = ("", "ultralytics/", "reference/musgd/", "reference/musgd_ultralytics/")
        for page in (*pages, "reference/cli/", "site/"):
            _visit(browser, urljoin(base, page))
            problems += [f"/{page}: {p}" for p in _overflowing_code(browser)]
            scroll, client = _sideways(browser)
            if scroll > client:
                problems.append(f"/{page}: the page is {scroll} px wide in a {client} px window")
    finally:
        browser.set_window_size(_DESKTOP_WIDTH, 900)  # type: ignore[attr-defined]
    assert not problems, f"at {width} px:\n" + "\n".join(problems)
