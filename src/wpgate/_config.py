"""The configuration: ``.wpgate.toml``, ``wpgate.toml`` or ``[tool.wpgate]`` of
``pyproject.toml`` (the first that configures wpgate, :data:`CONFIG_FILES`): loading, rule
switches, sections. A dedicated file holds the same tables at the top level (``[trailers]``).

Layout::

    [tool.wpgate]
    history_start = "abc1234"        # first governed commit; `wpgate check` lints it..HEAD

    [tool.wpgate.rules]              # per rule, keyed by id or kebab name: on/off or severity
    WPG108 = true
    subject-length = false
    subject-period = "warning"       # reported, but does not fail the run ("error", "off")

    [tool.wpgate.trailers]           # options of one linter; each linter reads its own section
    types = ["feat", "fix"]

Every table and key is checked when the file is loaded, each linter's table parsed into its
options record (:func:`records`): an unknown table or key, or a value of the wrong type, is a
:class:`ConfigError` that names the key and the expected type; the CLI turns it into exit
status 2. The records' fields declare the linters' keys; :func:`settings` (which the adopter's
guide publishes) is derived from them and from the two settings no record holds, declared here
where they are read: ``history_start`` and the rule switches. Both are made when first asked
for (a file with a table to check, the reference): a run without a configuration file makes
neither, nor the docs linters' records (:mod:`wpgate.docs_options`).
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from wpgate._documents import ReadRefusedError, read_bounded
from wpgate._model import RULES
from wpgate._record import field, frozen, replace
from wpgate.errors import InvocationError
from wpgate.options import (
    KINDS,
    SEVERITIES,
    ConfigError,
    DocsLayout,
    GateOptions,
    LinterOptions,
    OutputOptions,
    Setting,
    TrailerOptions,
    converted,
    shown,
)

_O = TypeVar("_O", bound=LinterOptions)
_K = TypeVar("_K")
_V = TypeVar("_V")

__all__ = [
    "CONFIG_FILES",
    "SEVERITIES",
    "Config",
    "ConfigError",
    "Setting",
    "find_config",
    "load_config",
    "moving_history_start",
    "records",
    "schema",
    "settings",
    "unknown_history_start",
]

_RULE_ID = re.compile(r"^WPG[0-9]{3}$", re.IGNORECASE)
# A revision's name up to its first suffix (`~2`, `^`, `@{1}`): what it is relative to.
_SUFFIX = re.compile(r"[~^]|@\{")
# An abbreviated or full commit id: a fixed commit, as a tag is.
_COMMIT_ID = re.compile(r"^[0-9a-fA-F]{4,64}$")
# HEAD and the names git moves itself (`@`, `FETCH_HEAD`, `ORIG_HEAD`...), or none (`@{-1}`).
_MOVED_BY_GIT = re.compile(r"^(?:@|HEAD|[A-Z_]*_HEAD)?$")
#: A table named as pyproject.toml writes it, in a message (``[tool.wpgate.gates]``).
_TABLE_NAME = re.compile(r"\[tool\.wpgate\.(\w+)\]")


def _frozen(value: Mapping[_K, _V]) -> Mapping[_K, _V]:
    """A read-only view, so a section handed to a linter cannot be changed under another."""
    return MappingProxyType(dict(value))


@frozen
class Config:
    """The loaded ``[tool.wpgate]`` table of one repository."""

    root: Path
    table: Mapping[str, Any] = field(default_factory=dict)
    rule_switches: Mapping[str, bool] = field(default_factory=dict)
    history_start: str = ""
    warnings: frozenset[str] = frozenset()
    #: The file the configuration was read from (``""``: none, the defaults).
    source: str = ""
    #: Later files of ``CONFIG_FILES`` that configure wpgate too, and so are not read.
    unread: tuple[str, ...] = ()
    # The records of the tables `load_config` parsed and checked.
    parsed: Mapping[type[LinterOptions], LinterOptions] = field(
        default_factory=dict, compare=False, repr=False
    )
    # Each linter's options record, checked on first use and then shared (see `options`).
    _options: dict[type[LinterOptions], LinterOptions] = field(
        default_factory=dict, compare=False, repr=False
    )

    def options(self, kind: type[_O]) -> _O:
        """The ``kind`` record (e.g. ``DocsLayout``) of this configuration, parsed and checked
        once: every linter of a run reads the same record."""
        record = self._options.get(kind)
        if record is None:
            record = self.parsed.get(kind)
            if record is None:  # a table the file lacks, or a configuration built by hand
                record = kind.parse(self.section(kind.TABLE))
            record.check()
            self._options[kind] = record
        assert isinstance(record, kind)
        return record

    def describe_source(self) -> list[str]:
        """Where the configuration comes from, in words (``--verbose``)."""
        if not self.source:
            files = ", ".join(CONFIG_FILES[:-1])
            return [
                f"configuration: none found ({files} or [tool.wpgate] in pyproject.toml); defaults"
            ]
        lines = [f"configuration: {self.source}"]
        lines += [
            f"configuration: {other} also configures wpgate and is not read ({self.source} "
            "comes first); keep one of them"
            for other in self.unread
        ]
        return lines

    @property
    def respells(self) -> bool:
        """Whether :meth:`spelled` changes any message: the file is not ``pyproject.toml``."""
        return self.source not in ("", _PYPROJECT)

    def spelled(self, text: str) -> str:
        """``text`` (a message) naming each ``[tool.wpgate.<table>]`` as this configuration's
        file writes it: ``[<table>]`` in a ``wpgate.toml`` or ``.wpgate.toml``."""
        if not self.respells:
            return text
        return _TABLE_NAME.sub(r"[\1]", text)

    def table_in_file(self, name: str) -> str:
        """Where the ``name`` table is written, in words: ``[tool.wpgate.docs] in
        pyproject.toml`` or ``[docs] in wpgate.toml``; both forms when no file configures
        wpgate (the adopter may create either)."""
        if not self.source:
            return f"[tool.wpgate.{name}] in pyproject.toml (or [{name}] in wpgate.toml)"
        if self.respells:
            return f"[{name}] in {self.source}"
        return f"[tool.wpgate.{name}] in {self.source}"

    def section(self, name: str) -> Mapping[str, Any]:
        """The ``[tool.wpgate.<name>]`` sub-table (empty when absent)."""
        value = self.table.get(name)
        if value is None:
            return _frozen({})
        if not isinstance(value, Mapping):
            raise ConfigError(f"tool.wpgate.{name}", "must be a table ([tool.wpgate.{name}])")
        return _frozen(value)

    def enabled(self, rule_id: str) -> bool:
        """Whether a rule is on: its switch if set, else the rule's default (on if unknown)."""
        key = rule_id.upper()
        if key in self.rule_switches:
            return self.rule_switches[key]
        rule = RULES.get(key)
        return True if rule is None else rule.enabled_by_default

    def severity(self, rule_id: str) -> str:
        """``warning`` for a rule configured so (reported, never failing), else ``error``."""
        return "warning" if rule_id.upper() in self.warnings else "error"

    def ignoring(self, rules: Iterable[str]) -> Config:
        """This configuration with ``rules`` (ids or names) switched off for one run."""
        switches = dict(self.rule_switches)
        unknown: dict[str, None] = {}
        for name in rules:
            if not name.replace(",", "").strip():
                raise InvocationError(
                    f"--ignore {name!r} names no rule; pass a rule id such as WPG102 or a name "
                    "(`wpgate explain --list` lists them)"
                )
            for part in filter(None, (p.strip() for p in name.split(","))):
                try:
                    rule_id = _rule_key(part, f"--ignore {part}")
                except ConfigError as exc:
                    # An option of this run, not a setting of a file: a usage error.
                    raise InvocationError(f"{exc.key}: {exc.detail}") from exc
                switches[rule_id] = False
                if RULES.get(rule_id) is None:
                    unknown[rule_id] = None
        for rule_id in unknown:
            warn(_unknown_rule("--ignore", rule_id))
        # Same table, same options: the copy shares the records built so far.
        return replace(self, rule_switches=_frozen(switches))


