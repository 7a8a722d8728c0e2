"""The Ultralytics-compatible MuSGD flavour (``shared/specs/ultralytics-compat.md``).

Same constructor and state-dict layout as the Ultralytics 8.4 ``MuSGD`` (``muon=``, ``sgd=``,
per-group ``use_muon``, buffers ``momentum_buffer`` and ``momentum_buffer_SGD``); the update
rule below runs on this project's execution machinery (bucketed Newton–Schulz, the replay of
``capture_orthogonalization`` and ``capture_updates``). For a ``use_muon`` group, parameter ``P``
with gradient ``g``, momentum ``b`` (β), weight decay ``λ``, learning rate ``lr``::

    m <- b*m + (1-b)*g                     (buffer momentum_buffer)
    u <- b*m + (1-b)*g  (nesterov)  or  m
    O <- sqrt(max(1, shape[-2]/shape[-1])) * NS(u viewed as (rows, numel/rows))
    g' <- g + λ*(P - lr*muon*O)            (decay on the Muon-updated parameter)
    s <- b*s + g'                          (buffer momentum_buffer_SGD)
    v <- g' + b*s  (nesterov)  or  s
    P <- P - lr*(muon*O + sgd*v)

Other groups: ``g' = g + λ*P``, ``m <- b*m + g'``, ``v = g' + b*m`` (nesterov) or ``m``,
``P <- P - lr*v``. The Ultralytics implementation writes the Muon part before the SGD part; here
both parts go into one update ``U`` written as ``P <- P - lr*U`` (one foreach write, the same
split into preparation and write as the default flavour), which differs from it by float32
rounding only.

The learning rate enters the preparation (through the decay of the Muon-updated parameter), so
replay reads it, like ``momentum``, ``1 - momentum`` and ``weight_decay``, from a float32 0-d
device tensor refilled outside the recording (:class:`UltralyticsHyper`). ``muon``, ``sgd`` and
the Newton-Schulz settings (an ``NSConfig``) are constructor constants, part of the update rule
(:class:`UltralyticsRule`) that the step engine (``musgd._engine``) runs.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor

from musgd._distributed import ShardedStep, WorkItem, exchange_results, is_sharded
from musgd._engine import (
    EngineOptimizer,
    ParamsT,
    StepEngine,
    StepValues,
    host_number,
    refuse_generic_flags,
)
from musgd._functional import (
    MOMENTUM_BUFFER,
    Bucket,
    HyperValues,
    Layout,
    NSSettings,
    Orthogonalizer,
    Scalar,
    StepRecord,
    Structure,
    apply_updates,
    momentum_foreach,
    orthogonalize_table_views,
    stack_bucket,
    unstack_bucket,
)
from musgd._newton_schulz import (
    DEFAULT_NS_DTYPE,
    SCALES,
    SUPPORTED_NS_DTYPES,
    resolve_ns_dtype,
    ultralytics_scale,
)
from musgd._nsconfig import NSConfig, merge_flat
from musgd._replay import Recorder
from musgd._triton_ns import BACKENDS as NS_BACKENDS

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

SGD_BUFFER = "momentum_buffer_SGD"
# Ultralytics 8.4's constructor defaults (its reference documentation, R150).
ULTRALYTICS_DEFAULTS: dict[str, Any] = {
    "lr": 1e-3,
    "momentum": 0.0,
    "weight_decay": 0.0,
    "nesterov": False,
    "use_muon": False,
    "muon": 0.5,
    "sgd": 0.5,
}
# The flat shorthand arguments' defaults: one left at its default defers to ``ns=``.
FLAT_DEFAULTS: dict[str, Any] = {"ns_dtype": DEFAULT_NS_DTYPE, "ns_backend": "auto"}


@dataclass(frozen=True)
class UltralyticsHyper:
    """This flavour's per-step hyperparameter record: ``momentum`` (b), ``weight_decay`` (λ),
    the learning rate ``lr`` (it enters the preparation through the decay of the Muon-updated
    parameter) and ``damping`` (``1 - momentum``).

    Python floats, or under ``capture_updates`` 0-d float32 device tensors that the recording
    reads (``HyperSlots``), refilled outside it whenever a value changes, so warm-up schedules
    of ``lr`` and ``momentum`` replay with current values.
    """

    momentum: Scalar
    weight_decay: Scalar
    lr: Scalar
    damping: Scalar


# The Ultralytics flavour's Muon scale (``musgd._newton_schulz.ultralytics_scale``), by the
# name this module has always exported it under.
muon_scale = ultralytics_scale
DEFAULT_SCALE = "ultralytics"


@functools.lru_cache(maxsize=1024)
def _muon_scales(shapes: tuple[torch.Size, ...], scale: str) -> tuple[float, ...]:
    """The ``scale`` (a name of ``SCALES``) of each shape: the Triton table's per-matrix result
    scales."""
    fn = SCALES[scale]
    return tuple(fn(shape) for shape in shapes)


def sgd_direction(
    params: Sequence[Tensor],
    grads: Sequence[Tensor],
    bufs: Sequence[Tensor],
    hyper: HyperValues,
    structure: Structure,
) -> list[Tensor]:
    """``g' = g + λ*P``; ``s <- b*s + g'`` in place; returns ``g' + b*s`` (nesterov) or ``s``.

    The momentum half is the default flavour's (``momentum_foreach``) on ``g'``.
    """
    if structure.decay:
        decayed = list(torch._foreach_mul(list(params), hyper.weight_decay))
        torch._foreach_add_(decayed, list(grads))
    else:
        decayed = list(grads)
    return momentum_foreach(bufs, decayed, hyper, structure)


def _orthogonalize_into(
    out: list[Tensor | None],
    u: Sequence[Tensor],
    bucket: Bucket,
    indices: Sequence[int],
    ns: NSSettings,
    orth: Orthogonalizer,
    scale: str = DEFAULT_SCALE,
) -> None:
    """One job: ``O`` of the matrices ``indices`` of one bucket of ``u`` (all of it, or a DDP
    plan's slice of an unpadded bucket), written into ``out``, scaled by ``scale`` (a name of
    ``SCALES``).

    A padded bucket (on CUDA, :func:`~musgd._functional.pad_bound`) holds smaller matrices in
    the corners of its blocks: each result is its own corner, scaled by its own Muon scale.
    """
    members = [u[i] for i in indices]
    if len(indices) != len(bucket.indices):
        bucket = dataclasses.replace(bucket, indices=tuple(indices))
    O = orth.batched(stack_bucket(members, bucket), ns)
    scales = list(_muon_scales(tuple(m.shape for m in members), scale))
    if len(set(scales)) == 1:
        O.mul_(scales[0])
        scales = [1.0] * len(members)
    for i, o, k in zip(indices, unstack_bucket(O, bucket), scales, strict=True):
        out[i] = o.reshape(u[i].shape) if k == 1.0 else o.reshape(u[i].shape).mul(k)


def _orthogonalized(
    u: Sequence[Tensor],
    layout: Layout,
    structure: Structure,
    orth: Orthogonalizer,
    scale: str = DEFAULT_SCALE,
) -> list[Tensor]:
    """``O`` of every matrix of ``u`` in one process: the Triton table where it applies (with
    the Muon scales ``scale`` names), else the per-bucket batched calls."""
    found: list[Tensor | None] = [None] * len(u)
    table = orthogonalize_table_views(
        u,
        layout,
        structure.ns,
        orth,
        _muon_scales(tuple(u[i].shape for i in layout.matrices), scale),
    )
    if table is not None:
        for i, o in zip(layout.matrices, table[1], strict=True):
            found[i] = o
    else:
        orth.run_buckets(
            [
                functools.partial(
                    _orthogonalize_into, found, u, b, b.indices, structure.ns, orth, scale
                )
                for b in layout.buckets
            ],
            [b.cost for b in layout.buckets],
        )
    return cast(list[Tensor], found)


def _fail(where: str, name: str, rule: str, value: object) -> None:
    raise ValueError(f"{where}: {name} must be {rule}, got {value!r}")


def _finite(value: object) -> bool:
    """A finite real number (NumPy's scalars too), not a bool."""
    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


_OR_TENSOR = " (or a one-element floating-point tensor, read on the host)"


def validate_flavour_group(group: dict[str, Any], *, where: str) -> None:
    """Raise ValueError naming the argument when a group's setting is out of range."""
    lr = host_number(group["lr"])
    if lr is None or not math.isfinite(lr) or lr < 0:
        _fail(where, "lr", "a finite number >= 0" + _OR_TENSOR, group["lr"])
    mu = host_number(group["momentum"])
    if mu is None or not 0.0 <= mu < 1.0:
        _fail(where, "momentum", "a number in [0, 1)" + _OR_TENSOR, group["momentum"])
    wd = host_number(group["weight_decay"])
    if wd is None or not math.isfinite(wd) or wd < 0:
        _fail(where, "weight_decay", "a finite number >= 0" + _OR_TENSOR, group["weight_decay"])
    for name in (
        "nesterov",
        "use_muon",
        "capture_orthogonalization",
        "capture_updates",
        "maximize",
        "skip_nonfinite",
    ):
        if not isinstance(group[name], bool):
            _fail(where, name, "True or False", group[name])
    check_routes(group, where=where)


def check_routes(group: Mapping[str, Any], *, where: str) -> None:
    """Raise ValueError where a ``use_muon=True`` group holds a parameter that is no matrix."""
    if group["use_muon"]:
        for j, p in enumerate(group["params"]):
            if p.ndim < 2:
                raise ValueError(
                    f"{where}: use_muon=True needs matrices or conv kernels (ndim >= 2), but "
                    f"params[{j}] has shape {tuple(p.shape)}; put it in a group with "
                    "use_muon=False"
                )


@dataclass(frozen=True)
class UltralyticsRule:
    """The Ultralytics flavour as an update rule (``musgd._engine.UpdateRule``): the Ultralytics
    group settings (:func:`validate_flavour_group`), ``momentum_buffer`` plus, in ``use_muon``
    groups, ``momentum_buffer_SGD`` per parameter, and the update of this module's docstring.

    Frozen, so equal rules compare and hash equal: a recording's key holds :meth:`prepare`.
    """

    muon: float
    sgd: float
    ns: NSConfig
    name: str = "UltralyticsMuSGD"
    # The Newton-Schulz settings of ``ns`` per device (its "auto" dtype resolved there).
    _settings: dict[torch.device, NSSettings] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )

    def check_settings(self, group: Mapping[str, Any], *, where: str) -> None:
        validate_flavour_group(dict(group), where=where)

    def check_params(self, group: Mapping[str, Any], *, where: str) -> None:
        check_routes(group, where=where)

    def admit_group(
        self, group: dict[str, Any], defaults: Mapping[str, Any], *, where: str
    ) -> dict[str, Any]:
        params = group.get("params", [])  # a list (the engine read a generator) or a tensor
        if isinstance(params, Tensor):
            group = {**group, "params": [params]}
        validate_flavour_group({**defaults, **group}, where=where)
        return group

    def buffers(self, group: Mapping[str, Any]) -> tuple[str, ...]:
        return BOTH_BUFFERS if group["use_muon"] else (MOMENTUM_BUFFER,)

    @property
    def known_buffers(self) -> tuple[str, ...]:
        return BOTH_BUFFERS

    def shares(self, group: Mapping[str, Any], params: list[Tensor], sharded: ShardedStep) -> bool:
        if is_sharded(params):
            raise RuntimeError(
                "UltralyticsMuSGD does not shard FSDP2 (DTensor) parameters; use it with DDP "
                "(process_group=... shares the Newton-Schulz work across ranks) or one process, "
                "or use musgd.MuSGD for FSDP2"
            )
        return sharded.shares_ddp() and bool(group["use_muon"]) and self.muon != 0.0

    def values(
        self, group: Mapping[str, Any], device: torch.device, live: torch.device | None
    ) -> StepValues:
        """Every value is read on the host (``live`` is not used): the trainer writes Python
        numbers into the groups."""
        momentum = float(group["momentum"])
        weight_decay = float(group["weight_decay"])
        lr = float(group["lr"])
        structure = Structure(
            nesterov=bool(group["nesterov"]),
            decay=weight_decay != 0.0,
            muon=bool(group["use_muon"]) and self.muon != 0.0,
            ns=self.settings(device),
        )
        return StepValues(
            UltralyticsHyper(momentum, weight_decay, lr, 1.0 - momentum), structure, lr
        )

    def settings(self, device: torch.device) -> NSSettings:
        """The Newton-Schulz settings of :attr:`ns` for matrices on ``device``, made once per
        device (a step's calls share one settings object)."""
        found = self._settings.get(device)
        if found is None:
            ns = self.ns
            assert ns.dtype is not None  # the constructor filled it
            dtype = resolve_ns_dtype(ns.dtype, device, backend=ns.backend)
            found = NSSettings(ns.steps, ns.triples, ns.eps, dtype, ns.backend, str(ns.normalize))
            self._settings[device] = found
        return found

    def prepare(self, record: StepRecord) -> list[Tensor]:
        """``U`` for ``P <- P - lr*U``; buffers updated in place (``record.bufs`` holds the
        Muon buffers then, for a ``use_muon`` group, the SGD buffers)."""
        layout, structure, orth = record.layout, record.structure, record.orth
        assert self.ns.scale is not None  # the constructor filled it
        scale = self.ns.scale
        return self.run(record, lambda u: _orthogonalized(u, layout, structure, orth, scale))

    def run(
        self, record: StepRecord, orthogonalized: Callable[[list[Tensor]], list[Tensor]]
    ) -> list[Tensor]:
        """The preparation with ``O`` from ``orthogonalized(u)`` (one process's, or the ranks'
        shared work under DDP); every other operation is the same on every rank."""
        params, grads, bufs = record.params, record.grads, record.bufs
        layout, structure = record.layout, record.structure
        hyper = record.hyper
        assert isinstance(hyper, UltralyticsHyper)  # this flavour's record
        if not layout.matrices:
            return sgd_direction(params, grads, bufs, hyper, structure)
        count = len(params)
        muon_bufs, sgd_bufs = list(bufs[:count]), list(bufs[count:])
        # m <- b*m + (1-b)*g and u = b*m + (1-b)*g: the default momentum on (1-b)*g.
        damped = list(torch._foreach_mul(list(grads), hyper.damping))
        u = momentum_foreach(muon_bufs, damped, hyper, structure)
        if not structure.muon:
            v = sgd_direction(params, grads, sgd_bufs, hyper, structure)
            return list(torch._foreach_mul(v, self.sgd))
        O = orthogonalized(u)
        updated = list(params)
        if structure.decay:
            # The decay of the Ultralytics rule reads the parameter after its Muon write.
            step = torch._foreach_mul(O, hyper.lr)
            torch._foreach_mul_(step, self.muon)
            updated = list(torch._foreach_sub(list(params), step))
        v = sgd_direction(updated, grads, sgd_bufs, hyper, structure)
        U = list(torch._foreach_mul(v, self.sgd))
        torch._foreach_add_(U, torch._foreach_mul(O, self.muon))
        return U

    def step_shared(self, engine: StepEngine, record: StepRecord, lr: float) -> None:
        """A ``use_muon`` group under DDP: each rank orthogonalizes the bucket slices the plan
        gives it (batched torch products, replayed under ``capture_orthogonalization``), one
        ``all_gather`` shares the results, and every rank runs the rest of the update on the
        whole group, so parameters and both buffers stay identical on every rank. Collectives
        sit inside the step, so ``capture_updates`` records nothing here."""
        layout, structure, orth = record.layout, record.structure, record.orth
        # The Triton table runs a whole group, not a rank's share: the shares run the torch
        # products (the Gram iteration's where the group asked for it).
        ns = structure.ns
        if ns.backend != "gram":
            ns = dataclasses.replace(ns, backend="torch")
        assert self.ns.scale is not None  # the constructor filled it
        scale = self.ns.scale
        shared = engine.sharded.ddp_plan(layout, record.params, structure, orth)
        if shared is None:  # pragma: no cover - shares_ddp() said two or more ranks
            raise RuntimeError("UltralyticsMuSGD: the process group has one rank")
        plan, comm = shared

        def orthogonalized(u: list[Tensor]) -> list[Tensor]:
            results: list[Tensor | None] = [None] * len(u)

            def compute(item: WorkItem) -> None:
                bucket = layout.buckets[item.bucket]
                indices = bucket.indices[item.start : item.stop]
                _orthogonalize_into(results, u, bucket, indices, ns, orth, scale)

            exchange_results(results, record.params, layout, plan, comm, compute)
            return cast(list[Tensor], results)

        apply_updates(record.params, self.run(record, orthogonalized), lr)


