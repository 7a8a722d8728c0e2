"""The functional MuSGD step: routing, bucketing, and the per-tensor and foreach bodies.

Notation follows docs (spec §1): parameter W, gradient g, momentum buffer m, learning rate lr,
momentum mu, weight decay wd, mix weights w_muon and w_sgd.

    m <- mu*m + g
    n <- g + mu*m            (Nesterov)   or   n <- m
    U <- w_muon*0.2*sqrt(max(rows, cols))*NS(n) + w_sgd*n + wd*W     (matrices)
    U <- n + wd*W                                                     (vectors)
    W <- W - lr*U

Steps 1–4 (everything up to U) are the *update preparation*; the write is separate so that the
preparation can be replayed from a CUDA graph while the learning-rate read stays outside it.
Hyperparameters enter only through multiplications by a scalar and additions of two tensors, so
a Python float and a float32 0-d CUDA tensor holding the same value give the same bits -- for
float32 tensors only: measured on an H200, a 0-d tensor scalar is rounded to bf16/fp16 before
scaling a bf16/fp16 tensor while a Python float is not (docs/ASSUMPTIONS.md A1). Replay that holds
hyperparameters in device tensors must therefore fall back to eager for non-float32 parameters.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import torch
from torch import Tensor

from musgd._device import capturing
from musgd._newton_schulz import (
    Triple,
    muon_rms_scale,
    newton_schulz_stack,
)

if TYPE_CHECKING:
    from musgd._triton_ns import MomentumPlan, TablePlan

MOMENTUM_BUFFER = "momentum_buffer"

Scalar = float | Tensor


@dataclass(frozen=True)
class NSSettings:
    """The Newton–Schulz settings of one param group."""

    steps: int
    coefficients: tuple[Triple, ...]
    eps: float
    dtype: torch.dtype
    # "auto", "triton", "torch" or "gram": which Newton–Schulz backend the foreach body runs
    # (WP-009; "gram": the torch backend iterating on Gram matrices, WP-023).
    backend: str = "torch"
    # "frobenius" or "aol": how each matrix is normalized first (musgd._newton_schulz).
    normalize: str = "frobenius"


@dataclass(frozen=True)
class Hyper:
    """Per-step hyperparameter values: Python floats (eager) or 0-d device tensors (replay)."""

    momentum: Scalar
    weight_decay: Scalar
    w_muon: Scalar
    w_sgd: Scalar


class HyperValues(Protocol):
    """A flavour's per-step hyperparameter record (:class:`Hyper` for the default flavour):
    frozen dataclasses of Python floats or 0-d device tensors, whose fields replay holds in
    device tensors (``musgd._update_replay.HyperSlots``). The momentum helpers read these two."""

    @property
    def momentum(self) -> Scalar: ...

    @property
    def weight_decay(self) -> Scalar: ...


@dataclass(frozen=True)
class Structure:
    """What decides which operations run (as opposed to the values they run with)."""

    nesterov: bool
    decay: bool  # weight_decay != 0
    muon: bool  # w_muon != 0; False skips Newton–Schulz entirely
    ns: NSSettings


@dataclass(frozen=True)
class Bucket:
    """Matrices of one dtype and device, orthogonalized in one batched ``(B, rows, cols)`` call.

    Without padding every matrix is ``(rows, cols)``. A padded stack holds smaller matrices in
    the top-left corner of their block, zero elsewhere: zero rows and zero columns stay zero
    through every Newton–Schulz iteration (they add nothing to ``X·Xᵀ``'s other entries, to the
    Frobenius norm or to ``B·X``), so each block is its matrix's own orthogonalization up to
    rounding. ``member_shapes`` gives each matrix's ``(rows, cols)`` as it sits in the stack
    (empty when every matrix fills its block); ``transposed`` marks matrices that sit
    transposed (empty when none does): the polar factor of ``Xᵀ`` is that of ``X`` transposed.
    The RMS scale is each matrix's own.
    """

    rows: int
    cols: int
    indices: tuple[int, ...]
    member_shapes: tuple[tuple[int, int], ...] = ()
    transposed: tuple[bool, ...] = ()

    @property
    def padded(self) -> bool:
        """Whether some matrix does not fill its block as it is (smaller, or transposed)."""
        return bool(self.member_shapes)

    @property
    def scale(self) -> float:
        """The RMS scale of a bucket whose matrices all fill their blocks."""
        return muon_rms_scale(self.rows, self.cols)

    @property
    def scales(self) -> tuple[float, ...]:
        """Each matrix's RMS scale, ``0.2*sqrt(max(rows_i, cols_i))``, in ``indices`` order."""
        shapes = self.member_shapes or ((self.rows, self.cols),) * len(self.indices)
        return tuple(muon_rms_scale(r, c) for r, c in shapes)

    @property
    def cost(self) -> int:
        """Newton-Schulz work, up to a constant factor: matrices x rows x cols x min(rows, cols)."""
        return len(self.indices) * self.rows * self.cols * min(self.rows, self.cols)


