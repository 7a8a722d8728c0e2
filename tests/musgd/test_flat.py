"""Tensors back to back in one buffer: layouts kept, aligned views, runs found again."""

from __future__ import annotations

import gc

import pytest
import torch
from torch import Tensor

from musgd._flat import (
    ALIGN,
    adopt_flat,
    dense,
    flat_zeros,
    laid_flat,
    memory_order,
    paired_runs,
    runs,
)


def mixed_tensors() -> list[Tensor]:
    """Tensors of several layouts, sizes and dtypes: contiguous, channels-last, 0-d, float64."""
    gen = torch.Generator().manual_seed(3)
    return [
        torch.randn(4, 3, 3, 3, generator=gen),
        torch.randn(4, 3, 2, 2, generator=gen).to(memory_format=torch.channels_last),
        torch.randn((), generator=gen),
        torch.randn(7, generator=gen).to(torch.float64),
        torch.randn(5, 3, generator=gen),
    ]


def test_dense_accepts_permuted_contiguous_layouts_only() -> None:
    assert dense((2, 3, 4, 5), (60, 20, 5, 1))  # contiguous
    assert dense((2, 3, 4, 5), (60, 1, 15, 3))  # channels-last
    assert dense((1, 3, 1, 1), (3, 1, 3, 3))  # size-1 dimensions: any stride
    assert not dense((2, 3), (0, 1))  # an expanded gradient (the backward of a mean)
    assert not dense((2, 3), (1, 1))  # overlapping
    assert not dense((2, 3), (6, 1))  # gaps
    assert not dense((2, 3), (3,))


def test_adopted_tensors_keep_their_objects_values_and_layouts() -> None:
    tensors = mixed_tensors()
    before = [(t.clone(), t.stride(), t.dtype, id(t)) for t in tensors]
    views = adopt_flat(tensors)
    for t, view, (value, stride, dtype, ident) in zip(tensors, views, before, strict=True):
        assert id(t) == ident
        assert t.stride() == stride
        assert t.dtype == dtype
        assert torch.equal(t, value)
        assert view.data_ptr() == t.data_ptr()
    merged = runs(views)
    # float32 0..2 are one run, float64 3 its own buffer, float32 4 after it: not consecutive.
    assert len(merged) == 3
    merged[0].add_(1.0)  # one pass over the run reaches each of its tensors
    assert all(torch.equal(tensors[i], before[i][0] + 1) for i in range(3))
    assert torch.equal(tensors[4], before[4][0])


def test_views_start_aligned_and_zeros_keep_their_tensors_layout() -> None:
    like = mixed_tensors()
    zeros = flat_zeros(like)
    for z, t in zip(zeros, like, strict=True):
        assert z.shape == t.shape
        assert z.stride() == t.stride()
        assert z.dtype == t.dtype
        assert not z.any()
        assert z.storage_offset() % ALIGN == 0
    assert zeros[0].untyped_storage().data_ptr() == zeros[4].untyped_storage().data_ptr()
    (run,) = runs(zeros[:3])
    assert run.numel() > sum(z.numel() for z in zeros[:3])  # the padding between them
    assert not run.any()  # zero too


def test_runs_merge_only_consecutive_views_of_a_buffer_made_here() -> None:
    a, b, c = flat_zeros([torch.empty(3), torch.empty(5), torch.empty(2)])
    assert len(runs([a, b, c])) == 1
    assert runs([a, b, c])[0].numel() == 2 * ALIGN + 2  # padding included
    assert len(runs([b, a, c])) == 3  # b then a goes backwards; a and c have b between them
    assert len(runs([a, c])) == 2  # b lies between them: a pass over a and c must not reach it
    assert len(runs([b, c])) == 1
    assert len(runs([a, torch.zeros(2), b])) == 3  # another tensor between them
    assert len(runs([a])) == 1
    assert runs([a])[0] is a
    plain = torch.zeros(20)
    assert len(runs([plain[:8], plain[8:12]])) == 2  # not a buffer of ours: padding unknown


@pytest.mark.parametrize(
    "odd",
    [
        lambda: torch.randn(4, 4)[:, ::2],  # strided
        lambda: torch.randn(4, 5)[:, :3],  # a gap after each row
    ],
    ids=["strided", "gapped"],
)
def test_tensors_not_dense_stay_where_they_are(odd: object) -> None:
    t = odd()  # type: ignore[operator]
    pointer = t.data_ptr()
    zeros = flat_zeros([t])
    adopt_flat([t])
    assert t.data_ptr() == pointer
    assert zeros[0].is_contiguous()
    assert not zeros[0].any()


def test_tied_tensors_stay_where_they_are() -> None:
    shared = torch.randn(6)
    tied = [shared[:3], shared[3:]]
    alone = torch.randn(3)
    pointers = [t.data_ptr() for t in tied]
    views = adopt_flat([*tied, alone])
    assert [t.data_ptr() for t in tied] == pointers
    assert views[2].data_ptr() == alone.data_ptr() != pointers[0]


def test_adopted_tensors_are_found_in_their_buffer_by_their_storage() -> None:
    """A tensor moved by adopt_flat is no autograd view (``_base`` is None), yet runs finds its
    buffer: parameters laid out in one buffer are saved and selected as one view."""
    params = [torch.nn.Parameter(torch.randn(3, 2)), torch.nn.Parameter(torch.randn(5))]
    adopt_flat(params)
    assert all(p._base is None for p in params)
    assert all(laid_flat(p) and laid_flat(p.detach()) for p in params)
    (run,) = runs(params)
    assert run.numel() == ALIGN + 5
    assert len(runs([params[1], params[0]])) == 2


def test_a_buffer_is_forgotten_with_the_tensors_adopted_into_it() -> None:
    tensors = [torch.randn(4), torch.randn(4)]
    views = adopt_flat(tensors)
    alias = tensors[0].detach()  # keeps the storage, not the listing
    del tensors, views
    gc.collect()
    assert not laid_flat(alias)
    assert runs([alias]) == [alias]


def test_paired_runs_merge_only_pairs_laid_out_alike() -> None:
    shapes = [(3, 2), (5,), (2, 2, 1, 1)]
    a = flat_zeros([torch.empty(s) for s in shapes])
    b = [torch.randn(s) for s in shapes]
    adopt_flat(b)
    merged_a, merged_b = paired_runs(a, b)
    assert len(merged_a) == len(merged_b) == 1
    assert merged_a[0].numel() == merged_b[0].numel() == 2 * ALIGN + 4
    torch._foreach_add_(merged_a, merged_b)  # one pass pairs every element with its own
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    # b's second tensor left out: its neighbours are no longer next to each other.
    assert len(paired_runs([a[0], a[2]], [b[0], b[2]])[0]) == 2
    # Laid out alike but the pairs' shapes differ: each pair on its own.
    c = flat_zeros([torch.empty(6), torch.empty(5), torch.empty(4)])
    assert len(paired_runs(c, b)[0]) == 3
    # One side not in a buffer made here.
    assert len(paired_runs(a, [t.clone() for t in b])[0]) == 3
    with pytest.raises(ValueError, match="3 tensors against 2"):
        paired_runs(a, b[:2])


def test_memory_order_puts_laid_out_tensors_first_in_memory_order() -> None:
    tensors = [torch.randn(2), torch.randn(3), torch.randn(4), torch.randn(5)]
    adopt_flat([tensors[3], tensors[1]])
    assert memory_order(tensors) == [3, 1, 0, 2]
