"""The ``wpgate`` mkdocs plugin.

On every build it reads the work-package registry once and then:

- prepends each work-package page's header (phase, status, Depends on, computed Needed by,
  previous/next and a roadmap link) and sets the page title from the escaped front matter;
- generates the roadmap (served at ``roadmap/``) and a page for each phase that has none,
  and appends each existing phase page's list of work packages;
- above ``nav_limit`` work packages, leaves their pages out of the navigation (the theme
  renders the whole navigation into every page, so a registry of thousands would make the
  build quadratic); the roadmap and the phase pages still link every one;
- replaces each ``wpgate-evidence`` block with a table and, on request, an SVG chart;
- generates reference pages: the click CLI, a module's API, one page per lint rule and the
  configuration reference (these options and the ``[tool.wpgate]`` keys).

Problems are logged as warnings, so ``mkdocs build --strict`` fails on them with the message.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from mkdocs.config import base
from mkdocs.config import config_options as c
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.plugins import BasePlugin, get_plugin_logger
from mkdocs.structure.files import File, Files
from mkdocs.structure.nav import Navigation, Section
from mkdocs.structure.pages import Page

from wpgate._config import Config, ConfigError, load_config
from wpgate._docs import load_work_packages
from wpgate._documents import read_text, resolve_inside
from wpgate.options import DocsLayout
from wpgate.parsers.evidence import parse_evidence
from wpgate.rules import EVIDENCE_FILE_VALID
from wpgate.site import _evidence, _reference, _roadmap
from wpgate.site._escape import escape_html, escape_markdown

log = get_plugin_logger(__name__)

_H1_RE = re.compile(r"\A\s*(#\s[^\n]*\n)")


class WpgateConfig(base.Config):  # type: ignore[no-untyped-call]  # mkdocs leaves it untyped
    """Options of the plugin in ``mkdocs.yml`` (pages relative to ``docs_dir``).

    Where the registry, the phase pages and the evidence live is not repeated here: it comes
    from ``[tool.wpgate.docs]`` in ``pyproject.toml``, as for the linters.
    """

    roadmap = c.Type(str, default="ROADMAP.md")
    roadmap_url = c.Type(str, default="roadmap/")
    reference_dir = c.Type(str, default="reference")
    cli_group = c.Type(str, default="")
    cli_name = c.Type(str, default="wpgate")
    api_module = c.Type(str, default="")
    api_members = c.ListOfItems(c.Type(str), default=[])
    rules_module = c.Type(str, default="")
    config_reference = c.Type(bool, default=True)
    nav_limit = c.Type(int, default=100)


#: What each option does; the generated configuration reference publishes it with the schema.
OPTION_HELP = {
    "roadmap": "The roadmap page (generated when the file does not exist).",
    "roadmap_url": "The roadmap's address in the built site; empty keeps the file's own.",
    "reference_dir": "The folder of the generated reference pages.",
    "cli_group": "A click group, `module:attribute`, to document as the CLI page.",
    "cli_name": "The command name the CLI page shows.",
    "api_module": "A module whose API page is generated (docstrings and signatures).",
    "api_members": "The members of `api_module` to document, in order.",
    "rules_module": "A module whose import registers lint rules: one page per rule and an index.",
    "config_reference": "Generate `configuration.md` (these tables) in `reference_dir`.",
    "nav_limit": "The most work packages the navigation lists; above it, none is listed and "
    "each is reached from the roadmap and its phase page.",
}


class WpgatePlugin(BasePlugin[WpgateConfig]):  # type: ignore[no-untyped-call]  # idem
    """Publishes the work-package registry and the measured evidence of a wpgate repository."""

    def __init__(self) -> None:
        self._model: _roadmap.SiteModel | None = None
        self._wp_by_src: dict[str, str] = {}
        self._phase_by_src: dict[str, int] = {}
        self._root = Path.cwd()
        self._docs_dir = Path.cwd()

    # -- events -----------------------------------------------------------------------------

    def on_config(self, config: MkDocsConfig) -> MkDocsConfig | None:
        """Remember where the repository and the docs are."""
        config_file = config.config_file_path
        self._root = Path(config_file).resolve().parent if config_file else Path.cwd()
        self._docs_dir = Path(config.docs_dir).resolve()
        return config

    def on_files(self, files: Files, /, *, config: MkDocsConfig) -> Files | None:
        """Read the registry; add the roadmap, missing phase pages and reference pages."""
        wpgate_config = read_wpgate_config(self._root)
        registry = load_work_packages(self._root, wpgate_config)
        for finding in registry.findings:
            log.warning(
                "%s:%d: %s %s", finding.path, finding.line, finding.rule_id, finding.message
            )
        packages = registry.packages
        pages = {wp.id: self._docs_path(wp.path) for wp in packages}
        phases = [
            _roadmap.Phase(p.number, p.title, self._docs_path(p.path))
            for p in registry.phases.values()
        ]
        # A phase some package names but no page describes gets a generated page.
        engineering = self._docs_path(DocsLayout.from_config(wpgate_config).engineering)
        missing = sorted({wp.phase for wp in packages} - set(registry.phases))
        generated = [_roadmap.Phase(n, "", f"{engineering}/phase-{n:02d}.md") for n in missing]
        roadmap_src = self.config.roadmap
        self._model = _roadmap.build_model(packages, phases + generated, pages, roadmap_src)
        self._wp_by_src = {src: wp_id for wp_id, src in pages.items()}
        self._phase_by_src = {p.src_uri: p.number for p in phases if p.src_uri}
        for phase in generated:
            src = f"{engineering}/phase-{phase.number:02d}.md"
            _add(files, config, src, _roadmap.render_phase_page(self._model, phase.number, src))
        roadmap_file = files.get_file_from_path(roadmap_src)
        if roadmap_file is None:
            roadmap_file = _add(files, config, roadmap_src, "# Roadmap\n")
        # One stable, lower-case address whatever the source file is called.
        url = self.config.roadmap_url.strip("/")
        if url:
            directory_urls = config.use_directory_urls
            roadmap_file.dest_uri = f"{url}/index.html" if directory_urls else f"{url}.html"
            roadmap_file.url = f"{url}/" if directory_urls else f"{url}.html"
        self._add_reference(files, config)
        return files

    def on_nav(
        self, nav: Navigation, /, *, config: MkDocsConfig, files: Files
    ) -> Navigation | None:
        """Above ``nav_limit`` work packages, take their pages out of the navigation."""
        model = self._require_model()
        if len(model.packages) <= self.config.nav_limit:
            return nav
        hidden = set(self._wp_by_src)
        nav.items[:] = _without_pages(nav.items, hidden)
        for page in nav.pages:
            if page.file.src_uri in hidden:
                page.parent = None
                page.previous_page = page.next_page = None
        nav.pages[:] = [page for page in nav.pages if page.file.src_uri not in hidden]
        for before, after in zip(nav.pages, nav.pages[1:], strict=False):
            before.next_page, after.previous_page = after, before
        return nav

    def on_page_markdown(
        self, markdown: str, /, *, page: Page, config: MkDocsConfig, files: Files
    ) -> str | None:
        """Headers on work-package pages, generated sections, and evidence blocks everywhere."""
        model = self._require_model()
        src = page.file.src_uri
        if src == model.roadmap_src:
            markdown = _roadmap.render_roadmap(model, src, intro=markdown)
        elif src in self._phase_by_src:
            number = self._phase_by_src[src]
            section = _roadmap.render_phase_section(model, number, src)
            markdown = f"{markdown.rstrip()}\n\n{section}"
            phase = model.phases[number]
            page.meta["title"] = f"Phase {number} — {phase.title}" if phase.title else None
        wp = model.package(self._wp_by_src.get(src, ""))
        if wp is not None:
            page.meta["title"] = f"WP-{wp.id} — {wp.title}"
            # Material reads `status` as its own page-status badge (new, deprecated); the
            # header shows the work-package status instead.
            page.meta.pop("status", None)
            markdown = insert_header(markdown, _roadmap.render_header(model, wp.id, src))
        # The theme writes a front-matter title into the navigation and <title> unescaped.
        title = page.meta.get("title")
        if title is None:
            page.meta.pop("title", None)
        else:
            page.meta["title"] = escape_html(str(title))
        return _evidence.replace_blocks(markdown, lambda body: self._render_evidence(body, src))

    def on_page_content(
        self, html: str, /, *, page: Page, config: MkDocsConfig, files: Files
    ) -> str | None:
        """The icons the generated Markdown names, as the theme's inline SVG."""
        return _roadmap.expand_icons(html)

    # -- helpers ----------------------------------------------------------------------------

    def _docs_path(self, repo_path: str) -> str:
        """A repository-relative path as a path relative to ``docs_dir``."""
        full = (self._root / repo_path).resolve()
        if not full.is_relative_to(self._docs_dir):
            raise PluginError(
                f"wpgate: {repo_path} is outside the docs directory {self._docs_dir}; point "
                "[tool.wpgate.docs] in pyproject.toml (or docs_dir in mkdocs.yml) at one tree"
            )
        return full.relative_to(self._docs_dir).as_posix()

    def _require_model(self) -> _roadmap.SiteModel:
        """The model built in ``on_files``."""
        if self._model is None:  # pragma: no cover - mkdocs always runs on_files first
            raise PluginError("wpgate: the registry was not loaded (on_files did not run)")
        return self._model

    def _add_reference(self, files: Files, config: MkDocsConfig) -> None:
        """Generate the CLI, API and rule pages the configuration asks for."""
        ref = self.config.reference_dir.strip("/")
        if self.config.config_reference:
            from wpgate._config import SETTINGS
            from wpgate.site._config_reference import render_config_page

            schema = WpgateConfig._schema  # the options as mkdocs declares them
            page = render_config_page(schema, OPTION_HELP, SETTINGS)
            _add(files, config, f"{ref}/configuration.md", page)
        try:
            if self.config.cli_group:
                group = _reference.import_target(self.config.cli_group)
                _add(
                    files,
                    config,
                    f"{ref}/cli.md",
                    _reference.render_cli_page(group, self.config.cli_name),
                )
            if self.config.api_module:
                text = _reference.render_api_page(self.config.api_module, self.config.api_members)
                _add(files, config, f"{ref}/{self.config.api_module}.md", text)
            if self.config.rules_module:
                _reference.import_target(self.config.rules_module)
                from wpgate._model import RULES
                from wpgate.rules import register_all

                register_all()

                rules = list(RULES)
                _add(files, config, f"{ref}/rules/index.md", _reference.render_rules_index(rules))
                for rule in rules:
                    name = _reference.rule_page_name(rule)
                    _add(files, config, f"{ref}/rules/{name}", _reference.render_rule_page(rule))
        except _reference.ReferenceBuildError as exc:
            raise PluginError(f"wpgate: {exc}; fix the wpgate options in mkdocs.yml") from None

    def _render_evidence(self, body: str, page_src: str) -> str:
        """One evidence block as Markdown; a problem is logged and shown on the page."""
        try:
            block = _evidence.parse_block(body)
            document, docs_rel = self._read_evidence(block.path)
            table = _evidence.build_table(document, block)
        except _evidence.EvidenceBlockError as exc:
            log.warning("%s: %s", page_src, exc)
            return f'!!! failure "Evidence not rendered"\n    {escape_markdown(str(exc))}\n'
        parts = []
        if block.caption:
            parts.append(f"**{escape_markdown(block.caption)}**\n")
        if block.table:
            parts.append(_evidence.format_table(table, block.digits) + "\n")
        if block.chart:
            from wpgate.site import _charts

            salt = hashlib.sha256(f"{page_src}\n{body}".encode()).hexdigest()[:16]
            try:
                svg = _charts.render_chart_svg(table, salt=salt)
            except ImportError as exc:
                log.warning("%s: %s", page_src, exc)
            else:
                parts.append(_charts.format_chart_html(svg, block.caption) + "\n")
        facts = [escape_markdown(f) for f in _evidence.describe_source(document)]
        name = escape_markdown(PurePosixPath(block.path).name)
        source = f"[{name}]({_roadmap.relative_link(page_src, docs_rel)})" if docs_rel else name
        parts.append(f"*Source: {source}{''.join(' · ' + f for f in facts)}*\n")
        return "\n" + "\n".join(parts)

    def _read_evidence(self, path: str) -> tuple[Mapping[str, Any], str | None]:
        """The evidence document at repository-relative ``path`` and its docs-relative path."""
        rel, problem = resolve_inside(self._root, "", path)
        if rel is None:
            raise _evidence.EvidenceBlockError(f"evidence path: {problem}")
        text, unreadable = read_text(self._root, rel)
        if text is None:
            why = unreadable.message if unreadable else f"{rel} cannot be read"
            raise _evidence.EvidenceBlockError(
                f"evidence file {why} (run the benchmark that writes it, or fix `path`)"
            )
        parsed = parse_evidence(text, rel, rule_id=EVIDENCE_FILE_VALID)
        if parsed.evidence is None:
            why = "; ".join(f.message for f in parsed.findings) or "not a valid evidence file"
            raise _evidence.EvidenceBlockError(f"{rel}: {why}")
        full = (self._root / rel).resolve()
        # Only a file under docs_dir is published with the site, so only such a file is linked.
        docs_rel = (
            full.relative_to(self._docs_dir).as_posix()
            if full.is_relative_to(self._docs_dir)
            else None
        )
        return parsed.evidence.document, docs_rel


