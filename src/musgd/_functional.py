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
from collections.abc import Callable, Hashable, Sequence
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
    # "auto", "triton" or "torch": which Newton–Schulz backend the foreach body runs (WP-009).
    backend: str = "torch"


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
    """Matrices of one (rows, cols, dtype, device): orthogonalized in one batched call."""

    rows: int
    cols: int
    indices: tuple[int, ...]

    @property
    def scale(self) -> float:
        return MUON_RMS_SCALE * math.sqrt(max(self.rows, self.cols))

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

    def table(self, key: Hashable, src: Tensor, run: Callable[[Tensor], Tensor]) -> Tensor:
        """``run(src)``: a whole group's Newton–Schulz table (Triton backend), fresh storage.

        ``key`` names everything ``run`` depends on besides ``src``; a replaying orthogonalizer
        records ``run`` under it. This default calls ``run`` directly.
        """
        return run(src)

    def stacked(self, members: Sequence[Tensor], bucket: Bucket, ns: NSSettings) -> Tensor:
        """``scale * NS(stack)`` of one bucket's tensors, in fresh storage the caller owns.

        Step 3 and the bucket's RMS scale of step 4. This default stacks, calls ``batched`` and
        scales in place; an implementation may save copies but must give the same bits.
        """
        return self.batched(stack_bucket(members, bucket), ns).mul_(bucket.scale)


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


def build_layout(params: Sequence[Tensor], use_muon: bool | None) -> Layout:
    """Route each parameter and bucket equal (rows, cols, dtype, device) matrices together."""
    shapes = tuple(matrix_shape(p.shape, use_muon) for p in params)
    groups: dict[tuple[int, int, torch.dtype, torch.device], list[int]] = {}
    for i, (p, rc) in enumerate(zip(params, shapes, strict=True)):
        if rc is not None:
            groups.setdefault((*rc, p.dtype, p.device), []).append(i)
    buckets = tuple(Bucket(r, c, tuple(idx)) for (r, c, _, _), idx in groups.items())
    return Layout(
        matrices=tuple(i for i, rc in enumerate(shapes) if rc is not None),
        vectors=tuple(i for i, rc in enumerate(shapes) if rc is None),
        buckets=buckets,
        shapes=shapes,
    )


def _pick(items: Sequence[Tensor], idx: Sequence[int]) -> list[Tensor]:
    return [items[i] for i in idx]


def momentum_foreach(
    bufs: Sequence[Tensor], grads: Sequence[Tensor], hyper: Hyper, structure: Structure
) -> list[Tensor]:
    """Steps 1–2: ``m <- mu*m + g`` in place; returns ``n`` (fresh with Nesterov, else ``m``)."""
    bufs = list(bufs)
    grads = list(grads)
    torch._foreach_mul_(bufs, hyper.momentum)
    torch._foreach_add_(bufs, grads)
    if not structure.nesterov:
        return bufs
    n = list(torch._foreach_mul(bufs, hyper.momentum))
    torch._foreach_add_(n, grads)
    return n


def sgd_terms_foreach(n: Sequence[Tensor], layout: Layout, hyper: Hyper) -> list[Tensor]:
    """The update before its orthogonalized and decay terms: ``w_sgd*n`` (matrices), ``n``."""
    updates = list(n)
    if layout.matrices:
        scaled = torch._foreach_mul(_pick(n, layout.matrices), hyper.w_sgd)
        for i, u in zip(layout.matrices, scaled, strict=True):
            updates[i] = u
    return updates


def add_orthogonalized(
    updates: list[Tensor], indices: Sequence[int], O: Tensor, hyper: Hyper
) -> None:
    """``U += w_muon*O`` for the matrices ``indices``; ``O`` (already scaled) is overwritten."""
    O.mul_(hyper.w_muon)
    targets = _pick(updates, indices)
    shape = targets[0].shape
    if all(t.shape == shape for t in targets):
        # One reshape and one unbind instead of an indexing and a reshape per matrix.
        parts: Sequence[Tensor] = O.reshape(len(targets), *shape).unbind(0)
    else:
        parts = [o.reshape_as(t) for o, t in zip(O, targets, strict=True)]
    torch._foreach_add_(targets, list(parts))


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


def orthogonalize_table_into(
    n: Sequence[Tensor],
    updates: list[Tensor],
    layout: Layout,
    hyper: Hyper,
    ns: NSSettings,
    orth: Orthogonalizer,
) -> bool:
    """Step 3 for all of a group's matrices through the Triton backend's one table, then
    ``U += w_muon*O``; False (nothing done) when ``ns.backend`` is "torch" or Triton does not
    apply, so that the caller runs the per-bucket torch backend."""
    if ns.backend == "torch" or not layout.matrices:
        return False
    from musgd._triton_ns import orthogonalize_table  # Triton is imported only when it runs

    shapes = tuple(rc for rc in layout.shapes if rc is not None)
    result = orthogonalize_table(
        _pick(n, layout.matrices),
        shapes,
        requested=ns.backend,
        triples=ns.coefficients,
        eps=ns.eps,
        dtype=ns.dtype,
        run=orth.table,  # looked up only when Triton runs
    )
    if result is None:
        return False
    flat, parts = result
    flat.mul_(hyper.w_muon)
    torch._foreach_add_(_pick(updates, layout.matrices), parts)
    return True


def stack_bucket(members: Sequence[Tensor], bucket: Bucket) -> Tensor:
    """The ``(B, rows, cols)`` stack of a bucket's tensors, with as few dispatches as possible.

    One tensor is reshaped (a view when its layout allows); tensors of one shape are stacked and
    then reshaped once; mixed shapes of the same matrix view are reshaped one by one first.
    """
    rows, cols = bucket.rows, bucket.cols
    if len(members) == 1:
        return members[0].reshape(1, rows, cols)
    shape = members[0].shape
    if all(m.shape == shape for m in members):
        return torch.stack(list(members)).reshape(len(members), rows, cols)
    return torch.stack([m.reshape(rows, cols) for m in members])


def add_decay_foreach(
    updates: list[Tensor], params: Sequence[Tensor], layout: Layout, hyper: Hyper
) -> None:
    """``U += wd*W``: in place for matrices, out of place for vectors (whose U may be ``m``)."""
    decay = torch._foreach_mul(list(params), hyper.weight_decay)
    if layout.matrices:
        torch._foreach_add_(_pick(updates, layout.matrices), _pick(decay, layout.matrices))
    if layout.vectors:
        summed = torch._foreach_add(_pick(updates, layout.vectors), _pick(decay, layout.vectors))
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
    if structure.muon and not orthogonalize_table_into(
        n, updates, layout, hyper, structure.ns, orth
    ):
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
    torch._foreach_add_(list(params), list(updates), alpha=-lr)
