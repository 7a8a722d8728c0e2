"""A CPU recorder with CUDA-graph semantics, for testing the replay machinery without a GPU.

Recording runs the function once as a warm-up, then once more under a dispatch mode that logs
every ATen operation with the tensors it touched. ``replay()`` re-runs the logged operations on
the *same* tensor objects and copies each result into the tensor recorded for it -- as a CUDA
graph re-runs its kernels on the same addresses. Python scalars are therefore frozen at record
time while 0-d tensors are re-read, exactly the property the replay design depends on, and no
Python function body runs during replay (what the count regressions check).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from musgd._functional import Bucket, BucketJob, NSSettings, Orthogonalizer
from musgd._replay import GraphPool


class InjectedFailureError(RuntimeError):
    """Raised by the fake recorder where a test asked it to fail."""


@dataclass
class _Op:
    func: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    out: Any


class _Log(TorchDispatchMode):
    """Logs every ATen call; refuses host syncs as CUDA stream capture does.

    As a capture runs no kernel, each tensor an operation writes in place gets its value back
    right after it: the pass leaves every tensor as it found it (the values it computes are
    only what the log is made from, as a capture's are).
    """

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: list[_Op] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default:
            raise InjectedFailureError("host synchronization (.item()) is not allowed in a capture")
        written = _written(func, args, kwargs)
        before = [t.clone() for t in written]
        out = func(*args, **kwargs)
        for t, value in zip(written, before, strict=True):
            t.copy_(value)
        self.ops.append(_Op(func, args, kwargs, out))
        return out


def _written(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Tensor]:
    """The tensors that ``func`` writes in place (its schema's mutable arguments)."""
    written: list[Tensor] = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        items = value if isinstance(value, list | tuple) else [value]
        written += [t for t in items if isinstance(t, Tensor)]
    return written


def _copy_into(recorded: Any, fresh: Any) -> None:
    if isinstance(recorded, Tensor):
        if recorded.data_ptr() != fresh.data_ptr():
            recorded.copy_(fresh)
    elif isinstance(recorded, tuple | list):
        for r, f in zip(recorded, fresh, strict=True):
            _copy_into(r, f)


@dataclass
class FakeRecording:
    """The logged operations of one recording and the tensors its replay writes."""

    ops: list[_Op]
    outputs: tuple[Tensor, ...]
    owner: FakeRecorder

    def replay(self) -> None:
        self.owner.replays += 1
        for op in self.ops:
            if op.func.is_view:
                continue  # the recorded view already aliases its (recorded) base
            fresh = op.func(*op.args, **op.kwargs)
            if not op.func._schema.is_mutable:
                _copy_into(op.out, fresh)


_W = TypeVar("_W")


@dataclass
class _ReversedJobs:
    """An orthogonalizer that runs a group's bucket jobs in reverse order."""

    inner: Orthogonalizer
    owner: FakeRecorder

    def single(self, G: Tensor, ns: NSSettings) -> Tensor:
        return self.inner.single(G, ns)

    def batched(self, G: Tensor, ns: NSSettings) -> Tensor:
        return self.inner.batched(G, ns)

    def stacked(self, members: Sequence[Tensor], bucket: Bucket, ns: NSSettings) -> Tensor:
        return self.inner.stacked(members, bucket, ns)

    def table(self, key: Hashable, src: Tensor, run: Callable[[Tensor], Tensor]) -> Tensor:
        return self.inner.table(key, src, run)

    def workspace(self, key: Hashable, build: Callable[[], _W]) -> _W:
        return self.inner.workspace(key, build)

    def run_buckets(self, jobs: Sequence[BucketJob], costs: Sequence[int]) -> None:
        if len(jobs) > 1:
            self.owner.reordered += 1
        for job in reversed(jobs):
            job()


@dataclass
class FakeRecorder:
    """Records on ``device_type`` tensors; can be told to fail, or to claim a capture is underway.

    ``fail_in`` is ``"warmup"`` or ``"capture"``: that pass runs the function fully and then
    raises ``InjectedFailureError`` (a warm-up's work has moved state by then, as a half-finished
    real one would; a capture's has not, as a real capture runs nothing). ``fail_cold``: a
    capture without a warm-up (``warm_up=False``) raises. ``warm_ups`` counts warm-up passes.
    """

    device_type: str = "cpu"
    fail_in: str | None = None
    capture_underway: bool = False
    stream: Hashable = "stream-0"
    fail_cold: bool = False
    records: int = 0
    warm_ups: int = 0
    in_capture: bool = False  # while the capture pass runs
    replays: int = 0
    reordered: int = 0  # passes that ran a group's bucket jobs out of order
    recordings: list[FakeRecording] = field(default_factory=list)

    def supports(self, device: torch.device) -> bool:
        return device.type == self.device_type

    def capturing(self, device: torch.device) -> bool:
        return self.capture_underway

    def stream_key(self, device: torch.device) -> Hashable:
        return self.stream

    def concurrent(self, orth: Orthogonalizer, device: torch.device) -> Orthogonalizer:
        """Run bucket jobs last first: recorded results must not depend on the jobs' order."""
        return _ReversedJobs(orth, self)

    def record(
        self, fn: Callable[[], Sequence[Tensor]], device: torch.device, *, warm_up: bool = True
    ) -> FakeRecording:
        self.records += 1
        if warm_up:
            self.warm_ups += 1
            fn()
            if self.fail_in == "warmup":
                raise InjectedFailureError("injected failure in the warm-up pass")
        elif self.fail_cold:
            raise InjectedFailureError("injected failure in a capture without warm-up")
        self.in_capture = True
        try:
            with _Log() as log:
                outputs = tuple(fn())
        finally:
            self.in_capture = False
        if self.fail_in == "capture":
            raise InjectedFailureError("injected failure in the capture pass")
        recording = FakeRecording(log.ops, outputs, self)
        self.recordings.append(recording)
        return recording


class FakeNetworkGrapher:
    """A stand-in for ``musgd._network_capture.CudaNetworkGrapher`` on any device.

    Like the real one it runs ``warmup`` forward and backward passes of the module on the sample
    arguments first (moving BatchNorm statistics, which the caller must put back), without
    touching the parameters' ``.grad``; the callable it returns then runs the module eagerly, so
    results are the eager ones, bit for bit. ``fail`` makes the graphing raise after the warm-up.
    """

    def __init__(
        self,
        *,
        warmup: int = 3,
        fail: bool = False,
        compile: bool = False,
        pool: GraphPool | None = None,
    ) -> None:
        if compile:
            raise ValueError("FakeNetworkGrapher runs the module eagerly: it has no compile=True")
        self.warmup = warmup
        self.fail = fail
        self.pool = pool  # taken as the real grapher takes it; nothing is recorded into it
        self.graphed = 0
        self.grad_strides: list[list[tuple[int, ...] | None]] = []  # what each graph was given

    def supports(self, device: torch.device) -> bool:
        return True

    def graph(
        self,
        module: torch.nn.Module,
        sample_args: tuple[Tensor, ...],
        grad_strides: Sequence[tuple[int, ...] | None],
    ) -> Any:
        self.grad_strides.append(list(grad_strides))
        params = [p for p in module.parameters() if p.requires_grad]
        for _ in range(self.warmup):
            outputs = [o for o in module(*sample_args) if o.requires_grad]
            torch.autograd.grad(
                outputs, params, [torch.ones_like(o) for o in outputs], allow_unused=True
            )
        if self.fail:
            raise RuntimeError("fake graphing failure")
        self.graphed += 1
        return module


def fake_graph_pools(monkeypatch: Any) -> list[int]:
    """Pool tokens made on any machine (``torch.cuda.graph_pool_handle`` gives distinct
    tuples) and ``give_back_cached_blocks`` counted rather than run: the list it appends to."""
    from itertools import count

    from musgd import _replay

    tokens = count()
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: ("pool", next(tokens)))
    given_back: list[int] = []
    monkeypatch.setattr(_replay, "give_back_cached_blocks", lambda: given_back.append(1))
    return given_back
