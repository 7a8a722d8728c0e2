"""Replay of recorded work: the recorder interface, the CUDA-graph recorder, keys and the cache.

Spec §2. The math (``_newton_schulz``, ``_functional``) never imports this module; the optimizer
chooses once whether its orthogonalizer and update preparation run eagerly or through here.

A *recorder* turns a zero-argument function into a *recording* whose ``replay()`` re-runs the same
device work on the same memory. Everything else here -- keys, the bounded cache, the eager
fallbacks, failure handling -- is recorder-agnostic, so it is unit-tested on CPU with a fake
recorder; :class:`CudaGraphRecorder` (``torch.cuda.CUDAGraph``) is tested on a GPU.
"""

from __future__ import annotations

import contextlib
import gc
import math
import threading
import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, cast

import torch
from torch import Tensor

from musgd._device import capturing, lpt_assign
from musgd._functional import (
    Bucket,
    BucketJob,
    EagerOrthogonalizer,
    NSSettings,
    Orthogonalizer,
    run_in_order,
)

E = TypeVar("E")
T = TypeVar("T")


class Recording(Protocol):
    """Recorded device work: ``replay()`` re-runs it, writing into ``outputs``."""

    @property
    def outputs(self) -> tuple[Tensor, ...]: ...

    def replay(self) -> None: ...


class Recorder(Protocol):
    """Records a function's device work for replay; says which devices it can record on."""

    def supports(self, device: torch.device) -> bool: ...

    def capturing(self, device: torch.device) -> bool: ...

    def stream_key(self, device: torch.device) -> Hashable: ...

    def record(
        self, fn: Callable[[], Sequence[Tensor]], device: torch.device, *, warm_up: bool = True
    ) -> Recording:
        """``fn``'s device work, recorded; ``warm_up`` runs it once first, for real (creating
        lazily made library state), else the capture alone runs, moving no tensor's value."""
        ...

    def concurrent(self, orth: Orthogonalizer, device: torch.device) -> Orthogonalizer:
        """``orth``, with bucket jobs spread the way recordings on ``device`` should run them."""
        ...


# Keys a ReplayState remembers as recorded before (ReplayState.record): each is a tuple of
# settings and addresses, and a training run makes a few dozen.
WARMED_KEYS = 1024
# Recordings of a whole step's group preparations kept at once (ReplayState.step_cache): a
# training run's groups keep their settings, so it makes one; each holds every replayed group's
# gradient copies and updates, so a run whose groups change often makes per-group ones instead.
STEP_RECORDINGS = 2
# Parallel branches a recorded group's bucket jobs are spread over (see BranchedOrthogonalizer).
DEFAULT_BRANCHES = 4
# A bucket job whose Newton-Schulz cost (``Bucket.cost``) reaches this keeps the GPU busy on its
# own: it runs on the capturing stream, since a branch would buy no overlap and hold its own
# memory. At this size a bucket's five iterations are 40 to 65 GFLOP; every bucket of the nano
# detector is below it (the costliest, 1 x 256 x 2304, by 14 times), every transformer bucket of
# the benchmark (12 x 768 x 768 and up) above it.
BRANCH_COST_LIMIT = 2**31


def plan_lanes(costs: Sequence[int], lanes: int) -> list[list[int]]:
    """Spread jobs of the given costs over ``lanes`` lanes, largest first onto the least loaded
    (:func:`musgd._device.lpt_assign`).

    Returns one list of job indices per lane (in increasing order; empty lanes omitted). The
    greedy longest-first rule keeps the costliest lane within 4/3 of the best possible.
    """
    members: list[list[int]] = [[] for _ in range(max(1, lanes))]
    for job, lane in enumerate(lpt_assign(costs, lanes)):
        members[lane].append(job)
    return [m for m in members if m]


def plan_branches(
    costs: Sequence[int], lanes: int, limit: int = BRANCH_COST_LIMIT
) -> tuple[list[list[int]], list[int]]:
    """Which jobs run on parallel lanes (planned by :func:`plan_lanes`) and which stay inline.

    Jobs costing ``limit`` or more stay on the current stream, in order; the others are spread.
    With fewer than two lanes' worth of small jobs, every job stays inline.
    """
    small = [i for i, c in enumerate(costs) if c < limit]
    planned = plan_lanes([costs[i] for i in small], lanes)
    if len(planned) < 2:
        return [], list(range(len(costs)))
    inline = [i for i, c in enumerate(costs) if c >= limit]
    return [[small[k] for k in lane] for lane in planned], inline


