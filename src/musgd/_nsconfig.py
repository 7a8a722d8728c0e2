"""``NSConfig``: the Newton-Schulz settings of either flavour, one validated, keyword-only record.

Spec §4 (``shared/specs/musgd.md``). Both flavours, ``from_stock`` and ``musgd_trainer`` take it
as ``ns=``; the flat constructor arguments (``ns_steps``, ``ns_coefficients``, ``eps``,
``ns_dtype``, ``ns_backend``) stay as shorthands for its fields (:func:`merge_flat`). Names are
looked up in module-level registries, so that a new named schedule, scale or normalization is
one entry there: ``SCHEDULES``, ``SCALES`` and ``NORMALIZATIONS`` (``musgd._newton_schulz``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import torch

from musgd._newton_schulz import (
    AUTO_NS_DTYPE,
    DEFAULT_EPS,
    MAX_STEPS,
    NORMALIZATIONS,
    SCALES,
    SCHEDULES,
    SUPPORTED_NS_DTYPES,
    Triple,
    resolve_coefficients,
    schedule_normalization,
    schedule_steps,
)
from musgd._triton_ns import BACKENDS

DEFAULT_SCHEDULE = "quintic"
DEFAULT_NORMALIZE = "frobenius"
_DTYPE_NAMES = {
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "float32": torch.float32,
    "fp32": torch.float32,
}


def _fail(field: str, rule: str, value: object, fix: str = "") -> NoReturn:
    hint = f"; {fix}" if fix else ""
    raise ValueError(f"NSConfig: {field} must be {rule}, got {value!r}{hint}")


def _names(options: Sequence[str] | Mapping[str, object]) -> str:
    return ", ".join(map(repr, options))


def _triples(value: object) -> tuple[Triple, ...]:
    """An explicit schedule as float triples (1..MAX_STEPS of them, finite); else ValueError."""
    # bytes are a sequence of ints, not a name or triples (b"quintic" is refused as given).
    text = isinstance(value, bytes | bytearray)
    if not text and isinstance(value, Sequence) and len(value) == 3 and all(map(_real, value)):
        value = (value,)  # one triple, for every iteration
    if text or not isinstance(value, Sequence) or not 1 <= len(value) <= MAX_STEPS:
        _fail(
            "coefficients",
            f"a schedule name ({_names(SCHEDULES)}) or a sequence of 1..{MAX_STEPS} "
            "(a, b, c) triples",
            value,
        )
    out: list[Triple] = []
    for i, item in enumerate(value):
        if (
            not isinstance(item, Sequence)
            or len(item) != 3
            or not all(_real(v) and math.isfinite(float(v)) for v in item)
        ):
            _fail(f"coefficients[{i}]", "an (a, b, c) triple of finite numbers", item)
        a, b, c = (float(v) for v in item)
        out.append((a, b, c))
    return tuple(out)


def _real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def as_ns_dtype(value: object) -> torch.dtype | str:
    """A working dtype as ``NSConfig`` stores it: ``"auto"`` or a supported ``torch.dtype``;
    else ValueError (text such as ``"bf16"`` is :func:`parse_ns_dtype`'s, for command lines)."""
    if value == AUTO_NS_DTYPE:
        return AUTO_NS_DTYPE
    if not isinstance(value, torch.dtype) or value not in SUPPORTED_NS_DTYPES:
        _fail(
            "dtype",
            '"auto", torch.bfloat16, torch.float16 or torch.float32',
            value,
            "bf16 where matrices multiply in bf16 natively, float32 for the exact reference",
        )
    return value


@dataclass(frozen=True, kw_only=True)
class NSConfig:
    """The Newton-Schulz settings of one optimizer: keyword-only, validated at construction.

    Args:
        steps: iterations, 1..100. None (default): the schedule's own, 4 for ``"aol4"``, the
            length of an explicit sequence of more than 5 triples, and 5 for every other (an
            explicit schedule shorter than ``steps`` repeats its last triple; a longer one runs
            its first ``steps`` triples). Read back as the resolved value.
        coefficients: a schedule name (``"quintic"``, the default, the Muon write-up's
            ``(3.4445, -4.7750, 2.0315)`` for every iteration; ``"polar_express"``, Polar
            Express's five per-iteration minimax quintics, arXiv 2505.16932) or an explicit
            sequence of 1..100
            ``(a, b, c)`` triples of finite numbers, one per iteration (a shorter sequence
            repeats its last triple), or one triple for every iteration. A name is kept as
            given; :attr:`triples` is the expanded schedule.
        eps: added to the norm before normalizing (> 0). Default 1e-7.
        dtype: the working dtype: ``"auto"`` (bf16 where it is native, float32 elsewhere),
            ``torch.bfloat16``, ``torch.float16`` or ``torch.float32``. None (default): the
            flavour's own (``MuSGD``: ``"auto"``;
            ``UltralyticsMuSGD``: ``torch.bfloat16``, as Ultralytics).
        backend: ``"auto"``, ``"triton"``, ``"torch"`` or ``"gram"`` (see :class:`musgd.MuSGD`).
        scale: the Muon scale of each orthogonalized matrix, by name: ``"muon"``
            (``0.2*sqrt(max(rows, cols))``) or ``"ultralytics"``
            (``sqrt(max(1, shape[-2]/shape[-1]))``). None (default): the flavour's own.
        normalize: how a matrix is normalized before the iteration: ``"frobenius"``
            (``X/‖X‖_F``) or ``"aol"`` (the AOL row rescaling of its wide orientation, R271).
            None (default): the schedule's own, ``"aol"`` for ``"aol4"`` and ``"frobenius"``
            for every other schedule; a name's own cannot be overridden. Read back as the
            resolved value.
    """

    # None (the default) resolves in __post_init__, so that readers always see an int.
    steps: int = None  # type: ignore[assignment]
    coefficients: str | tuple[Triple, ...] = DEFAULT_SCHEDULE
    eps: float = DEFAULT_EPS
    dtype: torch.dtype | str | None = None
    backend: str = "auto"
    scale: str | None = None
    normalize: str | None = None

    def __post_init__(self) -> None:
        # None: the schedule's own length ("aol4": 4), else 5.
        object.__setattr__(self, "steps", schedule_steps(self.coefficients, self.steps))
        steps = self.steps
        if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
            _fail("steps", f"an int in 1..{MAX_STEPS}", steps, "5 is the quintic schedule's")
        coefficients = self.coefficients
        if isinstance(coefficients, str):
            if coefficients not in SCHEDULES:
                _fail(
                    "coefficients",
                    f"one of the names {_names(SCHEDULES)} or a sequence of (a, b, c) triples",
                    coefficients,
                )
        else:
            object.__setattr__(self, "coefficients", _triples(coefficients))
        eps = self.eps
        if not _real(eps) or not math.isfinite(eps) or eps <= 0:
            _fail("eps", "a finite number > 0", eps, "1e-7 is the default")
        object.__setattr__(self, "eps", float(eps))
        if self.dtype is not None:
            object.__setattr__(self, "dtype", as_ns_dtype(self.dtype))
        if not isinstance(self.backend, str) or self.backend not in BACKENDS:
            _fail("backend", f"one of {_names(BACKENDS)}", self.backend)
        if self.scale is not None and (not isinstance(self.scale, str) or self.scale not in SCALES):
            _fail("scale", f"one of {_names(SCALES)} or None (the flavour's own)", self.scale)
        if self.normalize is not None and self.normalize not in NORMALIZATIONS:
            _fail("normalize", f"one of {_names(NORMALIZATIONS)} or None", self.normalize)
        try:  # a named schedule brings its own normalization ("aol4": "aol")
            how = schedule_normalization(self.coefficients, self.normalize)
        except ValueError as exc:
            _fail("normalize", "the schedule's own", self.normalize, str(exc))
        object.__setattr__(self, "normalize", how)

    @property
    def triples(self) -> tuple[Triple, ...]:
        """The schedule expanded to exactly ``steps`` (a, b, c) triples."""
        return resolve_coefficients(self.coefficients, self.steps)

    def with_defaults(self, *, dtype: torch.dtype | str, scale: str) -> NSConfig:
        """This config with a flavour's own ``dtype`` and ``scale`` where they are None."""
        return dataclasses.replace(
            self,
            dtype=self.dtype if self.dtype is not None else dtype,
            scale=self.scale if self.scale is not None else scale,
        )


# The flat shorthand arguments: argument name -> the NSConfig field it stands for.
FLAT_ARGUMENTS: dict[str, str] = {
    "ns_steps": "steps",
    "ns_coefficients": "coefficients",
    "eps": "eps",
    "ns_dtype": "dtype",
    "ns_backend": "backend",
}


def _differs(name: str, flat: object, field: object, steps: int) -> bool:
    if name == "ns_coefficients":
        try:
            return resolve_coefficients(flat, steps) != resolve_coefficients(field, steps)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return True
    if name == "ns_dtype":
        return as_ns_dtype(flat) != field
    return bool(flat != field)


def merge_flat(
    ns: NSConfig | None,
    flat: Mapping[str, Any],
    defaults: Mapping[str, Any],
    *,
    where: str,
) -> NSConfig:
    """The one ``NSConfig`` of a constructor's ``ns=`` and its flat shorthand arguments.

    ``flat`` maps argument names (keys of :data:`FLAT_ARGUMENTS`) to the values passed and
    ``defaults`` to the constructor's defaults for them. Without ``ns`` the flat arguments make
    it (a bad value raises ValueError naming the argument). With it, a flat argument left at its
    default defers to ``ns``; one given with another value than ``ns`` holds raises ValueError
    naming both, since either could be meant.
    """
    if ns is None:
        values = {FLAT_ARGUMENTS[name]: value for name, value in flat.items()}
        try:
            return NSConfig(**values)
        except ValueError as exc:
            # Name the argument the caller wrote, not the field it stands for.
            message = str(exc).removeprefix("NSConfig: ")
            for name, field in FLAT_ARGUMENTS.items():
                if name in flat and message.startswith(field):
                    message = name + message[len(field) :]
                    break
            raise ValueError(f"{where}: {message}") from None
    if not isinstance(ns, NSConfig):
        raise ValueError(
            f"{where}: ns must be a musgd.NSConfig (e.g. NSConfig(steps=3)), got {ns!r}"
        )
    for name, value in flat.items():
        field = FLAT_ARGUMENTS[name]
        current = getattr(ns, field)
        if _same(name, value, defaults[name]):
            continue
        if current is None or _differs(name, value, current, ns.steps):
            raise ValueError(
                f"{where}: {name}={value!r} conflicts with ns.{field}={current!r}; set it in "
                f"the NSConfig (NSConfig({field}=...)) and leave {name} out"
            )
    return ns


def _same(name: str, value: object, default: object) -> bool:
    """Whether a flat argument was left at its default (so it defers to ``ns=``)."""
    if name == "ns_coefficients" or isinstance(default, torch.dtype):
        return value == default
    return type(value) is type(default) and value == default


def group_entries(config: NSConfig) -> dict[str, Any]:
    """The default flavour's param-group keys for ``config`` (plain Python values, so that
    ``state_dict()`` carries them): ``ns_steps``, ``ns_coefficients`` (the schedule expanded to
    ``ns_steps`` triples), ``eps``, ``ns_dtype``, ``ns_backend`` and ``ns_normalize``."""
    return {
        "ns_steps": config.steps,
        "ns_coefficients": config.triples,
        "eps": config.eps,
        "ns_dtype": AUTO_NS_DTYPE if config.dtype is None else config.dtype,
        "ns_backend": config.backend,
        "ns_normalize": config.normalize,
    }


def from_group(group: Mapping[str, Any], *, scale: str) -> NSConfig:
    """The ``NSConfig`` a default-flavour param group holds (the inverse of
    :func:`group_entries`, with the flavour's ``scale``)."""
    return NSConfig(
        steps=group["ns_steps"],
        coefficients=group["ns_coefficients"],
        eps=group["eps"],
        dtype=group["ns_dtype"],
        backend=group["ns_backend"],
        scale=scale,
        normalize=group.get("ns_normalize", DEFAULT_NORMALIZE),
    )


def parse_ns_dtype(text: str) -> torch.dtype | str:
    """A working dtype written as text (a command line's ``ns_dtype=bf16``): ``"auto"`` or a
    supported dtype's name (``bfloat16``/``bf16``, ``float16``/``fp16``, ``float32``/``fp32``,
    with or without ``torch.``); else ValueError listing them."""
    if text == AUTO_NS_DTYPE:
        return text
    dtype = _DTYPE_NAMES.get(text.removeprefix("torch."))
    if dtype is None:
        _fail("dtype", f'"auto" or one of {_names(_DTYPE_NAMES)}', text)
    return dtype


# Command-line keys (``musgd-yolo ns_steps=3 ns_coefficients=quintic``): "ns_" + a field name.
COMMAND_LINE_PREFIX = "ns_"


def pop_command_line(options: dict[str, Any]) -> NSConfig | None:
    """Take the ``ns_<field>=value`` pairs (values as the command line parsed them) out of
    ``options`` and make them one ``NSConfig``; None when there are none. ``ns_dtype`` is read
    by name (:func:`parse_ns_dtype`). A bad key or value raises ValueError naming the key."""
    fields = {f.name for f in dataclasses.fields(NSConfig)}
    keys = [k for k in options if k.startswith(COMMAND_LINE_PREFIX)]
    if not keys:
        return None
    values: dict[str, Any] = {}
    for key in keys:
        field = key.removeprefix(COMMAND_LINE_PREFIX)
        value = options.pop(key)
        if field not in fields:
            known = ", ".join(f"{COMMAND_LINE_PREFIX}{f}" for f in sorted(fields))
            raise ValueError(f"{key}= is not a Newton-Schulz setting; the settings are {known}")
        if field == "coefficients" and isinstance(value, list):
            value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        values[field] = value
    try:
        if isinstance(values.get("dtype"), str):
            values["dtype"] = parse_ns_dtype(values["dtype"])
        return NSConfig(**values)
    except ValueError as exc:
        message = str(exc).removeprefix("NSConfig: ")
        raise ValueError(f"{COMMAND_LINE_PREFIX}{message}") from None
