"""MuSGD across ranks: the Newton-Schulz work is shared out, the results exchanged.

Two setups are supported, both on PyTorch's own ``torch.distributed``:

* **DDP** (plain tensors, ``MuSGD(..., process_group=pg)``): every rank holds the same averaged
  gradients, so each rank orthogonalizes only the work items a deterministic plan gives it, and
  one ``all_gather`` per dtype hands every result to every rank.
  Matrices travel in ``ns_dtype`` when it is narrower than the parameters' (lossless, see
  ``wire_dtype``).
* **FSDP2** (``fully_shard``; DTensor parameters on a 1-D mesh, placement ``Shard(0)``): each
  matrix's Nesterov input is gathered row-wise onto its owner rank with one ``all_to_all``, the
  owner orthogonalizes the *full* matrix (never a shard), and a second ``all_to_all`` sends every
  rank its rows of the result. Vector parameters never leave their rank.

The arithmetic is the functional body's (``_functional.prepare_updates_foreach``), operation for
operation, on local tensors: ``m <- mu*m + g``, ``n <- g + mu*m``, ``U <- w_sgd*n +
w_muon*scale*NS(n) + wd*W``, ``W <- W - lr*U``. Newton-Schulz goes through whatever
``Orthogonalizer`` the optimizer holds (eager or replayed), so each rank replays its own share.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from musgd._functional import (
    Bucket,
    GroupStep,
    Layout,
    Orthogonalizer,
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


@dataclass(frozen=True)
class WorkItem:
    """A slice ``[start, stop)`` of one bucket's matrices, orthogonalized by rank ``owner``."""

    bucket: int
    start: int
    stop: int
    flops: int
    owner: int


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


