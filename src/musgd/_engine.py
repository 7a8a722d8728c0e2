"""The one step engine both MuSGD flavours hold, and the update-rule interface they plug into it.

A *flavour* is an :class:`UpdateRule`: its hyperparameter record (what a param group must hold,
checked before anything is stored, and the per-step values read from it), its buffer layout (the
state keys of each parameter) and its per-group update preparation (steps 1-4 of the spec,
bucket by bucket, taking one :class:`~musgd._functional.StepRecord`). The rule is chosen at
construction, as Distributed Shampoo chooses its preconditioner (R200); everything else is the
:class:`StepEngine`'s: gathering gradients, making buffers, routing and bucketing, the replay of
``capture_orthogonalization`` and ``capture_updates``, the distributed step and the write
``P <- P - lr*U``. :class:`EngineOptimizer` is the ``torch.optim.Optimizer`` around it that both
:class:`musgd.MuSGD` and :class:`musgd.ultralytics.UltralyticsMuSGD` subclass: neither overrides a
private method of the other, and neither skips a constructor.
"""

from __future__ import annotations

import difflib
import itertools
import numbers
import operator
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch
from torch import Tensor
from torch.optim import Optimizer

from musgd._device import capturing
from musgd._distributed import ShardedStep
from musgd._flat import flat_zeros
from musgd._functional import (
    MOMENTUM_BUFFER,
    EagerOrthogonalizer,
    HyperValues,
    Layout,
    Orthogonalizer,
    PrepareFn,
    StepRecord,
    Structure,
    apply_updates,
    build_layout,
    matrix_shape,
    multi_neg,
    pad_bound,
)
from musgd._guard import GuardPlan, NonFiniteGuard
from musgd._identity import SameTensors
from musgd._replay import (
    CudaGraphRecorder,
    GraphPool,
    Recorder,
    ReplayOrthogonalizer,
    ReplayState,
)
from musgd._update_replay import UpdateReplayer

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

ParamsT = Iterable[Tensor] | Iterable[dict[str, Any]]


@dataclass(frozen=True)
class StepValues:
    """What a rule reads from a param group for one step: the per-step hyperparameter record
    (Python floats, or 0-d device tensors read on the device), the operations to run and the
    learning rate of the write."""

    hyper: HyperValues
    structure: Structure
    lr: float | Tensor


class UpdateRule(Protocol):
    """A flavour of MuSGD, as the engine runs it (see the module docstring).

    Implementations are frozen dataclasses: equal rules compare and hash equal, since a
    ``capture_updates`` recording's key holds the rule's :meth:`prepare`.
    """

    @property
    def name(self) -> str:
        """The optimizer's name in messages (``"MuSGD"``)."""
        ...

    def admit_group(
        self, group: dict[str, Any], defaults: Mapping[str, Any], *, where: str
    ) -> dict[str, Any]:
        """The group as it is stored, after checking it merged with ``defaults`` (raise
        ValueError naming the setting; nothing is stored before this returns)."""
        ...

    def check_settings(self, group: Mapping[str, Any], *, where: str) -> None:
        """Raise ValueError naming the setting where a stored group's value is out of range
        (:func:`settings_view` of the group: no tensor's value is read, no parameter looked at).
        """
        ...

    def check_params(self, group: Mapping[str, Any], *, where: str) -> None:
        """Raise ValueError where a stored group's parameters do not suit its route (called
        when its parameter list or its ``use_muon`` changed since the last check)."""
        ...

    def buffers(self, group: Mapping[str, Any]) -> tuple[str, ...]:
        """The state keys each parameter of ``group`` holds, in the order the rule's
        :meth:`prepare` reads them (``record.bufs`` holds them key by key)."""
        ...

    @property
    def known_buffers(self) -> tuple[str, ...]:
        """Every state key a parameter may hold under this rule, whatever its group's settings
        (what :meth:`load_state_dict` accepts in a saved entry)."""
        ...

    def shares(self, group: Mapping[str, Any], params: list[Tensor], sharded: ShardedStep) -> bool:
        """Whether this group's Newton-Schulz work is shared across ranks this step (raise
        where the rule does not support the parameters' setup)."""
        ...

    def values(
        self, group: Mapping[str, Any], device: torch.device, live: torch.device | None
    ) -> StepValues:
        """This step's hyperparameters, structure and learning rate (``live``: the device whose
        float32 tensors are read there, None to read every value on the host)."""
        ...

    def prepare(self, record: StepRecord) -> list[Tensor]:
        """Steps 1-4 of one group: ``U`` for ``P <- P - lr*U``, buffers updated in place."""
        ...

    def step_shared(self, engine: StepEngine, record: StepRecord, lr: float) -> None:
        """Steps 1-5 of a group whose work ranks share (:meth:`shares` said so)."""
        ...


