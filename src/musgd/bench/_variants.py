"""The optimizer variants a benchmark compares: a name and a callable that builds the optimizer.

Adding a variant is one line in :func:`musgd_variants` (a new ``MuSGD`` constructor flag) or a
new entry beside :func:`torch_muon_variant` (an external peer).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import torch
from torch import Tensor
from torch.optim import Optimizer

from musgd._functional import (
    EagerOrthogonalizer,
    _pick,
    _table_plan,
    build_layout,
    matrix_shape,
    pad_bound,
)
from musgd._optimizer import MuSGD, group_structure
from musgd._ultralytics_optim import UltralyticsMuSGD

LR = 0.02
# Hyperparameters shared by every variant, so that they differ only in how they execute.
MOMENTUM = 0.95
NS_STEPS = 5

BuildFn = Callable[[Iterable[Tensor] | Iterable[dict[str, Any]]], Optimizer]


class Stepper(Protocol):
    """What a timed variant runs: an optimizer, or a wrapper of one's ``step``."""

    def step(self) -> object: ...


class WholeStepGraph:
    """``optimizer.step()`` captured whole in one CUDA graph on the first call, then replayed.

    What anyone can do to any optimizer with ``torch.cuda.graph`` (R5): no host work is left
    in a step, but every value the step reads on the host (learning rate, momentum, step
    counts) is frozen at capture, so a schedule no longer reaches it. As a timing-only variant:
    the floor of what host-side work costs.

    ``training``: every call is one real training step. The first call's eager warm-up is that
    step; the gradients it read become static inputs the graph reads, and each later call
    copies the parameters' new gradients into them (one multi-tensor copy) before replaying,
    so training may keep ``zero_grad(set_to_none=True)``. The parameters with gradients must
    be the same at every step.
    """

    WARMUP = 3  # eager steps on a side stream before capture, as torch.cuda.graph asks

    def __init__(self, optimizer: Optimizer, *, training: bool = False) -> None:
        self.optimizer = optimizer
        self.training = training
        self._graph: torch.cuda.CUDAGraph | None = None
        self._params: list[Tensor] = []
        self._static: list[Tensor] = []

    def _with_grads(self) -> list[Tensor]:
        return [p for g in self.optimizer.param_groups for p in g["params"] if p.grad is not None]

    def step(self) -> None:
        if self._graph is None:
            if self.training:
                self._params = self._with_grads()
                self._static = [cast(Tensor, p.grad) for p in self._params]
            self._graph = self._capture(1 if self.training else self.WARMUP)
            if not self.training:
                self._graph.replay()
            return
        if self.training:
            params = self._with_grads()
            if len(params) != len(self._params) or any(
                a is not b for a, b in zip(params, self._params, strict=True)
            ):
                raise RuntimeError(
                    "a step captured whole reads the gradients of the parameters it was "
                    "captured with: the set of parameters with gradients changed"
                )
            torch._foreach_copy_(self._static, [cast(Tensor, p.grad) for p in params])
        self._graph.replay()

    def _capture(self, warmup: int) -> torch.cuda.CUDAGraph:
        return capture_graph(self.optimizer.step, warmup)


def capture_graph(body: Callable[[], object], warmup: int) -> torch.cuda.CUDAGraph:
    """``body`` captured in one CUDA graph, after ``warmup`` eager calls on a side stream (as
    ``torch.cuda.graph`` asks); the graph is not replayed here."""
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call,unused-ignore]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    return graph