class BranchedOrthogonalizer(Orthogonalizer):
    """``inner``'s Newton-Schulz, with a group's bucket jobs spread over parallel CUDA streams.

    Each lane's jobs run in order on its own stream, forked from and joined back into the
    current stream. Inside a CUDA-graph capture the lanes become parallel branches of the graph,
    so the small kernels of different buckets overlap on the GPU instead of queueing one after
    the other. Every kernel is the one the eager order runs, on the same inputs; bucket jobs write
    disjoint tensors, so the results are the same bits.
    """

    def __init__(
        self,
        inner: Orthogonalizer,
        streams: Sequence[torch.cuda.Stream],
        cost_limit: int = BRANCH_COST_LIMIT,
    ) -> None:
        self._inner = inner
        self._streams = tuple(streams)
        self._cost_limit = cost_limit

    def single(self, G: Tensor, ns: NSSettings) -> Tensor:
        return self._inner.single(G, ns)

    def batched(self, G: Tensor, ns: NSSettings) -> Tensor:
        return self._inner.batched(G, ns)

    def stacked(self, members: Sequence[Tensor], bucket: Bucket, ns: NSSettings) -> Tensor:
        return self._inner.stacked(members, bucket, ns)

    def table(self, key: Hashable, src: Tensor, run: Callable[[Tensor], Tensor]) -> Tensor:
        return self._inner.table(key, src, run)

    def workspace(self, key: Hashable, build: Callable[[], T]) -> T:
        return self._inner.workspace(key, build)

    def run_buckets(self, jobs: Sequence[BucketJob], costs: Sequence[int]) -> None:
        lanes, inline = plan_branches(costs, len(self._streams), self._cost_limit)
        if not lanes:
            run_in_order(jobs, costs)
            return
        current = torch.cuda.current_stream()
        forked: list[torch.cuda.Stream] = []
        try:
            for stream, lane in zip(self._streams, lanes, strict=False):
                stream.wait_stream(current)
                forked.append(stream)
                with torch.cuda.stream(stream):
                    for i in lane:
                        jobs[i]()
            for i in inline:  # large jobs: on the current stream, overlapping the lanes
                jobs[i]()
        finally:
            # Joined even after a failure: a capture must end with every branch joined, and
            # eager work after this must not race the lanes.
            for stream in forked:
                current.wait_stream(stream)


class _Held:
    """A graph the keeper holds, and the shared pool it captured into (None: its own)."""

    __slots__ = ("graph", "pool")

    def __init__(self, graph: Any) -> None:
        self.graph: Any = graph
        self.pool: Hashable | None = None


class KeptGraph:
    """A ``torch.cuda.CUDAGraph`` made by :data:`GRAPHS`: its owner captures and replays it
    through this handle, and when the handle goes the keeper decides when the graph does."""

    __slots__ = ("__weakref__", "_held")

    def __init__(self, held: _Held) -> None:
        self._held = held

    def capture_begin(self, pool: Any = None) -> None:
        """Begin capturing on the current stream, into ``pool`` (a pool token) or its own."""
        self._held.pool = pool
        self._held.graph.capture_begin(pool=pool, capture_error_mode="thread_local")

    def capture_end(self) -> None:
        self._held.graph.capture_end()

    def replay(self) -> None:
        self._held.graph.replay()


