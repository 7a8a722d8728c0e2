"""The MuSGD optimizer class: validates hyperparameters, gathers state, dispatches the step."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from musgd._distributed import ShardedStep
from musgd._functional import (
    MOMENTUM_BUFFER,
    EagerOrthogonalizer,
    GroupStep,
    Hyper,
    Layout,
    NSSettings,
    Orthogonalizer,
    PrepareFn,
    Structure,
    apply_updates,
    build_layout,
    capturing,
    matrix_shape,
    pad_bound,
    prepare_updates_foreach,
    prepare_updates_per_tensor,
)
from musgd._newton_schulz import (
    AUTO_NS_DTYPE,
    DEFAULT_COEFFICIENTS,
    DEFAULT_EPS,
    DEFAULT_STEPS,
    SUPPORTED_NS_DTYPES,
    Coefficients,
    resolve_coefficients,
    resolve_ns_dtype,
)
from musgd._replay import CudaGraphRecorder, Recorder, ReplayOrthogonalizer, ReplayState
from musgd._triton_ns import BACKENDS as NS_BACKENDS
from musgd._update_replay import UpdateReplayer

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

DEFAULT_MOMENTUM = 0.95
DEFAULT_W_MUON = 0.5
DEFAULT_W_SGD = 0.5

ParamsT = Iterable[Tensor] | Iterable[dict[str, Any]]


class MuSGD(Optimizer):
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
    ``w_muon`` always runs its term (adding exact zeros at zero). To capture a whole step: run
    one step first (it makes the momentum buffers, which a capture cannot), give the graph
    gradients at fixed addresses (copy each step's gradients into the tensors it was captured
    with; ``zero_grad(set_to_none=False)`` works too but makes backward add into them), then
    capture ``step()`` (see ``torch.cuda.graph``). The capture flags below then run eagerly
    inside it; a sharded step refuses to be captured.

    Args:
        params: parameters or param groups (see :func:`musgd.param_groups`).
        lr: learning rate (required, >= 0), a number or a one-element tensor (see above).
        momentum: momentum factor in [0, 1). Default 0.95.
        nesterov: use Nesterov momentum. Default True.
        weight_decay: decoupled-into-the-update L2 factor (>= 0). Default 0.
        w_muon: weight of the orthogonalized term (>= 0); 0 skips Newton–Schulz. Default 0.5.
        w_sgd: weight of the SGD term for matrices (>= 0). Default 0.5.
        ns_steps: Newton–Schulz iterations, 1..100. Default 5.
        ns_coefficients: one (a, b, c) triple, or one per iteration (a shorter sequence repeats
            its last triple). Default (3.4445, -4.7750, 2.0315).
        eps: added to the Frobenius norm before normalizing (> 0). Default 1e-7.
        ns_dtype: Newton–Schulz working dtype: ``"auto"`` (bf16 where it is native, float32
            elsewhere; see above), ``torch.bfloat16``, ``torch.float16`` or ``torch.float32``.
            Default ``"auto"``.
        use_muon: force (True) or forbid (False) the matrix route; None routes by shape.
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
            once. ``"torch"``: batched ``torch.bmm`` calls per bucket. The capture flags never
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
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float,
        momentum: float = DEFAULT_MOMENTUM,
        nesterov: bool = True,
        weight_decay: float = 0.0,
        w_muon: float = DEFAULT_W_MUON,
        w_sgd: float = DEFAULT_W_SGD,
        ns_steps: int = DEFAULT_STEPS,
        ns_coefficients: Coefficients = DEFAULT_COEFFICIENTS,
        eps: float = DEFAULT_EPS,
        ns_dtype: torch.dtype | str = AUTO_NS_DTYPE,
        use_muon: bool | None = None,
        *,
        foreach: bool | None = None,
        capture_orthogonalization: bool = False,
        capture_updates: bool = False,
        process_group: ProcessGroup | None = None,
        ns_backend: str = "auto",
        shard_balance: str = "flops",
        recorder: Recorder | None = None,
    ) -> None:
        defaults: dict[str, Any] = {
            "lr": lr,
            "momentum": momentum,
            "nesterov": nesterov,
            "weight_decay": weight_decay,
            "w_muon": w_muon,
            "w_sgd": w_sgd,
            "ns_steps": ns_steps,
            "ns_coefficients": ns_coefficients,
            "eps": eps,
            "ns_dtype": ns_dtype,
            "use_muon": use_muon,
            "capture_orthogonalization": capture_orthogonalization,
            "capture_updates": capture_updates,
            "ns_backend": ns_backend,
        }
        _validate_group(defaults, where="MuSGD")
        defaults["ns_coefficients"] = resolve_coefficients(ns_coefficients, ns_steps)
        super().__init__(params, defaults)
        self._setup_execution(
            foreach=foreach,
            process_group=process_group,
            shard_balance=shard_balance,
            recorder=recorder,
        )

    def _setup_execution(
        self,
        *,
        foreach: bool | None,
        process_group: ProcessGroup | None,
        shard_balance: str = "flops",
        recorder: Recorder | None = None,
    ) -> None:
        """Bodies, orthogonalizers, replay state and the distributed step (chosen once)."""
        # The execution strategy is chosen once (house style): bodies and orthogonalizer.
        self._prepare: PrepareFn = (
            prepare_updates_per_tensor if foreach is False else prepare_updates_foreach
        )
        self._orth: Orthogonalizer = EagerOrthogonalizer()
        # Replay (spec §2): recordings are bounded by the number of matrix parameters.
        self._replay = ReplayState(
            CudaGraphRecorder() if recorder is None else recorder,
            orth_bound=self._count_matrices,
            update_bound=lambda: max(self._count_matrices(), len(self.param_groups)),
        )
        self._orth_replay: Orthogonalizer = ReplayOrthogonalizer(self._replay)
        self._update_replay = UpdateReplayer(self._replay)
        # Distributed (DDP with process_group, or FSDP2 DTensor parameters): NS work is shared.
        self._sharded = ShardedStep(process_group, shard_balance)
        # Single-process groups stack matrices of equal column count, zero-padding rows
        # (`build_layout`); the sharded plan slices same-shape buckets, so it never pads.
        self._pad_buckets = True

    def _count_matrices(self) -> int:
        """The number of parameters routed to Newton-Schulz: the bound on recordings."""
        return sum(
            matrix_shape(p.shape, group["use_muon"]) is not None
            for group in self.param_groups
            for p in group["params"]
        )

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Validate the group's hyperparameters (before anything is stored), then add it."""
        merged = {**self.defaults, **param_group}
        where = f"param_groups[{len(self.param_groups)}]"
        _validate_group(merged, where=where)
        if "ns_coefficients" in param_group or "ns_steps" in param_group:
            param_group = dict(param_group)
            param_group["ns_coefficients"] = resolve_coefficients(
                merged["ns_coefficients"], merged["ns_steps"]
            )
        super().add_param_group(param_group)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load state; keys a older state dict lacks take this optimizer's constructor values."""
        groups = state_dict.get("param_groups")
        if isinstance(groups, list):
            state_dict = dict(state_dict)
            state_dict["param_groups"] = [
                {**{k: v for k, v in self.defaults.items() if k not in g}, **g}
                if isinstance(g, dict)
                else g
                for g in groups
            ]
        super().load_state_dict(state_dict)
        # Recordings read and write the old momentum buffers by address: drop them all.
        self._replay.clear()

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """Perform one step; ``closure`` re-evaluates the model and returns the loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # Check every group's gradients before any group is written, so that an unsupported
        # gradient in a later group raises with no parameter or momentum changed.
        gathered = [self._gather(index, group) for index, group in enumerate(self.param_groups)]
        with self._replay.step_scope():
            for index, (group, (params, grads)) in enumerate(
                zip(self.param_groups, gathered, strict=True)
            ):
                if params:
                    self._step_group(index, group, params, grads, self._buffers(params))
        return loss

    def _step_group(
        self,
        index: int,
        group: dict[str, Any],
        params: list[Tensor],
        grads: list[Tensor],
        bufs: list[Tensor],
    ) -> None:
        sharded = self._sharded.applies(params)
        device = params[0].device
        if sharded and capturing(device):
            raise RuntimeError(
                "MuSGD cannot be captured in a CUDA graph while it shares Newton-Schulz work "
                "across ranks (process_group or FSDP2 parameters): step it outside the capture"
            )
        # Sharded steps read every value on the host (their collectives are not captured).
        live = None if sharded else device
        step = GroupStep(
            params=params,
            grads=grads,
            bufs=bufs,
            layout=self._layout(params, group["use_muon"], sharded=sharded),
            hyper=Hyper(
                momentum=hyper_value(group["momentum"], live),
                weight_decay=hyper_value(group["weight_decay"], live),
                w_muon=hyper_value(group["w_muon"], live),
                w_sgd=hyper_value(group["w_sgd"], live),
            ),
            structure=group_structure(group, device),
        )
        orth = self._orthogonalizer(group)
        lr = hyper_value(group["lr"], live)
        if sharded:
            assert isinstance(lr, float)  # live is None: every value was read on the host
            # Collectives sit inside this step, so no whole-group recording: each rank replays
            # only its own Newton-Schulz share (through `orth`).
            self._sharded.step(step, orth=orth, lr=lr, body=self._prepare)
            return
        self._prepare_and_apply(index, group, step, self._prepare, orth, lr)

    def _layout(self, params: list[Tensor], use_muon: bool | None, *, sharded: bool) -> Layout:
        """The group's layout: matrices in padded stacks within the device's bound, except
        where the sharded plan runs (it slices same-shape buckets across ranks)."""
        pad = pad_bound(params[0].device) if self._pad_buckets and not sharded else None
        return build_layout(params, use_muon, pad=pad)

    def _orthogonalizer(self, group: dict[str, Any]) -> Orthogonalizer:
        """The replaying orthogonalizer under ``capture_orthogonalization``, else the eager one."""
        return self._orth_replay if group["capture_orthogonalization"] else self._orth

    def _prepare_and_apply(
        self,
        index: int,
        group: dict[str, Any],
        step: GroupStep,
        body: PrepareFn,
        orth: Orthogonalizer,
        lr: float | Tensor,
    ) -> None:
        """Steps 1-4 through ``body`` (replayed whole under ``capture_updates``), then the write
        ``P <- P - lr*U`` (see :func:`apply_updates`)."""
        if group["capture_updates"]:
            updates = self._update_replay.prepare(index, step, body=body, orth=orth)
        else:
            updates = step.prepare(body, orth)
        apply_updates(step.params, updates, lr)

    def _gather(self, index: int, group: dict[str, Any]) -> tuple[list[Tensor], list[Tensor]]:
        """Parameters with gradients and their gradients; unsupported gradients raise.

        One pass collects them and the set of gradient kinds (layout, dtype): per-tensor checks
        cost host time every step (about a third of a replayed yolo26n step's host time on the
        H200 at 4b62f17), and only a bad kind needs the per-tensor search for the message. A
        gradient always has its parameter's dtype, so a complex parameter shows in the kinds.
        """
        params = [p for p in group["params"] if p.grad is not None]
        grads: list[Tensor] = [g for p in params if (g := p.grad) is not None]
        kinds = {(g.layout, g.dtype) for g in grads}
        if any(layout != torch.strided or dtype.is_complex for layout, dtype in kinds):
            self._raise_unsupported(index, group)
        return params, grads

    @staticmethod
    def _raise_unsupported(index: int, group: dict[str, Any]) -> None:
        """Raise RuntimeError naming the first parameter whose gradient is not supported."""
        for j, p in enumerate(group["params"]):
            g = p.grad
            if g is None:
                continue
            if g.layout != torch.strided:
                raise RuntimeError(
                    f"MuSGD does not support sparse gradients ({g.layout}) "
                    f"(param_groups[{index}], params[{j}]); use a dense embedding or another "
                    "optimizer for it"
                )
            if g.is_complex() or p.is_complex():
                raise RuntimeError(
                    f"MuSGD does not support complex parameters or gradients "
                    f"(param_groups[{index}], params[{j}]); view them as real with "
                    "torch.view_as_real before optimizing"
                )

    def _buffers(self, params: list[Tensor], key: str = MOMENTUM_BUFFER) -> list[Tensor]:
        """The ``key`` buffers of ``params``, created (zeros) at a parameter's first step."""
        state = self.state
        try:  # every step after the first: one lookup per parameter
            return [state[p][key] for p in params]
        except KeyError:
            pass
        if capturing(params[0].device):
            raise RuntimeError(
                "MuSGD creates a parameter's momentum buffer at its first step, which a CUDA-graph "
                "capture would replay as a reset: run one step outside the capture first (as "
                "torch.cuda.graph's warm-up does), then capture"
            )
        for p in params:
            if key not in state[p]:
                state[p][key] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return [state[p][key] for p in params]


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