class NSOnlyStep:
    """The Newton-Schulz part of a MuSGD step alone, timed as a step: each group's matrices
    orthogonalized as its step would (its schedule, normalization, dtype and backend: with
    ``"auto"`` the Triton table where it applies, one ``run_table`` over the packed matrices,
    else the torch backend's batched call per bucket), and nothing else: no momentum, no mix,
    no decay, no write. The parameters' gradients, packed once before the first call, stand
    in for the momenta.

    On CUDA the calls are captured in one CUDA graph on the first step (after warm-up calls,
    as :class:`WholeStepGraph` does) and replayed; elsewhere they run eagerly, no graph
    (``skipped`` says why). ``backends`` names what ran each group: ``"triton"``, ``"torch"`` or
    ``"gram"``.
    """

    WARMUP = WholeStepGraph.WARMUP

    def __init__(self, optimizer: Optimizer) -> None:
        self.optimizer = optimizer
        self.backends: tuple[str, ...] = ()
        self.skipped: str | None = None
        self._jobs: list[Callable[[], object]] | None = None
        self._graph: torch.cuda.CUDAGraph | None = None

    def _prepare(self) -> list[Callable[[], object]]:
        jobs: list[Callable[[], object]] = []
        backends: list[str] = []
        orth = EagerOrthogonalizer()
        for group in self.optimizer.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            device = params[0].device
            structure = group_structure(group, device)
            ns = structure.ns
            layout = build_layout(
                params, group["use_muon"], pad=pad_bound(device), orient=ns.normalize == "aol"
            )
            if not structure.muon or not layout.matrices:
                continue
            momenta = [cast(Tensor, p.grad).detach().clone() for p in params]
            plan = _table_plan(params, layout, structure)
            if plan is None:
                backends.append("gram" if ns.backend == "gram" else "torch")
                jobs.extend(
                    functools.partial(orth.stacked, _pick(momenta, b.indices), b, ns)
                    for b in layout.buckets
                )
                continue
            from musgd._triton_ns import run_table  # Triton is imported only when it runs

            backends.append("triton")
            packed = torch.cat([momenta[i].reshape(-1) for i in layout.matrices])
            jobs.append(
                functools.partial(
                    run_table,
                    plan,
                    packed,
                    triples=ns.coefficients,
                    eps=ns.eps,
                    dtype=ns.dtype,
                )
            )
        self.backends = tuple(backends)
        return jobs

    def describe(self) -> dict[str, Any]:
        """What the timed step ran, for the benchmark's row: the Newton-Schulz part alone, each
        group's backend, and whether it was captured in a CUDA graph (else why not)."""
        return {
            "ran": "newton-schulz only",
            "backends": list(self.backends),
            "graphed": self._graph is not None,
            "not_graphed_because": self.skipped,
        }

    def _run(self) -> None:
        for job in self._jobs or ():
            job()

    def step(self) -> None:
        if self._jobs is None:
            self._jobs = self._prepare()
            first = next((p for g in self.optimizer.param_groups for p in g["params"]), None)
            if first is None or first.device.type != "cuda":
                where = "no parameters" if first is None else first.device.type
                self.skipped = f"not captured in a CUDA graph: that needs CUDA ({where})"
        if self.skipped is not None:
            self._run()
        elif self._graph is None:
            self._graph = capture_graph(self._run, self.WARMUP)
            self._graph.replay()
        else:
            self._graph.replay()


@dataclass(frozen=True)
class Variant:
    """One way of running the optimizer step.

    ``matrices_only`` marks an external peer that accepts only 2-D matrices: it is handed the
    matrix parameters flattened to ``(rows, cols)`` (the Muon half of MuSGD) and cannot train a
    model on its own. ``timing_only`` marks a variant that is timed but trains no model here: a
    peer whose update rule differs from MuSGD's, or a step captured whole (``whole_graph``: the
    timed object is a :class:`WholeStepGraph` of the built optimizer). ``cuda_only`` variants
    are skipped on other devices.
    """

    name: str
    build: BuildFn
    matrices_only: bool = False
    cuda_only: bool = False
    timing_only: bool = False
    whole_graph: bool = False
    ns_only: bool = False

    def stepper(self, optimizer: Optimizer, *, training: bool = False) -> Stepper:
        """What the benchmark times for this variant's ``optimizer`` (``training``: each call
        is one training step, see :class:`WholeStepGraph`; ``ns_only``: its Newton-Schulz part
        alone, see :class:`NSOnlyStep`)."""
        if self.ns_only:
            return NSOnlyStep(optimizer)
        return WholeStepGraph(optimizer, training=training) if self.whole_graph else optimizer

    def graphed(self) -> Variant:
        """This variant with its step captured whole in one CUDA graph (timing only)."""
        return dataclasses.replace(
            self, name=f"{self.name} graphed", cuda_only=True, timing_only=True, whole_graph=True
        )