BOTH_BUFFERS = (MOMENTUM_BUFFER, SGD_BUFFER)


class UltralyticsMuSGD(EngineOptimizer):
    """MuSGD with the Ultralytics 8.4 constructor, update rule and state-dict layout.

    Drop-in for ``ultralytics.optim.MuSGD``: ``UltralyticsMuSGD(groups, lr=..., momentum=...,
    weight_decay=..., nesterov=..., use_muon=..., muon=0.2, sgd=1.0)``; its state dicts load into
    the Ultralytics optimizer and back. The update rule is in this module's docstring; it runs
    as :class:`UltralyticsRule` on the step engine :class:`musgd.MuSGD` holds too.

    Args:
        params: parameters or param groups; a group's ``use_muon=True`` sends its parameters
            (ndim >= 2) through Newton–Schulz, ``False`` (default) through SGD with momentum.
        lr, momentum, weight_decay, nesterov, use_muon: as in Ultralytics (group defaults).
        muon: weight of the orthogonalized part (>= 0). Default 0.5 (the trainer passes 0.2).
        sgd: weight of the SGD part of ``use_muon`` groups (>= 0). Default 0.5 (trainer: 1.0).
        ns: the Newton-Schulz settings, one :class:`musgd.NSConfig` (steps, coefficients,
            eps, dtype, backend, scale); its dtype defaults to bf16 (as Ultralytics) and its
            scale to ``"ultralytics"``, ``sqrt(max(1, shape[-2]/shape[-1]))``. ``ns_dtype``
            and ``ns_backend`` are shorthands for its fields (one given with another value
            than ``ns`` holds raises ValueError). Held by the optimizer (:attr:`ns`), not in
            the groups: the state-dict layout stays the Ultralytics one.
        ns_dtype: Newton–Schulz working dtype (bf16 as in Ultralytics; fp16 or fp32).
        capture_orthogonalization, capture_updates: replay (see :class:`musgd.MuSGD`);
            bit-identical to this optimizer's eager steps. Both live in each param group.
        ns_backend: ``"auto"`` (default: the grouped Triton Newton–Schulz kernels on CUDA
            where they apply, each ``use_muon`` group's matrices as one table, with this
            flavour's Muon scales), ``"triton"``, ``"torch"`` or ``"gram"``, as in
            :class:`musgd.MuSGD`.
        process_group: under DDP (gradients already averaged, the same on every rank), share
            the Newton–Schulz work of ``use_muon`` groups across the group's ranks: a
            FLOP-balanced plan gives each rank slices of the buckets, one ``all_gather`` hands
            every result to every rank, and each rank finishes the whole update, so parameters
            and both buffers stay identical everywhere (bit-identical to one process on the
            CPU). Those groups then record no ``capture_updates`` graph (the collective sits in
            the step); ``capture_orthogonalization`` replays each rank's share. Without it
            (default), every rank runs all of the work. FSDP2 (DTensor) parameters are refused.
        recorder: what records device work for replay (see :class:`musgd.MuSGD`).
        maximize: step on ``-grad``, as in ``torch.optim`` (every path). Default False. Lives
            in each param group (an extra key the Ultralytics optimizer ignores).
        skip_nonfinite: skip a step whose gradients (of the groups that ask) are not all
            finite, leaving parameters and every buffer bit-identical, decided on the device
            with no host read (one fused inf/NaN check, a backup copy and a bitwise select:
            ``musgd._guard``); eager, replayed and inside a whole-step CUDA graph alike.
            Skipped steps are counted on the device (:attr:`skipped_steps`); an extra group key
            the Ultralytics optimizer ignores. Costs one copy
            of the guarded parameters and buffers in memory. Off by default. Lives in each
            param group. FSDP2 (DTensor) parameters are refused.

    ``differentiable``, ``fused`` and ``capturable`` are not offered, as in
    :class:`musgd.MuSGD`: anything but their defaults raises ValueError saying what serves
    instead.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = ULTRALYTICS_DEFAULTS["lr"],
        momentum: float = ULTRALYTICS_DEFAULTS["momentum"],
        weight_decay: float = ULTRALYTICS_DEFAULTS["weight_decay"],
        nesterov: bool = ULTRALYTICS_DEFAULTS["nesterov"],
        use_muon: bool = ULTRALYTICS_DEFAULTS["use_muon"],
        muon: float = ULTRALYTICS_DEFAULTS["muon"],
        sgd: float = ULTRALYTICS_DEFAULTS["sgd"],
        *,
        ns: NSConfig | None = None,
        ns_dtype: torch.dtype = DEFAULT_NS_DTYPE,
        capture_orthogonalization: bool = False,
        capture_updates: bool = False,
        ns_backend: str = "auto",
        process_group: ProcessGroup | None = None,
        recorder: Recorder | None = None,
        maximize: bool = False,
        skip_nonfinite: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        capturable: bool = False,
    ) -> None:
        refuse_generic_flags(
            "UltralyticsMuSGD", differentiable=differentiable, fused=fused, capturable=capturable
        )
        for name, value in (("muon", muon), ("sgd", sgd)):
            if not _finite(value) or value < 0:
                _fail("UltralyticsMuSGD", name, "a finite number >= 0", value)
        if ns_dtype not in SUPPORTED_NS_DTYPES:
            _fail("UltralyticsMuSGD", "ns_dtype", "torch.bfloat16, float16 or float32", ns_dtype)
        if ns_backend not in NS_BACKENDS:
            _fail("UltralyticsMuSGD", "ns_backend", " or ".join(map(repr, NS_BACKENDS)), ns_backend)
        flat = {"ns_dtype": ns_dtype, "ns_backend": ns_backend}
        config = merge_flat(ns, flat, FLAT_DEFAULTS, where="UltralyticsMuSGD")
        self.ns = config.with_defaults(dtype=DEFAULT_NS_DTYPE, scale=DEFAULT_SCALE)
        self.muon = float(muon)
        self.sgd = float(sgd)
        self.ns_dtype = self.ns.dtype
        self.ns_backend = self.ns.backend
        defaults: dict[str, Any] = {
            "lr": lr,
            "momentum": momentum,
            "weight_decay": weight_decay,
            "nesterov": nesterov,
            "use_muon": use_muon,
            "capture_orthogonalization": capture_orthogonalization,
            "capture_updates": capture_updates,
            "maximize": maximize,
            "skip_nonfinite": skip_nonfinite,
            "params": [],
        }
        validate_flavour_group(defaults, where="UltralyticsMuSGD")
        del defaults["params"]
        super().__init__(
            params,
            defaults,
            UltralyticsRule(self.muon, self.sgd, self.ns),
            process_group=process_group,
            recorder=recorder,
        )

    def ns_config(self, group: int = 0) -> NSConfig:
        """The Newton-Schulz settings every group steps with (this flavour keeps one, like
        ``muon`` and ``sgd``, out of the Ultralytics state-dict layout)."""
        del group
        return self.ns