def _rule_key(key: str, where: str) -> str:
    """The rule id ``key`` (an id or a kebab name) stands for; unknown names are errors."""
    _import_rules()
    rule = RULES.get(key)
    if rule is not None:
        return rule.rule_id
    if _RULE_ID.match(key):
        # An id the installed version does not know yet (a newer config) is kept, not fatal.
        return key.upper()
    raise ConfigError(where, "is not a known rule; `wpgate explain --list` lists them")


def _unknown_rule(where: str, rule_id: str) -> str:
    """The warning for a rule id that ``where`` names and this version does not know."""
    import wpgate  # the version is looked up only for this warning

    return (
        f"{where} names {rule_id}, which this wpgate (version {wpgate.__version__}) does not "
        "know; it is ignored: check for a typo (`wpgate explain --list` lists the rules), or "
        "upgrade wpgate if the rule is newer"
    )


def warn(text: str) -> None:
    """Say ``text`` as one ``wpgate: warning:`` line on stderr (stdout is the report), as the
    shell says its notes; stderr's ``backslashreplace`` keeps any name writable."""
    sys.stderr.write(f"wpgate: warning: {text}\n")
    sys.stderr.flush()


def _rule_switches(raw: Any) -> tuple[dict[str, bool], frozenset[str]]:
    """``[tool.wpgate.rules]``: on/off per rule id, and the ids whose severity is ``warning``."""
    if raw is None:
        return {}, frozenset()
    if not isinstance(raw, Mapping):
        raise ConfigError("tool.wpgate.rules", "must be a table of `RULE-ID = true|false`")
    switches: dict[str, bool] = {}
    warnings: set[str] = set()
    named: dict[str, str] = {}  # rule id -> the key that set it
    for key, value in raw.items():
        where = f"tool.wpgate.rules.{key}"
        if not isinstance(value, bool) and value not in SEVERITIES:
            raise ConfigError(where, f"must be {KINDS['rule'][1]}, not {shown(value)}")
        rule_id = _rule_key(str(key), where)
        if rule_id in named:
            # Its id and its kebab name both set: which one wins would depend on their order.
            raise ConfigError(
                where,
                f"sets {rule_id} again, which `{named[rule_id]}` already sets; keep one of them",
            )
        named[rule_id] = str(key)
        switches[rule_id] = value is True or value in ("error", "warning")
        if value == "warning":
            warnings.add(rule_id)
    return switches, frozenset(warnings)