@dataclass(frozen=True)
class Layout:
    """How a group's parameters (those with gradients, in group order) are routed."""

    matrices: tuple[int, ...]
    vectors: tuple[int, ...]
    buckets: tuple[Bucket, ...]
    shapes: tuple[tuple[int, int] | None, ...]
    # Each parameter's own shape, and the (dtype, device) they all share (None where they do
    # not): what the packed step's workspace depends on besides the routing (``prepare_packed``).
    tensor_shapes: tuple[torch.Size, ...] = ()
    kind: tuple[torch.dtype, torch.device] | None = None

    @functools.cached_property
    def matrix_shapes(self) -> tuple[tuple[int, int], ...]:
        """The ``(rows, cols)`` view of each matrix, in ``matrices`` order."""
        return tuple(rc for rc in self.shapes if rc is not None)

    @functools.cached_property
    def packed(self) -> tuple[int, ...]:
        """The packed order of the Triton path: the matrices, then the vectors."""
        return self.matrices + self.vectors


BucketJob = Callable[[], None]
W = TypeVar("W")
# Workspaces an orthogonalizer keeps: a training run steps one layout per param group; a run
# that freezes and unfreezes parameters steps a few more. Each holds about two copies of its
# group, so the bound keeps a churning run from holding many.
WORKSPACES = 8


class Orthogonalizer(Protocol):
    """Runs Newton–Schulz on one matrix or on a stack; eager or replayed.

    ``run_buckets`` runs a group's per-bucket jobs (stack, Newton–Schulz, mix); the jobs write
    disjoint tensors, so any order -- or concurrent streams -- gives the same bits.
    """

    def single(self, G: Tensor, ns: NSSettings) -> Tensor: ...

    def batched(self, G: Tensor, ns: NSSettings) -> Tensor: ...

    def run_buckets(self, jobs: Sequence[BucketJob], costs: Sequence[int]) -> None: ...

    def table(self, key: Hashable, src: Tensor, run: Callable[[Tensor], Tensor]) -> Tensor:
        """``run(src)``: a whole group's Newton–Schulz table (Triton backend), fresh storage.

        ``key`` names everything ``run`` depends on besides ``src``; a replaying orthogonalizer
        records ``run`` under it. This default calls ``run`` directly.
        """
        return run(src)

    def workspace(self, key: Hashable, build: Callable[[], W]) -> W:
        """``build()``, kept under ``key`` for this orthogonalizer's later steps: device memory
        a group's step reuses instead of allocating it per parameter (``prepare_packed``).

        Inside a CUDA-graph capture a workspace is always built for that capture alone, in the
        graph's own memory: a graph writes by address, so it must never write into memory that
        this cache may later drop. At most ``WORKSPACES`` are kept, the oldest dropped first.
        """
        if capturing():
            return build()
        kept: dict[Hashable, Any] = self.__dict__.setdefault("_workspaces", {})
        found = kept.get(key)
        if found is None:
            found = build()
            if len(kept) >= WORKSPACES:
                del kept[next(iter(kept))]
            kept[key] = found
        return cast(W, found)

    def stacked(self, members: Sequence[Tensor], bucket: Bucket, ns: NSSettings) -> Tensor:
        """``scale * NS(stack)`` of one bucket's tensors, in fresh storage the caller owns.

        Step 3 and the bucket's RMS scale of step 4. This default stacks, calls ``batched`` and
        scales in place; an implementation may save copies but must give the same bits.
        """
        return scale_stack(self.batched(stack_bucket(members, bucket), ns), bucket)


def run_in_order(jobs: Sequence[BucketJob], costs: Sequence[int]) -> None:
    """Run ``jobs`` one after the other on the current stream (``costs`` are not needed)."""
    for job in jobs:
        job()


class EagerOrthogonalizer(Orthogonalizer):
    """Calls the Newton–Schulz functions directly; runs bucket jobs in order."""

    run_buckets = staticmethod(run_in_order)

    def single(self, G: Tensor, ns: NSSettings) -> Tensor:
        return newton_schulz_stack(G.unsqueeze(0), **_ns_arguments(ns)).squeeze(0)

    def batched(self, G: Tensor, ns: NSSettings) -> Tensor:
        return newton_schulz_stack(G, **_ns_arguments(ns))


def _ns_arguments(ns: NSSettings) -> dict[str, Any]:
    """The Newton–Schulz functions' keyword arguments for a group's settings (``"gram"``: the
    torch backend's products, iterating on Gram matrices)."""
    return {
        "steps": ns.steps,
        "coefficients": ns.coefficients,
        "eps": ns.eps,
        "dtype": ns.dtype,
        "normalize": ns.normalize,
        "iteration": "gram" if ns.backend == "gram" else "standard",
    }


def matrix_shape(shape: Sequence[int], use_muon: bool | None = None) -> tuple[int, int] | None:
    """Return the ``(rows, cols)`` view of a parameter routed to Newton–Schulz, else None.

    ``(rows, cols) = (shape[0], numel / shape[0])``; both must be at least 2 unless ``use_muon``
    forces the route (True) or forbids it (False).
    """
    if use_muon is False:
        return None
    numel = math.prod(shape)
    rows = shape[0] if len(shape) else 1
    if numel == 0 or rows == 0:
        return None
    cols = numel // rows
    if use_muon or (rows >= 2 and cols >= 2):
        return rows, cols
    return None


