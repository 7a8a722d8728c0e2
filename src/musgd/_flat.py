"""Tensors laid back to back in one buffer, so that a pass over all of them is one launch.

A multi-tensor (``torch._foreach_*``) pass costs host work per tensor: for a YOLO26 model's few
hundred parameters, its momentum buffers and its EMA, each bitwise save and select of the
non-finite guard (``musgd._guard``) was hundreds of microseconds of launches. Tensors this
module allocates (:func:`flat_zeros`) or moves (:func:`adopt_flat`) lie in one buffer per
(device, dtype), in list order, each view's offset rounded up to :data:`ALIGN` elements so that
the device's vectorized kernels see aligned addresses; :func:`runs` finds such tensors again
and gives one view over each run of them. A view keeps its tensor's shape and strides (a
channels-last parameter's buffer is channels-last too).

Only a buffer made here is covered with its padding: the padding belongs to no tensor. Tensors
of any other storage are never merged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import torch
from torch import Tensor

# Each view starts at a multiple of this many elements of its buffer: 16 bytes or more for any
# dtype of 1 to 8 bytes, what the vectorized elementwise kernels need (a misaligned view takes
# their scalar path).
ALIGN = 16
# Set on each buffer made here: the views of one such buffer, and their padding, are ours.
_MARK = "_musgd_flat"


def dense(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether ``stride`` lays ``shape`` out densely, without overlap (a permutation of a
    contiguous layout), so that a buffer of it can hold any gradient of that shape."""
    if len(shape) != len(stride):
        return False
    expected = 1
    for size, step in sorted(
        ((n, st) for n, st in zip(shape, stride, strict=True) if n != 1), key=lambda d: d[1]
    ):
        if step != expected:
            return False
        expected *= size
    return True


def _plain(t: Tensor) -> bool:
    """A strided, dense tensor of no subclass (a DTensor or other wrapper keeps its own)."""
    return (
        type(t) in (Tensor, torch.nn.Parameter)
        and t.layout == torch.strided
        and dense(t.shape, t.stride())
    )


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def flat_views(
    tensors: Sequence[Tensor], include: Sequence[bool] | None = None, *, zeros: bool = False
) -> list[Tensor | None]:
    """Views, one per plain dense tensor of ``tensors`` (where ``include`` says so; None for
    the others), with its shape, strides, dtype and device, laid in list order in one new
    buffer per (device, dtype): uninitialized, or with ``zeros`` zero, padding included (one
    launch per buffer)."""
    views: list[Tensor | None] = [None] * len(tensors)
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, t in enumerate(tensors):
        if (include is None or include[i]) and _plain(t) and t.numel():
            groups.setdefault((t.device, t.dtype), []).append(i)
    for (device, dtype), members in groups.items():
        starts, total = [], 0
        for i in members:
            starts.append(total)
            total += _aligned(tensors[i].numel())
        flat = (torch.zeros if zeros else torch.empty)(total, dtype=dtype, device=device)
        setattr(flat, _MARK, True)
        for i, start in zip(members, starts, strict=True):
            views[i] = flat.as_strided(tensors[i].shape, tensors[i].stride(), start)
    return views


def flat_zeros(like: Sequence[Tensor]) -> list[Tensor]:
    """Zeros shaped and strided like each of ``like`` (``torch.zeros_like(t,
    memory_format=torch.preserve_format)``), the plain dense ones in one buffer per (device,
    dtype)."""
    views = flat_views(like, zeros=True)
    return [
        torch.zeros_like(t, memory_format=torch.preserve_format) if view is None else view
        for t, view in zip(like, views, strict=True)
    ]


def flat_copies(
    tensors: Sequence[Tensor], include: Sequence[bool] | None = None
) -> list[Tensor | None]:
    """:func:`flat_views` of ``tensors`` holding their values, copied by one multi-tensor
    copy (the bits of a ``clone`` each); None where a tensor got no view."""
    views = flat_views(tensors, include)
    into = [view for view in views if view is not None]
    if into:
        torch._foreach_copy_(
            into, [t.detach() for t, v in zip(tensors, views, strict=True) if v is not None]
        )
    return views


def adopt_flat(tensors: Sequence[Tensor]) -> list[Tensor]:
    """Move the plain dense tensors of ``tensors`` into new buffers, in place: each keeps its
    object, values, shape and strides, its data now a view of the buffer (``tensor.data =
    view``). A tensor that shares memory with another stays where it is. Returns the views (for
    the tensors that stayed, a detached alias), in order."""
    count = Counter(t.untyped_storage().data_ptr() for t in tensors)
    alone = [count[t.untyped_storage().data_ptr()] == 1 for t in tensors]
    out = []
    for t, view in zip(tensors, flat_copies(tensors, alone), strict=True):
        if view is None:
            out.append(t.detach())
            continue
        t.data = view
        out.append(view)
    return out


def _base(t: Tensor) -> Tensor | None:
    base = t._base
    return base if base is not None and getattr(base, _MARK, False) else None


def runs(tensors: Sequence[Tensor]) -> list[Tensor]:
    """``tensors`` with each run of two or more consecutive views of one buffer made here (in
    increasing order) replaced by one flat view over the run, padding included."""
    out: list[Tensor] = []
    i = 0
    while i < len(tensors):
        base = _base(tensors[i])
        j = i + 1
        if base is not None:
            end = tensors[i].storage_offset() + tensors[i].numel()
            while (
                j < len(tensors)
                and _base(tensors[j]) is base
                and tensors[j].storage_offset() >= end
            ):
                end = tensors[j].storage_offset() + tensors[j].numel()
                j += 1
        if j - i >= 2:
            assert base is not None
            start = tensors[i].storage_offset()
            out.append(base.as_strided((end - start,), (1,), start))
        else:
            out.extend(tensors[i:j])
        i = j
    return out
