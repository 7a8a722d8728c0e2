"""The functional layer: routing, bucketing, and the foreach body against the per-tensor body."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Hashable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from musgd_reference import route
from torch import Tensor

from musgd._functional import (
    DEFAULT_PAD_BOUND,
    PAD_BOUNDS,
    WORKSPACES,
    Bucket,
    EagerOrthogonalizer,
    Hyper,
    NSSettings,
    Orthogonalizer,
    PadBound,
    Structure,
    add_orthogonalized,
    apply_updates,
    build_layout,
    matrix_shape,
    ns_work,
    pad_bound,
    plan_stacks,
    prepare_updates_foreach,
    prepare_updates_per_tensor,
    run_in_order,
    scale_stack,
    stack_bucket,
)
from musgd._newton_schulz import resolve_coefficients

NS32 = NSSettings(
    steps=5,
    coefficients=resolve_coefficients((3.4445, -4.7750, 2.0315), 5),
    eps=1e-7,
    dtype=torch.float32,
)


class RecordingOrthogonalizer(Orthogonalizer):
    """Eager NS, one matrix at a time (so both bodies see identical bits), recording the calls."""

    def __init__(self) -> None:
        self.inner = EagerOrthogonalizer()
        self.batched_shapes: list[tuple[int, ...]] = []
        self.single_shapes: list[tuple[int, ...]] = []

    run_buckets = staticmethod(run_in_order)

    def single(self, G: Tensor, ns: NSSettings) -> Tensor:
        self.single_shapes.append(tuple(G.shape))
        return self.inner.single(G, ns)

    def batched(self, G: Tensor, ns: NSSettings) -> Tensor:
        self.batched_shapes.append(tuple(G.shape))
        return torch.stack([self.inner.single(g, ns) for g in G])


@pytest.mark.parametrize(
    ("shape", "use_muon", "expected"),
    [
        ((16, 3, 3, 3), None, (16, 27)),  # conv kernel (O, I, kh, kw) -> (O, I*kh*kw)
        ((64, 32, 1, 1), None, (64, 32)),  # 1x1 conv
        ((8, 12), None, (8, 12)),
        ((12, 8), None, (12, 8)),
        ((8, 1, 1), None, None),  # (C, 1, 1) gain: one column, a vector
        ((8,), None, None),  # bias
        ((1, 5), None, None),  # one row
        ((5, 1), None, None),  # one column
        ((), None, None),  # 0-d scalar
        ((0, 4), None, None),  # empty
        ((8, 1, 1), True, (8, 1)),  # forced onto the matrix route
        ((8,), True, (8, 1)),
        ((16, 3, 3, 3), False, None),  # forced onto the vector route
        ((0, 4), True, None),  # nothing to orthogonalize even when forced
    ],
)
def test_matrix_shape_routes_as_specified(
    shape: tuple[int, ...], use_muon: bool | None, expected: tuple[int, int] | None
) -> None:
    assert matrix_shape(shape, use_muon) == expected


@settings(max_examples=200, deadline=None)
@given(
    shape=st.lists(st.integers(min_value=1, max_value=6), min_size=0, max_size=4),
    use_muon=st.sampled_from([None, True, False]),
)
def test_matrix_shape_agrees_with_the_spec_rule(shape: list[int], use_muon: bool | None) -> None:
    got = matrix_shape(tuple(shape), use_muon)
    assert got == route(tuple(shape), use_muon)
    if got is not None:
        # The view covers the parameter exactly: a reshape, never padding.
        assert got[0] * got[1] == math.prod(shape)


def _params(shapes_dtypes: list[tuple[tuple[int, ...], torch.dtype]]) -> list[Tensor]:
    return [torch.zeros(shape, dtype=dtype) for shape, dtype in shapes_dtypes]


def test_layout_buckets_equal_rows_cols_dtype_device() -> None:
    params = _params(
        [
            ((8, 4, 3, 3), torch.float32),  # 0: (8, 36)
            ((8,), torch.float32),  # 1: vector
            ((8, 36), torch.float32),  # 2: (8, 36), same bucket as 0
            ((36, 8), torch.float32),  # 3: transposed shape, own bucket
            ((8, 36), torch.float64),  # 4: other dtype, own bucket
            ((8, 1, 1), torch.float32),  # 5: gain, vector
            ((8, 4, 3, 3), torch.float32),  # 6: (8, 36) again
        ]
    )
    params.append(torch.zeros(8, 36, device="meta"))  # 7: other device, own bucket
    layout = build_layout(params, None)
    assert layout.matrices == (0, 2, 3, 4, 6, 7)
    assert layout.vectors == (1, 5)
    assert {b.indices: (b.rows, b.cols) for b in layout.buckets} == {
        (0, 2, 6): (8, 36),
        (3,): (36, 8),
        (4,): (8, 36),
        (7,): (8, 36),
    }
    assert layout.shapes[1] is None
    assert layout.shapes[0] == (8, 36)


def test_layout_respects_use_muon() -> None:
    params = _params([((8, 36), torch.float32), ((8,), torch.float32)])
    assert build_layout(params, False).matrices == ()
    forced = build_layout(params, True)
    assert forced.matrices == (0, 1)
    assert {b.indices for b in forced.buckets} == {(0,), (1,)}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=3),
            st.sampled_from([torch.float32, torch.float64]),
        ),
        max_size=10,
    )
)
def test_buckets_partition_the_matrices(
    spec: list[tuple[list[int], torch.dtype]],
) -> None:
    """Without a pad bound, one bucket per (rows, cols, dtype): no padding."""
    params = _params([(tuple(s), d) for s, d in spec])
    layout = build_layout(params, None)
    flat = sorted(i for b in layout.buckets for i in b.indices)
    assert flat == list(layout.matrices)
    keys = set()
    for bucket in layout.buckets:
        assert not bucket.padded
        members = {(*layout.shapes[i], params[i].dtype) for i in bucket.indices}  # type: ignore[misc]
        assert members == {(bucket.rows, bucket.cols, params[bucket.indices[0]].dtype)}
        assert list(bucket.indices) == sorted(bucket.indices)  # group order kept
        keys.add((bucket.rows, bucket.cols, params[bucket.indices[0]].dtype))
    assert len(keys) == len(layout.buckets)  # one bucket per key


BOUNDS = [PadBound(0.5, 1.25), PadBound(1 / 16, 4.0, pad_cols=True), PadBound(0.25, 2.0)]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=70),
            st.sampled_from([4, 9, 36, 50]),
            st.sampled_from([torch.float32, torch.float64]),
        ),
        max_size=16,
    ),
    st.sampled_from(BOUNDS),
)
def test_padded_buckets_respect_the_bound(
    spec: list[tuple[int, int, torch.dtype]], bound: PadBound
) -> None:
    params = [torch.zeros(r, c, dtype=d) for r, c, d in spec]
    layout = build_layout(params, None, pad=bound)
    assert sorted(i for b in layout.buckets for i in b.indices) == list(layout.matrices)
    assert [b.indices[0] for b in layout.buckets] == sorted(b.indices[0] for b in layout.buckets)
    home: dict[tuple[int, int, torch.dtype], int] = {}
    for k, bucket in enumerate(layout.buckets):
        assert list(bucket.indices) == sorted(bucket.indices)
        assert len({params[i].dtype for i in bucket.indices}) == 1
        own = [tuple(params[i].shape) for i in bucket.indices]
        placed = list(bucket.member_shapes) or [(bucket.rows, bucket.cols)] * len(own)
        flips = list(bucket.transposed) or [False] * len(own)
        assert bucket.padded == bool(bucket.member_shapes)
        for (r, c), (pr, pc), flip in zip(own, placed, flips, strict=True):
            assert (pc, pr) == (r, c) if flip else (pr, pc) == (r, c)
            assert bound.min_fraction * bucket.rows <= pr <= bucket.rows
            assert bound.min_fraction * bucket.cols <= pc <= bucket.cols
            if not bound.pad_cols:
                assert pc == bucket.cols
                assert not flip
        assert bucket.rows == max(r for r, _ in placed)
        assert bucket.cols == max(c for _, c in placed)
        assert bucket.cost <= bound.cost_limit * sum(ns_work(r, c) for r, c in own)
        for i in bucket.indices:  # equal (rows, cols, dtype) never split over two buckets
            key = (*params[i].shape, params[i].dtype)
            assert home.setdefault(key, k) == k


def test_stacks_take_the_costliest_shape_first_within_the_bound() -> None:
    rows_only = PadBound(1 / 16, 4.0)
    # Column count 64: rows 64, 60 and 32 fit one stack at 1/16 and 4x; 2 rows is below 1/16.
    shapes = [(32, 64), (64, 64), (2, 64), (60, 64), (64, 64)]
    assert plan_stacks(shapes, rows_only) == [[0, 1, 3, 4], [2]]
    # At half the rows and 1.25x the work, 60 joins 64 but 32 (4x its own work) does not.
    assert plan_stacks(shapes, PadBound(0.5, 1.25)) == [[1, 3, 4], [0], [2]]
    # Without pad_cols only the column count 64 shares a stack; with it, (64, 40) joins too.
    # (2, 2) is below 1/16 of 64 either way.
    mixed = [(64, 64), (64, 40), (40, 64), (2, 2)]
    assert plan_stacks(mixed, rows_only) == [[0, 2], [1], [3]]
    assert plan_stacks(mixed, PadBound(1 / 16, 4.0, pad_cols=True)) == [[0, 1, 2], [3]]


def test_a_stack_of_tall_and_wide_matrices_transposes_the_tall_ones() -> None:
    params = [torch.zeros(40, 64), torch.zeros(64, 40), torch.zeros(64, 64)]
    (bucket,) = build_layout(params, None, pad=PadBound(1 / 16, 4.0, pad_cols=True)).buckets
    assert (bucket.rows, bucket.cols, bucket.indices) == (64, 64, (0, 1, 2))
    assert bucket.member_shapes == ((40, 64), (40, 64), (64, 64))
    assert bucket.transposed == (False, True, False)
    # All tall: the stack keeps their orientation (Newton–Schulz transposes it whole).
    (tall,) = build_layout(params[1:2] * 2, None, pad=PadBound(1 / 16, 4.0, pad_cols=True)).buckets
    assert (tall.rows, tall.cols, tall.padded) == (64, 40, False)


def test_pad_bound_is_wider_on_cuda_than_elsewhere() -> None:
    cuda = pad_bound(torch.device("cuda", 0))
    assert cuda is PAD_BOUNDS["cuda"]
    assert pad_bound(torch.device("cpu")) is DEFAULT_PAD_BOUND
    assert cuda.min_fraction < DEFAULT_PAD_BOUND.min_fraction
    assert cuda.cost_limit > DEFAULT_PAD_BOUND.cost_limit
    assert cuda.pad_cols
    assert not DEFAULT_PAD_BOUND.pad_cols


def test_padded_stack_holds_each_matrix_in_its_corner_and_zeros_elsewhere() -> None:
    gen = torch.Generator().manual_seed(3)
    members = [
        torch.randn(4, 2, 3, generator=gen),
        torch.randn(6, 6, generator=gen),
        torch.randn(5, 3, generator=gen),
    ]
    bucket = Bucket(6, 6, (0, 1, 2), ((4, 6), (6, 6), (3, 5)), (False, False, True))
    stack = stack_bucket(members, bucket)
    assert stack.shape == (3, 6, 6)
    assert torch.equal(stack[0, :4], members[0].reshape(4, 6))
    assert torch.equal(stack[0, 4:], torch.zeros(2, 6))
    assert torch.equal(stack[1], members[1])
    assert torch.equal(stack[2, :3, :5], members[2].mT)
    assert torch.equal(stack[2, 3:], torch.zeros(3, 6))
    assert torch.equal(stack[2, :, 5:], torch.zeros(6, 1))
    assert bucket.scales == (0.2 * math.sqrt(6), 0.2 * math.sqrt(6), 0.2 * math.sqrt(5))
    scaled = scale_stack(stack.clone(), bucket)
    for k, s in enumerate(bucket.scales):
        assert torch.equal(scaled[k], stack[k] * s)
    # add_orthogonalized reads each matrix back from its corner, in its own shape.
    hyper = Hyper(momentum=0.9, weight_decay=0.0, w_muon=0.5, w_sgd=0.5)
    updates = [torch.zeros_like(m) for m in members]
    add_orthogonalized(updates, (0, 1, 2), stack.clone(), hyper, bucket)
    for u, m in zip(updates, members, strict=True):
        assert torch.equal(u, m * 0.5)


@pytest.mark.parametrize(
    ("bound", "stacks"),
    [
        (PadBound(0.25, 4.0), [(0, 1, 2), (3, 4, 5)]),
        # (160, 12) is wider than 144 once transposed: a stack of its own.
        (PadBound(1 / 16, 16.0, pad_cols=True), [(0, 1, 2, 3, 5), (4,)]),
    ],
    ids=["rows", "rows-and-cols"],
)
@pytest.mark.parametrize("ns_dtype", [torch.float32, torch.bfloat16])
def test_padded_buckets_give_the_per_matrix_result_up_to_rounding(
    ns_dtype: torch.dtype, bound: PadBound, stacks: list[tuple[int, ...]]
) -> None:
    """Zero rows and columns stay zero through Newton–Schulz, wide and tall matrices alike."""
    shapes = [(48, 16, 3, 3), (40, 144), (24, 16, 3, 3), (144, 12), (160, 12), (130, 12), (5,)]
    gen = torch.Generator().manual_seed(11)
    params = [torch.randn(s, generator=gen) for s in shapes]
    grads = [torch.randn(s, generator=gen) for s in shapes]
    bufs = [torch.randn(s, generator=gen) for s in shapes]
    ns = NSSettings(NS32.steps, NS32.coefficients, NS32.eps, ns_dtype)
    structure = Structure(nesterov=True, decay=True, muon=True, ns=ns)
    hyper = Hyper(momentum=0.9, weight_decay=0.05, w_muon=0.5, w_sgd=0.5)
    padded = build_layout(params, None, pad=bound)
    assert sorted(b.indices for b in padded.buckets) == stacks
    assert padded.buckets[0].padded
    orth = EagerOrthogonalizer()
    bufs_b = [b.clone() for b in bufs]
    u_a = prepare_updates_foreach(params, grads, bufs, padded, hyper, structure, orth)
    u_b = prepare_updates_per_tensor(params, grads, bufs_b, padded, hyper, structure, orth)
    tol = 1e-5 if ns_dtype == torch.float32 else 2e-2
    for a, b in zip(u_a, u_b, strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)


GROUP_SHAPES = [(8, 4, 3, 3), (8, 36), (8,), (36, 8), (8, 4, 3, 3), (8, 1, 1), (6, 6)]


def _group(seed: int) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    params = [torch.randn(s, generator=gen) for s in GROUP_SHAPES]
    grads = [torch.randn(s, generator=gen) for s in GROUP_SHAPES]
    bufs = [torch.randn(s, generator=gen) for s in GROUP_SHAPES]
    return params, grads, bufs


STRUCTURES = [
    Structure(nesterov=n, decay=d, muon=m, ns=NS32)
    for n, d, m in itertools.product([True, False], repeat=3)
]


@pytest.mark.parametrize("structure", STRUCTURES, ids=str)
def test_foreach_body_equals_per_tensor_body_bit_for_bit(structure: Structure) -> None:
    hyper = Hyper(momentum=0.9, weight_decay=0.1 if structure.decay else 0.0, w_muon=0.7, w_sgd=0.3)
    params, grads, bufs = _group(1)
    layout = build_layout(params, None)
    bufs_a = [b.clone() for b in bufs]
    bufs_b = [b.clone() for b in bufs]
    orth_a, orth_b = RecordingOrthogonalizer(), RecordingOrthogonalizer()
    u_a = prepare_updates_foreach(params, grads, bufs_a, layout, hyper, structure, orth_a)
    u_b = prepare_updates_per_tensor(params, grads, bufs_b, layout, hyper, structure, orth_b)
    for a, b in itertools.chain(zip(u_a, u_b, strict=True), zip(bufs_a, bufs_b, strict=True)):
        assert torch.equal(a, b)
    # The foreach body stacks same-shape matrices: one batched call per bucket, no padding.
    if structure.muon:
        assert sorted(orth_a.batched_shapes) == [(1, 6, 6), (1, 36, 8), (3, 8, 36)]
        assert orth_a.single_shapes == []
        assert sorted(orth_b.single_shapes) == [(6, 6), (8, 36), (8, 36), (8, 36), (36, 8)]
    else:
        assert orth_a.batched_shapes == orth_a.single_shapes == orth_b.single_shapes == []


class TableStandIn(RecordingOrthogonalizer):
    """The Triton table replaced by the per-tensor body's own arithmetic on the packed source
    (``w_sgd·n + w_muon·scale·NS(n)`` per matrix), so that the packed body can be compared bit
    for bit with the per-tensor one; records each packed source."""

    def __init__(self, hyper: Hyper, ns: NSSettings) -> None:
        super().__init__()
        self.hyper, self.ns = hyper, ns
        self.sources: list[Tensor] = []

    def table(self, key: Hashable, src: Tensor, run: Callable[[Tensor], Tensor]) -> Tensor:
        assert isinstance(key, tuple)
        self.sources.append(src.clone())
        parts, offset = [], 0
        for rows, cols in key[1]:  # the plan's (rows, cols) shapes, in packed order
            n = src[offset : offset + rows * cols].view(rows, cols)
            offset += rows * cols
            O = self.single(n, self.ns)
            O.mul_(0.2 * math.sqrt(max(rows, cols))).mul_(self.hyper.w_muon)
            parts.append(n.mul(self.hyper.w_sgd).add_(O).reshape(-1))
        assert offset == src.numel()
        return torch.cat(parts)


TRITON_NS = dataclasses.replace(NS32, dtype=torch.bfloat16, backend="triton")
# The packed body runs the Triton momentum kernel: on CUDA where there is a GPU (the kernels
# are then compiled for it), else in Triton's CPU interpreter.
PACKED_DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _packable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the Triton table apply to this test's group (its kernels are never run: the
    stand-in replaces the table; the momentum kernel runs)."""
    pytest.importorskip("triton")
    if PACKED_DEVICE.type == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def _packed_group(seed: int) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    return tuple([t.to(PACKED_DEVICE) for t in ts] for ts in _group(seed))  # type: ignore[return-value]