@dataclass(frozen=True)
class PadBound:
    """How far a bucket may zero-pad: the bound on padding of :func:`build_layout`.

    A matrix joins a larger one's stack only when it has at least ``min_fraction`` of the
    stack's rows (and, with ``pad_cols``, of its columns; without it, only matrices of the
    stack's column count join), and a stack's padded Newton–Schulz work (rows x cols x
    min(rows, cols) per matrix, at the stack's size) stays within ``cost_limit`` times its
    members' own work. With ``pad_cols`` matrices are stacked wide side along the columns (a
    tall one sits transposed), as Newton–Schulz runs them anyway.
    """

    min_fraction: float
    cost_limit: float
    pad_cols: bool = False


# On a GPU these small stacks are bound by host-side launches (an H200 host spends about 0.6 ms
# per stack on yolo26n-sized stacks while the GPU idles: evidence of 5a309cb's replay profile),
# not arithmetic: fewer, larger stacks win, so rows and columns may each differ up to 16x (the
# row bound the Ultralytics MuSGD documents, ultralytics-compat.md) with up to 4x the work.
# Elsewhere (CPU) the arithmetic is the cost: only rows pad, and only where that adds at most a
# quarter of the work.
PAD_BOUNDS = {"cuda": PadBound(min_fraction=1 / 16, cost_limit=4.0, pad_cols=True)}
DEFAULT_PAD_BOUND = PadBound(min_fraction=0.5, cost_limit=1.25)


def pad_bound(device: torch.device) -> PadBound:
    """The padding bound for matrices on ``device``."""
    return PAD_BOUNDS.get(device.type, DEFAULT_PAD_BOUND)


_DESCRIBE = operator.attrgetter("shape", "dtype", "device")
# Layouts kept for reuse: a training run steps the same groups every step, and planning a
# yolo26n group's layout costs about 0.25 ms of host time (2-core CI machine), ~4x its key.
LAYOUT_CACHE_SIZE = 256


def build_layout(
    params: Sequence[Tensor],
    use_muon: bool | None,
    *,
    pad: PadBound | None = None,
    orient: bool = False,
) -> Layout:
    """Route each parameter and bucket its matrices for batched Newton–Schulz.

    Without ``pad``, matrices of equal (rows, cols, dtype, device) share a bucket. With it,
    matrices of one (dtype, device) (and one column count, unless ``pad.pad_cols``) are stacked
    within that bound (:func:`plan_stacks`). Buckets are ordered by their first matrix in group
    order, and each keeps its matrices in group order. The layout depends on nothing but each
    parameter's (shape, dtype, device), ``use_muon``, ``pad`` and ``orient``, so it is planned
    once per such description and then reused. ``orient`` makes every padded stack hold its
    matrices wide (tall ones transposed) on every device, as ``pad.pad_cols`` does: what the
    AOL normalization needs, which rescales the rows of a matrix's wide orientation.
    """
    return _plan_layout(tuple(map(_DESCRIBE, params)), use_muon, pad, orient)


@functools.lru_cache(maxsize=LAYOUT_CACHE_SIZE)
def _plan_layout(
    described: tuple[tuple[torch.Size, torch.dtype, torch.device], ...],
    use_muon: bool | None,
    pad: PadBound | None,
    orient: bool = False,
) -> Layout:
    shapes = tuple(matrix_shape(shape, use_muon) for shape, _, _ in described)
    groups: dict[tuple[object, ...], list[tuple[int, tuple[int, int]]]] = {}
    for i, ((_, dtype, device), rc) in enumerate(zip(described, shapes, strict=True)):
        if rc is None:
            continue
        if pad is None:
            key: tuple[object, ...] = (rc, dtype, device)
        else:
            key = (None if pad.pad_cols else rc[1], dtype, device)
        groups.setdefault(key, []).append((i, rc))
    buckets: list[Bucket] = []
    for members in groups.values():
        own = [rc for _, rc in members]
        stacks = [list(range(len(own)))] if pad is None else plan_stacks(own, pad)
        wide = pad is not None and (pad.pad_cols or orient)
        buckets.extend(
            _bucket([members[k][0] for k in s], [own[k] for k in s], orient=wide) for s in stacks
        )
    buckets.sort(key=lambda b: b.indices[0])
    kinds = {(dtype, device) for _, dtype, device in described}
    return Layout(
        matrices=tuple(i for i, rc in enumerate(shapes) if rc is not None),
        vectors=tuple(i for i, rc in enumerate(shapes) if rc is None),
        buckets=tuple(buckets),
        shapes=shapes,
        tensor_shapes=tuple(shape for shape, _, _ in described),
        kind=next(iter(kinds)) if len(kinds) == 1 else None,
    )


