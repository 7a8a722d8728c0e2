"""Distributed MuSGD (src/musgd/_distributed.py): DDP and FSDP2 on CPU through gloo.

World sizes 1, 2 and 3 (3 splits the 5-row and 2-row matrices unevenly, leaving one rank an empty
shard) are spawned once each; every rank trains the same small model under DDP and under FSDP2
``fully_shard``, saves a ``torch.distributed.checkpoint`` half-way and resumes from it
(distributed_worker.py). The reference is single-process MuSGD fed the very gradients each
distributed step used. On CPU, batched Newton-Schulz gives the same bits for any slicing of a
bucket (checked below), so the single-process run *is* the run with the same bucket plan and
results must match bitwise.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from distributed_worker import STEPS, Net, first_difference, main

import musgd._distributed as distributed
from musgd import MuSGD, orthogonalize_batched, param_groups
from musgd._distributed import (
    SUPPORTED_SETUPS,
    CallCost,
    ShardedStep,
    _chunk_rows,
    measure_costs,
    ns_iteration_flops,
    plan_buckets,
    plan_stages,
    wire_dtype,
)
from musgd._functional import Bucket, Layout, build_layout

KINDS = ("ddp", "fsdp")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda w: f"world{w}")
def spawned(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    world = int(request.param)
    out = tmp_path_factory.mktemp(f"world{world}")
    mp.spawn(main, args=(world, _free_port(), str(out)), nprocs=world, join=True)  # type: ignore[attr-defined,no-untyped-call]
    return world, [torch.load(out / f"rank{r}.pt") for r in range(world)]


@pytest.mark.slow  # spawns gloo worlds of 1-3 processes (make test-fast skips it)
@pytest.mark.parametrize("kind", KINDS)
def test_matches_single_process_reference_bitwise(spawned: Any, kind: str) -> None:
    _, ranks = spawned
    for rank, res in enumerate(ranks):
        diff = first_difference(res[kind]["final"], res[kind]["reference"])
        assert diff is None, f"{kind} rank {rank}: {diff}"


@pytest.mark.slow  # spawns gloo worlds of 1-3 processes (make test-fast skips it)
@pytest.mark.parametrize("kind", KINDS)
def test_ranks_agree_bitwise(spawned: Any, kind: str) -> None:
    _, ranks = spawned
    for rank, res in enumerate(ranks[1:], start=1):
        assert first_difference(res[kind]["final"], ranks[0][kind]["final"]) is None, rank


@pytest.mark.slow  # spawns gloo worlds of 1-3 processes (make test-fast skips it)
@pytest.mark.parametrize("kind", KINDS)
def test_resume_through_distributed_checkpoint_is_bit_identical(spawned: Any, kind: str) -> None:
    _, ranks = spawned
    for rank, res in enumerate(ranks):
        diff = first_difference(res[kind]["resumed"], res[kind]["final"])
        assert diff is None, f"{kind} rank {rank}: {diff}"


@pytest.mark.slow  # spawns gloo worlds of 1-3 processes (make test-fast skips it)
@pytest.mark.parametrize("kind", KINDS)
def test_each_rank_orthogonalizes_only_its_planned_share(spawned: Any, kind: str) -> None:
    world, ranks = spawned
    model = Net()
    groups = param_groups(model, weight_decay=0.01)
    # The sharded step plans over same-shape buckets (it never zero-pads).
    buckets = build_layout(list(groups[0]["params"]), None).buckets
    plan = plan_buckets(buckets, world)
    expected = [STEPS * sum(i.stop - i.start for i in plan.owned(r)) for r in range(world)]
    counted = [res[kind]["orthogonalized"] for res in ranks]
    assert counted == expected
    total = STEPS * sum(len(b.indices) for b in buckets)
    assert sum(counted) == total
    if world > 1:
        assert max(counted) < total  # no rank does all the work


@pytest.mark.slow  # spawns gloo worlds of 1-3 processes (make test-fast skips it)
def test_each_ddp_rank_writes_only_its_own_matrices_and_every_vector(spawned: Any) -> None:
    # The element-wise update of a matrix (its Nesterov input onwards) runs on its owner only;
    # the others update its momentum buffer and copy the new parameter in.
    world, ranks = spawned
    expected = [0] * world
    for group in param_groups(Net(), weight_decay=0.01):
        params = list(group["params"])
        layout = build_layout(params, group.get("use_muon"))
        plan = plan_buckets(layout.buckets, world)
        vectors = sum(params[i].numel() for i in layout.vectors)
        for r in range(world):
            owned = plan.owned(r) if world > 1 else plan.items
            matrices = sum(
                params[i].numel()
                for item in owned
                for i in layout.buckets[item.bucket].indices[item.start : item.stop]
            )
            expected[r] += STEPS * (matrices + vectors)
    assert [res["ddp"]["written"] for res in ranks] == expected
    if world > 1:  # (world size 1 runs the single-process body, which this does not count)
        assert [res["ddp"]["nesterov"] for res in ranks] == expected
        total = STEPS * sum(p.numel() for p in Net().parameters())
        assert max(expected) < total


def test_batched_newton_schulz_is_slice_invariant_on_cpu() -> None:
    # The precondition for comparing against plain single-process MuSGD bit for bit.
    G = torch.randn(5, 16, 27, generator=torch.Generator().manual_seed(3))
    pieces = torch.cat([orthogonalize_batched(G[:2]), orthogonalize_batched(G[2:])])
    assert torch.equal(pieces, orthogonalize_batched(G))


def test_ns_iteration_flops_counts_the_three_products() -> None:
    # (2 x 3): X X^T = 2*2*2*3, A A = 2*2*2*2, B X = 2*2*2*3 -> 24 + 16 + 24.
    assert ns_iteration_flops(2, 3) == 64
    assert ns_iteration_flops(3, 2) == 64


def test_plan_covers_every_matrix_once_and_balances() -> None:
    buckets = (
        Bucket(768, 3072, tuple(range(12))),
        Bucket(3072, 768, tuple(range(12, 24))),
        Bucket(768, 768, tuple(range(24, 72))),
        Bucket(16, 27, (72,)),
    )
    for world in (1, 2, 3, 8):
        plan = plan_buckets(buckets, world)
        covered = sorted(
            buckets[i.bucket].indices[k] for i in plan.items for k in range(i.start, i.stop)
        )
        assert covered == list(range(73))
        biggest = max(i.flops for i in plan.items)
        # Greedy largest-first: no rank exceeds the mean by more than one item.
        assert max(plan.loads) <= sum(plan.loads) / world + biggest
        assert plan == plan_buckets(buckets, world)  # deterministic
    whole = plan_buckets(buckets, 1)
    assert [(i.start, i.stop) for i in whole.items] == [(0, 12), (0, 12), (0, 48), (0, 1)]
    eight = plan_buckets(buckets, 8)
    # 24 wide matrices (3 units each) and 48 square ones (1 unit): 15 units per rank, plus the
    # one small matrix somewhere.
    assert max(eight.loads) - min(eight.loads) == ns_iteration_flops(16, 27)
    assert {i.owner for i in eight.items if i.bucket in (0, 1)} == set(range(8))


def test_matrices_travel_in_the_narrower_of_parameter_and_ns_dtype() -> None:
    assert wire_dtype(torch.float32, torch.bfloat16) == torch.bfloat16
    assert wire_dtype(torch.float32, torch.float32) == torch.float32
    # bf16 parameters: the result is cast back to bf16 anyway, whatever NS ran in.
    assert wire_dtype(torch.bfloat16, torch.float32) == torch.bfloat16
    assert wire_dtype(torch.bfloat16, torch.float16) == torch.bfloat16


def test_plan_rejects_an_empty_world() -> None:
    with pytest.raises(ValueError, match="world_size must be >= 1"):
        plan_buckets((), 0)


def test_chunk_rows_follows_torch_chunk() -> None:
    for rows in range(1, 12):
        for world in (1, 2, 3, 4):
            sizes = [c.shape[0] for c in torch.empty(rows).chunk(world)]
            assert _chunk_rows(rows, world) == (*sizes, *[0] * (world - len(sizes)))


def test_process_group_before_init_is_a_clear_error() -> None:
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="init_process_group"):
        MuSGD([torch.nn.Parameter(torch.ones(2, 2))], lr=0.1, process_group=object())  # type: ignore[arg-type]


@pytest.fixture
def single_rank(tmp_path: Path) -> Any:
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    yield
    dist.destroy_process_group()


@pytest.mark.usefixtures("single_rank")
def test_wrong_process_group_type_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match=r"torch\.distributed\.ProcessGroup"):
        ShardedStep("world")  # type: ignore[arg-type]


@pytest.mark.usefixtures("single_rank")
def test_tensor_parallel_sharding_is_refused_naming_what_is_supported() -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (1,))
    weight = torch.nn.Parameter(distribute_tensor(torch.randn(4, 6), mesh, [Shard(1)]))
    weight.grad = distribute_tensor(torch.randn(4, 6), mesh, [Shard(1)])
    opt = MuSGD([weight], lr=0.1)
    with pytest.raises(RuntimeError) as info:
        opt.step()
    assert "tensor parallel" in str(info.value)
    assert SUPPORTED_SETUPS in str(info.value)


@pytest.mark.usefixtures("single_rank")
def test_mixing_dtensor_and_plain_parameters_is_refused() -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (1,))
    sharded = torch.nn.Parameter(distribute_tensor(torch.randn(4, 6), mesh, [Shard(0)]))
    sharded.grad = distribute_tensor(torch.randn(4, 6), mesh, [Shard(0)])
    plain = torch.nn.Parameter(torch.randn(4, 6))
    plain.grad = torch.randn(4, 6)
    opt = MuSGD([sharded, plain], lr=0.1)
    with pytest.raises(RuntimeError, match="mixes DTensor and plain-tensor"):
        opt.step()


def test_plan_balances_measured_cost_where_it_differs_from_flops() -> None:
    # One large matrix that runs fast and three small ones that each cost as much (launch-bound).
    buckets = (
        Bucket(512, 512, (0,)),
        Bucket(16, 16, (1,)),
        Bucket(16, 17, (2,)),
        Bucket(17, 16, (3,)),
    )
    costs = tuple(CallCost(0.0, 1.0) for _ in buckets)
    by_flops = plan_buckets(buckets, 2)
    measured = plan_buckets(buckets, 2, costs)
    seconds = [0.0, 0.0]
    for item in by_flops.items:
        seconds[item.owner] += costs[item.bucket](item.stop - item.start)
    assert max(seconds) == 3.0  # the FLOP plan gives one rank all three small calls
    assert measured.cost_loads == (2.0, 2.0)
    assert by_flops.loads[0] > by_flops.loads[1]
    assert measured == plan_buckets(buckets, 2, costs)  # deterministic


def test_measured_plan_keeps_launch_bound_buckets_whole() -> None:
    # Splitting pays the call's fixed cost once more: a bucket of cheap matrices stays whole.
    buckets = (Bucket(64, 64, tuple(range(8))), Bucket(64, 65, tuple(range(8, 10))))
    costs = (CallCost(1.0, 0.001), CallCost(0.0, 1.0))
    plan = plan_buckets(buckets, 2, costs)
    assert [(i.bucket, i.start, i.stop) for i in plan.items] == [(0, 0, 8), (1, 0, 1), (1, 1, 2)]
    # By FLOPs the eight matrices are most of the work and are split over both ranks.
    assert [(i.bucket, i.start, i.stop) for i in plan_buckets(buckets, 2).items][:2] == [
        (0, 0, 4),
        (0, 4, 8),
    ]


def test_plan_needs_one_cost_per_bucket() -> None:
    with pytest.raises(ValueError, match="one CallCost per bucket"):
        plan_buckets((Bucket(4, 4, (0,)),), 2, ())


def test_stages_cut_the_plan_in_order_by_bytes_and_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    buckets = (
        Bucket(4, 4, (0, 1, 2, 3)),  # 64 elements
        Bucket(2, 2, (4,)),  # 4
        Bucket(2, 3, (5,)),  # 6
        Bucket(3, 3, (6, 7)),  # 18, another dtype
    )
    layout = Layout(tuple(range(8)), (), buckets, (None,) * 8)
    plan = plan_buckets(buckets, 2)
    dtypes = [torch.float32, torch.float32, torch.float32, torch.bfloat16]
    monkeypatch.setattr(distributed, "STAGE_BYTES", 2 * 64)
    stages = plan_stages(plan, layout, dtypes, [2, 2, 2, 2])
    assert [s.keys for s in stages] == [
        tuple(k for k, i in enumerate(plan.items) if i.bucket == 0),  # 128 bytes: closes
        tuple(k for k, i in enumerate(plan.items) if i.bucket == 3),  # 36 bytes
        # 20 bytes, closed by the dtype change; the smallest, so it goes last.
        tuple(k for k, i in enumerate(plan.items) if i.bucket in (1, 2)),
    ]
    assert [s.dtype for s in stages] == [torch.float32, torch.bfloat16, torch.float32]
    monkeypatch.setattr(distributed, "STAGE_BYTES", 1)
    assert len(plan_stages(plan, layout, dtypes, [2, 2, 2, 2])) == len(buckets)


def test_measure_costs_fits_fixed_and_per_matrix_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    sizes: list[int] = []

    def call(G: torch.Tensor) -> None:  # a call costing 0.5 s plus 0.25 s per matrix
        sizes.append(G.shape[0])
        clock[0] += 0.5 + 0.25 * G.shape[0]

    monkeypatch.setattr("musgd._distributed.time.perf_counter", lambda: clock[0])
    buckets = (Bucket(3, 5, (0, 1, 2, 3)), Bucket(2, 2, (4,)))
    rng = torch.get_rng_state()
    costs = measure_costs(
        buckets, [torch.float32, torch.float32], torch.device("cpu"), 2, call=call, repeats=2
    )
    assert torch.equal(torch.get_rng_state(), rng)  # the training's random stream is untouched
    assert costs[0] == CallCost(0.5, 0.25)
    assert costs[1] == CallCost(0.0, 0.75)  # one size only: all of it per matrix
    assert sorted(set(sizes)) == [1, 2, 4]  # whole buckets and half of the 4-matrix one


def test_unknown_balance_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="'flops' balances"):
        ShardedStep(None, "fastest")


@pytest.mark.usefixtures("single_rank")
@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
def test_world_size_1_runs_the_single_process_body_without_collectives(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    gen = torch.Generator().manual_seed(5)
    weights = [torch.randn(6, 4, generator=gen), torch.randn(6, 4, generator=gen)]
    grads = [torch.randn(6, 4, generator=gen) for _ in range(3)]
    plain = [torch.nn.Parameter(w.clone()) for w in weights]
    mesh = init_device_mesh("cpu", (1,))
    if kind == "fsdp":
        params = [torch.nn.Parameter(distribute_tensor(w, mesh, [Shard(0)])) for w in weights]
    else:
        params = [torch.nn.Parameter(w.clone()) for w in weights]
    group = dist.group.WORLD if kind == "ddp" else None
    opt = MuSGD(params, lr=0.1, process_group=group, shard_balance="measured")
    reference = MuSGD(plain, lr=0.1)

    def no_collective(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a collective ran at world size 1")

    for name in ("all_gather_object", "all_to_all_single", "all_reduce", "all_gather_single"):
        monkeypatch.setattr(dist, name, no_collective, raising=False)
    monkeypatch.setattr(dist, "all_gather_into_tensor", no_collective)
    for g in grads:
        for p, q in zip(params, plain, strict=True):
            p.grad = distribute_tensor(g, mesh, [Shard(0)]) if kind == "fsdp" else g.clone()
            q.grad = g.clone()
        opt.step()
        reference.step()
    for p, q in zip(params, plain, strict=True):
        local = p.to_local() if kind == "fsdp" else p  # type: ignore[attr-defined]
        assert torch.equal(local, q)
