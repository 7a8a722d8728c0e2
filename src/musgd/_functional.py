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

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from musgd._newton_schulz import Triple, orthogonalize, orthogonalize_batched

MOMENTUM_BUFFER = "momentum_buffer"
# Muon's RMS-matching factor: 0.2*sqrt(max(rows, cols)) gives the orthogonalized update about
# the RMS of an Adam/SGD update (Moonshot's "Muon is Scalable", arXiv 2502.16982; R3).
MUON_RMS_SCALE = 0.2

Scalar = float | Tensor


@dataclass(frozen=True)
class NSSettings:
    """The Newton–Schulz settings of one param group."""

    steps: int
    coefficients: tuple[Triple, ...]
    eps: float
    dtype: torch.dtype


@dataclass(frozen=True)
class Hyper:
    """Per-step hyperparameter values: Python floats (eager) or 0-d device tensors (replay)."""

    momentum: Scalar
    weight_decay: Scalar
    w_muon: Scalar
    w_sgd: Scalar


@dataclass(frozen=True)
class Structure:
    """What decides which operations run (as opposed to the values they run with)."""

    nesterov: bool
    decay: bool  # weight_decay != 0
    muon: bool  # w_muon != 0; False skips Newton–Schulz entirely
    ns: NSSettings


@dataclass(frozen=True)
class Bucket:
    """Matrices of one (cols, dtype, device): orthogonalized in one batched call.

    ``rows`` is the stack's row count, that of the bucket's tallest matrix. A matrix with fewer
    rows enters the stack zero-padded to ``rows``: zero rows stay zero through every
    Newton–Schulz iteration (they add nothing to ``X·Xᵀ``'s other entries, to the Frobenius
    norm or to ``B·X``), so its block of the result is its own orthogonalization up to
    rounding. ``member_rows`` gives each matrix's own rows when they differ (empty when every
    matrix has ``rows``); the RMS scale is each matrix's own.
    """

    rows: int
    cols: int
    indices: tuple[int, ...]
    member_rows: tuple[int, ...] = ()

    @property
    def padded(self) -> bool:
        """Whether some matrix of the stack is zero-padded (its rows differ from ``rows``)."""
        return bool(self.member_rows)

    @property
    def scale(self) -> float:
        """The RMS scale of a bucket whose matrices all have ``rows`` rows."""
        return MUON_RMS_SCALE * math.sqrt(max(self.rows, self.cols))

    @property
    def scales(self) -> tuple[float, ...]:
        """Each matrix's RMS scale, ``0.2*sqrt(max(rows_i, cols))``, in ``indices`` order."""
        rows = self.member_rows or (self.rows,) * len(self.indices)
        return tuple(MUON_RMS_SCALE * math.sqrt(max(r, self.cols)) for r in rows)

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


BucketJob = Callable[[], None]


class Orthogonalizer(Protocol):
    """Runs Newton–Schulz on one matrix or on a stack; eager or replayed.

    ``run_buckets`` runs a group's per-bucket jobs (stack, Newton–Schulz, mix); the jobs write
    disjoint tensors, so any order -- or concurrent streams -- gives the same bits.
    """

    def single(self, G: Tensor, ns: NSSettings) -> Tensor: ...

    def batched(self, G: Tensor, ns: NSSettings) -> Tensor: ...

    def run_buckets(self, jobs: Sequence[BucketJob], costs: Sequence[int]) -> None: ...

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
        return orthogonalize(
            G, steps=ns.steps, coefficients=ns.coefficients, eps=ns.eps, dtype=ns.dtype
        )

    def batched(self, G: Tensor, ns: NSSettings) -> Tensor:
        return orthogonalize_batched(
            G, steps=ns.steps, coefficients=ns.coefficients, eps=ns.eps, dtype=ns.dtype
        )


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
    """How far a bucket may zero-pad rows: the bound on padding of :func:`build_layout`.

    A matrix joins a taller one's stack only when it has at least ``min_row_fraction`` of the
    stack's rows, and a stack's padded Newton–Schulz work (rows x cols x min(rows, cols) per
    matrix, at the stack's rows) stays within ``cost_limit`` times its members' own work.
    """

    min_row_fraction: float
    cost_limit: float


