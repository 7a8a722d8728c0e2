"""The default MuSGD flavour: its constructor, its update rule and its hyperparameter checks.

The step itself is the engine's (``musgd._engine``); this module says what the default flavour
is: the hyperparameters of spec §1, one momentum buffer per parameter and the bodies of
``musgd._functional``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from musgd._distributed import ShardedStep
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
    Hyper,
    NSSettings,
    StepRecord,
    Structure,
    matrix_shape,
    prepare_default,
)
from musgd._newton_schulz import (
    AUTO_NS_DTYPE,
    DEFAULT_COEFFICIENTS,
    DEFAULT_EPS,
    DEFAULT_STEPS,
    NORMALIZATIONS,
    SUPPORTED_NS_DTYPES,
    Coefficients,
    resolve_coefficients,
    resolve_ns_dtype,
    schedule_normalization,
    schedule_steps,
)
from musgd._nsconfig import NSConfig, from_group, group_entries, merge_flat
from musgd._replay import Recorder
from musgd._triton_ns import BACKENDS as NS_BACKENDS

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

# The learning rate of the Muon write-up's hidden-layer matrices (R1), and the one this
# project's tests, benchmarks and examples train the default flavour with; a default only so that
# generic construction (``MuSGD(model.parameters())``) works, as torch.optim's optimizers allow.
DEFAULT_LR = 0.02
DEFAULT_MOMENTUM = 0.95
DEFAULT_W_MUON = 0.5
DEFAULT_W_SGD = 0.5


class MuSGD(EngineOptimizer):
    r"""Muon's Newton–Schulz orthogonalization mixed with SGD momentum.

    For each parameter ``W`` with gradient ``g`` and momentum buffer ``m``::

        m <- momentum*m + g
        n <- g + momentum*m            (nesterov=True)   or   n <- m
        matrices:  U <- w_muon*0.2*sqrt(max(rows, cols))*NS(n) + w_sgd*n + weight_decay*W
        vectors:   U <- n + weight_decay*W
        W <- W - lr*U

    A parameter is a *matrix* when its view ``(shape[0], numel/shape[0])`` has at least two rows
    and two columns (a conv kernel ``(O, I, kh, kw)`` becomes ``(O, I*kh*kw)``); everything else
    is a *vector*. A group may force either route with ``use_muon=True/False``. ``NS`` is the
    quintic Newton–Schulz iteration (:func:`musgd.orthogonalize`). A group's matrices are
    orthogonalized in a few batched calls, smaller ones zero-padded to their stack's size (zero
    rows and columns stay zero through the iteration, so each gets its own result up to
    rounding). Padding is bounded. On CUDA, where these calls are bound by host-side launches,
    rows and columns may each differ up to 16x (tall matrices sit transposed) at up to 4x the
    work; elsewhere only matrices of equal column count share a stack, rows within 2x and at
    most 1.25x the work.

    ``ns_dtype="auto"`` (the default) runs Newton–Schulz in bf16 where matrices multiply in bf16
    natively -- CUDA GPUs of compute capability 8.0 and up, CPUs with AVX512-BF16 or AMX tiles
    for a group whose largest matrix is large enough (``CPU_BF16_MIN_WORK``, WP-022) --
    and in float32 everywhere else: without native bf16 the bf16 matrix products are emulated
    and an order of magnitude slower (issue #15 reports 4.5 s against 0.12-0.21 s per
    nano-detector step on a 2-core CPU, with the same loss curves), while with it bf16 is the
    faster one. Pass a dtype to choose it yourself.

    The step is the step engine's (``musgd._engine.StepEngine``) running this flavour's update
    rule (:class:`DefaultRule`); :class:`musgd.ultralytics.UltralyticsMuSGD` holds the same
    engine with its own rule.

    ``torch.compile(optimizer.step)`` works (the step's multi-tensor work becomes per-tensor
    code that Inductor fuses); under compile, the capture flags run the eager body.

    Non-finite gradients are not hidden, as with ``torch.optim.SGD``: a NaN or inf in a gradient
    enters that parameter's momentum buffer (in that entry) and its value; for a matrix it spreads
    through the Frobenius norm of Newton–Schulz to the whole matrix. Other parameters, including
    matrices stacked in the same batched call, are unaffected. To skip such steps, use
    ``torch.amp.GradScaler`` (it skips ``step()`` when it finds inf/NaN) or check the gradients.

    ``lr``, ``momentum``, ``weight_decay``, ``w_muon`` and ``w_sgd`` may each be a number or a
    one-element tensor. A float32 tensor on the parameters' device is read there, never on the
    host: no step synchronizes on it, and a step captured whole in a CUDA graph reads its
    current value at every replay, so a schedule that writes it in place (an ``LRScheduler``
    fills a tensor ``lr``) keeps reaching the captured step. Numbers, and tensors of another
    dtype or device, are read on the host at each step (frozen into a capture). With a tensor
    ``lr`` the write is ``W - (lr*U)`` (the product rounded first); a tensor ``weight_decay`` or
    ``w_muon`` always runs its term (adding exact zeros at zero). A tensor on the CPU is
    checked as a number is whenever it or its value changes (reading it waits for nothing); a
    GPU tensor's value is never read on the host, so a value written into it later is not
    checked (a NaN ``lr`` there is not refused). To capture a whole step: run
    one step first (it makes the momentum buffers, which a capture cannot), give the graph
    gradients at fixed addresses (copy each step's gradients into the tensors it was captured
    with; ``zero_grad(set_to_none=False)`` works too but makes backward add into them), then
    capture ``step()`` (see ``torch.cuda.graph``). The capture flags below then run eagerly
    inside it; a sharded step refuses to be captured.

    Args:
        params: parameters or param groups (see :func:`musgd.param_groups`).
        lr: learning rate (>= 0), a number or a one-element tensor (see above). Default 0.02,
            the learning rate of the Muon write-up's hidden-layer matrices and of this
            project's examples; tune it for your model.
        momentum: momentum factor in [0, 1). Default 0.95.
        nesterov: use Nesterov momentum. Default True.
        weight_decay: decoupled-into-the-update L2 factor (>= 0). Default 0.
        w_muon: weight of the orthogonalized term (>= 0); 0 skips Newton–Schulz. Default 0.5.
        w_sgd: weight of the SGD term for matrices (>= 0). Default 0.5.
        ns_steps: Newton–Schulz iterations, 1..100. None (default): the schedule's own, 4 for
            ``"aol4"`` and 5 for every other (an explicit 5 with ``"aol4"`` runs 5).
        ns_coefficients: a schedule name (``"quintic"``), one (a, b, c) triple, or one per
            iteration (a shorter sequence repeats its last triple). Default
            (3.4445, -4.7750, 2.0315), the ``"quintic"`` schedule.
        eps: added to the Frobenius norm before normalizing (> 0). Default 1e-7.
        ns_dtype: Newton–Schulz working dtype: ``"auto"`` (bf16 where it is native, float32
            elsewhere; see above), ``torch.bfloat16``, ``torch.float16`` or ``torch.float32``.
            Default ``"auto"``.
        use_muon: force (True) or forbid (False) the matrix route; None routes by shape.
        ns: the Newton-Schulz settings as one :class:`musgd.NSConfig` (steps, coefficients,
            eps, dtype, backend, scale). The flat ``ns_steps``, ``ns_coefficients``, ``eps``,
            ``ns_dtype`` and ``ns_backend`` are shorthands for its fields: left at their
            defaults they defer to ``ns``, and one given with another value than ``ns`` holds
            raises ValueError. Stored in each param group as those plain entries (a group may
            pass its own ``"ns"``); :meth:`ns_config` reads it back. This flavour scales by
            ``"muon"``, ``0.2*sqrt(max(rows, cols))``.
        maximize: step on ``-grad`` (maximize the objective), as in ``torch.optim``; every
            path (eager, replayed, sharded) negates the gradients first, exactly. Default
            False. Lives in each param group.
        skip_nonfinite: skip a step whose gradients (of the groups that ask) are not all
            finite, leaving parameters and every buffer bit-identical, decided on the device
            with no host read (one fused inf/NaN check, a backup copy and a bitwise select:
            ``musgd._guard``); eager, replayed and inside a whole-step CUDA graph alike.
            Skipped steps are counted on the device (:attr:`skipped_steps`). Costs one copy
            of the guarded parameters and buffers in memory. Off by default. Lives in each
            param group. FSDP2 (DTensor) parameters are refused.
        foreach: use the ``torch._foreach_*`` body (default) or the per-tensor body.
        capture_orthogonalization: replay Newton-Schulz calls from CUDA graphs, recorded once
            per matrix signature; results are bit-identical to eager. Off by default. Lives in
            each param group. Inputs it cannot replay (CPU, MPS, autocast, enclosing capture,
            compile trace, non-contiguous) run eagerly; so do new signatures once the number
            of recordings reaches the number of matrix parameters.
        capture_updates: replay each group's whole update preparation (momentum, Nesterov,
            Newton-Schulz and the mix; not the learning-rate write) from one CUDA graph per
            group layout, with momentum, weight_decay, w_muon and w_sgd read from device
            tensors so schedules keep working; the graph runs the group's Newton-Schulz
            buckets as parallel branches. Bit-identical to eager; float32 parameters only
            (other dtypes run eagerly); contiguous or channels-last parameters, buffers and
            gradients (other layouts run eagerly). Off by default. Lives in each param group.
        process_group: share the Newton-Schulz work of DDP training across this group's ranks
            (e.g. ``torch.distributed.group.WORLD``): a FLOP-balanced plan gives each rank
            its matrices and ``all_gather`` shares the results; parameters stay identical on
            every rank. FSDP2 (``fully_shard``) DTensor parameters are handled without it
            (their mesh's group is used): full matrices are gathered on owner ranks, never
            orthogonalized as shards. Tensor parallel and HSDP meshes raise an error. With a
            group, ``capture_updates`` records no whole-group graph (collectives run inside
            the step); ``capture_orthogonalization`` replays each rank's share.
        ns_backend: which Newton-Schulz code runs a group's matrices in the foreach body.
            ``"auto"`` (default): the grouped Triton kernels on CUDA where they apply and the
            group's Newton-Schulz arithmetic is at most ``AUTO_MAX_FLOP`` (300 GFLOP a step:
            detectors such as YOLO26 n/s/m, where launches cost more than arithmetic), else
            torch, silently. ``"triton"``: the grouped Triton kernels (one problem table per
            group, three grouped launches per iteration, bf16 operands with fp32 accumulation,
            deterministic); where they do not apply (no CUDA or Triton,
            ``ns_dtype=torch.float32``, a compile trace) the torch backend runs and says so
            once. ``"torch"``: batched ``torch.bmm`` calls per bucket. ``"gram"``: the torch
            backend iterating on each matrix's Gram matrix where that takes fewer operations
            (long side over 1.5x the short, as 3x3 convolutions; Gram Newton-Schulz,
            ``musgd._newton_schulz.iterate_gram``): the same polynomial in about half the
            products, with one restart; never in bf16 (asked for it, it runs in float16;
            ``"auto"`` is float16 on a GPU, float32 on a CPU; WP-023). Not yet timed on a
            GPU. The capture flags never
            change the backend (replay stays bit-identical to eager). A group the Triton
            table runs steps packed, in device memory it keeps between steps (about one copy
            of its parameters and one of its matrices, one more with weight decay; decision
            D8). On the H200 (YOLO26 shapes, WP-009, evidence at b960f8e) Triton is the faster
            backend for every set and flag: a yolo26n/s/m step took 1.65 / 1.64 / 1.70 ms
            eager against torch's 8.51 / 8.08 / 7.96 ms, and with both capture flags 0.90 /
            0.94 / 1.75 ms against 0.93 / 1.91 / 3.56 ms. Lives in each param group.
        shard_balance: how the distributed plan balances ranks: ``"flops"`` (default,
            Newton-Schulz FLOPs) or ``"measured"`` (each layout's first step times every
            bucket's batched call on every rank and balances the slowest rank's seconds).
        recorder: what records and replays device work for the two capture options (default:
            a ``CudaGraphRecorder``); a seam for tests and tools, e.g. a recorder with other
            ``branches``, or a CPU fake with CUDA-graph semantics.

    The generic ``torch.optim`` flags ``differentiable``, ``fused`` and ``capturable`` are not
    offered: anything but their defaults raises ValueError saying what serves instead (the step
    is not differentiable; the fused work is ``ns_backend="triton"`` and ``capture_updates``;
    every step is capturable as it is, see above). Of the generic flags, ``foreach`` and
    ``maximize`` are offered.

    A pickled or deep-copied optimizer carries its groups, state and settings, and builds its
    own engine: no recordings, the default recorder, no ``process_group``.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = DEFAULT_LR,
        momentum: float = DEFAULT_MOMENTUM,
        nesterov: bool = True,
        weight_decay: float = 0.0,
        w_muon: float = DEFAULT_W_MUON,
        w_sgd: float = DEFAULT_W_SGD,
        ns_steps: int | None = None,
        ns_coefficients: Coefficients = DEFAULT_COEFFICIENTS,
        eps: float = DEFAULT_EPS,
        ns_dtype: torch.dtype | str = AUTO_NS_DTYPE,
        use_muon: bool | None = None,
        *,
        ns: NSConfig | None = None,
        maximize: bool = False,
        skip_nonfinite: bool = False,
        foreach: bool | None = None,
        capture_orthogonalization: bool = False,
        capture_updates: bool = False,
        process_group: ProcessGroup | None = None,
        ns_backend: str = "auto",
        shard_balance: str = "flops",
        recorder: Recorder | None = None,
        differentiable: bool = False,
        fused: bool | None = None,
        capturable: bool = False,
    ) -> None:
        refuse_generic_flags(
            "MuSGD", differentiable=differentiable, fused=fused, capturable=capturable
        )
        if foreach is not None and not isinstance(foreach, bool):
            raise ValueError(
                f"MuSGD: foreach must be None, True or False, got {foreach!r}; None and True run "
                "the torch._foreach_* body, False the per-tensor body"
            )
        if ns is None:  # ns_steps left at None takes the schedule's own ("aol4": 4)
            ns_steps = schedule_steps(ns_coefficients, ns_steps)
        flat: dict[str, Any] = {
            "ns_steps": ns_steps,
            "ns_coefficients": ns_coefficients,
            "eps": eps,
            "ns_dtype": ns_dtype,
            "ns_backend": ns_backend,
        }
        if ns is not None:  # the record's values, where no flat argument says otherwise
            flat = group_entries(default_ns(merge_flat(ns, flat, FLAT_DEFAULTS, where="MuSGD")))
        defaults: dict[str, Any] = {
            "lr": lr,
            "momentum": momentum,
            "nesterov": nesterov,
            "weight_decay": weight_decay,
            "w_muon": w_muon,
            "w_sgd": w_sgd,
            **flat,
            "use_muon": use_muon,
            "capture_orthogonalization": capture_orthogonalization,
            "capture_updates": capture_updates,
            "maximize": maximize,
            "skip_nonfinite": skip_nonfinite,
        }
        _validate_group(defaults, where="MuSGD")
        defaults["ns_normalize"] = _normalization(defaults, where="MuSGD")
        defaults["ns_coefficients"] = resolve_coefficients(
            defaults["ns_coefficients"], defaults["ns_steps"]
        )
        super().__init__(
            params,
            defaults,
            DefaultRule(foreach=foreach is not False),
            process_group=process_group,
            shard_balance=shard_balance,
            recorder=recorder,
        )

    def ns_config(self, group: int = 0) -> NSConfig:
        """The Newton-Schulz settings param group ``group`` steps with, as an ``NSConfig``
        (rebuilt from the group's plain entries, so also after ``load_state_dict``)."""
        return from_group(self.param_groups[group], scale=DEFAULT_SCALE)