@pytest.mark.parametrize("structure", [s for s in STRUCTURES if s.muon], ids=str)
@pytest.mark.parametrize("channels_last", [False, True])
def test_packed_body_equals_per_tensor_body_bit_for_bit(
    structure: Structure, channels_last: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the Triton table runs, the group runs packed: momentum, Nesterov, decay and the
    unpacking give the per-tensor body's bits, in group order, buffers included."""
    _packable(monkeypatch)
    structure = dataclasses.replace(structure, ns=TRITON_NS)
    hyper = Hyper(momentum=0.9, weight_decay=0.1 if structure.decay else 0.0, w_muon=0.7, w_sgd=0.3)
    params, grads, bufs = _packed_group(5)
    if channels_last:  # the conv kernels' tensors as a channels-last model holds them
        for ts in (params, grads, bufs):
            ts[0] = ts[0].contiguous(memory_format=torch.channels_last)
    layout = build_layout(params, None)
    bufs_a = [b.clone(memory_format=torch.preserve_format) for b in bufs]
    bufs_b = [b.clone(memory_format=torch.preserve_format) for b in bufs]
    packed = TableStandIn(hyper, TRITON_NS)
    u_a = prepare_updates_foreach(params, grads, bufs_a, layout, hyper, structure, packed)
    u_b = prepare_updates_per_tensor(
        params, grads, bufs_b, layout, hyper, structure, RecordingOrthogonalizer()
    )
    assert len(packed.sources) == 1, "the group's matrices go through one table"
    assert packed.batched_shapes == []
    for a, b in itertools.chain(zip(u_a, u_b, strict=True), zip(bufs_a, bufs_b, strict=True)):
        assert a.shape == b.shape
        assert torch.equal(a, b)
    assert bufs_a[0].is_contiguous(memory_format=torch.channels_last) == channels_last


def test_a_group_of_mixed_dtypes_is_not_packed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Packing would promote a float32 and a float64 tensor to one dtype: such a group runs the
    multi-tensor body (the table takes its matrices alone), with the per-tensor body's bits."""
    _packable(monkeypatch)
    structure = Structure(nesterov=True, decay=True, muon=True, ns=TRITON_NS)
    hyper = Hyper(momentum=0.9, weight_decay=0.1, w_muon=0.7, w_sgd=0.3)
    params, grads, bufs = _packed_group(6)
    params[2], grads[2], bufs[2] = params[2].double(), grads[2].double(), bufs[2].double()
    layout = build_layout(params, None)
    bufs_b = [b.clone() for b in bufs]
    orth = TableStandIn(hyper, TRITON_NS)
    u_a = prepare_updates_foreach(params, grads, bufs, layout, hyper, structure, orth)
    u_b = prepare_updates_per_tensor(
        params, grads, bufs_b, layout, hyper, structure, RecordingOrthogonalizer()
    )
    assert [s.dtype for s in orth.sources] == [torch.float32]
    for a, b in itertools.chain(zip(u_a, u_b, strict=True), zip(bufs, bufs_b, strict=True)):
        assert a.dtype == b.dtype
        assert torch.equal(a, b)


@pytest.mark.parametrize("packed", [False, True])
def test_bodies_called_in_grad_mode_track_nothing(
    packed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Called with grad mode on and parameters that require gradients (as a test or a tool
    would), the bodies record no autograd history and compute what they compute under
    ``no_grad``: in-place writes into views of packed results must not trip autograd."""
    ns = NS32
    params, grads, bufs = _group(7)
    if packed:
        _packable(monkeypatch)
        ns = TRITON_NS
        params, grads, bufs = _packed_group(7)
    structure = Structure(nesterov=True, decay=True, muon=True, ns=ns)
    hyper = Hyper(momentum=0.9, weight_decay=0.1, w_muon=0.7, w_sgd=0.3)
    layout = build_layout(params, None)
    results = []
    for grad_mode in (True, False):
        leaves = [p.clone().requires_grad_() for p in params]
        moved = [b.clone() for b in bufs]
        orth = TableStandIn(hyper, ns)
        with torch.set_grad_enabled(grad_mode):
            for body in (prepare_updates_foreach, prepare_updates_per_tensor):
                updates = body(
                    leaves, grads, [b.clone() for b in moved], layout, hyper, structure, orth
                )
                assert not any(u.requires_grad for u in updates)
                results.append(updates)
        assert len(orth.sources) == int(packed)
    for a, b in zip(results[0] + results[1], results[2] + results[3], strict=True):
        assert torch.equal(a, b)


def test_workspaces_are_kept_per_key_and_bounded() -> None:
    """An orthogonalizer keeps what ``build`` made under its key and hands it back, and keeps
    at most ``WORKSPACES`` of them, dropping the oldest first."""
    orth = EagerOrthogonalizer()
    built: list[int] = []

    def build(k: int) -> Callable[[], list[int]]:
        return lambda: built.append(k) or [k]  # type: ignore[func-returns-value]

    first = orth.workspace(0, build(0))
    assert orth.workspace(0, build(0)) is first
    for k in range(1, WORKSPACES + 1):
        orth.workspace(k, build(k))
    assert built == list(range(WORKSPACES + 1))
    assert orth.workspace(WORKSPACES, build(WORKSPACES)) == [WORKSPACES]  # kept
    assert orth.workspace(0, build(0)) is not first  # the oldest was dropped: built again
    assert built[-1] == 0
    assert EagerOrthogonalizer().workspace(1, build(1)) == [1]  # each orthogonalizer its own


def test_foreach_body_with_real_batched_ns_matches_per_tensor() -> None:
    structure = Structure(nesterov=True, decay=True, muon=True, ns=NS32)
    hyper = Hyper(momentum=0.95, weight_decay=0.05, w_muon=0.5, w_sgd=0.5)
    params, grads, bufs = _group(2)
    layout = build_layout(params, None)
    orth = EagerOrthogonalizer()
    bufs_b = [b.clone() for b in bufs]
    u_a = prepare_updates_foreach(params, grads, bufs, layout, hyper, structure, orth)
    u_b = prepare_updates_per_tensor(params, grads, bufs_b, layout, hyper, structure, orth)
    for a, b in zip(u_a, u_b, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_bodies_do_not_write_params_or_grads() -> None:
    structure = Structure(nesterov=True, decay=True, muon=True, ns=NS32)
    hyper = Hyper(momentum=0.9, weight_decay=0.1, w_muon=0.5, w_sgd=0.5)
    for body in (prepare_updates_foreach, prepare_updates_per_tensor):
        params, grads, bufs = _group(3)
        before = [t.clone() for t in params + grads]
        body(
            params, grads, bufs, build_layout(params, None), hyper, structure, EagerOrthogonalizer()
        )
        assert all(torch.equal(a, b) for a, b in zip(params + grads, before, strict=True))


def test_apply_updates_writes_w_minus_lr_u() -> None:
    params, updates, _ = _group(4)
    expected = [p - 0.25 * u for p, u in zip(params, updates, strict=True)]
    apply_updates(params, updates, 0.25)
    for p, e in zip(params, expected, strict=True):
        torch.testing.assert_close(p, e, atol=1e-6, rtol=0)


BUCKET_MEMBERS = {
    "one": [(8, 4, 3, 3)],
    "same shapes": [(8, 4, 3, 3)] * 3,
    "mixed shapes": [(8, 4, 3, 3), (8, 36), (8, 4, 3, 3)],
}


@pytest.mark.parametrize("members", BUCKET_MEMBERS.values(), ids=BUCKET_MEMBERS.keys())
@pytest.mark.parametrize("channels_last", [False, True])
def test_stack_and_add_back_match_the_per_matrix_reshapes(
    members: list[tuple[int, ...]], channels_last: bool
) -> None:
    gen = torch.Generator().manual_seed(7)
    fmt = torch.channels_last if channels_last else torch.contiguous_format

    def make(shape: tuple[int, ...]) -> Tensor:
        t = torch.randn(shape, generator=gen)
        return t.to(memory_format=fmt) if t.dim() == 4 else t

    n = [make(s) for s in members]
    bucket = Bucket(8, 36, tuple(range(len(members))))
    assert torch.equal(stack_bucket(n, bucket), torch.stack([m.reshape(8, 36) for m in n]))
    O = torch.randn(len(members), 8, 36, generator=gen)
    hyper = Hyper(momentum=0.9, weight_decay=0.0, w_muon=0.7, w_sgd=0.3)
    updates = [make(s) for s in members]
    expected = [u + (o * bucket.scale * 0.7).reshape_as(u) for u, o in zip(updates, O, strict=True)]
    add_orthogonalized(updates, bucket.indices, O.clone() * bucket.scale, hyper)
    assert all(torch.equal(u, e) for u, e in zip(updates, expected, strict=True))