# On a GPU these small stacks are bound by kernel launches, not arithmetic: fewer, larger
# stacks win, so rows may differ up to 16x (the bound the Ultralytics MuSGD documents,
# ultralytics-compat.md) with up to 4x the work. Elsewhere (CPU) the arithmetic is the cost:
# only stacks that add at most a quarter of the work merge.
PAD_BOUNDS = {"cuda": PadBound(min_row_fraction=1 / 16, cost_limit=4.0)}
DEFAULT_PAD_BOUND = PadBound(min_row_fraction=0.5, cost_limit=1.25)


def pad_bound(device: torch.device) -> PadBound:
    """The padding bound for matrices on ``device``."""
    return PAD_BOUNDS.get(device.type, DEFAULT_PAD_BOUND)


def build_layout(
    params: Sequence[Tensor], use_muon: bool | None, *, pad: PadBound | None = None
) -> Layout:
    """Route each parameter and bucket its matrices for batched Newton–Schulz.

    Without ``pad``, matrices of equal (rows, cols, dtype, device) share a bucket. With it,
    matrices of equal (cols, dtype, device) do, shorter ones zero-padded to the tallest within
    that bound (:func:`plan_row_buckets`). Buckets are ordered by their first matrix in group
    order, and each keeps its matrices in group order.
    """
    shapes = tuple(matrix_shape(p.shape, use_muon) for p in params)
    groups: dict[tuple[int, int, torch.dtype, torch.device], list[tuple[int, int]]] = {}
    for i, (p, rc) in enumerate(zip(params, shapes, strict=True)):
        if rc is not None:
            rows, cols = rc
            key = (0 if pad is not None else rows, cols, p.dtype, p.device)
            groups.setdefault(key, []).append((i, rows))
    buckets: list[Bucket] = []
    for (_, cols, _, _), members in groups.items():
        heights = [r for _, r in members]
        stacks = (
            [list(range(len(heights)))] if pad is None else plan_row_buckets(heights, cols, pad)
        )
        for stack in stacks:
            member_rows = tuple(heights[k] for k in stack)
            tallest = max(member_rows)
            uneven = any(r != tallest for r in member_rows)
            indices = tuple(members[k][0] for k in stack)
            buckets.append(Bucket(tallest, cols, indices, member_rows if uneven else ()))
    buckets.sort(key=lambda b: b.indices[0])
    return Layout(
        matrices=tuple(i for i, rc in enumerate(shapes) if rc is not None),
        vectors=tuple(i for i, rc in enumerate(shapes) if rc is None),
        buckets=tuple(buckets),
        shapes=shapes,
    )


def ns_work(rows: int, cols: int) -> int:
    """Newton–Schulz work of one ``(rows, cols)`` matrix, up to a constant factor."""
    return rows * cols * min(rows, cols)


def plan_row_buckets(rows: Sequence[int], cols: int, bound: PadBound) -> list[list[int]]:
    """Split matrices of one column count into stacks: index lists into ``rows``.

    Equal row counts always share a stack. Row counts are taken tallest first; a shorter one
    joins the current stack while ``bound`` allows (see :class:`PadBound`), else it starts the
    next stack. Each stack lists its matrices in their order in ``rows``.
    """
    by_rows: dict[int, list[int]] = {}
    for k, r in enumerate(rows):
        by_rows.setdefault(r, []).append(k)
    stacks: list[list[int]] = []
    tallest = unpadded = 0
    for r in sorted(by_rows, reverse=True):
        members = by_rows[r]
        work = len(members) * ns_work(r, cols)
        if stacks and r >= bound.min_row_fraction * tallest:
            count = len(stacks[-1]) + len(members)
            if count * ns_work(tallest, cols) <= bound.cost_limit * (unpadded + work):
                stacks[-1].extend(members)
                unpadded += work
                continue
        stacks.append(list(members))
        tallest, unpadded = r, work
    return [sorted(stack) for stack in stacks]


# Multi-tensor primitives: one ``torch._foreach_*`` call each in eager mode. Under a
# ``torch.compile`` trace they become per-tensor loops, which Inductor fuses into its own kernels
# anyway: on CUDA, Inductor's foreach scheduling fails with an AssertionError when foreach ops
# meet per-tensor reductions over tensors of different shapes (pytorch/pytorch#176591, R140),
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


def multi_copy_(targets: Sequence[Tensor], sources: Sequence[Tensor]) -> None:
    """``t <- s`` for each pair."""
    if not torch.compiler.is_compiling():
        torch._foreach_copy_(list(targets), list(sources))
        return
    for t, src in zip(targets, sources, strict=True):
        t.copy_(src)