def _bucket(indices: list[int], shapes: list[tuple[int, int]], *, orient: bool) -> Bucket:
    """The bucket of matrices ``indices`` of these ``(rows, cols)`` shapes, one stack.

    With ``orient``, wide and tall matrices in one stack: the tall ones sit transposed. When
    every matrix fills the stack as it is, the bucket records no member shapes (the unpadded
    fast paths apply).
    """
    wide = [r <= c for r, c in shapes]
    if not orient or all(wide) or not any(wide):
        placed = shapes  # one orientation: Newton–Schulz transposes the whole stack if tall
        flips = [False] * len(shapes)
    else:
        placed = [(r, c) if w else (c, r) for (r, c), w in zip(shapes, wide, strict=True)]
        flips = [not w for w in wide]
    rows = max(r for r, _ in placed)
    cols = max(c for _, c in placed)
    if all(rc == (rows, cols) for rc in placed) and not any(flips):
        return Bucket(rows, cols, tuple(indices))
    return Bucket(rows, cols, tuple(indices), tuple(placed), tuple(flips) if any(flips) else ())


def ns_work(rows: int, cols: int) -> int:
    """Newton–Schulz work of one ``(rows, cols)`` matrix, up to a constant factor."""
    return rows * cols * min(rows, cols)


def plan_stacks(shapes: Sequence[tuple[int, int]], bound: PadBound) -> list[list[int]]:
    """Split matrices of these ``(rows, cols)`` shapes into stacks: index lists into ``shapes``.

    Equal shapes always share a stack. Shapes are taken costliest first (with ``pad_cols``, as
    ``(short, long)``); each joins the first stack it fits within ``bound`` (see
    :class:`PadBound`), else it starts a new stack of its own size. Each stack lists its
    matrices in their order in ``shapes``.
    """
    by_shape: dict[tuple[int, int], list[int]] = {}
    for k, (r, c) in enumerate(shapes):
        key = (min(r, c), max(r, c)) if bound.pad_cols else (r, c)
        by_shape.setdefault(key, []).append(k)
    order = sorted(by_shape, key=lambda rc: (-ns_work(*rc), rc))
    stacks: list[tuple[int, int, int, list[int]]] = []  # (rows, cols, own work, members)
    for r, c in order:
        members = by_shape[(r, c)]
        work = len(members) * ns_work(r, c)
        for k, (rows, cols, own, placed) in enumerate(stacks):
            fits_cols = c == cols or (bound.pad_cols and bound.min_fraction * cols <= c <= cols)
            fits = fits_cols and bound.min_fraction * rows <= r <= rows
            padded = (len(placed) + len(members)) * ns_work(rows, cols)
            if fits and padded <= bound.cost_limit * (own + work):
                stacks[k] = (rows, cols, own + work, placed + members)
                break
        else:
            stacks.append((r, c, work, list(members)))
    return [sorted(placed) for _, _, _, placed in stacks]


# Multi-tensor primitives: one ``torch._foreach_*`` call each in eager mode. Under a
# ``torch.compile`` trace they become per-tensor loops, which Inductor fuses into its own kernels
# anyway: on CUDA, Inductor's foreach scheduling fails with an AssertionError when foreach ops
# meet per-tensor reductions over tensors of different shapes (pytorch/pytorch#176591, R141),
# which is what a step with Newton–Schulz norms between foreach ops is. Each loop runs the
# foreach op's per-tensor arithmetic, so both forms give the same bits in eager mode.


def multi_mul_(tensors: Sequence[Tensor], scalar: Scalar | Sequence[float]) -> None:
    """``t *= scalar`` for each tensor (``scalar`` may be one value or one per tensor)."""
    if not torch.compiler.is_compiling():
        torch._foreach_mul_(list(tensors), scalar)
        return
    values = scalar if isinstance(scalar, Sequence) else [scalar] * len(tensors)
    for t, v in zip(tensors, values, strict=True):
        t.mul_(v)


def multi_mul(tensors: Sequence[Tensor], scalar: Scalar) -> list[Tensor]:
    """``t * scalar`` for each tensor, fresh."""
    if not torch.compiler.is_compiling():
        return list(torch._foreach_mul(list(tensors), scalar))
    return [t.mul(scalar) for t in tensors]


def multi_add_(tensors: Sequence[Tensor], others: Sequence[Tensor], alpha: float = 1.0) -> None:
    """``t += alpha * o`` for each pair."""
    if not torch.compiler.is_compiling():
        torch._foreach_add_(list(tensors), list(others), alpha=alpha)
        return
    for t, o in zip(tensors, others, strict=True):
        t.add_(o, alpha=alpha)


def multi_add(tensors: Sequence[Tensor], others: Sequence[Tensor]) -> list[Tensor]:
    """``t + o`` for each pair, fresh."""
    if not torch.compiler.is_compiling():
        return list(torch._foreach_add(list(tensors), list(others)))
    return [t.add(o) for t, o in zip(tensors, others, strict=True)]


def multi_neg(tensors: Sequence[Tensor]) -> list[Tensor]:
    """``-t`` for each tensor, fresh (exact: a negation rounds nothing)."""
    if not torch.compiler.is_compiling():
        return list(torch._foreach_neg(list(tensors)))
    return [t.neg() for t in tensors]