def _musgd(**options: Any) -> BuildFn:
    """A builder of MuSGD with the shared hyperparameters and ``options``."""

    def build(params: Iterable[Tensor] | Iterable[dict[str, Any]]) -> Optimizer:
        # ns_steps left to the schedule: NS_STEPS for the quintic, a named schedule's own else.
        return MuSGD(params, lr=LR, momentum=MOMENTUM, **options)

    return build


def _musgd_tensor_hyper(**options: Any) -> BuildFn:
    """A builder of MuSGD whose learning rate and momentum live in float32 0-d tensors on the
    parameters' device: a step captured whole then reads their current values at every replay
    (so schedules keep working) and can train."""

    def build(params: Iterable[Tensor] | Iterable[dict[str, Any]]) -> Optimizer:
        listed: list[Any] = list(params)
        first = listed[0]
        device = (first["params"][0] if isinstance(first, dict) else first).device
        held = {
            "lr": torch.tensor(LR, device=device),
            "momentum": torch.tensor(MOMENTUM, device=device),
        }
        return MuSGD(listed, **held, **options)  # type: ignore[arg-type]

    return build


def musgd_variants() -> list[Variant]:
    """The MuSGD execution variants, slowest first; the first is the baseline."""
    return [
        Variant("per-matrix eager", _musgd(foreach=False)),
        Variant("bucketed eager", _musgd()),
        # CUDA-graph replay (spec §2); elsewhere these would silently run the eager path.
        Variant(
            "capture_orthogonalization", _musgd(capture_orthogonalization=True), cuda_only=True
        ),
        Variant("capture_updates", _musgd(capture_updates=True), cuda_only=True),
        Variant(
            "both",
            _musgd(capture_orthogonalization=True, capture_updates=True),
            cuda_only=True,
        ),
        # The default ns_dtype="auto" is bf16 where bf16 is native (CUDA from compute capability
        # 8.0, CPUs with AVX512-BF16 or AMX): this one keeps float32 Newton-Schulz beside it.
        Variant("float32-NS eager", _musgd(ns_dtype=torch.float32)),
        # The default ns_backend="auto" runs the Triton kernels on CUDA; these run the torch
        # backend (batched cuBLAS products) in the same run, eager and recorded whole.
        Variant("torch-NS eager", _musgd(ns_backend="torch"), cuda_only=True),
        Variant(
            "torch-NS both",
            _musgd(ns_backend="torch", capture_orthogonalization=True, capture_updates=True),
            cuda_only=True,
        ),
        # The Gram iteration (WP-023): the torch backend's products on Gram matrices, float16.
        Variant("gram-NS eager", _musgd(ns_backend="gram"), cuda_only=True),
        Variant(
            "gram-NS both",
            _musgd(ns_backend="gram", capture_orthogonalization=True, capture_updates=True),
            cuda_only=True,
        ),
        # The default step captured whole by the user (timing only: lr is frozen in it).
        Variant("bucketed eager", _musgd()).graphed(),
        # Captured whole with lr and momentum in device tensors: a schedule still reaches it,
        # so it trains (each step copies the new gradients into the graph's inputs).
        Variant(
            "tensor-hyperparameters graphed",
            _musgd_tensor_hyper(),
            cuda_only=True,
            whole_graph=True,
        ),
    ]


SCHEDULE_NAMES = ("quintic", "polar_express", "aol4")


def schedule_variants() -> list[Variant]:
    """Each named Newton-Schulz schedule (WP-023) on the torch backend, the step captured whole
    (timing only); ``aol4`` runs its own 4 steps. :func:`ns_only_variants` times the schedules'
    Newton-Schulz alone on the default backend."""
    return [
        Variant(f"torch-NS {name}", _musgd(ns_backend="torch", ns_coefficients=name)).graphed()
        for name in SCHEDULE_NAMES
    ]


