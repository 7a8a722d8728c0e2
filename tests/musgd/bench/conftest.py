"""Benchmark tests run single-threaded: on a shared 2-core CI machine, intra-op threads
fighting other processes made these small CPU workloads 5-10x slower, not faster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)