class GraphKeeper:
    """Every CUDA graph this package makes, each destroyed only once no other graph of its
    device is still owned.

    PyTorch frees the cuBLAS workspaces of a graph's capture stream when it destroys the graph,
    also those that other live graphs captured on that stream write to (pytorch/pytorch#193402,
    docs/PROVENANCE.md R386). Every recording here warms up and captures on one side stream per
    device (:data:`STREAMS`), so a dropped or failed recording would free the workspace of the
    network's and the optimizer's live ones, and their next replays would write into memory the
    caching allocator hands out again or gives back to the driver. So an owner holds a
    :class:`KeptGraph`; when that handle goes, its graph is destroyed at once where it was its
    device's last owned graph, and else kept, idle and never replayed, until the device's last
    owned graph goes. ``idle`` counts the graphs kept so; each holds its own pool's memory
    (graphs in a shared pool hold nothing the pool does not), and the events that make them --
    a recording dropped or failed while others live -- are few in a training run.

    Nor is a graph destroyed while the current stream captures: destroying one is an operation
    CUDA refuses then, and the refusal invalidates the capture under way (a user's whole-step
    ``torch.cuda.graph`` failed so on the H100 at 6268a20, a collection during it freeing an
    earlier optimizer's recordings). Such a graph waits in ``deferred`` for the keeper's next
    call outside a capture (a graph made or let go) or :meth:`flush`. ``capturing`` says whether
    a capture is under way (default: on the current CUDA stream).
    """

    def __init__(
        self,
        make: Callable[[], Any] | None = None,
        capturing: Callable[[], bool] = capturing,
    ) -> None:
        self._make = make
        self._capturing = capturing
        self._lock = threading.Lock()
        self._owned: dict[int, set[_Held]] = {}
        self._idle: dict[int, list[_Held]] = {}
        self._deferred: list[_Held] = []

    def graph(self, device: int | None = None) -> KeptGraph:
        """A new graph on device ``device`` (an index; None: the current one), owned through
        the handle returned."""
        if device is None:
            device = torch.cuda.current_device()
        self.flush()
        held = _Held(torch.cuda.CUDAGraph() if self._make is None else self._make())
        handle = KeptGraph(held)
        with self._lock:
            self._owned.setdefault(device, set()).add(held)
        weakref.finalize(handle, self._let_go, device, held).atexit = False
        return handle

    def _let_go(self, device: int, held: _Held) -> None:
        with self._lock:
            owned = self._owned[device]
            owned.discard(held)
            if owned:
                self._idle.setdefault(device, []).append(held)
                return
            self._deferred += [*self._idle.pop(device, []), held]
        self.flush()

    def flush(self) -> None:
        """Destroy the graphs whose destruction waited for a capture to end; none while the
        current stream still captures."""
        if not self._deferred or self._capturing():
            return
        with self._lock:
            gone, self._deferred = self._deferred, []
        for each in gone:  # outside the lock: destroying a graph may run other finalizers
            each.graph = None

    @property
    def deferred(self) -> int:
        """How many graphs wait for a capture to end before they are destroyed."""
        with self._lock:
            return len(self._deferred)

    @property
    def owned(self) -> int:
        """How many graphs have a live owner, all devices together."""
        with self._lock:
            return sum(len(held) for held in self._owned.values())

    @property
    def idle(self) -> int:
        """How many graphs are kept past their owners, all devices together."""
        with self._lock:
            return sum(len(kept) for kept in self._idle.values())

    def holds_pool(self, device: int, pool: Hashable) -> bool:
        """Whether a graph of ``device``, owned or idle, captured into the shared ``pool``:
        PyTorch refuses a capture into a pool whose graphs were all destroyed."""
        with self._lock:
            held = (*self._owned.get(device, ()), *self._idle.get(device, ()))
            return any(h.pool == pool for h in held)


GRAPHS = GraphKeeper()


@dataclass(frozen=True)
class CudaGraphRecording:
    """One captured graph (a :class:`KeptGraph`) and the static tensors its replay writes."""

    graph: KeptGraph
    outputs: tuple[Tensor, ...]

    def replay(self) -> None:
        self.graph.replay()


class _StreamPool(threading.local):
    """The streams recordings warm up, capture and branch on: per thread and device, shared.

    PyTorch gives cuBLAS a workspace for each stream it runs on and keeps it until the process
    ends (32 MiB each on an H200), or until a graph captured on that stream is destroyed
    (:class:`GraphKeeper` says why none of ours is while another lives). Streams owned by each
    recorder would hold one more set of workspaces for every optimizer a process creates;
    shared, a thread holds one side stream and one set of lanes per device. Per thread, because
    two threads recording at once must not capture on the same stream. PyTorch hands
    ``torch.cuda.Stream()`` out of a fixed pool per device and priority, round robin, so once a
    process has made more streams than that pool holds, another thread's stream objects may
    share a CUDA stream with these (seen on the H200 after a full CUDA test session): recording
    from two threads at once is not supported.
    """

    def __init__(self) -> None:
        self.side: dict[int, torch.cuda.Stream] = {}
        self.lanes: dict[int, list[torch.cuda.Stream]] = {}

    def side_stream(self, index: int) -> torch.cuda.Stream:
        """The stream every warm-up and capture on device ``index`` runs on."""
        stream = self.side.get(index)
        if stream is None:
            with torch.cuda.device(index):
                stream = torch.cuda.Stream()  # type: ignore[no-untyped-call,unused-ignore]
            self.side[index] = stream
        return stream

    def lane_streams(self, index: int, count: int) -> tuple[torch.cuda.Stream, ...]:
        """``count`` branch streams of device ``index``; a smaller count gets the first ones."""
        lanes = self.lanes.setdefault(index, [])
        if len(lanes) < count:
            with torch.cuda.device(index):
                lanes.extend(torch.cuda.Stream() for _ in range(count - len(lanes)))  # type: ignore[no-untyped-call,unused-ignore]
        return tuple(lanes[:count])


STREAMS = _StreamPool()