def settings_view(group: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """``group``'s settings as a rule's check reads them without a host synchronization: each
    one-element floating-point tensor (a tensor ``lr``) on a device stands as 0.0, its value
    unread (any other tensor is refused); one on the CPU, whose reading waits for nothing,
    stands as its value, checked as a number is. ``params`` is empty (their shapes were
    checked when the group was added)."""
    view: dict[str, Any] = {}
    for key, value in group.items():
        if isinstance(value, Tensor) and (value.numel() != 1 or not value.is_floating_point()):
            raise ValueError(
                f"{where}: {key} must be a number or a one-element floating-point tensor, "
                f"got a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
            )
        view[key] = _unread(value) if isinstance(value, Tensor) else value
    view["params"] = []
    return view


def host_number(value: object) -> float | None:
    """A setting's value read on the host, as both flavours check it: a real number (NumPy's
    scalars too, not a bool) or a one-element floating-point tensor's value; None for anything
    else (a meta tensor too: it holds no value)."""
    if isinstance(value, Tensor):
        usable = value.numel() == 1 and value.is_floating_point() and not value.is_meta
        return float(value) if usable else None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


def _unread(value: Tensor) -> float:
    """A one-element tensor setting as a check reads it: its value where it lies on the CPU
    (no synchronization), else 0.0 (a device's value is read there, at the step, never on the
    host)."""
    return value.item() if value.device.type == "cpu" else 0.0


def _settings_mark(group: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a group's check depends on, compared by value (a device tensor by identity, a CPU
    tensor by identity and value, so that a value written in place is checked too): a group
    whose mark is unchanged since its last check needs none (NaN never equals itself, so a NaN
    setting is checked, and refused, every time)."""
    return tuple(
        (key, _tensor_mark(value) if isinstance(value, Tensor) else (type(value), value))
        for key, value in group.items()
        if key != "params"
    )


def _plain_numbers(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with NumPy's (or another library's) scalars as Python ints and floats: the
    checks take them as numbers, and so must a checkpoint, which ``torch.load(...,
    weights_only=True)`` refuses to unpickle with a NumPy scalar in it."""
    plain = dict(settings)
    for key, value in settings.items():
        if type(value) in (int, float, bool) or isinstance(value, Tensor):
            continue
        if isinstance(value, numbers.Integral):
            plain[key] = int(value)
        elif isinstance(value, numbers.Real):
            plain[key] = float(value)
    return plain


def _same_route(known: tuple[Any, ...], route: tuple[Any, ...]) -> bool:
    """Whether a group's parameter list (the same object, of the same length) and route are
    those last checked."""
    return known[0] is route[0] and known[1:] == route[1:]


def _tensor_mark(value: Tensor) -> tuple[Any, ...]:
    """A tensor setting's part of the mark: its identity, what the check reads of any tensor
    (its dtype and size: a freed tensor's id may be given to another of another kind), and its
    value where reading it costs no synchronization (a one-element CPU tensor; else 0.0, so
    that a device tensor's identity and kind alone decide)."""
    size = value.numel()
    return id(value), value.dtype, size, _unread(value) if size == 1 else 0.0


# Group settings that only other optimizers have, each with one that has it: a state dict
# whose groups carry one is theirs (its learning rate and momenta mean something else there).
_OTHER_OPTIMIZERS_SETTINGS: dict[str, str] = {
    "betas": "Adam, AdamW",
    "amsgrad": "Adam, AdamW",
    "dampening": "SGD",
    "rho": "Adadelta",
    "lr_decay": "Adagrad",
    "initial_accumulator_value": "Adagrad",
    "centered": "RMSprop",
    "momentum_decay": "NAdam",
    "etas": "Rprop",
    "step_sizes": "Rprop",
    "lambd": "ASGD",
    "t0": "ASGD",
    "max_iter": "LBFGS",
}


def without_foreign_settings(group: Mapping[str, Any]) -> dict[str, Any]:
    """``group`` without the settings only other optimizers have (an SGD-derived optimizer's
    ``dampening``), which mean nothing to these optimizers and would make their checkpoints
    read as another optimizer's."""
    return {k: v for k, v in group.items() if k not in _OTHER_OPTIMIZERS_SETTINGS}


# Group settings of musgd.MuSGD that the Ultralytics flavour's groups never hold: a state dict
# of MuSGD's loaded into that flavour is named as MuSGD's, not refused for a setting it lacks.
_MUSGD_SETTINGS = ("w_muon", "w_sgd", "ns_steps", "ns_coefficients", "ns_dtype", "ns_backend")


def _refuse_foreign(
    group: Mapping[str, Any],
    name: str,
    *,
    where: str,
    fix: str,
    others: Mapping[str, str] = _OTHER_OPTIMIZERS_SETTINGS,
) -> None:
    """ValueError where ``group`` holds a setting only another optimizer has (``others``:
    setting -> who has it; ``dampening``: SGD's), saying ``fix``."""
    foreign = sorted(set(group) & others.keys())
    if foreign:
        raise ValueError(
            f"{where} has {', '.join(map(repr, foreign))}, a setting of another optimizer "
            f"({others[foreign[0]]}) that {name} has none of: {fix}"
        )


def _warn_misspelt(group: Mapping[str, Any], defaults: Mapping[str, Any], *, where: str) -> None:
    """Warn of a group key that is no setting but close to one (``weigth_decay``): like
    ``torch.optim``, a group keeps keys of its own (a scheduler's ``initial_lr``, a name), so
    only a likely typo, which would leave the default in force unseen, is said."""
    for key in group:
        if key == "params" or key in defaults or not isinstance(key, str):
            continue
        close = difflib.get_close_matches(key, [str(k) for k in defaults], n=1, cutoff=0.8)
        if close:
            warnings.warn(
                f"{where}: {key!r} is no setting, so the group keeps the default "
                f"{close[0]}={defaults[close[0]]!r}; did you mean {close[0]!r}?",
                UserWarning,
                stacklevel=4,
            )


# What the engine calls on a recorder (``musgd._replay.Recorder``).
_RECORDER_METHODS = ("supports", "capturing", "stream_key", "record")


class StepEngine:
    """One optimizer's step machinery, with its rule: the bodies, orthogonalizers, replay state
    and distributed step are chosen once, at construction.

    ``body`` is the rule's preparation as the engine calls it (a seam: tests wrap it to count
    eager preparations during replayed steps).
    """

    def __init__(
        self,
        optimizer: Optimizer,
        rule: UpdateRule,
        *,
        process_group: ProcessGroup | None = None,
        shard_balance: str = "flops",
        recorder: Recorder | None = None,
    ) -> None:
        self.optimizer = optimizer
        self.rule = rule
        self.body: PrepareFn = rule.prepare
        self.orth: Orthogonalizer = EagerOrthogonalizer()
        # The engine's own recorder, which share_pool may point at a pool; never a caller's.
        self._own_recorder: CudaGraphRecorder | None = None
        if recorder is None:
            recorder = self._own_recorder = CudaGraphRecorder()
        missing = [m for m in _RECORDER_METHODS if not callable(getattr(recorder, m, None))]
        if missing:
            raise TypeError(
                f"{rule.name}: recorder must record and replay device work (leave it None for "
                f"CUDA graphs; a recorder of your own has {', '.join(_RECORDER_METHODS)}), got "
                f"{type(recorder).__name__} without {', '.join(missing)}"
            )
        # Replay (spec §2): recordings are bounded by the number of matrix parameters.
        self.replay = ReplayState(
            recorder,
            orth_bound=self.count_matrices,
            update_bound=lambda: max(self.count_matrices(), len(optimizer.param_groups)),
        )
        self.orth_replay: Orthogonalizer = ReplayOrthogonalizer(self.replay)
        self.update_replay = UpdateReplayer(self.replay)
        # Distributed (DDP with process_group, or FSDP2 DTensor parameters): NS work is shared.
        self.sharded = ShardedStep(process_group, shard_balance)
        # skip_nonfinite (musgd._guard): the check, the backups and the skip counter.
        self.guard = NonFiniteGuard(rule.name)
        # Single-process groups stack matrices of equal column count, zero-padding rows
        # (`build_layout`); the sharded plan slices same-shape buckets, so it never pads.
        self.pad_buckets = True
        # Each group's settings as last checked (check_groups): a step checks only a changed one;
        # and its parameter list and route, whose check walks the parameters.
        self._checked: list[tuple[Any, ...] | None] = []
        self._routes: list[tuple[Any, ...] | None] = []
        # What a step derives from a group's gradient objects (musgd._identity): their kinds
        # checked, and the layout, derived again only when the gradients are other objects.
        self._kinds_checked: dict[int, SameTensors[bool]] = {}
        self._layouts: dict[tuple[Any, ...], SameTensors[Layout]] = {}

    def share_pool(self, pool: GraphPool) -> bool:
        """Make every later recording in ``pool``, shared with recordings that never replay
        while a step does (a captured network's); False, with nothing changed, where the
        recorder is a caller's or already records into a pool."""
        own = self._own_recorder
        if own is None or own.pool is not None:
            return False
        own.pool = pool
        # Where the network joins after this optimizer's first recordings, they are dropped
        # (and made anew at the next step) rather than replayed over its gradients.
        own.drops_with(self.replay.clear)
        return True

    def count_matrices(self) -> int:
        """The number of parameters routed to Newton-Schulz: the bound on recordings."""
        return sum(
            matrix_shape(p.shape, group["use_muon"]) is not None
            for group in self.optimizer.param_groups
            for p in group["params"]
        )

    def check_groups(self, groups: list[dict[str, Any]]) -> None:
        """Check every group's settings changed since its last check (a scheduler's ``lr``, a
        value a user set in ``param_groups``) before any group is written: a refused value
        leaves every parameter and buffer as it was. No tensor's value is read."""
        if len(self._checked) != len(groups):
            self._checked = [None] * len(groups)
            self._routes = [None] * len(groups)
        for index, group in enumerate(groups):
            mark = _settings_mark(group)
            params = group["params"]
            # The list object itself, not its id: a freed list's id may name the next one.
            route = (params, len(params), type(group.get("use_muon")), group.get("use_muon"))
            known = self._routes[index]
            if mark == self._checked[index] and known is not None and _same_route(known, route):
                continue
            where = f"param_groups[{index}]"
            try:
                self.rule.check_settings(settings_view(group, where=where), where=where)
                self.rule.check_params(group, where=where)
            except ValueError as exc:
                raise ValueError(
                    f"{exc} (set after the group was added; no group was stepped)"
                ) from None
            self._checked[index], self._routes[index] = mark, route

    def step(self) -> None:
        """One step of every param group; the groups with ``skip_nonfinite`` guarded."""
        groups = self.optimizer.param_groups
        self.check_groups(groups)
        # Check every group's gradients before any group is written, so that an unsupported
        # gradient in a later group raises with no parameter or momentum changed.
        gathered = [self.gather(index, group) for index, group in enumerate(groups)]
        # Each group's buffers, looked up once for the guard and the step (made at the first).
        bufs = [
            self.group_buffers(group, params)
            for group, (params, _) in zip(groups, gathered, strict=True)
        ]
        plan = self.begin_guard(groups, gathered, bufs)
        with self.replay.step_scope():
            # Groups that replay their preparation are prepared together (one recording for
            # all of them, where they can share one) and written after; the others are
            # prepared and written one by one, as before, holding one group's updates at a time.
            replayed: list[tuple[int, StepRecord, float | Tensor]] = []
            for index, (group, (params, grads)) in enumerate(zip(groups, gathered, strict=True)):
                if params:
                    made = self.step_group(index, group, params, grads, bufs[index])
                    if made is not None:
                        replayed.append((index, *made))
            if replayed:
                prepared = self.update_replay.prepare_groups(
                    [(index, record) for index, record, _ in replayed], body=self.body
                )
                for (_, record, lr), updates in zip(replayed, prepared, strict=True):
                    apply_updates(record.params, updates, lr)
        if plan is not None:
            self.guard.end(plan)

    def begin_guard(
        self,
        groups: list[dict[str, Any]],
        gathered: list[tuple[list[Tensor], list[Tensor]]],
        bufs: list[list[Tensor]],
    ) -> GuardPlan | None:
        """The guard's check and backups for the groups with ``skip_nonfinite`` (``bufs``, their
        buffers, made before, so that a skipped first step leaves them zero), or None where
        none asks."""
        protected: list[Tensor] = []
        checked: list[Tensor] = []
        for group, (params, grads), group_bufs in zip(groups, gathered, bufs, strict=True):
            if params and group.get("skip_nonfinite", False):
                protected += params
                protected += group_bufs
                checked += grads
        return self.guard.begin(protected, checked) if protected else None

    def step_group(
        self,
        index: int,
        group: dict[str, Any],
        params: list[Tensor],
        grads: list[Tensor],
        bufs: list[Tensor],
    ) -> tuple[StepRecord, float | Tensor] | None:
        """Steps 1-5 of one group: the rule's values and preparation, or the rule's shared
        step across ranks; then the write. A group that replays its preparation
        (``capture_updates``) is not stepped here: its record and learning rate are returned,
        for :meth:`step` to prepare with the step's other such groups and write."""
        rule = self.rule
        if group.get("maximize", False):
            grads = multi_neg(grads)  # the step on -grad, as torch.optim's (an exact negation)
        shares = rule.shares(group, params, self.sharded)
        device = params[0].device
        if shares and capturing(device):
            raise RuntimeError(
                f"{rule.name} cannot be captured in a CUDA graph while it shares Newton-Schulz "
                "work across ranks (process_group or FSDP2 parameters): step it outside the "
                "capture"
            )
        # Shared steps read every value on the host (their collectives are not captured).
        values = rule.values(group, device, None if shares else device)
        record = StepRecord(
            params=params,
            grads=grads,
            bufs=bufs,
            layout=self.group_layout(
                index,
                params,
                grads,
                group["use_muon"],
                sharded=shares,
                orient=values.structure.ns.normalize == "aol",
            ),
            hyper=values.hyper,
            structure=values.structure,
            orth=self.orth_replay if group["capture_orthogonalization"] else self.orth,
        )
        if shares:
            assert isinstance(values.lr, float)  # live was None: every value read on the host
            rule.step_shared(self, record, values.lr)
            return None
        if group["capture_updates"]:
            return record, values.lr
        apply_updates(params, self.body(record), values.lr)
        return None

    def layout(
        self, params: list[Tensor], use_muon: bool | None, *, sharded: bool, orient: bool = False
    ) -> Layout:
        """The group's layout: matrices in padded stacks within the device's bound, except
        where the sharded plan runs (it slices same-shape buckets across ranks); ``orient``
        holds every stack's matrices wide (the AOL normalization's need)."""
        pad = pad_bound(params[0].device) if self.pad_buckets and not sharded else None
        return build_layout(params, use_muon, pad=pad, orient=orient)

    def group_layout(
        self,
        index: int,
        params: list[Tensor],
        grads: list[Tensor],
        use_muon: bool | None,
        *,
        sharded: bool,
        orient: bool,
    ) -> Layout:
        """:meth:`layout` of group ``index``, planned again only when its gradients are other
        objects than at the last step (or the arguments differ): a gradient has its parameter's
        shape, dtype and device, which do not change while the gradient object lives."""
        memo = self._layouts.setdefault((index, use_muon, sharded, orient), SameTensors())
        return memo.get(
            grads, lambda: self.layout(params, use_muon, sharded=sharded, orient=orient)
        )

    def gather(self, index: int, group: dict[str, Any]) -> tuple[list[Tensor], list[Tensor]]:
        """Parameters with gradients and their gradients; unsupported gradients raise.

        One pass collects them and the set of gradient kinds (layout, dtype): per-tensor checks
        cost host time every step (about a third of a replayed yolo26n step's host time on the
        H200 at 4b62f17), and only a bad kind needs the per-tensor search for the message. A
        gradient always has its parameter's dtype, so a complex parameter shows in the kinds.
        """
        members = group["params"]
        found = [p.grad for p in members]  # each .grad read once: a read costs host time
        if all(map(operator.is_not, found, itertools.repeat(None))):
            params, grads = list(members), cast("list[Tensor]", found)
        else:
            params = [p for p, g in zip(members, found, strict=True) if g is not None]
            grads = [g for g in found if g is not None]
        memo = self._kinds_checked.setdefault(index, SameTensors())
        if not memo.get(grads, lambda: _supported_kinds(grads)):
            self._raise_unsupported(index, group)
        return params, grads

    def _raise_unsupported(self, index: int, group: dict[str, Any]) -> None:
        """Raise RuntimeError naming the first parameter whose gradient is not supported."""
        name = self.rule.name
        for j, p in enumerate(group["params"]):
            g = p.grad
            if g is None:
                continue
            if g.layout != torch.strided:
                raise RuntimeError(
                    f"{name} does not support sparse gradients ({g.layout}) "
                    f"(param_groups[{index}], params[{j}]); use a dense embedding or another "
                    "optimizer for it"
                )
            if g.is_complex() or p.is_complex():
                raise RuntimeError(
                    f"{name} does not support complex parameters or gradients "
                    f"(param_groups[{index}], params[{j}]); view them as real with "
                    "torch.view_as_real before optimizing"
                )
            if g.dtype not in _FLOATING:
                raise RuntimeError(
                    f"{name} steps float16, bfloat16, float32 and float64 parameters, but "
                    f"param_groups[{index}], params[{j}] has a {g.dtype} gradient; keep such "
                    "tensors out of the optimizer (or train a floating-point copy)"
                )

    def group_buffers(self, group: dict[str, Any], params: list[Tensor]) -> list[Tensor]:
        """The buffers of ``params`` (a group's parameters with gradients), key by key in the
        rule's order; none where no parameter has a gradient."""
        if not params:
            return []
        return [b for key in self.rule.buffers(group) for b in self.buffers(params, key)]

    def buffers(self, params: list[Tensor], key: str = MOMENTUM_BUFFER) -> list[Tensor]:
        """The ``key`` buffers of ``params``, created (zeros) at a parameter's first step."""
        state = self.optimizer.state
        try:  # every step after the first: one lookup per parameter
            return [state[p][key] for p in params]
        except KeyError:
            pass
        if capturing(params[0].device):
            raise RuntimeError(
                f"{self.rule.name} creates a parameter's momentum buffer at its first step, which "
                "a CUDA-graph capture would replay as a reset: run one step outside the capture "
                "first (as torch.cuda.graph's warm-up does), then capture"
            )
        # Made together, the new buffers lie back to back (musgd._flat): the guard's save and
        # select then pass over them as one tensor.
        missing = [p for p in params if key not in state[p]]
        for p, buf in zip(missing, flat_zeros([p.detach() for p in missing]), strict=True):
            state[p][key] = buf
        return [state[p][key] for p in params]


# The dtypes a step computes in (a gradient has its parameter's dtype): integer, bool and
# float8 tensors have no momentum arithmetic, and their step failed half-way in torch.
_FLOATING = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})