@dataclass(frozen=True)
class DefaultRule:
    """The default flavour as an update rule (``musgd._engine.UpdateRule``): the spec's
    hyperparameters (checked by :func:`_validate_group`), one ``momentum_buffer`` per
    parameter, and the foreach (or per-tensor) body of ``musgd._functional``; groups of
    DTensor parameters or with a process group step through ``ShardedStep``."""

    foreach: bool = True
    name: str = "MuSGD"

    def check_params(self, group: Mapping[str, Any], *, where: str) -> None:
        """Nothing to refuse: any parameter takes either route (``use_muon=True`` views a
        vector of n entries as an n x 1 matrix)."""

    def check_settings(self, group: Mapping[str, Any], *, where: str) -> None:
        _validate_group(dict(group), where=where)
        normalize = group.get("ns_normalize", "frobenius")  # an older state dict's: the default
        if normalize not in NORMALIZATIONS:
            names = ", ".join(map(repr, NORMALIZATIONS))
            raise ValueError(f"{where}: ns_normalize must be one of {names}, got {normalize!r}")
        name = group["ns_coefficients"]
        if isinstance(name, str):  # admit_group resolves a name (and its normalization)
            raise ValueError(
                f"{where}: ns_coefficients of an added group holds the schedule's (a, b, c) "
                f"triples, got the name {name!r}; name a schedule where the group is made "
                "(MuSGD(..., ns_coefficients=...) or add_param_group({..., 'ns_coefficients': "
                "...}))"
            )

    def admit_group(
        self, group: dict[str, Any], defaults: Mapping[str, Any], *, where: str
    ) -> dict[str, Any]:
        """Check the group merged with ``defaults``; a group's own ``NSConfig`` (``"ns"``) is
        stored as the plain entries (``ns_steps``, ``ns_coefficients``, ``eps``,
        ``ns_dtype``, ``ns_backend``), and its coefficients as exactly ``ns_steps`` triples."""
        if "ns" in group:
            group = dict(group)
            given = group.pop("ns")
            flat = {k: group.pop(k) for k in FLAT_DEFAULTS if k in group}
            config = merge_flat(given, flat, FLAT_DEFAULTS, where=where)
            group.update(group_entries(default_ns(config, where=where)))
        if "ns_coefficients" in group and "ns_steps" not in group:
            own = schedule_steps(group["ns_coefficients"])
            if own != DEFAULT_STEPS:
                group = {**group, "ns_steps": own}
        merged = {**defaults, **group}
        _validate_group(merged, where=where)
        if "ns_coefficients" in group or "ns_normalize" in group:
            group = dict(group)  # a group's own schedule brings its own normalization
            group["ns_normalize"] = _normalization(
                {**merged, "ns_normalize": group.get("ns_normalize")}, where=where
            )
        if "ns_coefficients" in group or "ns_steps" in group:
            group = dict(group)
            group["ns_coefficients"] = resolve_coefficients(
                merged["ns_coefficients"], merged["ns_steps"]
            )
        return group

    def buffers(self, group: Mapping[str, Any]) -> tuple[str, ...]:
        return BUFFERS

    @property
    def known_buffers(self) -> tuple[str, ...]:
        return BUFFERS

    def shares(self, group: Mapping[str, Any], params: list[Tensor], sharded: ShardedStep) -> bool:
        return sharded.applies(params)

    def values(
        self, group: Mapping[str, Any], device: torch.device, live: torch.device | None
    ) -> StepValues:
        hyper = Hyper(
            momentum=hyper_value(group["momentum"], live),
            weight_decay=hyper_value(group["weight_decay"], live),
            w_muon=hyper_value(group["w_muon"], live),
            w_sgd=hyper_value(group["w_sgd"], live),
        )
        return StepValues(hyper, group_structure(group, device), hyper_value(group["lr"], live))

    def prepare(self, record: StepRecord) -> list[Tensor]:
        return prepare_default(record, foreach=self.foreach)

    def step_shared(self, engine: StepEngine, record: StepRecord, lr: float) -> None:
        # Collectives sit inside this step, so no whole-group recording: each rank replays only
        # its own Newton-Schulz share (through the record's orthogonalizer).
        engine.sharded.step(record, lr=lr, body=engine.body)