def _parse(table: Mapping[str, Any]) -> dict[type[LinterOptions], LinterOptions]:
    """Every table and key of ``[tool.wpgate]`` known and of its kind; each linter's table
    parsed into its record (the rule switches are read by :func:`_rule_switches`)."""
    parsed: dict[type[LinterOptions], LinterOptions] = {}
    if not table:
        return parsed  # no file, or an empty table: nothing to check
    known = schema()
    top = known[""]
    record_of = {record.TABLE: record for record in records()}
    for key, value in table.items():
        where = f"tool.wpgate.{key}"
        if key in top:
            converted(where, top[key].kind, value)
            continue
        if key not in known:
            tables = ", ".join(f"[tool.wpgate.{name}]" for name in known if name)
            raise ConfigError(
                where,
                f"is not a known setting or table; the tables are {tables} and the top-level "
                f"key is {', '.join(top)}",
            )
        if not isinstance(value, Mapping):
            raise ConfigError(where, f"must be a table ([tool.wpgate.{key}]), not {shown(value)}")
        record = record_of.get(key)
        if record is not None:
            parsed[record] = record.parse(value)
    return parsed


def _import_rules() -> None:
    """Register every rule, so names can be looked up (rule modules register on import)."""
    from wpgate.rules import register_all

    register_all()


#: The files the configuration is read from, in this order: the first that configures wpgate
#: is the one read (as ruff reads ``.ruff.toml``, ``ruff.toml``, ``pyproject.toml``). A
#: dedicated file configures wpgate by existing, its tables at the top level (``[trailers]``);
#: ``pyproject.toml`` only with a ``[tool.wpgate]`` table.
CONFIG_FILES = (".wpgate.toml", "wpgate.toml", "pyproject.toml")
_PYPROJECT = "pyproject.toml"


def _read_toml(root: Path, name: str) -> dict[str, Any] | None:
    """The TOML document ``root/name`` (None when the file does not exist).

    The file is read by :func:`~wpgate._documents.read_bounded`: a link out of the repository
    (e.g. to ``/dev/zero``), a link to nothing, a FIFO or a file over the size limit is a
    :class:`ConfigError`.
    """
    try:
        text = read_bounded(root, name).decode("utf-8")
    except FileNotFoundError as exc:
        if not (root / name).is_symlink():
            return None
        target = (root / name).readlink()
        raise ConfigError(
            name,
            f"is a symbolic link to {target}, which does not exist; point it at the "
            "configuration file or remove it",
            source=name,
        ) from exc
    except ReadRefusedError as exc:
        detail = str(exc).removeprefix(f"{name} ")
        raise ConfigError(name, detail, source=name) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(name, f"cannot be read ({exc}); fix the file", source=name) from exc
    import tomllib  # only when there is a file to parse: most runs have none or one

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(name, f"is not valid TOML ({exc}); fix the syntax", source=name) from exc


