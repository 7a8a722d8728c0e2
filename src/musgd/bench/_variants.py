"""The optimizer variants a benchmark compares: a name and a callable that builds the optimizer.

Adding a variant is one line in :func:`musgd_variants` (a new ``MuSGD`` constructor flag) or a
new entry beside :func:`torch_muon_variant` (an external peer).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from musgd._functional import matrix_shape
from musgd._optimizer import MuSGD

LR = 0.02
# Hyperparameters shared by every variant, so that they differ only in how they execute.
MOMENTUM = 0.95
NS_STEPS = 5

BuildFn = Callable[[Iterable[Tensor] | Iterable[dict[str, Any]]], Optimizer]


@dataclass(frozen=True)
class Variant:
    """One way of running the optimizer step.

    ``matrices_only`` marks an external peer that accepts only 2-D matrices: it is handed the
    matrix parameters flattened to ``(rows, cols)`` (the Muon half of MuSGD) and cannot train a
    model on its own. ``timing_only`` marks a peer whose update rule differs from MuSGD's: its
    step is timed, but it trains no model here. ``cuda_only`` variants are skipped on other
    devices.
    """

    name: str
    build: BuildFn
    matrices_only: bool = False
    cuda_only: bool = False
    timing_only: bool = False


def _musgd(**options: Any) -> BuildFn:
    """A builder of MuSGD with the shared hyperparameters and ``options``."""

    def build(params: Iterable[Tensor] | Iterable[dict[str, Any]]) -> Optimizer:
        return MuSGD(params, lr=LR, momentum=MOMENTUM, ns_steps=NS_STEPS, **options)

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
        # The default ns_backend="auto" runs the Triton kernels on CUDA; these run the torch
        # backend (batched cuBLAS products) in the same run, eager and recorded whole.
        Variant("torch-NS eager", _musgd(ns_backend="torch"), cuda_only=True),
        Variant(
            "torch-NS both",
            _musgd(ns_backend="torch", capture_orthogonalization=True, capture_updates=True),
            cuda_only=True,
        ),
    ]


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
        tensors = [t for p in params for t in (p["params"] if isinstance(p, dict) else [p])]
        groups = [
            {"params": [p for p in tensors if matrix_shape(p.shape) is not None], "use_muon": True},
            {"params": [p for p in tensors if matrix_shape(p.shape) is None], "use_muon": False},
        ]
        optimizer: Optimizer = peer(
            [g for g in groups if g["params"]],
            lr=LR,
            momentum=MOMENTUM,
            nesterov=True,
            weight_decay=0.0,
            muon=ULTRALYTICS_MUON,
            sgd=ULTRALYTICS_SGD,
        )
        return optimizer

    return Variant(ULTRALYTICS_NAME, build, timing_only=True)


def all_variants() -> list[Variant]:
    """Every variant this installation can build, baseline first, external peers last."""
    peers = [torch_muon_variant(), ultralytics_variant()]
    return [*musgd_variants(), *(p for p in peers if p is not None)]


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