def multi_copy_(targets: Sequence[Tensor], sources: Sequence[Tensor]) -> None:
    """``t <- s`` for each pair."""
    if not torch.compiler.is_compiling():
        torch._foreach_copy_(list(targets), list(sources))
        return
    for t, src in zip(targets, sources, strict=True):
        t.copy_(src)


def _pick(items: Sequence[Tensor], idx: Sequence[int]) -> list[Tensor]:
    return [items[i] for i in idx]


def advance_momentum(bufs: Sequence[Tensor], grads: Sequence[Tensor], momentum: Scalar) -> None:
    """Step 1: ``m <- mu*m + g`` in place, as two multi-tensor calls (each rounds on its own)."""
    multi_mul_(bufs, momentum)
    multi_add_(bufs, grads)


def momentum_foreach(
    bufs: Sequence[Tensor], grads: Sequence[Tensor], hyper: HyperValues, structure: Structure
) -> list[Tensor]:
    """Steps 1–2: ``m <- mu*m + g`` in place; returns ``n`` (fresh with Nesterov, else ``m``)."""
    bufs = list(bufs)
    grads = list(grads)
    advance_momentum(bufs, grads, hyper.momentum)
    if not structure.nesterov:
        return bufs
    n = multi_mul(bufs, hyper.momentum)
    multi_add_(n, grads)
    return n


def sgd_terms_foreach(n: Sequence[Tensor], layout: Layout, hyper: Hyper) -> list[Tensor]:
    """The update before its orthogonalized and decay terms: ``w_sgd*n`` (matrices), ``n``."""
    updates = list(n)
    if layout.matrices:
        scaled = multi_mul(_pick(n, layout.matrices), hyper.w_sgd)
        for i, u in zip(layout.matrices, scaled, strict=True):
            updates[i] = u
    return updates


def add_orthogonalized(
    updates: list[Tensor],
    indices: Sequence[int],
    O: Tensor,
    hyper: Hyper,
    bucket: Bucket | None = None,
) -> None:
    """``U += w_muon*O`` for the matrices ``indices``; ``O`` (already scaled) is overwritten.

    A padded ``bucket``'s stack holds each matrix in the corner of its block (transposed where
    the bucket says so): contiguous updates take it through a 2-D view, without a copy.
    """
    O.mul_(hyper.w_muon)
    targets = _pick(updates, indices)
    if bucket is not None and bucket.padded:
        dst: list[Tensor] = []
        src: list[Tensor] = []
        for k, (t, block) in enumerate(zip(targets, _blocks(O, bucket), strict=True)):
            part = block.mT if bucket.transposed and bucket.transposed[k] else block
            if t.is_contiguous():
                dst.append(t.view(part.shape))
                src.append(part)
            else:
                dst.append(t)
                src.append(part.reshape(t.shape))
        multi_add_(dst, src)
        return
    shape = targets[0].shape
    if all(t.shape == shape for t in targets):
        # One reshape and one unbind instead of an indexing and a reshape per matrix.
        parts: Sequence[Tensor] = O.reshape(len(targets), *shape).unbind(0)
    else:
        parts = [o.reshape_as(t) for o, t in zip(O, targets, strict=True)]
    multi_add_(targets, parts)


def _blocks(stack: Tensor, bucket: Bucket) -> list[Tensor]:
    """Views of each matrix's corner of a padded ``bucket``'s ``(B, rows, cols)`` stack."""
    return [s[:r, :c] for s, (r, c) in zip(stack.unbind(0), bucket.member_shapes, strict=True)]


def unstack_bucket(O: Tensor, bucket: Bucket) -> list[Tensor]:
    """Each matrix's result in a bucket's ``(B, rows, cols)`` stack, as its own ``(rows, cols)``
    matrix: the stack's slices, or for a padded bucket the corners of their blocks (views),
    transposed back where the matrix sat transposed."""
    if not bucket.padded:
        return list(O.unbind(0))
    return [
        block.mT if bucket.transposed and bucket.transposed[k] else block
        for k, block in enumerate(_blocks(O, bucket))
    ]


def _placed(member: Tensor, bucket: Bucket, k: int) -> Tensor:
    """Matrix ``k`` of a padded ``bucket`` as it sits in the stack: its ``(rows, cols)`` view,
    transposed where the bucket says so."""
    r, c = bucket.member_shapes[k]
    if bucket.transposed and bucket.transposed[k]:
        return member.reshape(c, r).mT
    return member.reshape(r, c)


def orthogonalize_bucket(
    n: Sequence[Tensor],
    updates: list[Tensor],
    bucket: Bucket,
    hyper: Hyper,
    ns: NSSettings,
    orth: Orthogonalizer,
) -> None:
    """One bucket's job: orthogonalize the stack of its matrices of ``n``, add into ``updates``."""
    O = orth.stacked(_pick(n, bucket.indices), bucket, ns)
    add_orthogonalized(updates, bucket.indices, O, hyper, bucket)