class GraphPool:
    """One CUDA-graph memory pool per device, shared by the recordings given it.

    Captures into one pool reuse the memory each earlier capture had freed by its end (its
    scratch), so the recordings together reserve about what the largest needs, not the sum
    (WP-025, "Reserved memory"). PyTorch documents such sharing as safe (docs/PROVENANCE.md R5,
    R385) for graphs that never replay concurrently, whatever their order, where none reads
    what another wrote into memory freed by the end of its capture: the allocator never hands a
    block in use to a capture, but it may hand one that an earlier graph uses as scratch.

    A later capture's outputs may sit in an earlier one's scratch: they hold until that one
    replays again. Here one kind of recording reads another's outputs: consumers (the
    optimizer's, the clip's, which use their outputs at once) read the gradients a producer (a
    network's backward) keeps as outputs, which may outlive the producer's next replay when
    gradients accumulate. So one producer joins the pool on a device, and no consumer's
    recording made before it replays after it: no consumer's scratch then holds its gradients,
    and no other producer's replay overwrites them. Where consumers captured first (the
    trainer's first steps come before the network's recording), the producer joins only if
    every consumer said how to drop its recordings (:meth:`on_producer`): it drops them, and
    they record anew after it. Otherwise, and for every later producer (another input
    layout's network), it records into a private pool, counted in ``private``. The caller
    guarantees the rest: consumers and the producer never replay at the same time, and nothing
    of the pool replays between the producer's forward and backward (the activations the
    forward saves are freed when the backward's capture ends).
    """

    def __init__(self) -> None:
        self._handles: dict[int, Any] = {}
        self._joined: set[int] = set()  # devices whose producer has joined
        self._consumed: set[int] = set()  # devices where a consumer has captured
        self._drops: list[Callable[[], None]] = []
        self._undroppable = False  # a consumer captured without saying how to drop it
        self.private = 0  # producers recorded on their own

    def _index(self, device: torch.device) -> int:
        return device.index if device.index is not None else torch.cuda.current_device()

    def _shared(self, index: int) -> Any:
        token = self._handles.get(index)
        if token is None:
            token = self._handles[index] = torch.cuda.graph_pool_handle()
        return token

    def reset(self) -> None:
        """Forget the pool: every later recording starts a fresh one. For when every recording
        in it has been dropped (PyTorch refuses a capture into a pool whose graphs all went)."""
        self._handles.clear()
        self._joined.clear()
        self._consumed.clear()
        self._drops.clear()
        self._undroppable = False

    def on_producer(self, drop: Callable[[], None]) -> None:
        """``drop`` drops every recording one consumer made in this pool (they record anew at
        their next call); the producer calls it where it joins after them. A consumer says so
        before it captures."""
        self._drops.append(drop)

    def consumer(self, device: torch.device, *, droppable: bool = False) -> Any:
        """The shared pool's token on ``device``, for a recording that reads the producer's
        outputs (``droppable``: its consumer called :meth:`on_producer`; where one did not, a
        producer coming later records on its own)."""
        index = self._index(device)
        self._consumed.add(index)
        self._undroppable = self._undroppable or not droppable
        return self._shared(index)

    def producer(self, device: torch.device) -> Any:
        """The shared pool's token on ``device`` for its first producer, the consumers'
        earlier recordings dropped; a private pool's where they cannot be, or for a later
        producer."""
        index = self._index(device)
        if index in self._joined or (index in self._consumed and self._undroppable):
            self.private += 1
            return torch.cuda.graph_pool_handle()
        if index in self._consumed:
            for drop in self._drops:
                drop()
            self._consumed.clear()
            # Where no producer joined, every graph of the pool is gone, and PyTorch refuses a
            # capture into a pool whose graphs all were (an internal assertion on the H200,
            # PyTorch 2.11): the producer starts a fresh pool, the old one's memory given back.
            # Where GRAPHS still keeps some of them, idle, the pool lives on: the producer
            # joins it and reuses their memory.
            for stale in set(self._handles) - self._joined:
                if not GRAPHS.holds_pool(stale, self._handles[stale]):
                    del self._handles[stale]
            give_back_cached_blocks()
        self._joined.add(index)
        return self._shared(index)


