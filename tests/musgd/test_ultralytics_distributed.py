"""UltralyticsMuSGD under DDP (``process_group``) on CPU through gloo: ranks share the
Newton-Schulz work and end bit-identical to one process fed the same gradients.

On CPU the flavour's single-process layout does not pad (padding is CUDA's), and batched
Newton-Schulz gives the same bits for any slicing of a bucket (tests/musgd/test_distributed.py
checks it), so the one-process run is the reference to the bit.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp
from ultralytics_ddp_worker import main, make, train


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module", params=[2, 3], ids=lambda w: f"world{w}")
def spawned(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    world = int(request.param)
    out = tmp_path_factory.mktemp(f"ul-world{world}")
    mp.spawn(main, args=(world, _free_port(), str(out)), nprocs=world, join=True)  # type: ignore[attr-defined,no-untyped-call]
    return world, [torch.load(out / f"rank{r}.pt") for r in range(world)]


@pytest.mark.slow  # spawns gloo worlds of 2 and 3 processes (make test-fast skips it)
def test_shared_work_matches_one_process_bitwise_on_every_rank(spawned: Any) -> None:
    _, ranks = spawned
    reference = train(*make(None))
    for rank, res in enumerate(ranks):
        assert len(res["final"]) == len(reference)
        for k, (a, b) in enumerate(zip(res["final"], reference, strict=True)):
            assert torch.equal(a, b), f"rank {rank}, tensor {k}: max |diff| {(a - b).abs().max()}"


@pytest.mark.slow  # spawns gloo worlds of 2 and 3 processes (make test-fast skips it)
def test_every_rank_orthogonalizes_a_share_and_no_item_twice(spawned: Any) -> None:
    world, ranks = spawned
    owned = [res["owned"] for res in ranks]
    assert len(owned) == world
    assert all(owned), f"a rank orthogonalized nothing: {owned}"
    items = [item for share in owned for item in share]
    assert len(items) == len(set(items))


def test_one_rank_group_runs_the_single_process_step() -> None:
    """A process group of one rank changes nothing: no plan, no collective, the same bits."""
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{_free_port()}"
    )
    try:
        params, opt = make(dist.group.WORLD)
        shared = train(params, opt)
        assert opt._sharded.plans() == ()
    finally:
        dist.destroy_process_group()
    for a, b in zip(shared, train(*make(None)), strict=True):
        assert torch.equal(a, b)
