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
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from musgd import MuSGD, orthogonalize_batched, param_groups
from musgd._distributed import (
    SUPPORTED_SETUPS,
    ShardedStep,
    _chunk_rows,
    ns_iteration_flops,
    plan_buckets,
    wire_dtype,
)
from musgd._functional import Bucket, build_layout

# Spawned ranks import the worker by module name, whatever pytest's import mode: make its folder
# importable here (spawn hands this sys.path to the children).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from distributed_worker import STEPS, Net, main

KINDS = ("ddp", "fsdp")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda w: f"world{w}")
def spawned(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    world = int(request.param)
    out = tmp_path_factory.mktemp(f"world{world}")
    mp.spawn(main, args=(world, _free_port(), str(out)), nprocs=world, join=True)
    return world, [torch.load(out / f"rank{r}.pt") for r in range(world)]


def _first_difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> str | None:
    assert len(a) == len(b)
    for k, (x, y) in enumerate(zip(a, b, strict=True)):
        if not torch.equal(x, y):
            return f"tensor {k}: max |diff| {(x - y).abs().max().item():.3g}"
    return None


@pytest.mark.parametrize("kind", KINDS)
def test_matches_single_process_reference_bitwise(spawned: Any, kind: str) -> None:
    _, ranks = spawned
    for rank, res in enumerate(ranks):
        diff = _first_difference(res[kind]["final"], res[kind]["reference"])
        assert diff is None, f"{kind} rank {rank}: {diff}"


@pytest.mark.parametrize("kind", KINDS)
def test_ranks_agree_bitwise(spawned: Any, kind: str) -> None:
    _, ranks = spawned
    for rank, res in enumerate(ranks[1:], start=1):
        assert _first_difference(res[kind]["final"], ranks[0][kind]["final"]) is None, rank


@pytest.mark.parametrize("kind", KINDS)
def test_resume_through_distributed_checkpoint_is_bit_identical(spawned: Any, kind: str) -> None:
    _, ranks = spawned
    for rank, res in enumerate(ranks):
        diff = _first_difference(res[kind]["resumed"], res[kind]["final"])
        assert diff is None, f"{kind} rank {rank}: {diff}"


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