class CudaGraphRecorder:
    """Records with ``torch.cuda.CUDAGraph``: side-stream warm-up, then capture.

    The warm-up pass runs the function once on the side stream that then captures it, so that
    lazily created library state (cuBLAS handles and per-stream workspaces) exists before
    capture, as the PyTorch CUDA-graph documentation requires (docs/PROVENANCE.md R5, R123). The
    capture goes into ``pool`` (a :class:`GraphPool`, as a consumer: what it records may read a
    network's gradients) where one is given, else into a private pool of its own; replay runs
    on whichever stream is current when it is called.
    """

    def __init__(
        self,
        branches: int = DEFAULT_BRANCHES,
        branch_cost_limit: int = BRANCH_COST_LIMIT,
        pool: GraphPool | None = None,
    ) -> None:
        self.branches = branches
        self.branch_cost_limit = branch_cost_limit
        self.pool = pool
        self.droppable = False  # its owner told the pool how to drop its recordings

    def drops_with(self, drop: Callable[[], None]) -> None:
        """Tell the pool that ``drop`` drops every recording made through this recorder (see
        :class:`GraphPool`), before any of them is made."""
        if self.pool is None:
            raise ValueError(
                "CudaGraphRecorder.drops_with: the recorder has no pool to tell; make it with "
                "CudaGraphRecorder(pool=GraphPool())"
            )
        self.pool.on_producer(drop)
        self.droppable = True

    def supports(self, device: torch.device) -> bool:
        return device.type == "cuda"

    def concurrent(self, orth: Orthogonalizer, device: torch.device) -> Orthogonalizer:
        """``orth`` whose bucket jobs run on ``branches`` persistent streams of ``device``.

        The same streams (:data:`STREAMS`) serve the warm-up and the capture of every recording,
        so each stream's cuBLAS workspace exists before any capture uses it.
        """
        if self.branches < 2:
            return orth
        index = device.index if device.index is not None else torch.cuda.current_device()
        lanes = STREAMS.lane_streams(index, self.branches)
        return BranchedOrthogonalizer(orth, lanes, self.branch_cost_limit)

    def capturing(self, device: torch.device) -> bool:
        # The current device's current stream: where an enclosing capture would be recording.
        return capturing(device)

    def stream_key(self, device: torch.device) -> Hashable:
        stream = torch.cuda.current_stream(device)
        return ("cuda-stream", stream.device_index, stream.stream_id)

    def record(
        self, fn: Callable[[], Sequence[Tensor]], device: torch.device, *, warm_up: bool = True
    ) -> Recording:
        with torch.cuda.device(device):
            current = torch.cuda.current_stream()
            # One side stream per device for every warm-up and capture: warming up on the
            # capture stream creates its cuBLAS workspace before capture, and one stream keeps
            # it to one workspace instead of one per recording.
            side = STREAMS.side_stream(torch.cuda.current_device())
            if warm_up:
                with on_side_stream(side, current):
                    fn()
            graph = GRAPHS.graph()
            if warm_up:
                give_back_cached_blocks()
            else:  # the capture stream starts after the work queued so far, as a warm-up would
                side.wait_stream(current)
            pool = None
            if self.pool is not None:
                pool = self.pool.consumer(device, droppable=self.droppable)
            outputs = tuple(capture(graph, fn, side, pool))
            return CudaGraphRecording(graph, outputs)


@contextlib.contextmanager
def on_side_stream(side: torch.cuda.Stream, current: torch.cuda.Stream) -> Iterator[None]:
    """Work queued on ``side`` after what ``current`` holds; ``current`` then waits for it, also
    after a failure: the caller restores state on ``current`` next, and that must not race the
    side stream's writes."""
    side.wait_stream(current)
    try:
        with torch.cuda.stream(side):
            yield
    finally:
        current.wait_stream(side)


def give_back_cached_blocks() -> None:
    """The current device idle, then the caching allocator's unused blocks given back.

    A warm-up runs on the side stream, and the caching allocator keeps the blocks it freed
    for that stream: the capture (into its own pool) and the eager work on the current stream
    cannot reuse them, so without this they stay reserved, unused, for as long as the process
    trains (WP-025, "Reserved memory"). Recordings call it after their warm-ups; it frees
    nothing in use.
    """
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def capture(
    graph: KeptGraph,
    fn: Callable[[], T],
    side: torch.cuda.Stream,
    pool: Any = None,  # a torch.cuda.graph_pool_handle()
) -> T:
    """``fn()`` captured into ``graph`` on ``side`` (into ``pool``, else a private pool).

    capture_begin/end by hand rather than ``torch.cuda.graph``: when a capture is invalidated
    its exit raises before restoring the current stream, and every later operation would run on
    the side stream. Here the stream context always unwinds. ``thread_local``: a data-loader
    pin-memory thread allocating host memory meanwhile must not invalidate this capture (the
    default "global" mode would). The cyclic garbage collector waits (``_no_automatic_collection``).
    """
    with torch.cuda.stream(side), _no_automatic_collection():
        graph.capture_begin(pool)
        try:
            return fn()
        finally:
            graph.capture_end()  # raises when the capture was invalidated