BUFFERS = (MOMENTUM_BUFFER,)


def _normalization(group: Mapping[str, Any], *, where: str) -> str:
    """The group's ``ns_normalize``: its own where set, else its schedule's (``"aol"`` for
    ``"aol4"``, ``"frobenius"`` otherwise); a contradiction raises ValueError."""
    try:
        return schedule_normalization(group["ns_coefficients"], group.get("ns_normalize"))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


# The default flavour's own Newton-Schulz working dtype and Muon scale (NSConfig's None).
DEFAULT_SCALE = "muon"
# Its flat shorthand arguments' defaults: a flat argument left at one defers to ``ns=``.
FLAT_DEFAULTS: dict[str, Any] = {
    "ns_steps": None,
    "ns_coefficients": DEFAULT_COEFFICIENTS,
    "eps": DEFAULT_EPS,
    "ns_dtype": AUTO_NS_DTYPE,
    "ns_backend": "auto",
}


def default_ns(config: NSConfig, *, where: str = "MuSGD") -> NSConfig:
    """``config`` with this flavour's own dtype and scale where it leaves them None; a scale
    this flavour does not run raises ValueError."""
    config = config.with_defaults(dtype=AUTO_NS_DTYPE, scale=DEFAULT_SCALE)
    if config.scale != DEFAULT_SCALE:
        raise ValueError(
            f"{where}: ns.scale={config.scale!r} is the Ultralytics flavour's; MuSGD scales by "
            f"{DEFAULT_SCALE!r} (0.2*sqrt(max(rows, cols))): leave scale=None, or use "
            "musgd.ultralytics.UltralyticsMuSGD for the Ultralytics rule"
        )
    return config