def plan_buckets(buckets: Sequence[Bucket], world_size: int) -> ShardPlan:
    """Assign bucket slices to ranks, balanced by Newton-Schulz FLOPs.

    A bucket of ``B`` equal-shape matrices holding ``F`` of the total ``T`` FLOPs is cut into
    ``min(B, world_size, ceil(F / (T / world_size**2)))`` contiguous slices: big buckets (twelve
    attention matrices over eight ranks) spread over every rank, while small ones stay whole,
    since for small matrices each extra batched call costs launch latency, not arithmetic.
    Slices are assigned largest first to the least-loaded rank (ties: lower bucket, then lower
    rank). The plan depends only on the bucket shapes and sizes, so every rank computes the
    same one. With ``world_size == 1`` every bucket stays whole: exactly the single-process
    batched calls.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    per_matrix = [ns_iteration_flops(b.rows, b.cols) for b in buckets]
    total = sum(f * len(b.indices) for f, b in zip(per_matrix, buckets, strict=True))
    grain = max(1, total // (world_size * world_size))
    slices: list[tuple[int, int, int, int]] = []  # (bucket, start, stop, flops)
    for b, bucket in enumerate(buckets):
        count = len(bucket.indices)
        parts = min(count, world_size, -(-per_matrix[b] * count // grain))
        for start, stop in _split(count, parts):
            slices.append((b, start, stop, per_matrix[b] * (stop - start)))
    loads = [0] * world_size
    owners: dict[tuple[int, int], int] = {}
    for b, start, _, flops in sorted(slices, key=lambda s: (-s[3], s[0], s[1])):
        owner = min(range(world_size), key=lambda r: (loads[r], r))
        loads[owner] += flops
        owners[(b, start)] = owner
    items = tuple(
        WorkItem(b, start, stop, flops, owners[(b, start)]) for b, start, stop, flops in slices
    )
    return ShardPlan(world_size, items)


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
    return dtensor is not None and any(isinstance(t, dtensor) for t in tensors)


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


@dataclass(frozen=True)
class _Rows:
    """Row split of one matrix across ranks: ``counts[r]`` rows live on rank ``r``."""

    counts: tuple[int, ...]

    def start(self, rank: int) -> int:
        return sum(self.counts[:rank])


def _chunk_rows(rows: int, world: int) -> tuple[int, ...]:
    """FSDP2's dim-0 split (``torch.chunk`` semantics): ceil-sized chunks, trailing ones empty."""
    size = -(-rows // world)
    return tuple(max(0, min(size, rows - r * size)) for r in range(world))


class ShardedStep:
    """The distributed group step: plan, local Newton-Schulz share, exchange, update, write.

    ``process_group`` is the DDP group (None: only FSDP2 DTensor parameters are handled, over
    their own mesh's group). Plans are cached per bucket layout; a layout seen for the first time
    is checked to be the same on every rank, since a mismatch would deadlock the collectives.
    """

    def __init__(self, process_group: dist.ProcessGroup | None) -> None:
        check_process_group(process_group)
        self._group = process_group
        self._plans: dict[Hashable, ShardPlan] = {}

    def applies(self, params: Sequence[Tensor]) -> bool:
        """Whether this step (rather than the single-process body) handles these parameters."""
        return self._group is not None or is_sharded(params)

    def step(self, step: GroupStep, *, orth: Orthogonalizer, lr: float) -> None:
        """Steps 1-5 of one param group (its layout built from the global shapes)."""
        layout, hyper, structure = step.layout, step.hyper, step.structure
        group, sharded = self._resolve(step.params, step.grads, step.bufs)
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        P = [_local(t) for t in step.params]
        G = [_local(t) for t in step.grads]
        M = [_local(t) for t in step.bufs]
        # The foreach body's own pieces, in its order, give the same bits.
        n = momentum_foreach(M, G, hyper, structure)
        updates = sgd_terms_foreach(n, layout, hyper)
        # Every rank joins a new layout's agreement check, even one without matrices this step.
        plan = self._plan(layout, P, group, world) if structure.muon else None
        if layout.matrices and plan is not None and plan.items:
            comm = _Comm(group, rank)
            orthogonalize = _orthogonalize_fsdp if sharded else _orthogonalize_ddp
            results = orthogonalize(n, P, layout, plan, comm, structure=structure, orth=orth)
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
        self, layout: Layout, P: Sequence[Tensor], group: dist.ProcessGroup, world: int
    ) -> ShardPlan:
        """The cached plan for this layout, checked once to agree across ranks."""
        key = (
            world,
            tuple(
                (b.rows, b.cols, len(b.indices), str(P[b.indices[0]].dtype)) for b in layout.buckets
            ),
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
        if len(self._plans) >= _PLAN_CACHE_SIZE:
            self._plans.clear()
        plan = plan_buckets(layout.buckets, world)
        self._plans[key] = plan
        return plan


@dataclass(frozen=True)
class _Comm:
    """The group to talk over and this rank's index in it."""

    group: dist.ProcessGroup
    rank: int


def _local(t: Tensor) -> Tensor:
    """The rank-local tensor of a DTensor (a view of its storage), else ``t`` itself."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def _item_matrices(layout: Layout, item: WorkItem) -> tuple[int, ...]:
    return layout.buckets[item.bucket].indices[item.start : item.stop]


def _dtypes(plan: ShardPlan, layout: Layout, P: Sequence[Tensor]) -> list[torch.dtype]:
    """The dtypes of the plan's items in first-seen plan order (the same on every rank)."""
    seen: dict[torch.dtype, None] = {}
    for item in plan.items:
        seen.setdefault(P[_item_matrices(layout, item)[0]].dtype, None)
    return list(seen)


def _orthogonalize_ddp(
    n: Sequence[Tensor],
    P: Sequence[Tensor],
    layout: Layout,
    plan: ShardPlan,
    comm: _Comm,
    *,
    structure: Structure,
    orth: Orthogonalizer,
) -> list[Tensor]:
    """This rank's share, then one all_gather per dtype; returns O per plan item."""
    group, rank = comm.group, comm.rank
    results: dict[int, Tensor] = {}
    for k, item in enumerate(plan.items):
        if item.owner == rank:
            b = layout.buckets[item.bucket]
            stack = stack_bucket([n[i] for i in _item_matrices(layout, item)], b)
            results[k] = orth.batched(stack, structure.ns)
    world = plan.world_size
    for dtype in _dtypes(plan, layout, P):
        keys = [
            k
            for k, item in enumerate(plan.items)
            if P[_item_matrices(layout, item)[0]].dtype == dtype
        ]
        shapes = {k: _item_shape(layout, plan.items[k]) for k in keys}
        per_rank = [[k for k in keys if plan.items[k].owner == r] for r in range(world)]
        sizes = [sum(math.prod(shapes[k]) for k in ks) for ks in per_rank]
        width = max(sizes)
        if width == 0 or world == 1:  # nothing to share
            continue
        device = n[0].device
        wire = wire_dtype(dtype, structure.ns.dtype)
        send = torch.zeros(width, dtype=wire, device=device)
        if per_rank[rank]:
            send[: sizes[rank]] = torch.cat([results[k].reshape(-1) for k in per_rank[rank]])
        received = [torch.empty(width, dtype=wire, device=device) for _ in range(world)]
        dist.all_gather(received, send, group=group)
        for r, ks in enumerate(per_rank):
            if r == rank:
                continue
            offset = 0
            for k in ks:
                size = math.prod(shapes[k])
                results[k] = received[r][offset : offset + size].view(shapes[k]).to(dtype)
                offset += size
    return [results[k] for k in range(len(plan.items))]


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
    P: Sequence[Tensor],
    layout: Layout,
    plan: ShardPlan,
    comm: _Comm,
    *,
    structure: Structure,
    orth: Orthogonalizer,
) -> list[Tensor]:
    """Gather rows onto owners, orthogonalize whole matrices there, send each rank its rows.

    Returns, per plan item, this rank's rows of O as a ``(B, local_rows, cols)`` tensor.
    """
    group, rank = comm.group, comm.rank
    world = plan.world_size
    splits: dict[int, _Rows] = {}
    for item in plan.items:
        b = layout.buckets[item.bucket]
        for i in _item_matrices(layout, item):
            counts = _chunk_rows(b.rows, world)
            if n[i].shape[0] != counts[rank]:
                raise RuntimeError(
                    f"MuSGD: a sharded matrix of {b.rows} rows holds {n[i].shape[0]} rows on rank "
                    f"{rank}, not the {counts[rank]} of fully_shard's even dim-0 split; custom "
                    f"shard_placement_fn layouts are not supported. Supported: {SUPPORTED_SETUPS}"
                )
            splits[i] = _Rows(counts)
    local_results: dict[int, Tensor] = {}
    for dtype in _dtypes(plan, layout, P):
        keys = [
            k
            for k, item in enumerate(plan.items)
            if P[_item_matrices(layout, item)[0]].dtype == dtype
        ]
        device = n[0].device
        wire = wire_dtype(dtype, structure.ns.dtype)
        # Gather: my rows of every matrix go to that matrix's owner, in plan order.
        send_parts: list[list[Tensor]] = [[] for _ in range(world)]
        recv_sizes = [0] * world
        for k in keys:
            item = plan.items[k]
            cols = layout.buckets[item.bucket].cols
            for i in _item_matrices(layout, item):
                send_parts[item.owner].append(n[i].reshape(-1).to(wire))
                if item.owner == rank:
                    for src in range(world):
                        recv_sizes[src] += splits[i].counts[src] * cols
        gathered = _all_to_all(send_parts, recv_sizes, wire, device, group)
        cursors = [0] * world
        full: dict[int, Tensor] = {}
        for k in keys:
            item = plan.items[k]
            if item.owner != rank:
                continue
            b = layout.buckets[item.bucket]
            mats = []
            for i in _item_matrices(layout, item):
                pieces = []
                for src in range(world):
                    size = splits[i].counts[src] * b.cols
                    pieces.append(gathered[src][cursors[src] : cursors[src] + size])
                    cursors[src] += size
                mats.append(torch.cat(pieces).view(b.rows, b.cols))
            full[k] = orth.batched(torch.stack(mats).to(dtype), structure.ns)
        # Scatter: each rank gets its rows of every result, from the owner, in plan order.
        back_parts: list[list[Tensor]] = [[] for _ in range(world)]
        back_sizes = [0] * world
        for k in keys:
            item = plan.items[k]
            cols = layout.buckets[item.bucket].cols
            for j, i in enumerate(_item_matrices(layout, item)):
                if item.owner == rank:
                    for dst in range(world):
                        lo = splits[i].start(dst)
                        rows = full[k][j, lo : lo + splits[i].counts[dst]]
                        back_parts[dst].append(rows.reshape(-1).to(wire))
                back_sizes[item.owner] += splits[i].counts[rank] * cols
        returned = _all_to_all(back_parts, back_sizes, wire, device, group)
        cursors = [0] * world
        for k in keys:
            item = plan.items[k]
            b = layout.buckets[item.bucket]
            rows_here = [splits[i].counts[rank] for i in _item_matrices(layout, item)]
            # Every matrix of a bucket has the same rows, hence the same local row count.
            size = sum(rows_here) * b.cols
            src = item.owner
            chunk = returned[src][cursors[src] : cursors[src] + size]
            cursors[src] += size
            local_results[k] = chunk.view(len(rows_here), rows_here[0], b.cols).to(dtype)
    return [local_results[k] for k in range(len(plan.items))]


def _all_to_all(
    parts: list[list[Tensor]],
    recv_sizes: list[int],
    dtype: torch.dtype,
    device: torch.device,
    group: dist.ProcessGroup,
) -> list[Tensor]:
    """Send ``parts[r]`` (concatenated) to rank ``r``; returns what each rank sent here."""
    send_sizes = [sum(t.numel() for t in ts) for ts in parts]
    flat = [t for ts in parts for t in ts]
    send = torch.cat(flat) if flat else torch.empty(0, dtype=dtype, device=device)
    recv = torch.empty(sum(recv_sizes), dtype=dtype, device=device)
    dist.all_to_all_single(
        recv, send, output_split_sizes=recv_sizes, input_split_sizes=send_sizes, group=group
    )
    return [recv.narrow(0, start, size) for start, size in _offsets(recv_sizes)]


def _offsets(sizes: Sequence[int]) -> list[tuple[int, int]]:
    """``(start, size)`` of consecutive segments of the given sizes."""
    out: list[tuple[int, int]] = []
    start = 0
    for size in sizes:
        out.append((start, size))
        start += size
    return out