def _supported_kinds(grads: list[Tensor]) -> bool:
    """Whether every gradient is dense (strided) and of a floating-point dtype a step runs in."""
    kinds = {(g.layout, g.dtype) for g in grads}
    return not any(layout != torch.strided or dtype not in _FLOATING for layout, dtype in kinds)


# The generic torch.optim flags these optimizers do not take, and what serves instead.
GENERIC_FLAGS = {
    "differentiable": (
        False,
        "the step is not differentiable (it runs under torch.no_grad, and Newton-Schulz is not "
        "meant to be differentiated through); use a torch.optim optimizer for "
        "learning-to-learn setups",
    ),
    "fused": (
        None,
        "the fused work is ns_backend='triton' (grouped Triton Newton-Schulz kernels, a packed "
        "momentum kernel) and capture_updates=True (the whole update preparation replayed "
        "from one CUDA graph)",
    ),
    "capturable": (
        False,
        "every step is capturable as it is: run one step first, then capture the whole step "
        "in a CUDA graph; float32 one-element device tensors for lr and the other "
        "hyperparameters are read on the device, so schedules reach the captured step",
    ),
}


def refuse_generic_flags(where: str, **flags: object) -> None:
    """Raise ValueError for a generic ``torch.optim`` flag this optimizer does not offer
    (:data:`GENERIC_FLAGS`) set to anything but its default, saying what replaces it."""
    for name, value in flags.items():
        default, instead = GENERIC_FLAGS[name]
        if value is not default and value is not False:
            raise ValueError(f"{where}: {name}={value!r} is not offered: {instead}")


