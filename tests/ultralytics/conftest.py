"""Parity with the installed Ultralytics package (its own environment: `make test-ultralytics`).

These tests need ``ultralytics``; they skip, saying why, only where it is not installed. `make
test` installs it into ``.venv-ul`` (torch 2.14.1 with torchvision, which PyPI's torchvision needs
beside it) and runs them there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

# Each test module skips itself (pytest.importorskip) where ultralytics is not installed.


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from musgd.bench._yolo_data import write_synthetic_dataset

    root = tmp_path_factory.mktemp("yolo-data")
    return write_synthetic_dataset(root, train_images=8, val_images=2, size=64).yaml


def _bf16_is_fast() -> bool:
    import torch

    from musgd._newton_schulz import cpu_has_native_bf16

    return torch.cuda.is_available() or cpu_has_native_bf16()


@pytest.fixture(scope="session")
def parity_steps() -> int:
    """Steps of the optimizer parity runs: 20, or 3 on a CPU that emulates bf16.

    Both optimizers run their Newton-Schulz in bf16 there, at about 17 s a YOLO26n-shaped step
    on this project's 2-core AVX2 EPYC (see :func:`pytest_collection_modifyitems`): 20 steps of
    each optimizer in three tests were most of a 43-minute CI run. Three steps of the
    YOLO26n-shaped random parameters still compare every buffer and parameter after warm-up has
    changed lr and momentum twice, each parameter against its path length (the per-step bound);
    the net-change bound needs the 20 steps (tests/ultralytics/test_parity.py::_assert_parity).
    The real model's parity test keeps its 20 steps everywhere (its docstring says why).
    """
    return 20 if _bf16_is_fast() else 3


@pytest.fixture(scope="session")
def ours_trainer() -> Any:
    """Our trainer class for the trainer-integration tests: ``MuSGDTrainer`` (bf16
    Newton-Schulz), or ``musgd_trainer(ns_dtype=torch.float32)`` on a CPU that emulates bf16.

    These tests check groups, checkpoints, resumption and the clip, not bf16 rounding (the
    parity tests do); the command-line test keeps the module's default class everywhere.
    """
    import torch

    from musgd.ultralytics import MuSGDTrainer, musgd_trainer

    return MuSGDTrainer if _bf16_is_fast() else musgd_trainer(ns_dtype=torch.float32)


# The end-to-end trainer runs: each trains YOLO26 several times with both optimizers.
_END_TO_END = ("test_gpu_script.py", "test_tasks.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a CPU without native bf16 (and no GPU), skip the end-to-end trainer runs, saying why.

    Ultralytics' MuSGD runs its Newton-Schulz in bf16, which such a CPU emulates: on this
    project's 2-core AVX2 EPYC a YOLO26n-shaped step took 17275 ms in bf16 against 405 ms in
    float32 (docs/evidence/musgd-cpu-dtype-cpu-epyc-7c4f4862.json), so these two files alone
    take over an hour there. They run where bf16 is native and in the GPU gate; the parity
    tests (test_parity.py) run everywhere.
    """
    del config
    if _bf16_is_fast():
        return
    skip = pytest.mark.skip(
        reason="this CPU emulates bf16, which Ultralytics' MuSGD runs its Newton-Schulz in "
        "(~40x slower); end-to-end trainer runs need a bf16-native CPU or the GPU gate"
    )
    for item in items:
        if item.path.name in _END_TO_END:
            item.add_marker(skip)