def group_structure(group: dict[str, Any], device: torch.device) -> Structure:
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
            ),
            backend=str(group["ns_backend"]),
        ),
    )


def _real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _validate_group(group: dict[str, Any], *, where: str) -> None:
    """Raise ValueError naming the argument when a hyperparameter is out of range."""

    def fail(name: str, rule: str) -> None:
        raise ValueError(f"{where}: {name} must be {rule}, got {group[name]!r}")

    def number(name: str) -> float:
        """The value of a hyperparameter that may be a one-element tensor (read once here)."""
        value = group[name]
        if isinstance(value, Tensor):
            if value.numel() != 1 or not value.is_floating_point():
                fail(name, "a number or a one-element floating-point tensor")
            return float(value)
        if not _real(value):
            fail(name, "a number or a one-element floating-point tensor")
        return float(value)

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
    if group["use_muon"] not in (None, True, False):
        fail("use_muon", "None, True or False")
    for name in ("capture_orthogonalization", "capture_updates"):
        if not isinstance(group[name], bool):
            fail(name, "True or False")
    if group["ns_backend"] not in NS_BACKENDS:
        fail("ns_backend", " or ".join(map(repr, NS_BACKENDS)))
    try:
        resolve_coefficients(group["ns_coefficients"], group["ns_steps"])
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where}: {exc}") from None