def _pick(items: Sequence[Tensor], idx: Sequence[int]) -> list[Tensor]:
    return [items[i] for i in idx]


def momentum_foreach(
    bufs: Sequence[Tensor], grads: Sequence[Tensor], hyper: Hyper, structure: Structure
) -> list[Tensor]:
    """Steps 1–2: ``m <- mu*m + g`` in place; returns ``n`` (fresh with Nesterov, else ``m``)."""
    bufs = list(bufs)
    grads = list(grads)
    multi_mul_(bufs, hyper.momentum)
    multi_add_(bufs, grads)
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
    updates: list[Tensor], indices: Sequence[int], O: Tensor, hyper: Hyper
) -> None:
    """``U += w_muon*O`` for the matrices ``indices``; ``O`` (already scaled) is overwritten.

    ``O`` may be a zero-padded stack: each matrix is read from the first rows of its block.
    """
    O.mul_(hyper.w_muon)
    targets = _pick(updates, indices)
    shape = targets[0].shape
    if all(t.shape == shape for t in targets):
        # One reshape and one unbind instead of an indexing and a reshape per matrix.
        parts: Sequence[Tensor] = O.reshape(len(targets), *shape).unbind(0)
    else:
        # A padded stack's matrix is the first rows of its block (rows = shape[0]).
        parts = [o[: t.shape[0]].reshape_as(t) for o, t in zip(O, targets, strict=True)]
    multi_add_(targets, parts)


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
    add_orthogonalized(updates, bucket.indices, O, hyper)


def stack_bucket(members: Sequence[Tensor], bucket: Bucket) -> Tensor:
    """The ``(B, rows, cols)`` stack of a bucket's tensors, with as few dispatches as possible.

    One tensor is reshaped (a view when its layout allows); tensors of one shape are stacked and
    then reshaped once; mixed shapes of the same matrix view are reshaped one by one first. A
    padded bucket's stack starts as zeros and takes every matrix into its first rows with one
    multi-tensor copy.
    """
    rows, cols = bucket.rows, bucket.cols
    if bucket.padded:
        stack = members[0].new_zeros(len(members), rows, cols)
        blocks = [s[:r] for s, r in zip(stack.unbind(0), bucket.member_rows, strict=True)]
        views = [m.reshape(r, cols) for m, r in zip(members, bucket.member_rows, strict=True)]
        multi_copy_(blocks, views)
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
    exactly (vectors, no Nesterov, no decay), where the buffer itself is returned.
    """
    n = momentum_foreach(bufs, grads, hyper, structure)
    updates = sgd_terms_foreach(n, layout, hyper)
    if structure.muon:
        buckets = layout.buckets
        orth.run_buckets(
            [
                functools.partial(orthogonalize_bucket, n, updates, b, hyper, structure.ns, orth)
                for b in buckets
            ],
            [b.cost for b in buckets],
        )
    if structure.decay:
        add_decay_foreach(updates, params, layout, hyper)
    return updates


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
                O.mul_(MUON_RMS_SCALE * math.sqrt(max(rc))).mul_(hyper.w_muon)
                u.add_(O.reshape_as(u))
        if structure.decay:
            u = u.add(W.mul(hyper.weight_decay))
        updates.append(u)
    return updates


PrepareFn = Callable[
    [
        Sequence[Tensor],
        Sequence[Tensor],
        Sequence[Tensor],
        Layout,
        Hyper,
        Structure,
        Orthogonalizer,
    ],
    list[Tensor],
]


@dataclass(frozen=True)
class GroupStep:
    """One param group's step inputs: the parameters with gradients, those gradients, their
    momentum buffers, the routing, this step's hyperparameters and the operations to run."""

    params: Sequence[Tensor]
    grads: Sequence[Tensor]
    bufs: Sequence[Tensor]
    layout: Layout
    hyper: Hyper
    structure: Structure

    def prepare(self, body: PrepareFn, orth: Orthogonalizer) -> list[Tensor]:
        """Steps 1-4 through ``body`` (a foreach or per-tensor body) with ``orth``."""
        return body(
            self.params, self.grads, self.bufs, self.layout, self.hyper, self.structure, orth
        )


def apply_updates(params: Sequence[Tensor], updates: Sequence[Tensor], lr: float) -> None:
    """Step 5, the write: ``W <- W - lr*U`` as one foreach call over the group."""
    multi_add_(params, updates, alpha=-lr)
