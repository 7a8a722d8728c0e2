"""The host's functions over a window of iterations: names, ranks and the window's bounds."""

from __future__ import annotations

import cProfile
import pstats

import pytest

from musgd.bench._host import HOST_ROWS, host_profiler, host_table, short_location, summarize_host
from musgd.bench._kernels import KernelWindow


@pytest.mark.parametrize(
    ("filename", "line", "function", "expected"),
    [
        (
            "/x/venv/lib/python3.11/site-packages/ultralytics/engine/trainer.py",
            620,
            "optimizer_step",
            "ultralytics/engine/trainer.py:620(optimizer_step)",
        ),
        ("/work/main/src/musgd/_engine.py", 232, "step", "musgd/_engine.py:232(step)"),
        ("/usr/lib/python3.11/threading.py", 10, "wait", "threading.py:10(wait)"),
        ("~", 0, "<built-in method torch._foreach_add_>", "<built-in method torch._foreach_add_>"),
        ("/tmp/script.py", 3, "main", "script.py:3(main)"),
    ],
)
def test_locations_keep_the_package_path_and_drop_the_machines(
    filename: str, line: int, function: str, expected: str
) -> None:
    assert short_location(filename, line, function) == expected


def _spin(n: int) -> int:
    return sum(range(n))


def _outer() -> int:
    return _spin(20000) + _spin(20000)


def test_the_window_profiles_only_its_iterations_per_iteration() -> None:
    window = KernelWindow("cpu", start=2, count=3, profiler=host_profiler, summarize=summarize_host)
    for _ in range(7):
        window.start_iteration()
        _outer()
        window.end_iteration()
    s = window.summary
    assert s is not None
    assert s["iterations"] == 3
    assert s["wall_ms"] > 0
    rows = {r["name"].rsplit(":", 1)[-1]: r for r in s["by_cumulative"]}
    outer = next(r for name, r in rows.items() if name.endswith("(_outer)"))
    spin = next(r for r in s["by_self"] if r["name"].endswith("(_spin)"))
    assert outer["calls"] == 1.0  # once an iteration: only the window's three were seen
    assert spin["calls"] == 2.0
    assert outer["cumulative_ms"] >= spin["cumulative_ms"]  # both calls of _spin are in it
    assert outer["self_ms"] < outer["cumulative_ms"]
    assert s["by_self"][0]["self_ms"] >= s["by_self"][-1]["self_ms"]


def test_tables_rank_by_the_key_and_keep_the_first_rows() -> None:
    profile = cProfile.Profile()
    profile.enable()
    for n in range(HOST_ROWS + 10):
        _spin(10 * n)
    profile.disable()
    stats = pstats.Stats(profile)
    table = host_table(stats, 2, "cumulative_ms")
    assert len(table) <= HOST_ROWS
    assert [r["cumulative_ms"] for r in table] == sorted(
        (r["cumulative_ms"] for r in table), reverse=True
    )
    with pytest.raises(ValueError, match="cumulative_ms or self_ms"):
        host_table(stats, 1, "calls")
