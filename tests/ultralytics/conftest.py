"""Parity with the installed Ultralytics package (its own environment: `make test-ultralytics`).

These tests need ``ultralytics``; they skip, saying why, only where it is not installed. `make
test` installs it into ``.venv-ul`` (torch 2.14.1 with torchvision, which PyPI's torchvision needs
beside it) and runs them there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# Each test module skips itself (pytest.importorskip) where ultralytics is not installed.


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from musgd.bench._yolo_data import write_synthetic_dataset

    root = tmp_path_factory.mktemp("yolo-data")
    return write_synthetic_dataset(root, train_images=8, val_images=2, size=64).yaml


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
    import torch

    from musgd._newton_schulz import cpu_has_native_bf16

    if torch.cuda.is_available() or cpu_has_native_bf16():
        return
    skip = pytest.mark.skip(
        reason="this CPU emulates bf16, which Ultralytics' MuSGD runs its Newton-Schulz in "
        "(~40x slower); end-to-end trainer runs need a bf16-native CPU or the GPU gate"
    )
    for item in items:
        if item.path.name in _END_TO_END:
            item.add_marker(skip)