class EngineOptimizer(Optimizer):
    """A ``torch.optim.Optimizer`` whose step is a :class:`StepEngine` running ``rule``.

    The flavours subclass it with their own constructor (which builds their rule and defaults)
    and nothing else of the step. A few read-only names (``_replay``, ``_sharded``, ``_gather``,
    ``_buffers``, ``_orth``, ``_orth_replay``, ``_update_replay``, ``_count_matrices``) are the
    engine's, kept for the benchmark tools and tests that inspect a run.
    """

    def __init__(
        self,
        params: ParamsT,
        defaults: dict[str, Any],
        rule: UpdateRule,
        *,
        process_group: ProcessGroup | None = None,
        shard_balance: str = "flops",
        recorder: Recorder | None = None,
    ) -> None:
        self._rule = rule  # Optimizer.__init__ admits the groups through it
        super().__init__(params, _plain_numbers(defaults))
        self._shard_balance = shard_balance
        self._engine = StepEngine(
            self, rule, process_group=process_group, shard_balance=shard_balance, recorder=recorder
        )

    def __getstate__(self) -> dict[str, Any]:
        """What a pickle or a deep copy carries: ``torch.optim``'s groups, defaults and state,
        the rule and the flavour's public settings (``muon``, ``ns``, ...). The engine is not
        carried: a copy builds its own (no recordings, the default recorder, no process
        group; its parameters are new tensors, so recordings by address could not serve)."""
        state = super().__getstate__()
        state.update(
            {k: v for k, v in self.__dict__.items() if not k.startswith("_") and k not in state}
        )
        state["_rule"] = self._rule
        state["_shard_balance"] = self._shard_balance
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        # ``Optimizer.load_state_dict`` sets state through here too: keep a live engine.
        if "_engine" not in self.__dict__:
            self._engine = StepEngine(self, self._rule, shard_balance=self._shard_balance)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Check the group's settings (before anything is stored), then add it. A parameter
        listed twice in one group is refused (``torch.optim`` only warns, and its step would
        then move it twice)."""
        where = f"param_groups[{len(self.param_groups)}]"
        name = self._rule.name
        if not isinstance(param_group, dict):
            raise TypeError(
                f"{name}.add_param_group takes one group, a dict ({{'params': [...], 'lr': "
                f"...}}), got {type(param_group).__name__}; add several groups one by one"
            )
        if "params" not in param_group:
            raise ValueError(
                f"{name}: {where} has no 'params'; a group is a dict such as {{'params': "
                "[...], 'lr': ...}"
            )
        # A checkpoint with such a setting would read as another optimizer's (load_state_dict).
        _refuse_foreign(param_group, name, where=f"{name}: {where}", fix="remove it from the group")
        _warn_misspelt(param_group, self.defaults, where=f"{name}: {where}")
        params = param_group.get("params")
        if not isinstance(params, Tensor) and params is not None:
            # A generator is read once, here: the rule's check and the stored group see one list.
            param_group = {**param_group, "params": list(params)}
        group = self._rule.admit_group(_plain_numbers(param_group), self.defaults, where=where)
        params = group.get("params")
        if not isinstance(params, Tensor) and params is not None:
            seen: set[int] = set()
            for j, param in enumerate(group["params"]):
                if id(param) in seen:
                    raise ValueError(
                        f"{where}: params[{j}] is listed twice in the group (a tensor of shape "
                        f"{tuple(param.shape)}); list each parameter once"
                    )
                seen.add(id(param))
        super().add_param_group(group)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load state; keys an older state dict lacks take this optimizer's constructor values.

        Checked before anything is loaded (a refused state dict leaves the optimizer as it
        was): its form, each group's settings as a step checks them, and each momentum buffer
        against its parameter (a tensor of the parameter's shape, floating point, finite).
        """
        if (
            not isinstance(state_dict, Mapping)
            or not isinstance(state_dict.get("param_groups"), list)
            or "state" not in state_dict
        ):
            got = type(state_dict).__name__
            hint = (
                "; this looks like a model's state_dict: pass the optimizer's"
                if isinstance(state_dict, Mapping) and "param_groups" not in state_dict
                else ""
            )
            lacking = (
                " and ".join(repr(k) for k in ("state", "param_groups") if k not in state_dict)
                if isinstance(state_dict, Mapping)
                else "them"
            )
            raise TypeError(
                f"{self._rule.name}.load_state_dict takes what optimizer.state_dict() returns, a "
                f"dict with 'state' and 'param_groups', got {got} without {lacking}{hint}"
            )
        # MuSGD's own settings, which every group it saves holds (none for the other flavour).
        own = self.defaults.keys() & set(_MUSGD_SETTINGS)
        for index, group in enumerate(state_dict["param_groups"]):
            if own and isinstance(group, dict) and not own & group.keys():
                raise ValueError(
                    f"{self._rule.name}.load_state_dict: param_groups[{index}] holds none of "
                    f"{self._rule.name}'s settings ({', '.join(sorted(own))}): the state dict "
                    "is another optimizer's (an UltralyticsMuSGD's or Ultralytics' MuSGD's, "
                    "whose updates differ); load it into the one that saved it"
                )
        state_dict = dict(state_dict)
        state_dict["param_groups"] = [
            {**{k: v for k, v in self.defaults.items() if k not in g}, **g}
            if isinstance(g, dict)
            else g
            for g in state_dict["param_groups"]
        ]
        self._check_loaded(state_dict)
        super().load_state_dict(state_dict)
        # Recordings read and write the old momentum buffers by address: drop them all.
        self._engine.replay.clear()

    def _check_loaded(self, state_dict: Mapping[str, Any]) -> None:
        """What :meth:`load_state_dict` checks beyond ``torch.optim``'s own (which refuses other
        group counts and sizes: where those differ, it is left to say so)."""
        name = f"{self._rule.name}.load_state_dict"
        state = state_dict.get("state", {})
        if not isinstance(state, Mapping):
            raise TypeError(f"{name}: 'state' must be a dict, got {type(state).__name__}")
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups) or any(
            not isinstance(g, dict) or len(g.get("params", ())) != len(h["params"])
            for g, h in zip(saved, self.param_groups, strict=False)
        ):
            return
        owner: dict[Any, tuple[Tensor, dict[str, Any]]] = {}
        others = {
            **_OTHER_OPTIMIZERS_SETTINGS,
            **{key: "musgd.MuSGD" for key in _MUSGD_SETTINGS if key not in self.defaults},
        }
        for index, (group, mine) in enumerate(zip(saved, self.param_groups, strict=True)):
            where = f"{name}: param_groups[{index}]"
            _refuse_foreign(
                group,
                self._rule.name,
                where=where,
                fix="the state dict is another optimizer's; load it into the one that saved it",
                others=others,
            )
            self._rule.check_settings(settings_view(group, where=where), where=where)
            self._rule.check_params({**group, "params": mine["params"]}, where=where)
            for key, param in zip(group["params"], mine["params"], strict=True):
                if key in owner:
                    raise ValueError(
                        f"{where} lists parameter {key!r} twice; the state dict is damaged "
                        "(each parameter appears in one group, once)"
                    )
                owner[key] = (param, group)
        unknown = [key for key in state if key not in owner]
        if unknown:
            raise ValueError(
                f"{name}: 'state' holds entries for parameters no group lists "
                f"({', '.join(map(repr, unknown[:5]))}); the state dict is damaged or of "
                "another optimizer"
            )
        finite: list[Tensor] = []
        for key, entry in state.items():
            param, group = owner[key]
            if not isinstance(entry, Mapping):
                raise ValueError(f"{name}: state[{key!r}] must be a dict of buffers")
            kept = self._rule.known_buffers
            strange = [buffer for buffer in entry if buffer not in kept]
            if strange:
                raise ValueError(
                    f"{name}: state[{key!r}] holds {', '.join(map(repr, strange))}, which "
                    f"{self._rule.name} does not keep (its buffers: "
                    f"{', '.join(map(repr, kept))}): the state dict is another "
                    "optimizer's; load it into the one that saved it"
                )
            for buffer in self._rule.buffers(group):
                value = entry.get(buffer)
                if value is None:
                    continue  # made at the next step
                if not isinstance(value, Tensor) or not value.is_floating_point():
                    raise ValueError(
                        f"{name}: state[{key!r}][{buffer!r}] must be a floating-point tensor, "
                        f"got {type(value).__name__}"
                    )
                if value.shape != param.shape:
                    raise ValueError(
                        f"{name}: state[{key!r}][{buffer!r}] has shape {tuple(value.shape)}, "
                        f"its parameter {tuple(param.shape)}: the state dict is of another "
                        "model (or its parameters are in another order)"
                    )
                finite.append(torch.isfinite(value).all())
        if finite and not bool(torch.stack([f.to(finite[0].device) for f in finite]).all()):
            raise ValueError(
                f"{name}: a momentum buffer holds inf or NaN; the checkpoint is corrupted (load "
                "an earlier one, or train with skip_nonfinite=True to keep non-finite steps out)"
            )

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """Perform one step; ``closure`` re-evaluates the model and returns the loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._engine.step()
        return loss

    @property
    def skipped_steps(self) -> Tensor:
        """How many steps ``skip_nonfinite`` skipped (their gradients were not all finite), a
        0-d int64 tensor on the parameters' device, counted there with no host read: read it
        (``int(opt.skipped_steps)``, which waits for the device) every few hundred steps, not
        every step. Zero where no group has ``skip_nonfinite``; a copy or a state dict does not
        carry it."""
        return self._engine.guard.skipped()

    def last_step_skipped(self, device: torch.device) -> Tensor:
        """1.0 where the last guarded step was skipped, else 0.0: a 0-d float32 tensor on
        ``device``, for an update that must skip with the step (the trainer's EMA) on the
        device."""
        return self._engine.guard.last_skipped(device)

    # Read-only views of the engine, for tools and tests (see the class docstring).
    @property
    def _replay(self) -> ReplayState:
        return self._engine.replay

    @property
    def _sharded(self) -> ShardedStep:
        return self._engine.sharded

    @property
    def _orth(self) -> Orthogonalizer:
        return self._engine.orth

    @property
    def _orth_replay(self) -> Orthogonalizer:
        return self._engine.orth_replay

    @property
    def _update_replay(self) -> UpdateReplayer:
        return self._engine.update_replay

    def _gather(self, index: int, group: dict[str, Any]) -> tuple[list[Tensor], list[Tensor]]:
        return self._engine.gather(index, group)

    def _buffers(self, params: list[Tensor], key: str = MOMENTUM_BUFFER) -> list[Tensor]:
        return self._engine.buffers(params, key)

    def _count_matrices(self) -> int:
        return self._engine.count_matrices()
