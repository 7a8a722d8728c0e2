"""The cross-world-size checkpoint on GPUs: saved at world size 2 over NCCL, resumed at 1 and 2.

The CPU test (tests/musgd/test_distributed_resume.py) holds because CPU batched Newton-Schulz is
slice-invariant; on CUDA the resumed world-size-1 run orthogonalizes whole buckets where the saving
run split them over two GPUs, so this checks that cuBLAS gives the same bits for both slicings
(and that NCCL's exchange and FSDP2's resharded load change none). Needs two CUDA GPUs.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_distributed_resume import check_resumed, check_saving_run, run_phases

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs (NCCL)"),
]


@pytest.fixture(scope="module")
def phases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_phases(tmp_path_factory.mktemp("resume-cuda"), "nccl", (1, 2))


@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
@pytest.mark.parametrize("world", [1, 2])
def test_nccl_checkpoint_of_world_2_resumes_bit_identically(
    phases: dict[str, Any], kind: str, world: int
) -> None:
    check_resumed(phases, kind, world)


@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
def test_nccl_saving_ranks_agree_and_training_moved(phases: dict[str, Any], kind: str) -> None:
    check_saving_run(phases, kind)
