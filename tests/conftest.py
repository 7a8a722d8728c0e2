"""What every test folder shares: each pytest-xdist worker gets its share of the cores.

`make test` and `make test-fast` run one worker per core (``pytest -n auto``; all but the
Ultralytics lane with ``--dist loadfile``, so that a module's fixtures are built once, in the one
worker that runs its tests).

Torch's intra-op pool defaults to every core in each worker, so two workers on the 2-core CI
machine would run four threads on two cores; on such small CPU workloads threads that fight other
processes made them 5-10x slower, not faster (tests/musgd/bench/conftest.py). Each worker
therefore runs ``cores // workers`` threads (at least one), set before any test imports torch,
and its subprocesses (spawned worlds, training runs in their own process) inherit it. A value the
caller set (``OMP_NUM_THREADS=4 make test``) is kept; a run without xdist is left as it is.
"""

from __future__ import annotations

import os
import sys

import pytest

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def worker_threads(cores: int, workers: int) -> int:
    """Intra-op threads for each of ``workers`` processes sharing ``cores``: at least one."""
    return max(1, cores // max(1, workers))


def _cores() -> int:
    """The cores this process may run on (its affinity, where the platform says)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def pytest_configure(config: pytest.Config) -> None:
    """In an xdist worker, cap torch's threads at the worker's share of the cores."""
    del config
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers is None:
        return
    threads = str(worker_threads(_cores(), int(workers)))
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, threads)
    if "torch" in sys.modules:  # imported by a plugin before this ran: the variables came late
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