def _wpgate_table(name: str, data: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The wpgate tables of one file's document, or None when the file does not configure it."""
    if name != _PYPROJECT:
        if "tool" in data:
            raise ConfigError(
                "tool",
                f"in {name} the tables are top level: {_top_level_form(data['tool'])} (that "
                "form belongs in pyproject.toml)",
                source=name,
            )
        return data
    tool = data.get("tool", {})
    if not isinstance(tool, Mapping) or "wpgate" not in tool:
        return None
    table = tool["wpgate"]
    if not isinstance(table, Mapping):
        raise ConfigError("tool.wpgate", "must be a table ([tool.wpgate])")
    return table


def _top_level_form(tool: Any) -> str:
    """How to write the first ``[tool.wpgate...]`` entry of a dedicated file at its top level."""
    table = tool.get("wpgate") if isinstance(tool, Mapping) else None
    entries = iter(table.items()) if isinstance(table, Mapping) else iter(())
    key, value = next(entries, ("trailers", {}))
    if isinstance(value, Mapping):
        return f"write [{key}], not [tool.wpgate.{key}]"
    return f"write {key} at the top, not under [tool.wpgate]"


def find_config(root: Path) -> tuple[str, Mapping[str, Any], tuple[str, ...]]:
    """``(file, tables, others)``: the first of :data:`CONFIG_FILES` that configures wpgate
    (``""`` and no tables when none does) and the later ones that configure it too, unread."""
    chosen: tuple[str, Mapping[str, Any]] | None = None
    others: list[str] = []
    for name in CONFIG_FILES:
        if chosen is not None and not (root / name).exists():
            continue
        data = _read_toml(root, name)
        if data is None:
            continue
        if chosen is not None:
            # A later file is only looked at to say that it is not read; its errors do not count.
            try:
                configures = _wpgate_table(name, data) is not None
            except ConfigError:
                configures = True
            if configures:
                others.append(name)
            continue
        table = _wpgate_table(name, data)
        if table is not None:
            chosen = (name, table)
    if chosen is None:
        return "", {}, ()
    return chosen[0], chosen[1], tuple(others)


def _local(text: str) -> str:
    """A message or key of ``[tool.wpgate]`` as a dedicated file spells it (top-level tables)."""
    return text.replace("[tool.wpgate.", "[").replace("tool.wpgate.", "").replace("tool.wpgate", "")


def load_config(root: Path) -> Config:
    """Read the configuration of ``root`` from the first of :data:`CONFIG_FILES` that
    configures wpgate; none is the defaults."""
    source, table, others = find_config(root)
    try:
        config = _load(root, table)
    except ConfigError as exc:
        if source in ("", _PYPROJECT):
            raise
        raise ConfigError(
            _local(exc.key) or "(top level)", _local(exc.detail), source=source
        ) from exc
    config = replace(config, source=source, unread=others)
    # A second file that configures wpgate is never read: said every run, since what it sets
    # (a history_start, rules turned on) silently stops applying.
    for line in config.describe_source()[1:]:
        warn(line.removeprefix("configuration: "))
    where = config.table_in_file("rules")
    for rule_id in config.rule_switches:
        if RULES.get(rule_id) is None:  # `_rule_switches` registered every rule
            warn(_unknown_rule(where, rule_id))
    moving = moving_history_start(config)
    if moving:
        warn(moving)
    return config


def moving_history_start(config: Config) -> str | None:
    """The warning for a ``history_start`` that moves as commits are made (``HEAD``,
    ``HEAD~3``, a branch), so that ``wpgate check`` lints a shifting range (from ``HEAD``, one
    commit); None for a commit id, a tag or no setting.

    A commit id or ``HEAD``-relative name is told apart by its spelling; any other name costs
    one git process (is it a branch?), and outside a git work tree none moves.
    """
    value = config.history_start
    base = _SUFFIX.split(value, maxsplit=1)[0]
    if not value or _COMMIT_ID.match(base):
        return None
    if _MOVED_BY_GIT.match(base) or "@{" in value:
        what = f"`{value}`, which moves with every commit (or checkout)"
    else:
        from wpgate._git import branch_ref

        ref = branch_ref(config.root, base)
        if ref is None:
            return None  # a tag, or what git does not know (an error when the history is read)
        what = f"`{value}`, on the branch {ref}, which moves as commits are made"
    source = config.source or _PYPROJECT
    key = "history_start" if config.respells else "[tool.wpgate] history_start"
    return (
        f"{key} in {source} names {what}, so `wpgate check` lints a range that moves with it; "
        f"set it to the sha of the first governed commit (`git rev-parse {value}` prints the "
        "one it names now)"
    )


def history_start_off_head(config: Config) -> str | None:
    """The warning for a ``history_start`` that is not an ancestor of HEAD (a commit of another
    branch, or of history rewritten since): the range from it to HEAD is then not the governed
    history but HEAD's commits that it cannot reach. None when it is an ancestor, when none is
    set, or when git cannot tell (one git process; asked only where the history is read)."""
    value = config.history_start
    if not value:
        return None
    from wpgate._git import is_ancestor

    if is_ancestor(config.root, value) is not False:
        return None
    key = "history_start" if config.respells else "[tool.wpgate] history_start"
    return (
        f"{key} in {config.source or _PYPROJECT} names `{value}`, which is not an ancestor of "
        "HEAD, so the governed range holds HEAD's commits that it cannot reach, not the "
        "history since it; set it to the first governed commit of this branch's history "
        "(`git log --oneline` lists them)"
    )


def unknown_history_start(config: Config) -> ConfigError | None:
    """The error for a ``history_start`` git does not know, naming the file that set it; None
    when it names a commit, when none is set, or when ``root`` is no git work tree.

    Asked only after git has refused a range (the CLI's error path): a run that reads the
    history costs no extra git process.
    """
    value = config.history_start
    if not value:
        return None
    from wpgate._git import is_work_tree, resolve_commits

    if not is_work_tree(config.root) or resolve_commits(config.root, [value])[value] is not None:
        return None
    source = config.source or _PYPROJECT
    return ConfigError(
        "tool.wpgate.history_start" if source == _PYPROJECT else "history_start",
        f"`{value}` is not a commit git knows here (`git rev-parse --verify "
        f"{value}^{{commit}}` fails); set history_start to the first governed commit (its "
        "sha, from `git log --oneline`), or fetch that commit (`git fetch origin`; `git fetch "
        "--unshallow` in a shallow clone)",
        source=source,
    )


def _load(root: Path, table: Mapping[str, Any]) -> Config:
    """The configuration of one ``[tool.wpgate]`` table (or dedicated file's document)."""
    parsed = _parse(table)
    history_start = str(table.get("history_start", "")).strip()
    if history_start:
        from wpgate._git import GitError, validate_revision

        try:
            validate_revision(history_start, "history_start")
        except GitError as exc:
            raise ConfigError("tool.wpgate.history_start", str(exc)) from exc
    switches, warnings = _rule_switches(table.get("rules"))
    # Every table the file holds is checked now, whether or not this run reads it: `wpgate
    # check` without history_start reads no trailer options, yet must refuse a bad one.
    for record in parsed.values():
        record.check()
    return Config(
        root=root,
        table=_frozen(table),
        rule_switches=_frozen(switches),
        history_start=history_start,
        warnings=warnings,
        parsed=_frozen(parsed),
        _options=dict(parsed),
    )


# --------------------------------------------------------------------------- documented keys


@functools.cache
def records() -> tuple[type[LinterOptions], ...]:
    """The linters' option records, in the order the reference lists their tables; their fields
    are the declaration of every key of those tables."""
    from wpgate.docs_options import (
        ChangelogOptions,
        EvidenceOptions,
        ProvenanceOptions,
        WorkPackageOptions,
    )

    return (
        TrailerOptions,
        GateOptions,
        DocsLayout,
        ProvenanceOptions,
        WorkPackageOptions,
        EvidenceOptions,
        ChangelogOptions,
        OutputOptions,
    )


#: The settings no record holds, declared where :func:`load_config` reads them.
_UNRECORDED: tuple[Setting, ...] = (
    Setting(
        "",
        "history_start",
        "str",
        '""',
        "The first governed commit; `wpgate check` lints the trailers of it..HEAD.",
    ),
    Setting(
        "rules",
        "<RULE-ID or name>",
        "rule",
        "the rule's default",
        "Switch one rule on or off, by id (`WPG108`) or name (`subject-length`), or set its "
        'severity: `"warning"` is reported but never fails the run.',
    ),
)


@functools.cache
def settings() -> tuple[Setting, ...]:
    """Every key of ``[tool.wpgate]``, as the adopter's guide publishes it
    (``wpgate.site._config_reference``): derived, never declared a second time."""
    return _UNRECORDED + tuple(setting for record in records() for setting in record.settings())


@functools.cache
def schema() -> Mapping[str, Mapping[str, Setting]]:
    """:func:`settings` by table and key, as :func:`load_config` validates against it; each
    table of ``[tool.wpgate]`` and its keys (``rules`` is free-form: ids and names)."""
    tables: dict[str, dict[str, Setting]] = {}
    for setting in settings():
        members = tables.setdefault(setting.table, {})
        if setting.kind != "rule":
            members[setting.key] = setting
    return MappingProxyType({name: MappingProxyType(keys) for name, keys in tables.items()})