def _table_may_run(ns: NSSettings, device: torch.device) -> bool:
    """Whether the Triton table may run a group's matrices on ``device`` at all, before its own
    checks: not the torch or Gram backend, for ``"auto"`` only on CUDA (skipping the table's set-up
    on every other device), and only with the Frobenius normalization its kernels compute
    (``ns_backend="triton"`` with another says so once)."""
    if ns.backend in ("torch", "gram") or (ns.backend == "auto" and device.type != "cuda"):
        return False
    if ns.normalize != "frobenius":
        from musgd._triton_ns import warn_fallback  # Triton is imported only when asked for

        warn_fallback(
            ns.backend, f"its kernels normalize by the Frobenius norm, not {ns.normalize!r}"
        )
        return False
    return True


def orthogonalize_table_views(
    n: Sequence[Tensor],
    layout: Layout,
    ns: NSSettings,
    orth: Orthogonalizer,
    scales: tuple[float, ...] | None = None,
    mix: tuple[Scalar, Scalar] | None = None,
) -> tuple[Tensor, list[Tensor]] | None:
    """``O = scale·NS`` of all of a group's matrices of ``n`` through the Triton backend's one
    table (``scales`` per matrix, default the spec's RMS scale), or with ``mix = (w_sgd,
    w_muon)`` steps 3-4's ``w_sgd·n + w_muon·O``: one flat result and its views in
    ``layout.matrices`` order; None when ``ns.backend`` is "torch" or Triton does not apply,
    so that the caller runs the per-bucket torch backend."""
    if not layout.matrices or not _table_may_run(ns, n[layout.matrices[0]].device):
        return None
    from musgd._triton_ns import orthogonalize_table  # Triton is imported only when it runs

    return orthogonalize_table(
        _pick(n, layout.matrices),
        layout.matrix_shapes,
        requested=ns.backend,
        triples=ns.coefficients,
        eps=ns.eps,
        dtype=ns.dtype,
        run=orth.table,  # called only when Triton runs
        scales=scales,
        mix=mix,
    )


def stack_bucket(members: Sequence[Tensor], bucket: Bucket) -> Tensor:
    """The ``(B, rows, cols)`` stack of a bucket's tensors, with as few dispatches as possible.

    One tensor is reshaped (a view when its layout allows); tensors of one shape are stacked and
    then reshaped once; mixed shapes of the same matrix view are reshaped one by one first. A
    padded bucket's stack starts as zeros and takes every matrix into the corner of its block
    (transposed where the bucket says so) with one multi-tensor copy.
    """
    rows, cols = bucket.rows, bucket.cols
    if bucket.padded:
        stack = members[0].new_zeros(len(members), rows, cols)
        multi_copy_(_blocks(stack, bucket), [_placed(m, bucket, k) for k, m in enumerate(members)])
        return stack
    if len(members) == 1:
        return members[0].reshape(1, rows, cols)
    shape = members[0].shape
    if all(m.shape == shape for m in members):
        return torch.stack(list(members)).reshape(len(members), rows, cols)
    return torch.stack([m.reshape(rows, cols) for m in members])


def scale_stack(O: Tensor, bucket: Bucket) -> Tensor:
    """``O`` (a bucket's ``(B, rows, cols)`` result) times each matrix's RMS scale, in place."""
    if bucket.padded:
        multi_mul_(O.unbind(0), bucket.scales)
        return O
    return O.mul_(bucket.scale)


def add_decay_foreach(
    updates: list[Tensor], params: Sequence[Tensor], layout: Layout, hyper: Hyper
) -> None:
    """``U += wd*W``: in place for matrices, out of place for vectors (whose U may be ``m``)."""
    decay = multi_mul(params, hyper.weight_decay)
    if layout.matrices:
        multi_add_(_pick(updates, layout.matrices), _pick(decay, layout.matrices))
    if layout.vectors:
        summed = multi_add(_pick(updates, layout.vectors), _pick(decay, layout.vectors))
        for i, u in zip(layout.vectors, summed, strict=True):
            updates[i] = u


@torch.no_grad()
def prepare_updates_foreach(
    params: Sequence[Tensor],
    grads: Sequence[Tensor],
    bufs: Sequence[Tensor],
    layout: Layout,
    hyper: Hyper,
    structure: Structure,
    orth: Orthogonalizer,
) -> list[Tensor]:
    """Steps 1–4 over a whole group with ``torch._foreach_*``; returns U in group order.

    Momentum buffers are updated in place. Returned tensors are fresh except where U equals m
    exactly (vectors, no Nesterov, no decay), where the buffer itself is returned. Where the
    Triton table runs the group's matrices, the whole group runs packed (:func:`prepare_packed`).
    """
    plan = _table_plan(params, layout, structure) if structure.muon else None
    if plan is not None:
        return prepare_packed(params, grads, bufs, layout, hyper, structure, orth, plan)
    n = momentum_foreach(bufs, grads, hyper, structure)
    # The Triton table mixes the matrices' w_sgd*n + w_muon*O in its last kernel.
    table = (
        orthogonalize_table_views(n, layout, structure.ns, orth, mix=(hyper.w_sgd, hyper.w_muon))
        if structure.muon
        else None
    )
    if table is not None:
        updates = list(n)
        for i, u in zip(layout.matrices, table[1], strict=True):
            updates[i] = u
    else:
        updates = sgd_terms_foreach(n, layout, hyper)
        if structure.muon:
            buckets = layout.buckets
            orth.run_buckets(
                [
                    functools.partial(
                        orthogonalize_bucket, n, updates, b, hyper, structure.ns, orth
                    )
                    for b in buckets
                ],
                [b.cost for b in buckets],
            )
    if structure.decay:
        add_decay_foreach(updates, params, layout, hyper)
    return updates