NS_ONLY_PREFIX = "NS-only"


def ns_only_variants() -> list[Variant]:
    """Each named schedule's Newton-Schulz part alone on the default backend (``"auto"``: the
    Triton table on CUDA for the YOLO26 sets), captured in one CUDA graph on CUDA and eager
    elsewhere (:class:`NSOnlyStep`; timing only): the schedules' NS times side by side, the
    comparison of issue #35's "aol4 >= 18% below the default's NS time"; and the default
    schedule on the torch backend and its Gram iteration (``ns_backend="gram"``, also with aol4)
    beside them."""
    return [
        *(
            Variant(
                f"{NS_ONLY_PREFIX} {name}",
                _musgd(ns_coefficients=name),
                timing_only=True,
                ns_only=True,
            )
            for name in SCHEDULE_NAMES
        ),
        *(
            Variant(f"{NS_ONLY_PREFIX} {label}", _musgd(**options), timing_only=True, ns_only=True)
            for label, options in _NS_ONLY_BACKENDS.items()
        ),
    ]


# The Newton-Schulz part on a named backend: the torch backend (the Gram iteration's own
# baseline, both computing with batched torch products) and the Gram iteration, with the
# default schedule and with aol4.
_NS_ONLY_BACKENDS: dict[str, dict[str, Any]] = {
    "torch": {"ns_backend": "torch"},
    "gram": {"ns_backend": "gram"},
    "aol4 gram": {"ns_backend": "gram", "ns_coefficients": "aol4"},
}


_MUON_ARGS = ("params", "lr", "momentum", "nesterov", "ns_steps", "weight_decay")


def torch_muon_variant() -> Variant | None:
    """``torch.optim.Muon`` as the external peer, or None when this torch lacks a compatible one."""
    muon = getattr(torch.optim, "Muon", None)
    if muon is None:
        return None
    try:
        accepted = inspect.signature(muon).parameters
    except (TypeError, ValueError):
        return None
    if not all(name in accepted for name in _MUON_ARGS):
        return None

    def build(params: Iterable[Tensor] | Iterable[dict[str, Any]]) -> Optimizer:
        optimizer: Optimizer = muon(
            params, lr=LR, momentum=MOMENTUM, nesterov=True, ns_steps=NS_STEPS, weight_decay=0.0
        )
        return optimizer

    return Variant("torch.optim.Muon", build, matrices_only=True)


ULTRALYTICS_NAME = "ultralytics MuSGD"
ULTRALYTICS_MODULE = "ultralytics.optim.muon"
# The mix weights Ultralytics' trainer passes its MuSGD (ultralytics-compat.md).
ULTRALYTICS_MUON, ULTRALYTICS_SGD = 0.2, 1.0


class PeerImportError(RuntimeError):
    """An installed external peer that does not import; the message says how to leave it out."""