@contextlib.contextmanager
def _no_automatic_collection() -> Iterator[None]:
    """Python's cyclic garbage collector held off for the duration of a capture.

    A collection that runs inside a capture may free unreachable CUDA graphs (an optimizer
    dropped in a reference cycle, with its recordings) and their memory pools there, and that
    invalidates the capture: on the H200 the full CUDA suite failed a channels-last recording
    this way at bc3da34 and 4b62f17, while the test alone passed. Unreachable objects wait for
    the next collection after the capture instead.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def typed(value: object) -> Hashable:
    """A hashable form of ``value`` that also carries its type, so ``5`` never matches ``5.0``.

    Floats are kept as their exact bits (``float.hex``): ``-0.0`` and ``0.0`` differ too.
    """
    if isinstance(value, tuple | list):
        return (type(value).__name__, tuple(typed(v) for v in value))
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, bool | int | str | torch.dtype | torch.device) or value is None:
        return (type(value).__name__, value)
    return (type(value).__qualname__, repr(value))


def environment_key(recorder: Recorder, device: torch.device) -> Hashable:
    """The process-wide settings that change which kernels run: part of every recording's key.

    Current stream, float32 matmul precision (TF32), reduced-precision reductions, the
    preferred BLAS backend and deterministic algorithms (spec §2).
    """
    matmul = torch.backends.cuda.matmul
    return (
        recorder.stream_key(device),
        torch.get_float32_matmul_precision(),
        typed(getattr(matmul, "fp32_precision", None)),
        typed(matmul.allow_tf32),
        typed(matmul.allow_fp16_reduced_precision_reduction),
        typed(matmul.allow_bf16_reduced_precision_reduction),
        str(torch.backends.cuda.preferred_blas_library()),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )


def _autocast_active(device: torch.device) -> bool:
    return torch.is_autocast_enabled(device.type)


def context_fallback(recorder: Recorder, device: torch.device) -> str | None:
    """Why the surrounding context forbids recording on ``device``, or None when it allows it."""
    if not recorder.supports(device):
        return f"device:{device.type}"
    if torch.compiler.is_compiling():
        return "compile"
    if recorder.capturing(device):
        return "capture"
    if _autocast_active(device):
        return "autocast"
    return None


def tensor_fallback(t: Tensor, device: torch.device) -> str | None:
    """Why one input tensor must run eagerly, or None when it can be replayed."""
    if t.device != device:
        return "mixed-devices"
    if t.requires_grad:
        return "requires-grad"
    if not t.is_contiguous():
        return "non-contiguous"
    if t.storage_offset() != 0:
        return "storage-offset"
    return None


@dataclass
class ReplayStats:
    """Counters for tests and benchmarks: recordings, replays, eager fallbacks by reason."""

    recordings: int = 0
    replays: int = 0
    failures: int = 0
    fallbacks: Counter[str] = field(default_factory=Counter)

    def count_failure(self, exc: BaseException) -> None:
        """A failed recording whose call then ran eagerly: a failure, and a fallback named
        after the exception's type."""
        self.failures += 1
        self.fallbacks[f"record-failed:{type(exc).__name__}"] += 1


class RecordingCache(Generic[E]):
    """Published recordings by key, bounded; keys whose recording failed are never retried."""

    def __init__(self, bound: Callable[[], int]) -> None:
        self._bound = bound
        self._entries: dict[Hashable, E] = {}
        self._refused: set[Hashable] = set()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> E | None:
        return self._entries.get(key)

    def admits(self, key: Hashable) -> str | None:
        """Why a new recording for ``key`` may not be made, or None when it may."""
        if key in self._refused:
            return "not-recordable"
        if len(self._entries) >= self._bound():
            return "bound"
        return None

    def publish(self, key: Hashable, entry: E) -> None:
        self._entries[key] = entry

    def refuse(self, key: Hashable) -> None:
        self._refused.add(key)

    def clear(self) -> None:
        self._entries.clear()
        self._refused.clear()

    def refuse_failed(
        self, key: Hashable, exc: BaseException, stats: ReplayStats, what: str, after: str
    ) -> None:
        """``key``'s recording failed with ``exc``: never retried, counted in ``stats``, and
        the first failure warned of once, as "``what`` failed (the error); ``after``"."""
        self.refuse(key)
        stats.count_failure(exc)
        if stats.failures == 1:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            warnings.warn(
                f"{what} failed ({type(exc).__name__}: {message}); {after}",
                RuntimeWarning,
                stacklevel=4,
            )


@dataclass
class _OrthEntry:
    """A recorded Newton-Schulz call: its static input and the recording."""

    static: Tensor
    recording: Recording