def is_live(value: object, device: torch.device | None) -> bool:
    """Whether a hyperparameter is read on ``device`` rather than on the host: a one-element
    float32 tensor on that device (None: nothing is)."""
    return (
        isinstance(value, Tensor)
        and value.device == device
        and value.dtype == torch.float32
        and value.numel() == 1
    )


def hyper_value(value: object, device: torch.device | None) -> float | Tensor:
    """A hyperparameter as the step reads it: a live tensor (see :func:`is_live`) as a 0-d
    tensor, so that no step synchronizes on it and a step captured in a CUDA graph reads its
    current value at every replay; anything else as a Python float (read on the host, so
    frozen into a capture)."""
    if is_live(value, device):
        assert isinstance(value, Tensor)
        return value if value.dim() == 0 else value.view(())
    return float(value)  # type: ignore[arg-type]


def _nonzero(value: object, device: torch.device) -> bool:
    """Whether a hyperparameter's term runs: always for a live tensor (its value is not read
    on the host; a zero then adds exact zeros), else when the value is not zero."""
    return is_live(value, device) or float(value) != 0.0  # type: ignore[arg-type]


def group_structure(group: Mapping[str, Any], device: torch.device) -> Structure:
    """The operation-deciding part of a group's settings, for matrices on ``device``."""
    return Structure(
        nesterov=bool(group["nesterov"]),
        decay=_nonzero(group["weight_decay"], device),
        muon=_nonzero(group["w_muon"], device),
        ns=NSSettings(
            steps=int(group["ns_steps"]),
            coefficients=tuple(tuple(t) for t in group["ns_coefficients"]),
            eps=float(group["eps"]),
            # The group's matrix views, read only where "auto" depends on them (a bf16 CPU).
            dtype=resolve_ns_dtype(
                group["ns_dtype"],
                device,
                filter(None, (matrix_shape(p.shape, group["use_muon"]) for p in group["params"])),
                str(group["ns_backend"]),
            ),
            backend=str(group["ns_backend"]),
            normalize=str(group.get("ns_normalize", "frobenius")),
        ),
    )