def _module_found(name: str) -> bool:
    """Whether ``name`` can be found without importing it (a missing parent is not found)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


# What the Ultralytics peer and this package's flavour of it are built with: the shared
# hyperparameters and the mix weights Ultralytics' trainer passes.
_ULTRALYTICS_KW: dict[str, Any] = {
    "lr": LR,
    "momentum": MOMENTUM,
    "nesterov": True,
    "weight_decay": 0.0,
    "muon": ULTRALYTICS_MUON,
    "sgd": ULTRALYTICS_SGD,
}


def _ultralytics_groups(
    params: Iterable[Tensor] | Iterable[dict[str, Any]],
) -> list[dict[str, Any]]:
    """The groups the Ultralytics update rule takes: matrices (the routed ``(rows, cols)``
    views, conv kernels as they are) with ``use_muon``, the vectors without."""
    tensors = [t for p in params for t in (p["params"] if isinstance(p, dict) else [p])]
    groups = [
        {"params": [p for p in tensors if matrix_shape(p.shape) is not None], "use_muon": True},
        {"params": [p for p in tensors if matrix_shape(p.shape) is None], "use_muon": False},
    ]
    return [g for g in groups if g["params"]]


def ultralytics_flavour_variants() -> list[Variant]:
    """This package's Ultralytics-compatible optimizer (``musgd.ultralytics``) on the same
    groups and hyperparameters as the Ultralytics peer, eager and with both replay flags: what
    a YOLO26 user switching to it gets, timed beside the peer it replaces."""

    def flavour(**options: Any) -> BuildFn:
        def build(params: Iterable[Tensor] | Iterable[dict[str, Any]]) -> Optimizer:
            optimizer: Optimizer = UltralyticsMuSGD(
                _ultralytics_groups(params), **_ULTRALYTICS_KW, **options
            )
            return optimizer

        return build

    return [
        Variant(f"{FLAVOUR_NAME} eager", flavour(), timing_only=True),
        Variant(
            f"{FLAVOUR_NAME} both",
            flavour(capture_orthogonalization=True, capture_updates=True),
            cuda_only=True,
            timing_only=True,
        ),
    ]


FLAVOUR_NAME = "musgd.ultralytics"


def ultralytics_variant() -> Variant | None:
    """The installed Ultralytics MuSGD as an external peer, or None when it is not installed.

    A black box, timed only: it is built as its documented constructor allows (R140), with the
    matrices (the routed ``(rows, cols)`` views, conv kernels as they are) in a ``use_muon``
    group and the vectors in a plain SGD group, ``muon=0.2, sgd=1.0`` as its trainer passes them.
    Its update rule differs from MuSGD's (a second momentum buffer per matrix), so only its
    step time compares. ``ultralytics`` is never a dependency of this package; the module is
    imported only when the peer is built.
    """
    if not _module_found("ultralytics"):
        return None

    def build(params: Iterable[Tensor] | Iterable[dict[str, Any]]) -> Optimizer:
        try:
            peer = importlib.import_module(ULTRALYTICS_MODULE).MuSGD
        except (ImportError, AttributeError) as exc:
            raise PeerImportError(
                f"the {ULTRALYTICS_NAME!r} peer needs {ULTRALYTICS_MODULE}.MuSGD, which did not "
                f"import ({type(exc).__name__}: {exc}); fix the ultralytics install or leave "
                "the peer out with --variants"
            ) from None
        optimizer: Optimizer = peer(_ultralytics_groups(params), **_ULTRALYTICS_KW)
        return optimizer

    return Variant(ULTRALYTICS_NAME, build, timing_only=True)


def all_variants() -> list[Variant]:
    """Every variant this installation can build, baseline first, external peers last; the
    Ultralytics peer also captured whole in one CUDA graph (what its users can do today)."""
    ultralytics = ultralytics_variant()
    peers = [torch_muon_variant(), ultralytics]
    if ultralytics is not None:
        peers.append(ultralytics.graphed())
    return [
        *musgd_variants(),
        *schedule_variants(),
        *ns_only_variants(),
        *ultralytics_flavour_variants(),
        *(p for p in peers if p is not None),
    ]


def select_variants(
    names: Sequence[str] | None, device: torch.device, *, trainable: bool = False
) -> list[Variant]:
    """The variants called ``names`` (all when None) that can run on ``device``.

    ``trainable`` keeps only variants that train a whole model here (no matrices-only or
    timing-only peers).
    Raises ValueError naming the unknown or unusable variant and listing the available ones.
    """
    available = [
        v
        for v in all_variants()
        if (device.type == "cuda" or not v.cuda_only)
        and not (trainable and (v.matrices_only or v.timing_only))
    ]
    if names is None:
        return available
    by_name = {v.name: v for v in available}
    chosen = []
    for name in names:
        if name not in by_name:
            listed = ", ".join(repr(n) for n in by_name)
            raise ValueError(f"unknown or unavailable variant {name!r}; choose from {listed}")
        chosen.append(by_name[name])
    return chosen