class ReplayState:
    """Everything one optimizer owns for replay: the recorder, both caches, stats, the warning."""

    def __init__(
        self,
        recorder: Recorder,
        *,
        orth_bound: Callable[[], int],
        update_bound: Callable[[], int],
    ) -> None:
        self.recorder = recorder
        self.stats = ReplayStats()
        self.orth_cache: RecordingCache[_OrthEntry] = RecordingCache(orth_bound)
        self.update_cache: RecordingCache[object] = RecordingCache(update_bound)
        # Recordings of a whole step's group preparations together (``musgd._update_replay``):
        # each holds every replayed group's inputs and outputs, so only a few are kept.
        self.step_cache: RecordingCache[object] = RecordingCache(lambda: STEP_RECORDINGS)
        self._warned = False
        self._memo: dict[Hashable, object] | None = None
        self._last_ns: tuple[NSSettings, Hashable] | None = None
        # Keys recorded before in this process (insertion-ordered, bounded): a recording made
        # anew after a drop (:meth:`clear`) captures without a warm-up pass (:meth:`record`).
        self._warmed: dict[Hashable, None] = {}

    @contextlib.contextmanager
    def step_scope(self) -> Iterator[None]:
        """Read the context once per device for the span of one optimizer step.

        While ``step()`` runs no code outside the optimizer does, so autocast, an enclosing
        capture, the current stream and the matmul settings cannot change between its groups
        and buckets: the context fallback and the environment key are computed once per device
        instead of once per Newton-Schulz call (about 16 us of host time each on an H200 host).
        """
        outer, self._memo = self._memo, {}
        try:
            yield
        finally:
            self._memo = outer

    def _memoized(self, key: Hashable, compute: Callable[[], T]) -> T:
        memo = self._memo
        if memo is None:
            return compute()
        if key not in memo:
            memo[key] = compute()
        return cast(T, memo[key])

    def context_fallback(self, device: torch.device) -> str | None:
        """:func:`context_fallback` for this state's recorder (memoized within a step)."""
        return self._memoized(("context", device), lambda: context_fallback(self.recorder, device))

    def environment_key(self, device: torch.device) -> Hashable:
        """:func:`environment_key` for this state's recorder (memoized within a step)."""
        return self._memoized(
            ("environment", device), lambda: environment_key(self.recorder, device)
        )

    def ns_key(self, ns: NSSettings) -> Hashable:
        """The typed key of Newton-Schulz settings; a step's calls share one settings object."""
        last = self._last_ns
        if last is not None and last[0] is ns:
            return last[1]
        key = (
            typed(ns.steps),
            typed(ns.coefficients),
            typed(ns.eps),
            ns.dtype,
            ns.backend,
            ns.normalize,
        )
        self._last_ns = (ns, key)
        return key

    def clear(self) -> None:
        """Drop every recording and every not-recordable mark (``load_state_dict`` calls this)."""
        self.orth_cache.clear()
        self.update_cache.clear()
        self.step_cache.clear()

    def warmed(self, key: Hashable) -> bool:
        """Whether ``key`` was recorded before in this process (with its warm-up)."""
        return key in self._warmed

    def record(
        self,
        key: Hashable,
        fn: Callable[[], Sequence[Tensor]],
        device: torch.device,
        *,
        before_warm_up: Callable[[], None] | None = None,
    ) -> Recording:
        """``fn`` recorded for ``key``: with the warm-up pass the first time, and without it
        where ``key`` was recorded before, its recordings since dropped (:meth:`clear`).

        A warm-up exists to create lazily made library state (cuBLAS workspaces of the capture
        streams, compiled kernels, the Triton tables) before a capture, which cannot; once a
        key was recorded, that state exists, and a warm-up pass would only allocate the step's
        scratch a second time, in the caching allocator, beside everything already held: the
        drop that the network's capture causes (``GraphPool``) came at the top of a training
        run's reserved memory (WP-025). Where a capture without warm-up fails (that state gone
        after all), it is made once more with the warm-up. ``before_warm_up`` runs just before
        a warm-up pass, where one runs (a caller snapshots what the pass moves); a capture
        without warm-up runs nothing, so it moves no tensor's value.
        """
        if key in self._warmed:
            try:
                return self.recorder.record(fn, device, warm_up=False)
            except Exception:  # anything: the warm path below decides, and reports
                self.stats.fallbacks["cold-capture-failed"] += 1
        if before_warm_up is not None:
            before_warm_up()
        recording = self.recorder.record(fn, device)
        self._warmed[key] = None
        if len(self._warmed) > WARMED_KEYS:
            del self._warmed[next(iter(self._warmed))]
        return recording

    def fallback(self, reason: str) -> None:
        self.stats.fallbacks[reason] += 1

    def failed(self, what: str, exc: BaseException) -> None:
        """Count a failed recording; warn about the first one only."""
        self.stats.failures += 1
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"MuSGD could not record {what} for replay ({type(exc).__name__}: {exc}); that "
                "work runs eagerly from now on, with identical results. Further failures are "
                "not reported.",
                RuntimeWarning,
                stacklevel=2,
            )