def _table_plan(params: Sequence[Tensor], layout: Layout, structure: Structure) -> TablePlan | None:
    """The Triton plan of the group's matrices when the group can run packed through it: the
    table applies (see :func:`musgd._triton_ns.table_plan`) and every tensor of the group has one
    dtype and device (packing would promote mixed dtypes)."""
    ns = structure.ns
    if not layout.matrices or layout.kind is None or not _table_may_run(ns, layout.kind[1]):
        return None
    from musgd._triton_ns import table_plan  # Triton is imported only when it runs

    return table_plan(
        _pick(params, layout.matrices),
        layout.matrix_shapes,
        requested=ns.backend,
        steps=len(ns.coefficients),
        dtype=ns.dtype,
    )


class PackedWorkspace:
    """A group's packed step memory, kept across steps (:meth:`Orthogonalizer.workspace`).

    ``n`` holds the group's ``n`` packed in ``layout.packed`` order (matrices first, each
    row-major), ``out`` the table's result for the matrices, ``decay`` the packed ``wd·W``;
    their per-parameter views (in group order) are made once, not every step: a view costs
    about a microsecond of host time, and a YOLO26 group has hundreds of parameters.
    """

    def __init__(self, layout: Layout, dtype: torch.dtype, device: torch.device) -> None:
        # Each parameter's element count and packed offset, in group order. The matrices come
        # first, so a matrix's offset in ``n`` is its offset in ``out`` too.
        self.numels = tuple(math.prod(s) for s in layout.tensor_shapes)
        offsets = [0] * len(self.numels)
        offset = 0
        for i in layout.packed:
            offsets[i] = offset
            offset += self.numels[i]
        self.offsets = tuple(offsets)
        self.size = sum(self.numels[i] for i in layout.matrices)
        self._layout = layout
        self.n = torch.empty(offset, dtype=dtype, device=device)
        self.n_views = self._views(self.n, range(len(offsets)))
        self.out = torch.empty(self.size, dtype=dtype, device=device)
        self.updates = self.n_views.copy()
        self._place(self.updates, self.out)
        self._decay: tuple[Tensor, list[Tensor]] | None = None
        self.momentum_plan: MomentumPlan | None = None  # the momentum kernel's, on first use

    def _views(self, flat: Tensor, indices: Iterable[int]) -> list[Tensor]:
        """Views of the packed ``flat`` with the shapes of parameters ``indices``, in order."""
        shapes, offsets, numels = self._layout.tensor_shapes, self.offsets, self.numels
        return [flat[offsets[i] : offsets[i] + numels[i]].view(shapes[i]) for i in indices]

    def _place(self, updates: list[Tensor], out: Tensor) -> None:
        """The matrices' entries of ``updates``: views of the table's result ``out``."""
        matrices = self._layout.matrices
        for i, view in zip(matrices, self._views(out, matrices), strict=True):
            updates[i] = view

    def decay(self) -> tuple[Tensor, list[Tensor]]:
        """The packed decay buffer and its views (made on first use: groups without weight
        decay never need it)."""
        if self._decay is None:
            flat = torch.empty_like(self.n)
            self._decay = flat, self._views(flat, range(len(self.offsets)))
        return self._decay

    def updates_for(self, out: Tensor) -> list[Tensor]:
        """U in group order when the table's result is ``out``: the kept views when it is
        ``self.out``, else (a replayed table returns its recording's own output) new ones."""
        if out is self.out:
            return self.updates.copy()
        updates = self.n_views.copy()
        self._place(updates, out)
        return updates


def _packed_momentum(
    ws: PackedWorkspace,
    grads: Sequence[Tensor],
    bufs: Sequence[Tensor],
    hyper: Hyper,
    structure: Structure,
) -> bool:
    """Steps 1–2 of a packed group in one Triton launch where it applies (float32, contiguous:
    :func:`musgd._triton_ns.run_momentum`); False where the multi-tensor calls must run."""
    from musgd._triton_ns import (  # Triton is imported only when it runs
        PlanUnavailableError,
        momentum_applies,
        momentum_plan,
        run_momentum,
    )

    if not momentum_applies(grads, bufs):
        return False
    if ws.momentum_plan is None:
        try:
            ws.momentum_plan = momentum_plan(ws.numels, ws.offsets, ws.n.device)
        except PlanUnavailableError:  # first needed inside a capture: run the other way
            return False
    return run_momentum(
        ws.momentum_plan, grads, bufs, ws.n, hyper.momentum, nesterov=structure.nesterov
    )


