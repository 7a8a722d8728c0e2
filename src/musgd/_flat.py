"""Tensors laid back to back in one buffer, so that a pass over all of them is one launch.

A multi-tensor (``torch._foreach_*``) pass costs host work per tensor: for a YOLO26 model's few
hundred parameters, its momentum buffers and its EMA, each bitwise save and select of the
non-finite guard (``musgd._guard``) was hundreds of microseconds of launches. Tensors this
module allocates (:func:`flat_zeros`) or moves (:func:`adopt_flat`) lie in one buffer per
(device, dtype), in list order, each view's offset rounded up to :data:`ALIGN` elements so that
the device's vectorized kernels see aligned addresses; :func:`runs` finds such tensors again
and gives one view over each run of them, :func:`paired_runs` one view of each of two such
buffers laid out alike (a model's tensors and its EMA's, for an elementwise pass over pairs). A
view keeps its tensor's shape and strides (a channels-last parameter's buffer is channels-last
too).

Only a buffer made here is covered with its padding: the padding belongs to no tensor. Tensors
of any other storage are never merged, and neither are tensors with anything but padding
between them (a tensor left out of a pass must not be covered by it).
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Sequence

import torch
from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary

# Each view starts at a multiple of this many elements of its buffer: 16 bytes or more for any
# dtype of 1 to 8 bytes, what the vectorized elementwise kernels need (a misaligned view takes
# their scalar path).
ALIGN = 16
# Set on each buffer made here: the views of one such buffer, and their padding, are ours.
_MARK = "_musgd_flat"
# A tensor moved by adopt_flat (``tensor.data = view``) is no view autograd knows of (its
# ``_base`` is None), so its buffer is found by its storage's address. Each such tensor holds its
# buffer here (not in an attribute, which a checkpoint would pickle), so a buffer is listed while
# a tensor adopted into it lives, and no other storage can have its address meanwhile.
_ADOPTED: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
_HOLDS: WeakIdKeyDictionary = WeakIdKeyDictionary()


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
        buffer = view._base
        assert buffer is not None  # flat_views' views are views of their buffer
        _ADOPTED[buffer.untyped_storage().data_ptr()] = buffer
        _HOLDS[t] = buffer
        out.append(view)
    return out


def laid_flat(t: Tensor) -> bool:
    """Whether ``t`` lies in a buffer made here (a view of it, or a tensor adopted into it)."""
    return _base(t) is not None


def memory_order(tensors: Sequence[Tensor]) -> list[int]:
    """The indices of ``tensors``: those in buffers made here first, in the order they lie in
    memory (buffer by buffer), then the others in list order."""
    ours = [i for i, t in enumerate(tensors) if _base(t) is not None]
    ours.sort(key=lambda i: (tensors[i].untyped_storage().data_ptr(), tensors[i].storage_offset()))
    taken = set(ours)
    return ours + [i for i in range(len(tensors)) if i not in taken]


def _base(t: Tensor) -> Tensor | None:
    """The buffer made here that ``t`` lies in (a view of it, or a tensor adopted into it)."""
    if not _plain(t):  # a strided slice of a view covers other memory than its numel says
        return None
    base = t._base
    if base is not None and getattr(base, _MARK, False):
        return base
    if not t.numel():
        return None
    base = _ADOPTED.get(t.untyped_storage().data_ptr())
    return base if base is not None and base.device == t.device else None


def _next(t: Tensor) -> int:
    """Where the view after ``t`` in its buffer starts: the padding is all that lies between."""
    return int(t.storage_offset()) + _aligned(t.numel())


def runs(tensors: Sequence[Tensor]) -> list[Tensor]:
    """``tensors`` with each run of two or more views of one buffer made here, each the next
    one in the buffer (only padding between them), replaced by one flat view over the run,
    padding included."""
    out: list[Tensor] = []
    for start, stop in _spans([_base(t) for t in tensors], tensors, tensors):
        out.extend(_merged(tensors, start, stop))
    return out


def paired_runs(a: Sequence[Tensor], b: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """``a`` and ``b`` paired by position (each pair of one shape and strides), with each run of
    two or more pairs that lie alike in two buffers made here (:func:`runs`' runs in both, the
    same distance apart) replaced by one flat view of each buffer over the run: a pass pairing
    ``a[i]`` with ``b[i]`` element by element (the EMA's ``lerp``) may pair the two views'
    elements instead, padding with padding."""
    if len(a) != len(b):
        raise ValueError(f"paired_runs: {len(a)} tensors against {len(b)}")
    bases = [
        None if x.shape != y.shape or x.stride() != y.stride() else _pair(_base(x), _base(y))
        for x, y in zip(a, b, strict=True)
    ]
    out_a: list[Tensor] = []
    out_b: list[Tensor] = []
    for start, stop in _spans(bases, a, b):
        out_a.extend(_merged(a, start, stop))
        out_b.extend(_merged(b, start, stop))
    return out_a, out_b


def _pair(x: Tensor | None, y: Tensor | None) -> tuple[Tensor, Tensor] | None:
    return None if x is None or y is None else (x, y)


def _spans(
    bases: Sequence[object], a: Sequence[Tensor], b: Sequence[Tensor]
) -> list[tuple[int, int]]:
    """``[start, stop)`` index ranges covering ``a``: each longest run whose ``bases`` are one
    object (identity; None never joins) and whose tensors of ``a``, and of ``b`` alike, each
    start where the one before them ends, padding aside."""
    spans = []
    i = 0
    while i < len(a):
        j = i + 1
        if bases[i] is not None:
            while (
                j < len(a)
                and _same(bases[j], bases[i])
                and a[j].storage_offset() == _next(a[j - 1])
                and b[j].storage_offset() - b[j - 1].storage_offset()
                == a[j].storage_offset() - a[j - 1].storage_offset()
            ):
                j += 1
        spans.append((i, j))
        i = j
    return spans


def _same(x: object, y: object) -> bool:
    if isinstance(x, tuple) and isinstance(y, tuple):
        return all(p is q for p, q in zip(x, y, strict=True))
    return x is y


def _merged(tensors: Sequence[Tensor], start: int, stop: int) -> list[Tensor]:
    """``tensors[start:stop]``, or one flat view of their buffer over them where two or more."""
    if stop - start < 2:
        return list(tensors[start:stop])
    base = _base(tensors[start])
    assert base is not None  # a run of two is of one buffer
    first, last = tensors[start], tensors[stop - 1]
    begin = first.storage_offset()
    return [base.as_strided((last.storage_offset() + last.numel() - begin,), (1,), begin)]
