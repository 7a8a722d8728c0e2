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
