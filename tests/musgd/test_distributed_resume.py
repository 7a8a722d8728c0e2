"""A checkpoint saved at world size 2 resumes at world sizes 1 and 2, bit-identically (gloo, CPU).

``resume_worker.py`` trains DDP and FSDP2 at world size 2 (DDP balancing measured seconds, FSDP2
FLOPs), saves a ``torch.distributed.checkpoint`` half-way and records the rest of the run; fresh
processes at world sizes 1 and 2 load it and step on the same gradients. On CPU batched
Newton-Schulz is slice-invariant, so whatever plan each world size uses, every parameter and
momentum buffer must come out bit-identical to the uninterrupted world-size-2 run.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp
from distributed_worker import first_difference
from resume_worker import main

# Spawns gloo worlds of 1 and 2 processes (make test-fast skips it; make test runs it).
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_phases(out: Path, backend: str, resume_worlds: tuple[int, ...]) -> dict[str, Any]:
    """Save at world size 2, resume at each of ``resume_worlds``; every rank's results."""
    mp.spawn(main, args=(2, _free_port(), str(out), "save", backend), nprocs=2, join=True)  # type: ignore[attr-defined,no-untyped-call]
    results: dict[str, Any] = {"save": [torch.load(out / f"save-w2-rank{r}.pt") for r in (0, 1)]}
    for world in resume_worlds:
        mp.spawn(main, args=(world, _free_port(), str(out), "resume", backend), nprocs=world)  # type: ignore[attr-defined,no-untyped-call]
        results[f"resume-w{world}"] = [
            torch.load(out / f"resume-w{world}-rank{r}.pt") for r in range(world)
        ]
    return results


@pytest.fixture(scope="module")
def phases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_phases(tmp_path_factory.mktemp("resume"), "gloo", (1, 2))


def check_resumed(phases: dict[str, Any], kind: str, world: int) -> None:
    """Every rank resumed at ``world`` holds the uninterrupted run's final state, bit for bit."""
    final = phases["save"][0][kind]["final"]
    for rank, res in enumerate(phases[f"resume-w{world}"]):
        diff = first_difference(res[kind], final)
        assert diff is None, f"{kind} resumed at world size {world}, rank {rank}: {diff}"


def check_saving_run(phases: dict[str, Any], kind: str) -> None:
    """The saving ranks agree bitwise and recorded gradients that move the parameters."""
    zero, one = (res[kind] for res in phases["save"])
    assert first_difference(one["final"], zero["final"]) is None
    assert len(zero["grads"]) > 0
    # The recorded steps changed the parameters: a resume that skipped them would fail above.
    assert any(g.abs().sum() > 0 for g in zero["grads"][0])


@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
@pytest.mark.parametrize("world", [1, 2])
def test_checkpoint_of_world_2_resumes_bit_identically(
    phases: dict[str, Any], kind: str, world: int
) -> None:
    check_resumed(phases, kind, world)


@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
def test_saving_ranks_agree_and_training_moved(phases: dict[str, Any], kind: str) -> None:
    check_saving_run(phases, kind)