@torch.no_grad()
def prepare_packed(
    params: Sequence[Tensor],
    grads: Sequence[Tensor],
    bufs: Sequence[Tensor],
    layout: Layout,
    hyper: Hyper,
    structure: Structure,
    orth: Orthogonalizer,
    plan: TablePlan,
) -> list[Tensor]:
    """Steps 1–4 of :func:`prepare_updates_foreach` where the Triton table runs the group's
    matrices, into a workspace the group keeps; returns U in group order (views of it).

    ``n`` is written straight into the packed workspace (in-place multi-tensor calls, where
    the multi-tensor body's out-of-place ones allocate a tensor per parameter every step), the
    table reads its matrices from it without a ``cat`` and writes its result into the kept
    ``out``; the decay is one packed multiply. Every element sees the same operations in the
    same order as in the per-tensor body: the same bits.
    """
    kind = layout.kind
    assert kind is not None  # _table_plan checked it
    ws = orth.workspace(("packed", layout), lambda: PackedWorkspace(layout, *kind))
    if not _packed_momentum(ws, grads, bufs, hyper, structure):
        advance_momentum(bufs, grads, hyper.momentum)
        multi_copy_(ws.n_views, bufs)
        if structure.nesterov:
            ws.n.mul_(hyper.momentum)
            multi_add_(ws.n_views, grads)
    from musgd._triton_ns import run_table  # Triton is imported only when it runs

    ns = structure.ns
    out = run_table(
        plan,
        ws.n[: ws.size],
        triples=ns.coefficients,
        eps=ns.eps,
        dtype=ns.dtype,
        run=orth.table,
        mix=(hyper.w_sgd, hyper.w_muon),
        out=ws.out,
    )
    if structure.decay:
        decay, decay_views = ws.decay()
        multi_copy_(decay_views, params)
        decay.mul_(hyper.weight_decay)
        out.add_(decay[: ws.size])
        ws.n[ws.size :].add_(decay[ws.size :])
    return ws.updates_for(out)


@torch.no_grad()
def prepare_updates_per_tensor(
    params: Sequence[Tensor],
    grads: Sequence[Tensor],
    bufs: Sequence[Tensor],
    layout: Layout,
    hyper: Hyper,
    structure: Structure,
    orth: Orthogonalizer,
) -> list[Tensor]:
    """Steps 1–4 one parameter at a time, one Newton–Schulz call per matrix (same arithmetic)."""
    updates: list[Tensor] = []
    for W, g, m, rc in zip(params, grads, bufs, layout.shapes, strict=True):
        m.mul_(hyper.momentum).add_(g)
        n = m.mul(hyper.momentum).add_(g) if structure.nesterov else m
        if rc is None:
            u = n
        else:
            u = n.mul(hyper.w_sgd)
            if structure.muon:
                O = orth.single(n.reshape(rc), structure.ns)
                O.mul_(muon_rms_scale(*rc)).mul_(hyper.w_muon)
                u.add_(O.reshape_as(u))
        if structure.decay:
            u = u.add(W.mul(hyper.weight_decay))
        updates.append(u)
    return updates


@dataclass(frozen=True)
class StepRecord:
    """One param group's step, as an update rule's body takes it: the parameters with
    gradients, those gradients, their buffers (the rule's state keys, key by key), the routing,
    this step's hyperparameter record, the operations to run and the orthogonalizer (eager, or
    replaying) its Newton-Schulz calls go through."""

    params: Sequence[Tensor]
    grads: Sequence[Tensor]
    bufs: Sequence[Tensor]
    layout: Layout
    hyper: HyperValues
    structure: Structure
    orth: Orthogonalizer = dataclasses.field(default_factory=EagerOrthogonalizer)


# An update rule's body: steps 1-4 of one group (``U`` for ``P <- P - lr*U``), buffers updated in
# place. One signature for both flavours, the replay and the distributed step.
PrepareFn = Callable[[StepRecord], list[Tensor]]


def prepare_default(record: StepRecord, *, foreach: bool = True) -> list[Tensor]:
    """The default flavour's body: :func:`prepare_updates_foreach` (or, without ``foreach``,
    :func:`prepare_updates_per_tensor`) on the record's tensors."""
    hyper = record.hyper
    assert isinstance(hyper, Hyper)  # the default flavour's record
    body = prepare_updates_foreach if foreach else prepare_updates_per_tensor
    return body(
        record.params,
        record.grads,
        record.bufs,
        record.layout,
        hyper,
        record.structure,
        record.orth,
    )


def apply_updates(params: Sequence[Tensor], updates: Sequence[Tensor], lr: Scalar) -> None:
    """Step 5, the write: ``W <- W - lr*U`` as one foreach call over the group, or, for a
    learning rate held in a 0-d device tensor, as ``W - (lr*U)``: two calls that read it on
    the device (the product is rounded before the subtraction)."""
    if isinstance(lr, Tensor):
        multi_add_(params, multi_mul(updates, lr), alpha=-1.0)
        return
    multi_add_(params, updates, alpha=-lr)