class ReplayOrthogonalizer(Orthogonalizer):
    """The ``Orthogonalizer`` that replays recorded Newton-Schulz calls.

    Used for param groups with ``capture_orthogonalization``.

    Each call's matrix is copied into the recording's static input and the result is copied out
    into a fresh tensor, so two calls never alias. A key's first call runs the eager function
    (whose errors, such as an invalid step count, surface unchanged) and then records it.
    """

    def __init__(self, state: ReplayState) -> None:
        self._state = state
        self._eager = EagerOrthogonalizer()

    run_buckets = staticmethod(run_in_order)

    def single(self, G: Tensor, ns: NSSettings) -> Tensor:
        return self._run("single", G, ns)

    def batched(self, G: Tensor, ns: NSSettings) -> Tensor:
        return self._run("batched", G, ns)

    def stacked(self, members: Sequence[Tensor], bucket: Bucket, ns: NSSettings) -> Tensor:
        """``scale * NS(stack)``, with two copies fewer once the stack's recording exists.

        The bucket's tensors are stacked straight into the recording's static input, and the
        result is scaled on its way out into fresh storage: the same copy in, the same recorded
        kernels and the same multiply as stacking, copying in, replaying, copying out and
        scaling in place, so the same bits with two fewer launches per bucket. Anything else (no
        recording yet, a fallback, members of differing shapes or layouts) takes the default.
        """
        entry = self._stack_entry(members, bucket, ns)
        if entry is None:
            return super().stacked(members, bucket, ns)
        first = members[0]
        target = entry.static.view(len(members), *first.shape)
        if len(members) == 1:
            target[0].copy_(first)
        else:
            torch.stack(list(members), out=target)
        entry.recording.replay()
        self._state.stats.replays += 1
        return torch.mul(entry.recording.outputs[0], bucket.scale)

    def _stack_entry(
        self, members: Sequence[Tensor], bucket: Bucket, ns: NSSettings
    ) -> _OrthEntry | None:
        """The recording the stack of ``members`` would replay, when it can be filled directly.

        Only for contiguous members of one shape, dtype and device that need no fallback: then
        the stack the default path would build is contiguous with this key, whatever the count.
        """
        first = members[0]
        device, shape, dtype = first.device, first.shape, first.dtype
        if bucket.padded or self._state.context_fallback(device) is not None:
            return None
        for m in members:
            if (
                m.shape != shape
                or m.dtype != dtype
                or m.device != device
                or m.requires_grad
                or not m.is_contiguous()
            ):
                return None
        rows, cols = bucket.rows, bucket.cols
        stride = (rows * cols, cols, 1)
        key = self._key("batched", (len(members), rows, cols), stride, dtype, device, ns)
        return self._state.orth_cache.get(key)

    def _key(
        self,
        kind: str,
        shape: tuple[int, ...],
        stride: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
        ns: NSSettings,
    ) -> Hashable:
        """A recording's key (spec §2): the call, its input's layout, the settings, the context."""
        state = self._state
        return (
            kind,
            shape,
            stride,
            dtype,
            device,
            state.ns_key(ns),
            state.environment_key(device),
        )

    def _call_eager(self, kind: str, G: Tensor, ns: NSSettings) -> Tensor:
        return self._eager.single(G, ns) if kind == "single" else self._eager.batched(G, ns)

    def table(self, key: Hashable, src: Tensor, run: Callable[[Tensor], Tensor]) -> Tensor:
        """A group's Triton table, replayed like a batched call (same rules, same cache)."""
        state = self._state
        device = src.device
        reason = state.context_fallback(device) or tensor_fallback(src, device)
        if reason is not None:
            state.fallback(reason)
            return run(src)
        full = ("table", key, tuple(src.shape), src.dtype, device, state.environment_key(device))
        return self._replayed(full, src, run, f"a Triton table of {src.numel()} elements")

    def _run(self, kind: str, G: Tensor, ns: NSSettings) -> Tensor:
        state = self._state
        device = G.device
        reason = state.context_fallback(device) or tensor_fallback(G, device)
        if reason is not None:
            state.fallback(reason)
            return self._call_eager(kind, G, ns)
        key = self._key(kind, tuple(G.shape), G.stride(), G.dtype, device, ns)
        return self._replayed(
            key,
            G,
            lambda X: self._call_eager(kind, X, ns),
            f"the {kind} orthogonalization of a {tuple(G.shape)} matrix",
        )

    def _replayed(
        self, key: Hashable, G: Tensor, fn: Callable[[Tensor], Tensor], what: str
    ) -> Tensor:
        """``fn(G)`` from the recording of ``key``; a new key runs eagerly, then records."""
        state = self._state
        device = G.device
        entry = state.orth_cache.get(key)
        if entry is not None:
            entry.static.copy_(G)
            entry.recording.replay()
            state.stats.replays += 1
            return entry.recording.outputs[0].clone()
        result = fn(G)
        refusal = state.orth_cache.admits(key)
        if refusal is not None:
            state.fallback(refusal)
            return result
        static = torch.empty_like(G)
        static.copy_(G)
        try:
            recording = state.record(key, lambda: (fn(static),), device)
        except Exception as exc:  # any failure: nothing published, this key stays eager
            state.orth_cache.refuse(key)
            state.failed(what, exc)
            return result
        state.orth_cache.publish(key, _OrthEntry(static, recording))
        state.stats.recordings += 1
        return result


def is_float32(tensors: Sequence[Tensor]) -> bool:
    """True when every tensor is float32 (assumption A1 holds for device-tensor scalars)."""
    return all(t.dtype == torch.float32 for t in tensors)


def same_float(a: float | None, b: float) -> bool:
    """Exact float equality that also tells ``-0.0`` from ``0.0``."""
    return a is not None and a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
