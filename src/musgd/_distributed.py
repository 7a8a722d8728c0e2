"""MuSGD across ranks: the Newton-Schulz work is shared out, the results exchanged.

Two setups are supported, both on PyTorch's own ``torch.distributed``:

* **DDP** (plain tensors, ``MuSGD(..., process_group=pg)``): every rank holds the same averaged
  gradients, so each rank orthogonalizes only the work items a deterministic plan gives it, and
  one asynchronous ``all_gather`` per *stage* (a run of buckets, see ``plan_stages``) hands every
  result to every rank while the rank already orthogonalizes the next stage.
  Matrices travel in ``ns_dtype`` when it is narrower than the parameters' (lossless, see
  ``wire_dtype``).
* **FSDP2** (``fully_shard``; DTensor parameters on a 1-D mesh, placement ``Shard(0)``): each
  matrix's Nesterov input is gathered row-wise onto its owner rank with one ``all_to_all`` per
  stage, the owner orthogonalizes the *full* matrix (never a shard), and a second ``all_to_all``
  per stage sends every rank its rows of the result; every collective is asynchronous, so later
  stages' gathers and earlier stages' returns run under a stage's Newton-Schulz. Vector
  parameters never leave their rank.

At world size 1 both run the single-process body itself (no plan, no collective): the same
calls, so the same cost, as ``process_group=None``.

Asynchronous collectives (``async_op=True``): with NCCL the collective runs on the process
group's own CUDA stream, which waits for the compute stream at launch, and ``Work.wait()`` makes
the compute stream wait for it, so communication overlaps the next stage's kernels; with gloo it
runs on gloo's thread while the caller computes.

The arithmetic is the functional body's (``_functional.prepare_updates_foreach``), operation for
operation, on local tensors: ``m <- mu*m + g``, ``n <- g + mu*m``, ``U <- w_sgd*n +
w_muon*scale*NS(n) + wd*W``, ``W <- W - lr*U``. Newton-Schulz goes through whatever
``Orthogonalizer`` the optimizer holds (eager or replayed), so each rank replays its own share.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import Tensor

from musgd._device import lpt_assign
from musgd._functional import (
    Bucket,
    Hyper,
    Layout,
    Orthogonalizer,
    PrepareFn,
    StepRecord,
    Structure,
    add_decay_foreach,
    add_orthogonalized,
    apply_updates,
    momentum_foreach,
    sgd_terms_foreach,
    stack_bucket,
)

SUPPORTED_SETUPS = (
    "DDP (plain tensors, MuSGD(..., process_group=<group>)) and FSDP2 fully_shard on a 1-D "
    "device mesh (DTensor parameters with placements (Shard(0),))"
)
# Plans are cheap to rebuild; the cache only saves the cross-rank agreement check per layout.
_PLAN_CACHE_SIZE = 64


# A stage's all_gather (DDP) or all_to_all pair (FSDP2) closes once it carries this many bytes:
# big buckets get a collective each, small ones share one, so the nano set's 34 buckets do not
# cost 34 collective latencies.
STAGE_BYTES = 1 << 20
BALANCES = ("flops", "measured")


@dataclass(frozen=True)
class WorkItem:
    """A slice ``[start, stop)`` of one bucket's matrices, orthogonalized by rank ``owner``.

    ``flops`` is its Newton-Schulz work (one iteration); ``cost`` what the plan balanced: the
    FLOPs, or the measured seconds of the batched call (``plan_buckets(costs=...)``).
    """

    bucket: int
    start: int
    stop: int
    flops: int
    owner: int
    cost: float = 0.0


@dataclass(frozen=True)
class ShardPlan:
    """Which rank orthogonalizes which slice of which bucket; identical on every rank."""

    world_size: int
    items: tuple[WorkItem, ...]

    def owned(self, rank: int) -> tuple[WorkItem, ...]:
        """The items ``rank`` orthogonalizes, in plan order."""
        return tuple(item for item in self.items if item.owner == rank)

    @property
    def loads(self) -> tuple[int, ...]:
        """Newton-Schulz FLOPs per rank (one iteration)."""
        totals = [0] * self.world_size
        for item in self.items:
            totals[item.owner] += item.flops
        return tuple(totals)

    @property
    def cost_loads(self) -> tuple[float, ...]:
        """The balanced cost per rank (FLOPs, or measured seconds)."""
        totals = [0.0] * self.world_size
        for item in self.items:
            totals[item.owner] += item.cost
        return tuple(totals)


@dataclass(frozen=True)
class CallCost:
    """Seconds of one batched Newton-Schulz call on ``k`` matrices of a bucket: ``fixed + k·per``.

    ``fixed`` is what a call costs whatever its size (launches, host work); splitting a bucket
    over more ranks pays it once more per slice, which is why small buckets stay whole.
    """

    fixed: float
    per_matrix: float

    def __call__(self, count: int) -> float:
        return self.fixed + count * self.per_matrix


def ns_iteration_flops(rows: int, cols: int) -> int:
    """FLOPs of one quintic iteration on one matrix: ``2s²(2l + s)``, ``s = min``, ``l = max``.

    ``A = X·Xᵀ`` costs ``2s²l``, ``A·A`` costs ``2s³`` and ``B·X`` costs ``2s²l`` (multiply-adds
    counted as two FLOPs; the element-wise terms are negligible).
    """
    s, big = min(rows, cols), max(rows, cols)
    return 2 * s * s * (2 * big + s)


def _split(count: int, parts: int) -> list[tuple[int, int]]:
    """``[start, stop)`` ranges of ``count`` items in ``parts`` near-equal contiguous slices."""
    base, extra = divmod(count, parts)
    ranges: list[tuple[int, int]] = []
    start = 0
    for k in range(parts):
        stop = start + base + (1 if k < extra else 0)
        ranges.append((start, stop))
        start = stop
    return ranges


def plan_buckets(
    buckets: Sequence[Bucket], world_size: int, costs: Sequence[CallCost] | None = None
) -> ShardPlan:
    """Assign bucket slices to ranks, balanced by Newton-Schulz FLOPs or by measured cost.

    A bucket of ``B`` equal-shape matrices costing ``F`` of the total ``T`` is cut into
    ``min(B, world_size, ceil(F / (T / world_size**2)))`` contiguous slices: big buckets (twelve
    attention matrices over eight ranks) spread over every rank, while small ones stay whole,
    since for small matrices each extra batched call costs launch latency, not arithmetic
    (with measured costs ``F`` counts only the per-matrix seconds: each slice pays the call's
    fixed cost again).
    Slices are assigned largest first to the least-loaded rank (ties: lower bucket, then lower
    rank). The cost is the FLOPs, or with ``costs`` (one :class:`CallCost` per bucket, the same
    on every rank) the seconds ``costs[b](slice size)``, which also charges each extra slice its
    call's fixed cost. The plan depends only on the bucket shapes and sizes (and ``costs``), so
    every rank computes the same one. With ``world_size == 1`` every bucket stays whole: exactly
    the single-process batched calls.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if costs is not None and len(costs) != len(buckets):
        raise ValueError(
            f"plan_buckets got {len(costs)} call costs for {len(buckets)} buckets; pass one "
            "CallCost per bucket (measure_costs) or costs=None to balance by FLOPs"
        )
    per_matrix = [ns_iteration_flops(b.rows, b.cols) for b in buckets]

    def cost(b: int, count: int) -> float:
        return float(per_matrix[b] * count) if costs is None else costs[b](count)

    def parts_of(b: int, count: int, total: float) -> int:
        if costs is None:  # integer arithmetic: FLOP plans do not depend on float rounding
            units = max(1, int(total) // (world_size * world_size))
            return min(count, world_size, -(-(per_matrix[b] * count) // units))
        # Only the per-matrix part shrinks when a bucket is split; the fixed part is paid again.
        grain = total / (world_size * world_size)
        divisible = costs[b].per_matrix * count
        return max(1, min(count, world_size, math.ceil(divisible / grain) if grain > 0 else 1))

    total = sum(cost(b, len(bucket.indices)) for b, bucket in enumerate(buckets))
    slices: list[tuple[int, int, int, float]] = []  # (bucket, start, stop, cost)
    for b, bucket in enumerate(buckets):
        count = len(bucket.indices)
        parts = parts_of(b, count, total)
        for start, stop in _split(count, parts):
            slices.append((b, start, stop, cost(b, stop - start)))
    # Slices are listed in (bucket, start) order, so the planner's ties fall as the plan's.
    owners = lpt_assign([weight for _, _, _, weight in slices], world_size)
    items = tuple(
        WorkItem(b, start, stop, per_matrix[b] * (stop - start), owner, weight)
        for (b, start, stop, weight), owner in zip(slices, owners, strict=True)
    )
    return ShardPlan(world_size, items)


@dataclass(frozen=True)
class Stage:
    """Plan items (indices into ``ShardPlan.items``) of one dtype exchanged by one collective."""

    dtype: torch.dtype
    keys: tuple[int, ...]


def plan_stages(
    plan: ShardPlan, layout: Layout, dtypes: Sequence[torch.dtype], wire_bytes: Sequence[int]
) -> tuple[Stage, ...]:
    """Cut the plan, in order, into stages of whole buckets of one dtype.

    ``dtypes[b]`` is bucket ``b``'s parameter dtype and ``wire_bytes[b]`` the bytes one of its
    elements travels in. A stage closes after the bucket that brings it to :data:`STAGE_BYTES`
    (counting every rank's share), or before a bucket of another dtype; the smallest stage is
    then moved last, since its exchange is the one nothing overlaps. Each stage is one
    collective (DDP) or one pair (FSDP2); while it is in flight the next stage is computed.
    """
    stages: list[Stage] = []
    sizes: list[int] = []
    keys: list[int] = []
    size = 0
    dtype: torch.dtype | None = None

    def close() -> None:
        nonlocal keys, size
        if keys and dtype is not None:
            stages.append(Stage(dtype, tuple(keys)))
            sizes.append(size)
        keys, size = [], 0

    for k, item in enumerate(plan.items):
        b = layout.buckets[item.bucket]
        if dtype is not None and dtypes[item.bucket] != dtype:
            close()
        dtype = dtypes[item.bucket]
        keys.append(k)
        size += (item.stop - item.start) * b.rows * b.cols * wire_bytes[item.bucket]
        last_of_bucket = k + 1 == len(plan.items) or plan.items[k + 1].bucket != item.bucket
        if last_of_bucket and size >= STAGE_BYTES:
            close()
    close()
    if stages:
        # Nothing runs under the last stage's exchange: make it the smallest one (first of
        # equals), keeping the others in plan order.
        last = min(range(len(stages)), key=lambda j: (sizes[j], j))
        stages.append(stages.pop(last))
    return tuple(stages)


def measure_costs(
    buckets: Sequence[Bucket],
    dtypes: Sequence[torch.dtype],
    device: torch.device,
    world_size: int,
    *,
    call: Callable[[Tensor], object],
    repeats: int = 3,
) -> tuple[CallCost, ...]:
    """This rank's :class:`CallCost` per bucket, from timing ``call`` on random stacks.

    Each bucket is timed at the sizes a plan would give it: the whole bucket and one
    ``world_size``-th of it (fastest of ``repeats`` after one warm-up call, the device
    synchronized around each), and ``fixed``/``per_matrix`` are the line through the two points
    (clamped at zero). Callers agree on the result across ranks (``ShardedStep`` takes the
    maximum), since timings differ by rank and the plan must not.
    """
    # Drawn on the device with its own generator: no host-side draw of a large bucket, and the
    # global random state the training uses is left alone.
    gen = torch.Generator(device=device).manual_seed(0)
    out: list[CallCost] = []
    for bucket, dtype in zip(buckets, dtypes, strict=True):
        count = len(bucket.indices)
        sizes = sorted({count, max(1, -(-count // world_size))})
        seconds: list[float] = []
        for k in sizes:
            G = torch.randn(k, bucket.rows, bucket.cols, generator=gen, device=device, dtype=dtype)
            times = []
            for r in range(repeats + 1):
                _synchronize(device)
                start = time.perf_counter()
                call(G)
                _synchronize(device)
                if r:
                    times.append(time.perf_counter() - start)
            seconds.append(min(times))
        if len(sizes) == 1:
            out.append(CallCost(0.0, seconds[0] / sizes[0]))
            continue
        per = max(0.0, (seconds[1] - seconds[0]) / (sizes[1] - sizes[0]))
        out.append(CallCost(max(0.0, seconds[0] - per * sizes[0]), per))
    return tuple(out)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _dtensor_type() -> type[Any] | None:
    """The DTensor class, or None where this torch build has no distributed support."""
    if not dist.is_available():
        return None
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - every supported torch ships it
        return None
    return DTensor


def is_sharded(tensors: Sequence[Tensor]) -> bool:
    """True when any tensor is a DTensor (an FSDP2-sharded parameter)."""
    dtensor = _dtensor_type()
    # The few distinct types, not every tensor: this runs on every step of every group.
    return dtensor is not None and any(issubclass(k, dtensor) for k in set(map(type, tensors)))


def check_process_group(process_group: Any) -> None:
    """Raise a clear error unless ``process_group`` is None or usable now."""
    if process_group is None:
        return
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "MuSGD(process_group=...) needs torch.distributed initialized first: call "
            "torch.distributed.init_process_group(...) before building the optimizer, or "
            "leave process_group=None for single-process training"
        )
    if not isinstance(process_group, dist.ProcessGroup):
        raise TypeError(
            "process_group must be a torch.distributed.ProcessGroup (for example "
            f"torch.distributed.group.WORLD), got {type(process_group).__name__}"
        )


def _chunk_rows(rows: int, world: int) -> tuple[int, ...]:
    """FSDP2's dim-0 split (``torch.chunk`` semantics): ceil-sized chunks, trailing ones empty."""
    size = -(-rows // world)
    return tuple(max(0, min(size, rows - r * size)) for r in range(world))


class ShardedStep:
    """The distributed group step: plan, local Newton-Schulz share, exchange, update, write.

    ``process_group`` is the DDP group (None: only FSDP2 DTensor parameters are handled, over
    their own mesh's group). ``balance`` is ``"flops"`` (the plan balances Newton-Schulz FLOPs)
    or ``"measured"`` (the first step of a layout times each bucket's batched call on every
    rank, through the optimizer's own orthogonalizer, and balances the slowest rank's seconds).
    Plans are cached per bucket layout; a layout seen for the first time is checked to be the
    same on every rank, since a mismatch would deadlock the collectives.
    """

    def __init__(self, process_group: dist.ProcessGroup | None, balance: str = "flops") -> None:
        check_process_group(process_group)
        if balance not in BALANCES:
            raise ValueError(
                f"shard_balance must be one of {BALANCES}, got {balance!r}: 'flops' balances "
                "Newton-Schulz FLOPs, 'measured' times each bucket's call on the first step"
            )
        self._group = process_group
        self._balance = balance
        self._plans: dict[Hashable, ShardPlan] = {}

    def applies(self, params: Sequence[Tensor]) -> bool:
        """Whether this step (rather than the single-process body) handles these parameters."""
        return self._group is not None or is_sharded(params)

    def step(self, step: StepRecord, *, lr: float, body: PrepareFn) -> None:
        """Steps 1-5 of one param group of the default flavour (its layout built from the
        global shapes; its Newton-Schulz through ``step.orth``).

        ``body`` is the optimizer's single-process body; at world size 1 it runs on the local
        tensors (which then are the whole tensors), exactly as without a process group.
        """
        layout, structure, orth = step.layout, step.structure, step.orth
        hyper = step.hyper
        assert isinstance(hyper, Hyper)  # the default flavour's record
        group, sharded = self._resolve(step.params, step.grads, step.bufs)
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        P = [_local(t) for t in step.params]
        G = [_local(t) for t in step.grads]
        M = [_local(t) for t in step.bufs]
        if world == 1:
            apply_updates(P, body(dataclasses.replace(step, params=P, grads=G, bufs=M)), lr)
            return
        # Every rank joins a new layout's agreement check, even one without matrices this step.
        plan = self._plan(layout, P, group, world, structure, orth) if structure.muon else None
        if not (layout.matrices and plan is not None and plan.items):
            # The foreach body's own pieces, in its order, give the same bits.
            _finish_local(P, momentum_foreach(M, G, hyper, structure), layout, hyper, structure, lr)
            return
        comm = _Comm(group, rank)
        dtypes = [P[b.indices[0]].dtype for b in layout.buckets]
        if not sharded:
            n = _momentum_ddp(M, G, layout, plan, rank, hyper, structure)
            stages = plan_stages(plan, layout, dtypes, [d.itemsize for d in dtypes])
            _step_ddp(P, n, stages, layout, plan, comm, hyper, structure, orth, lr)
            return
        n = momentum_foreach(M, G, hyper, structure)
        wire = [wire_dtype(d, structure.ns.dtype).itemsize for d in dtypes]
        stages = plan_stages(plan, layout, dtypes, wire)
        updates = sgd_terms_foreach(n, layout, hyper)
        results = _orthogonalize_fsdp(n, stages, layout, plan, comm, structure=structure, orth=orth)
        for item, orthed in zip(plan.items, results, strict=True):
            bucket = layout.buckets[item.bucket]
            indices = bucket.indices[item.start : item.stop]
            add_orthogonalized(updates, indices, orthed.mul_(bucket.scale), hyper)
        if structure.decay:
            add_decay_foreach(updates, P, layout, hyper)
        apply_updates(P, updates, lr)

    def _resolve(
        self, params: Sequence[Tensor], grads: Sequence[Tensor], bufs: Sequence[Tensor]
    ) -> tuple[dist.ProcessGroup, bool]:
        """The group to talk over and whether the parameters are FSDP2 shards; else raise."""
        dtensor = _dtensor_type()
        kinds = {dtensor is not None and isinstance(p, dtensor) for p in params}
        if kinds == {False}:
            if self._group is None:  # pragma: no cover - applies() routes these elsewhere
                raise RuntimeError("MuSGD: no process group for plain-tensor parameters")
            return self._group, False
        if len(kinds) > 1:
            raise RuntimeError(
                "MuSGD: a param group mixes DTensor and plain-tensor parameters; shard the whole "
                f"model the same way. Supported: {SUPPORTED_SETUPS}"
            )
        from torch.distributed.tensor import Shard

        mesh = params[0].device_mesh  # type: ignore[attr-defined]
        for j, (p, g, m) in enumerate(zip(params, grads, bufs, strict=True)):
            placements = tuple(p.placements)  # type: ignore[attr-defined]
            if p.device_mesh.ndim != 1 or placements != (Shard(0),):  # type: ignore[attr-defined]
                raise RuntimeError(
                    f"MuSGD: parameter {j} of a param group is a DTensor on a "
                    f"{p.device_mesh.ndim}-D mesh with placements {placements}; tensor parallel, "  # type: ignore[attr-defined]
                    f"HSDP and other layouts are not supported. Supported: {SUPPORTED_SETUPS}"
                )
            if p.device_mesh != mesh:  # type: ignore[attr-defined]
                raise RuntimeError(
                    "MuSGD: the parameters of a param group live on different device meshes; "
                    f"shard them with one mesh. Supported: {SUPPORTED_SETUPS}"
                )
            for name, t in (("gradient", g), ("momentum buffer", m)):
                if not isinstance(t, type(p)) or tuple(t.placements) != placements:  # type: ignore[attr-defined]
                    raise RuntimeError(
                        f"MuSGD: the {name} of DTensor parameter {j} is not sharded like the "
                        "parameter (Shard(0) on the same mesh); load optimizer state with "
                        "torch.distributed.checkpoint.state_dict.set_state_dict so buffers "
                        "keep their sharding"
                    )
        group = mesh.get_group()
        if self._group is not None and self._group != group:
            raise RuntimeError(
                "MuSGD: process_group differs from the FSDP2 device mesh's group; pass "
                "process_group=None (the mesh's group is used) or the mesh's own group"
            )
        return group, True

    def _plan(
        self,
        layout: Layout,
        P: Sequence[Tensor],
        group: dist.ProcessGroup,
        world: int,
        structure: Structure,
        orth: Orthogonalizer,
    ) -> ShardPlan:
        """The cached plan for this layout, checked once to agree across ranks."""
        dtypes = [P[b.indices[0]].dtype for b in layout.buckets]
        key = (
            world,
            tuple(
                (b.rows, b.cols, len(b.indices), str(d))
                for b, d in zip(layout.buckets, dtypes, strict=True)
            ),
            structure.ns,
        )
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        seen: list[object] = [None] * world
        dist.all_gather_object(seen, key, group=group)
        if any(other != key for other in seen):
            raise RuntimeError(
                "MuSGD: ranks disagree on the matrices to orthogonalize this step (different "
                "parameters have gradients, or different shapes/dtypes); every rank must step "
                "the same parameters. With DDP, avoid per-rank unused parameters or set their "
                "gradients to zero instead of None"
            )
        costs = None
        if self._balance == "measured" and layout.buckets:
            device = P[layout.buckets[0].indices[0]].device
            mine = measure_costs(
                layout.buckets, dtypes, device, world, call=lambda G: orth.batched(G, structure.ns)
            )
            costs = _slowest_costs(mine, group, device)
        if len(self._plans) >= _PLAN_CACHE_SIZE:
            self._plans.clear()
        plan = plan_buckets(layout.buckets, world, costs)
        self._plans[key] = plan
        return plan

    def shares_ddp(self) -> bool:
        """Whether a DDP process group of two or more ranks shares the work."""
        return self._group is not None and dist.get_world_size(self._group) > 1

    def ddp_plan(
        self, layout: Layout, params: Sequence[Tensor], structure: Structure, orth: Orthogonalizer
    ) -> tuple[ShardPlan, _Comm] | None:
        """The DDP plan of ``layout``'s buckets and who this rank is, or None at world size 1
        (or without a process group): for optimizers that exchange orthogonalized results
        rather than parameters (:class:`musgd.ultralytics.UltralyticsMuSGD`). Every rank must
        call it for every layout (a new layout is checked to agree across ranks)."""
        group = self._group
        if group is None or not self.shares_ddp():
            return None
        plan = self._plan(layout, params, group, dist.get_world_size(group), structure, orth)
        return plan, _Comm(group, dist.get_rank(group))

    def plans(self) -> tuple[ShardPlan, ...]:
        """The plans in use (one per layout seen), for benchmarks and tests."""
        return tuple(self._plans.values())


def _slowest_costs(
    costs: Sequence[CallCost], group: dist.ProcessGroup, device: torch.device
) -> tuple[CallCost, ...]:
    """Every rank's costs replaced by the element-wise maximum over ranks (one all_reduce)."""
    flat = torch.tensor(
        [v for c in costs for v in (c.fixed, c.per_matrix)], dtype=torch.float64, device=device
    )
    dist.all_reduce(flat, op=dist.ReduceOp.MAX, group=group)
    values = flat.tolist()
    return tuple(CallCost(values[2 * b], values[2 * b + 1]) for b in range(len(costs)))


@dataclass(frozen=True)
class _Comm:
    """The group to talk over and this rank's index in it."""

    group: dist.ProcessGroup
    rank: int


def exchange_results(
    results: list[Tensor | None],
    params: Sequence[Tensor],
    layout: Layout,
    plan: ShardPlan,
    comm: _Comm,
    compute: Callable[[WorkItem], None],
) -> None:
    """Fill the entries of ``results`` (one per parameter, by layout index) that the plan's
    items name, on every rank: this rank runs ``compute(item)`` for the items it owns (each
    writes its matrices' entries, shaped like their parameters), then one ``all_gather`` hands
    every owner's entries to all ranks exactly (sent in the widest dtype of the buckets, a
    lossless round trip)."""
    rank, world = comm.rank, plan.world_size
    for item in plan.owned(rank):
        compute(item)
    firsts = [params[b.indices[0]] for b in layout.buckets]
    wire = functools.reduce(torch.promote_types, (t.dtype for t in firsts))
    sizes = [0] * world
    for item in plan.items:
        sizes[item.owner] += sum(params[i].numel() for i in _item_matrices(layout, item))
    mine = [
        cast(Tensor, results[i]).reshape(-1).to(wire)
        for item in plan.owned(rank)
        for i in _item_matrices(layout, item)
    ]
    received, width, work, _send = _gather_padded(mine, sizes, comm, wire, firsts[0].device)
    work.wait()
    offsets = [r * width for r in range(world)]
    for item in plan.items:
        for i in _item_matrices(layout, item):
            size = params[i].numel()
            start = offsets[item.owner]
            offsets[item.owner] += size
            if item.owner != rank:
                results[i] = (
                    received[start : start + size].view(params[i].shape).to(params[i].dtype)
                )


def _gather_padded(
    mine: Sequence[Tensor],
    sizes: Sequence[int],
    comm: _Comm,
    dtype: torch.dtype,
    device: torch.device,
) -> tuple[Tensor, int, dist.Work, Tensor]:
    """One asynchronous all_gather of every rank's flat ``mine`` (``sizes[r]`` elements on rank
    ``r``), each padded to the largest: the received tensor (rank ``r``'s part starts at
    ``r * width``), ``width``, the pending work and the send buffer, to keep alive until the
    work completes."""
    width = max(sizes)
    pad = torch.zeros(width - sizes[comm.rank], dtype=dtype, device=device)
    send = torch.cat([*mine, pad])
    received = torch.empty(len(sizes) * width, dtype=dtype, device=device)
    return received, width, _all_gather(received, send, comm.group), send


def _local(t: Tensor) -> Tensor:
    """The rank-local tensor of a DTensor (a view of its storage), else ``t`` itself."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def _item_matrices(layout: Layout, item: WorkItem) -> tuple[int, ...]:
    return layout.buckets[item.bucket].indices[item.start : item.stop]


def _all_gather(output: Tensor, send: Tensor, group: dist.ProcessGroup) -> dist.Work:
    """Asynchronous all_gather into one flat tensor (``all_gather_single`` where torch has it)."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    work: dist.Work | None = gather(output, send, group=group, async_op=True)
    assert work is not None  # async_op=True always returns a Work
    return work


def _finish_local(
    P: Sequence[Tensor],
    n: Sequence[Tensor],
    layout: Layout,
    hyper: Hyper,
    structure: Structure,
    lr: float,
    *,
    muon: Callable[[list[Tensor]], None] | None = None,
) -> None:
    """Steps 3-5 of the parameters ``layout`` names (indices into ``P`` and ``n``).

    ``muon`` adds the orthogonalized terms into the updates when given; the operations are the
    foreach body's, so each element gets the same bits whichever subset runs them.
    """
    updates = sgd_terms_foreach(n, layout, hyper)
    if muon is not None:
        muon(updates)
    if structure.decay:
        add_decay_foreach(updates, P, layout, hyper)
    apply_updates(P, updates, lr)


def _subset(layout: Layout, matrices: Sequence[int], vectors: Sequence[int]) -> Layout:
    """The parameters ``matrices`` and ``vectors`` of ``layout`` as a layout of their own,
    indexed in the order given (matrices first)."""
    order = [*matrices, *vectors]
    return Layout(
        matrices=tuple(range(len(matrices))),
        vectors=tuple(range(len(matrices), len(order))),
        buckets=(),
        shapes=tuple(layout.shapes[i] for i in order),
    )


def _momentum_ddp(
    M: Sequence[Tensor],
    G: Sequence[Tensor],
    layout: Layout,
    plan: ShardPlan,
    rank: int,
    hyper: Hyper,
    structure: Structure,
) -> list[Tensor]:
    """Steps 1-2 under DDP: ``m <- mu*m + g`` everywhere, ``n`` only where this rank needs it.

    Every rank updates every momentum buffer (the state stays whole and replicated), but the
    Nesterov input of a matrix is only read by its owner: the others skip it. Returns ``n`` in
    group order, holding the (unused) buffer itself for the matrices this rank does not own.
    """
    owned = {i for item in plan.owned(rank) for i in _item_matrices(layout, item)}
    others = [i for i in layout.matrices if i not in owned]
    skip = set(others)
    mine = [i for i in range(len(M)) if i not in skip]
    n = list(M)
    needed = momentum_foreach([M[i] for i in mine], [G[i] for i in mine], hyper, structure)
    for i, t in zip(mine, needed, strict=True):
        n[i] = t
    if others:
        plain = dataclasses.replace(structure, nesterov=False)
        momentum_foreach([M[i] for i in others], [G[i] for i in others], hyper, plain)
    return n


def _step_ddp(
    P: Sequence[Tensor],
    n: Sequence[Tensor],
    stages: Sequence[Stage],
    layout: Layout,
    plan: ShardPlan,
    comm: _Comm,
    hyper: Hyper,
    structure: Structure,
    orth: Orthogonalizer,
    lr: float,
) -> None:
    """DDP steps 3-5: each rank updates its own matrices and all_gathers the new parameters.

    Momentum (already done by the caller) runs on every rank, so every rank keeps the whole
    optimizer state. Per stage, the owner orthogonalizes its slices, mixes, decays and writes
    those matrices -- exactly the single-process arithmetic -- and one asynchronous all_gather
    (padded to the largest rank's share) hands the new parameters to every rank while the next
    stage computes. The element-wise work on matrices is thus shared out too, not only
    Newton-Schulz. Vectors are updated on every rank.
    """
    rank = comm.rank
    world = plan.world_size
    pending: list[tuple[Stage, Tensor, int, dist.Work, Tensor]] = []
    for stage in stages:
        owned = [plan.items[k] for k in stage.keys if plan.items[k].owner == rank]
        indices = [i for item in owned for i in _item_matrices(layout, item)]
        if indices:
            sub = _subset(layout, indices, ())

            def muon(updates: list[Tensor], owned: list[WorkItem] = owned) -> None:
                start = 0
                for item in owned:
                    b = layout.buckets[item.bucket]
                    mats = _item_matrices(layout, item)
                    orthed = orth.batched(stack_bucket([n[i] for i in mats], b), structure.ns)
                    local = tuple(range(start, start + len(mats)))
                    add_orthogonalized(updates, local, orthed.mul_(b.scale), hyper)
                    start += len(mats)

            _finish_local(
                [P[i] for i in indices],
                [n[i] for i in indices],
                sub,
                hyper,
                structure,
                lr,
                muon=muon,
            )
        sizes = [0] * world
        for k in stage.keys:
            sizes[plan.items[k].owner] += math.prod(_item_shape(layout, plan.items[k]))
        mine = [P[i].reshape(-1) for i in indices]
        pending.append((stage, *_gather_padded(mine, sizes, comm, stage.dtype, P[0].device)))
        if len(pending) > 1:
            _write_gathered(pending.pop(0), P, layout, plan, rank)
    while pending:
        _write_gathered(pending.pop(0), P, layout, plan, rank)
    if layout.vectors:
        vectors = list(layout.vectors)
        vec = _subset(layout, (), vectors)
        _finish_local([P[i] for i in vectors], [n[i] for i in vectors], vec, hyper, structure, lr)


def _write_gathered(
    entry: tuple[Stage, Tensor, int, dist.Work, Tensor],
    P: Sequence[Tensor],
    layout: Layout,
    plan: ShardPlan,
    rank: int,
) -> None:
    """Wait for one stage's all_gather and copy the other ranks' new parameters in."""
    stage, received, width, work, _ = entry
    work.wait()
    offsets = [r * width for r in range(plan.world_size)]
    for k in stage.keys:
        item = plan.items[k]
        for i in _item_matrices(layout, item):
            size = P[i].numel()
            start = offsets[item.owner]
            offsets[item.owner] += size
            if item.owner != rank:
                P[i].copy_(received[start : start + size].view(P[i].shape))


def wire_dtype(param_dtype: torch.dtype, ns_dtype: torch.dtype) -> torch.dtype:
    """The dtype matrices travel in: ``ns_dtype`` when it is narrower than the parameters'.

    Lossless: Newton-Schulz first casts its input to ``ns_dtype`` and its result is an
    ``ns_dtype`` tensor cast back, so both directions only ever carry ``ns_dtype`` values (bf16
    halves the bytes of float32 parameters and gives the same bits).
    """
    narrower = ns_dtype.itemsize < param_dtype.itemsize
    return ns_dtype if narrower else param_dtype


def _item_shape(layout: Layout, item: WorkItem) -> tuple[int, int, int]:
    b = layout.buckets[item.bucket]
    return (item.stop - item.start, b.rows, b.cols)


def _orthogonalize_fsdp(
    n: Sequence[Tensor],
    stages: Sequence[Stage],
    layout: Layout,
    plan: ShardPlan,
    comm: _Comm,
    *,
    structure: Structure,
    orth: Orthogonalizer,
) -> list[Tensor]:
    """Gather rows onto owners, orthogonalize whole matrices there, send each rank its rows.

    Per stage, one all_to_all gathers and one returns; all gathers are issued first, each
    stage's return right after its Newton-Schulz, and the returns are waited for at the end.
    Returns, per plan item, this rank's rows of O as a ``(B, local_rows, cols)`` tensor.
    """
    group, rank = comm.group, comm.rank
    world = plan.world_size
    splits = _row_splits(n, layout, plan, rank)
    device = n[0].device
    gathers = []
    for stage in stages:
        wire = wire_dtype(stage.dtype, structure.ns.dtype)
        # Gather: my rows of every matrix go to that matrix's owner, in plan order.
        send_parts: list[list[Tensor]] = [[] for _ in range(world)]
        recv_sizes = [0] * world
        for k in stage.keys:
            item = plan.items[k]
            cols = layout.buckets[item.bucket].cols
            for i in _item_matrices(layout, item):
                send_parts[item.owner].append(n[i].reshape(-1))
                if item.owner == rank:
                    for src in range(world):
                        recv_sizes[src] += splits[i][src] * cols
        gathers.append(_all_to_all(send_parts, recv_sizes, wire, device, group))
    returns = []
    for stage, gather in zip(stages, gathers, strict=True):
        wire = wire_dtype(stage.dtype, structure.ns.dtype)
        gathered = gather.wait()
        cursors = [0] * world
        back_parts: list[list[Tensor]] = [[] for _ in range(world)]
        back_sizes = [0] * world
        for k in stage.keys:
            item = plan.items[k]
            b = layout.buckets[item.bucket]
            indices = _item_matrices(layout, item)
            if item.owner == rank:
                pieces = []
                for i in indices:
                    for src in range(world):
                        size = splits[i][src] * b.cols
                        pieces.append(gathered[src][cursors[src] : cursors[src] + size])
                        cursors[src] += size
                # One copy assembles the stack in the wire dtype, and Newton-Schulz runs on it
                # as it is: it would cast a float32 copy of these values straight back to the
                # wire dtype (wire_dtype), so its result is bit for bit the same, still in the
                # wire dtype for the return.
                stack = torch.cat(pieces).view(len(indices), b.rows, b.cols)
                full = orth.batched(stack, structure.ns)
                # Scatter: each rank gets its rows of every result, in plan order.
                for j, i in enumerate(indices):
                    lo = 0
                    for dst in range(world):
                        back_parts[dst].append(full[j, lo : lo + splits[i][dst]].reshape(-1))
                        lo += splits[i][dst]
            for i in indices:
                back_sizes[item.owner] += splits[i][rank] * b.cols
        returns.append(_all_to_all(back_parts, back_sizes, wire, device, group))
    local_results: dict[int, Tensor] = {}
    for stage, back in zip(stages, returns, strict=True):
        returned = back.wait()
        cursors = [0] * world
        for k in stage.keys:
            item = plan.items[k]
            b = layout.buckets[item.bucket]
            # Every matrix of a bucket has the same rows, hence the same local row count.
            rows_here = splits[_item_matrices(layout, item)[0]][rank]
            count = item.stop - item.start
            size = count * rows_here * b.cols
            src = item.owner
            chunk = returned[src][cursors[src] : cursors[src] + size]
            cursors[src] += size
            local_results[k] = chunk.view(count, rows_here, b.cols).to(stage.dtype)
    return [local_results[k] for k in range(len(plan.items))]


def _row_splits(
    n: Sequence[Tensor], layout: Layout, plan: ShardPlan, rank: int
) -> dict[int, tuple[int, ...]]:
    """Rows of each planned matrix on every rank (fully_shard's split); else raise."""
    splits: dict[int, tuple[int, ...]] = {}
    for item in plan.items:
        b = layout.buckets[item.bucket]
        counts = _chunk_rows(b.rows, plan.world_size)
        for i in _item_matrices(layout, item):
            if n[i].shape[0] != counts[rank]:
                raise RuntimeError(
                    f"MuSGD: a sharded matrix of {b.rows} rows holds {n[i].shape[0]} rows on rank "
                    f"{rank}, not the {counts[rank]} of fully_shard's even dim-0 split; custom "
                    f"shard_placement_fn layouts are not supported. Supported: {SUPPORTED_SETUPS}"
                )
            splits[i] = counts
    return splits


@dataclass(frozen=True)
class _Pending:
    """An all_to_all in flight: ``wait()`` returns what each rank sent here."""

    work: dist.Work
    recv: Tensor
    sizes: tuple[int, ...]
    send: Tensor  # kept alive until the collective completes

    def wait(self) -> list[Tensor]:
        self.work.wait()
        return [self.recv.narrow(0, start, size) for start, size in _offsets(self.sizes)]


def _all_to_all(
    parts: list[list[Tensor]],
    recv_sizes: list[int],
    dtype: torch.dtype,
    device: torch.device,
    group: dist.ProcessGroup,
) -> _Pending:
    """Start sending ``parts[r]`` (concatenated) to rank ``r``; wait on the result."""
    send_sizes = [sum(t.numel() for t in ts) for ts in parts]
    flat = [t for ts in parts for t in ts]
    # One concatenation, then one cast to the wire dtype (a no-op when it matches).
    send = torch.cat(flat).to(dtype) if flat else torch.empty(0, dtype=dtype, device=device)
    recv = torch.empty(sum(recv_sizes), dtype=dtype, device=device)
    work = dist.all_to_all_single(
        recv,
        send,
        output_split_sizes=recv_sizes,
        input_split_sizes=send_sizes,
        group=group,
        async_op=True,
    )
    assert work is not None  # async_op=True always returns a Work
    return _Pending(work, recv, tuple(recv_sizes), send)


def _offsets(sizes: Sequence[int]) -> list[tuple[int, int]]:
    """``(start, size)`` of consecutive segments of the given sizes."""
    out: list[tuple[int, int]] = []
    start = 0
    for size in sizes:
        out.append((start, size))
        start += size
    return out
