"""Counting host synchronizations per iteration from CUDA's sync-debug warnings."""

from __future__ import annotations

import warnings

import pytest

from musgd.bench._syncs import SyncCounter


def sync_warning() -> None:
    # What CUDA's sync debug mode issues for a synchronizing call (its exact text).
    warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)


def test_synchronizations_are_counted_per_iteration_with_their_sources() -> None:
    counter = SyncCounter()
    with counter.counting():
        sync_warning()  # before the first iteration: counted apart
        for n in (2, 0, 3):
            counter.start_iteration()
            for _ in range(n):
                sync_warning()
            counter.end_iteration()
    summary = counter.summary(skip=1)
    assert summary["per_iteration"] == {"median": 1.5, "min": 0, "max": 3}
    assert summary["iterations"] == 2
    assert summary["outside_iterations"] == 1
    ((site, per_iteration),) = summary["sites_per_iteration"].items()
    line = sync_warning.__code__.co_firstlineno + 2  # the warn call's line
    assert site == f"musgd/bench/test_syncs.py:{line}"
    assert per_iteration == 1.5


def test_other_warnings_are_still_shown_and_nothing_is_left_installed() -> None:
    counter = SyncCounter()
    before = warnings.showwarning
    with counter.counting():
        counter.start_iteration()
        with pytest.warns(DeprecationWarning, match="something else"):
            warnings.warn("something else", DeprecationWarning, stacklevel=1)
        counter.end_iteration()
    assert counter.summary()["per_iteration"]["max"] == 0
    assert warnings.showwarning is before


def test_an_empty_run_summarizes_to_nothing_counted() -> None:
    summary = SyncCounter().summary()
    assert summary["per_iteration"] == {"median": None, "min": None, "max": None}
    assert summary["iterations"] == 0
