"""Records shared by every wpgate linter: findings and the rule registry."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar, cast

from wpgate._record import field, frozen

#: A work-package id, the one grammar of page names, front matter and the `WP:` trailer:
#: three or more digits and an optional lower-case letter (``004``, ``197b``, ``1000``).
WP_ID_PATTERN = r"[0-9]{3,}[a-z]?"

#: The longest finding message (characters); longer ones are cut where they are made.
MAX_MESSAGE = 1000


@frozen(order=True)
class Finding:
    """One problem: which rule, what is wrong and how to fix it, and where.

    ``path`` is a file path relative to the repository root, or a commit's 12-character sha in
    history mode; ``line`` is 1-based (0 when the finding is about the whole file or message).
    """

    path: str
    line: int
    rule_id: str
    message: str
    #: ``error`` fails the run; ``warning`` is reported only (``[tool.wpgate.rules]``).
    severity: str = field(default="error", compare=False)

    def __init__(
        self, path: str, line: int, rule_id: str, message: str, severity: str = "error"
    ) -> None:
        # A message quotes what it found, and what it found may be huge (an expanded YAML
        # value, a pasted blob): cut it, so one finding never floods a terminal or a CI log.
        if len(message) > MAX_MESSAGE:
            message = f"{message[:MAX_MESSAGE]}... ({len(message) - MAX_MESSAGE} characters cut)"
        # One dictionary update instead of the frozen __init__'s five object.__setattr__ calls:
        # a history's lint makes one finding per problem (runc's: 19,441), and this halves
        # their cost. The instance stays frozen: assignment still raises.
        self.__dict__.update(
            path=path, line=line, rule_id=rule_id, message=message, severity=severity
        )


@frozen
class Problem:
    """What is wrong with a document before a rule reports it: where, and how to fix it.

    Readers and parsers name no rule; the rule that reports a problem gives it its id
    (:meth:`finding`).
    """

    path: str
    line: int
    message: str

    def finding(self, rule_id: str) -> Finding:
        """This problem as a finding of rule ``rule_id``."""
        return Finding(self.path, self.line, rule_id, self.message)


def with_severity(finding: Finding, severity: str) -> Finding:
    """``finding`` with ``severity`` (``error`` or ``warning``); itself when unchanged."""
    if finding.severity == severity:
        return finding
    return Finding(finding.path, finding.line, finding.rule_id, finding.message, severity)


#: What a linter's rules read (a parsed document, a tree, a message) and their options record.
Subject = TypeVar("Subject")
Options = TypeVar("Options")


@frozen
class Rule(Generic[Subject, Options]):
    """A lint rule with a stable id (``WPG101``), a kebab-case name and a one-line summary.

    The one rule contract: ``check(subject, options)`` returns the rule's findings as an
    iterable (a generator, or a tuple where a rule runs once per commit of a history and most
    runs find nothing), where the subject is what the linter loaded (everything the rule reads
    is on it) and ``options`` is the linter's options record. Each rule module exports its
    rules as one typed tuple, ``CHECKS``, made by :func:`register`.
    """

    rule_id: str
    name: str
    summary: str
    check: Callable[[Subject, Options], Iterable[Finding]] = field(compare=False, repr=False)
    enabled_by_default: bool = True
    options: dict[str, Any] = field(default_factory=dict, compare=False)


class RuleRegistry:
    """Rules by id and by name; ids and names are unique."""

    def __init__(self) -> None:
        self._by_id: dict[str, Rule[Any, Any]] = {}
        self._by_name: dict[str, Rule[Any, Any]] = {}

    def register(self, rule: Rule[Any, Any]) -> Rule[Any, Any]:
        """Add ``rule``; a duplicate id or name is a programming error."""
        if rule.rule_id in self._by_id or rule.name in self._by_name:
            raise ValueError(f"duplicate rule {rule.rule_id} ({rule.name})")
        self._by_id[rule.rule_id] = rule
        self._by_name[rule.name] = rule
        return rule

    def ensure(self, rule: Rule[Subject, Options]) -> Rule[Subject, Options]:
        """``rule``'s registered entry: added now, or the one a module import added before.

        Rule modules register on import; importing one twice (pytest's importlib mode does)
        must keep the first registration rather than fail as a duplicate.
        """
        return cast("Rule[Subject, Options]", self.get(rule.rule_id) or self.register(rule))

    def get(self, key: str) -> Rule[Any, Any] | None:
        """Look a rule up by id (case-insensitive) or by name."""
        return self._by_id.get(key.upper()) or self._by_name.get(key.lower())

    def __iter__(self) -> Iterator[Rule[Any, Any]]:
        return iter(sorted(self._by_id.values(), key=lambda r: r.rule_id))

    def __len__(self) -> int:
        return len(self._by_id)


# The one registry every rule module registers into at import time.
RULES = RuleRegistry()


def register(*rules: Rule[Subject, Options]) -> tuple[Rule[Subject, Options], ...]:
    """The one way a rule module registers: its rules, added to :data:`RULES` in order.

    Returns the registered entries (a module imported twice gets its first ones back), which
    the module exports as its ``CHECKS`` tuple.
    """
    return tuple(RULES.ensure(rule) for rule in rules)


def switched_on(
    rules: Iterable[Rule[Subject, Options]], enabled: Callable[[str], bool] | None = None
) -> list[Rule[Subject, Options]]:
    """The ``rules`` that are on: ``enabled(rule_id)``, or each rule's default without it.

    Every runner filters its rules here before it runs any: a switched-off rule never runs.
    """
    return [
        rule
        for rule in rules
        if (rule.enabled_by_default if enabled is None else enabled(rule.rule_id))
    ]
