"""The profiled window of steady training iterations: its bounds, its summary, its ends."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from musgd.bench._kernels import (
    KERNEL_ROWS,
    KernelWindow,
    summarize_kernels,
    window_bounds,
)


@dataclass
class Row:
    """A stand-in for one row of ``torch.profiler``'s ``key_averages()``."""

    key: str
    count: int
    self_device_time_total: float = 0.0
    self_cpu_time_total: float = 0.0


def test_the_window_follows_the_skipped_iterations_or_takes_a_short_runs_second_half() -> None:
    assert window_bounds(80, 10) == (10, 10)
    assert window_bounds(20, 10) == (10, 10)
    assert window_bounds(8, 10) == (4, 4)  # a short run: its second half
    assert window_bounds(1, 10) == (0, 1)
    with pytest.raises(ValueError, match="none to profile"):
        window_bounds(0, 10)


def test_the_summary_divides_by_the_iterations_and_sorts_the_longest_first() -> None:
    rows = [
        Row("gemm", 20, self_device_time_total=3000.0),
        Row("copy", 40, self_device_time_total=1000.0),
        Row("aten::add_", 40, self_cpu_time_total=50.0),  # host only: no device time
    ]
    s = summarize_kernels(rows, iterations=10, wall_s=0.008, device=True)
    assert [r["name"] for r in s["table"]] == ["gemm", "copy"]
    assert s["table"][0] == {"name": "gemm", "calls": 2.0, "us": 300.0}
    assert s["busy_ms"] == pytest.approx(0.4)
    assert s["wall_ms"] == pytest.approx(0.8)
    assert s["busy_share"] == pytest.approx(0.5)
    assert s["kernels"] == pytest.approx(6.0)
    assert s["timed"] == "device kernels and copies"
    host = summarize_kernels(rows, iterations=10, wall_s=0.008, device=False)
    assert [r["name"] for r in host["table"]] == ["aten::add_"]
    many = [Row(f"k{i}", 1, self_device_time_total=float(i + 1)) for i in range(KERNEL_ROWS + 3)]
    cut = summarize_kernels(many, iterations=1, wall_s=1.0, device=True)
    assert len(cut["table"]) == KERNEL_ROWS
    assert cut["rows_left_out"] == 3
    assert cut["busy_ms"] == pytest.approx(sum(range(1, KERNEL_ROWS + 4)) / 1e3)  # all of them


class FakeProfile:
    """Records when it is entered and left; gives fixed rows."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def __enter__(self) -> FakeProfile:
        self.log.append("enter")
        return self

    def __exit__(self, kind: Any, value: Any, trace: Any, /) -> None:
        self.log.append("exit")

    def key_averages(self) -> list[Row]:
        return [Row("aten::mm", 6, self_cpu_time_total=600.0)]


def test_the_window_profiles_exactly_its_iterations_and_times_them() -> None:
    log: list[str] = []
    ticks = itertools.count(0.0, 0.001)  # each clock reading 1 ms after the last
    window = KernelWindow(
        "cpu", start=2, count=3, clock=lambda: next(ticks), profiler=lambda _: FakeProfile(log)
    )
    for i in range(7):
        window.start_iteration()
        log.append(f"it{i}")
        window.end_iteration()
    assert log == ["it0", "it1", "enter", "it2", "it3", "it4", "exit", "it5", "it6"]
    s = window.summary
    assert s is not None
    assert s["iterations"] == 3
    assert s["wall_ms"] == pytest.approx(1 / 3)  # one tick between opening and closing
    assert s["table"] == [{"name": "aten::mm", "calls": 2.0, "us": 200.0}]
    window.finish()  # closed already: nothing changes
    assert window.summary is s


def test_a_run_that_ends_inside_the_window_is_summarized_over_what_it_ran() -> None:
    log: list[str] = []
    window = KernelWindow("cpu", start=1, count=10, profiler=lambda _: FakeProfile(log))
    for _ in range(4):
        window.start_iteration()
        window.end_iteration()
    assert window.summary is None
    window.finish()
    assert log == ["enter", "exit"]
    assert window.summary is not None
    assert window.summary["iterations"] == 3
    with pytest.raises(ValueError, match="holds 1 or more"):
        KernelWindow("cpu", start=0, count=0)


def test_the_real_profiler_sees_the_windows_operators_on_a_cpu() -> None:
    window = KernelWindow("cpu", start=1, count=2)
    a = torch.randn(16, 16)
    for _ in range(4):
        window.start_iteration()
        a = a @ a.t()
        window.end_iteration()
    s = window.summary
    assert s is not None
    names = {r["name"]: r for r in s["table"]}
    mm = next(r for name, r in names.items() if "mm" in name)
    assert mm["calls"] == 1.0  # one product an iteration: only the window's two were seen
    assert s["wall_ms"] > 0
    assert s["timed"] == "host operators"