def read_wpgate_config(root: Path) -> Config:
    """The ``[tool.wpgate]`` configuration of ``root``; a bad file fails the build with why."""
    try:
        return load_config(root)
    except ConfigError as exc:
        raise PluginError(f"wpgate: {exc}") from None


def insert_header(markdown: str, header: str) -> str:
    """``header`` after the page's leading ``# title`` line, or at the top when there is none."""
    match = _H1_RE.match(markdown)
    if match is None:
        return f"{header}\n{markdown}"
    return f"{markdown[: match.end()]}\n{header}\n{markdown[match.end() :]}"


def _without_pages(items: list[Any], hidden: set[str]) -> list[Any]:
    """The navigation ``items`` without the pages in ``hidden`` and sections left empty."""
    kept: list[Any] = []
    for item in items:
        if isinstance(item, Section):
            item.children[:] = _without_pages(item.children, hidden)
            if not item.children:
                continue
        elif isinstance(item, Page) and item.file.src_uri in hidden:
            continue
        kept.append(item)
    return kept


def _add(files: Files, config: MkDocsConfig, src_uri: str, content: str) -> File:
    """Add (or replace) a generated page."""
    existing = files.get_file_from_path(src_uri)
    if existing is not None:
        files.remove(existing)
    generated = File.generated(config, src_uri, content=content)
    files.append(generated)
    return generated