def _real(value: object) -> bool:
    """A real number (NumPy's scalars included), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _validate_group(group: dict[str, Any], *, where: str) -> None:
    """Raise ValueError naming the argument when a hyperparameter is out of range."""

    def fail(name: str, rule: str) -> None:
        raise ValueError(f"{where}: {name} must be {rule}, got {group[name]!r}")

    def number(name: str) -> float:
        """The value of a hyperparameter that may be a one-element tensor (read once here)."""
        value = host_number(group[name])
        if value is None:
            fail(name, "a number or a one-element floating-point tensor")
        assert value is not None  # fail raised
        return value

    lr = number("lr")
    if not math.isfinite(lr) or lr < 0:
        fail("lr", "a finite number >= 0")
    mu = number("momentum")
    if not 0.0 <= mu < 1.0:
        fail("momentum", "a number in [0, 1)")
    if not isinstance(group["nesterov"], bool):
        fail("nesterov", "True or False")
    for name in ("weight_decay", "w_muon", "w_sgd"):
        v = number(name)
        if not math.isfinite(v) or v < 0:
            fail(name, "a finite number >= 0")
    eps = group["eps"]
    if not _real(eps) or not math.isfinite(eps) or eps <= 0:
        fail("eps", "a finite number > 0")
    ns_dtype = group["ns_dtype"]
    if not (ns_dtype == AUTO_NS_DTYPE or ns_dtype in SUPPORTED_NS_DTYPES):
        fail("ns_dtype", '"auto", torch.bfloat16, torch.float16 or torch.float32')
    if not (group["use_muon"] is None or isinstance(group["use_muon"], bool)):
        fail("use_muon", "None, True or False")
    for name in ("capture_orthogonalization", "capture_updates", "maximize", "skip_nonfinite"):
        if not isinstance(group[name], bool):
            fail(name, "True or False")
    if group["ns_backend"] not in NS_BACKENDS:
        fail("ns_backend", " or ".join(map(repr, NS_BACKENDS)))
    try:
        resolve_coefficients(group["ns_coefficients"], group["ns_steps"])
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where}: {exc}") from None
