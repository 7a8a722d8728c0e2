"""Where the host's time goes over a window of steady training iterations: cProfile's functions.

With the device busy only part of an iteration (``musgd.bench._kernels``), the iteration waits
on the host: the Python of the trainer, the loss, the optimizer, the EMA and every launch. A
host window profiles the main thread over iterations ``start`` to ``start + count - 1`` with
``cProfile`` (:class:`musgd.bench._kernels.KernelWindow` with this module's profiler and
summary) and says, per iteration: the profiled wall time, and the functions with the most
cumulative time and the most self time (their own code, callees excluded), each with its calls.

``cProfile`` adds a cost per Python call, so the profiled iteration is slower than an
unprofiled one, and functions making many small calls are inflated the most: the table ranks
where the host's time goes, its milliseconds are not the iteration's. The data loader's
workers are other processes and are not profiled; the time the main thread waits for them is
(in the data loader's ``__next__``).
"""

from __future__ import annotations

import cProfile
import pstats
from typing import Any

__all__ = ["HOST_ROWS", "host_profiler", "host_table", "short_location", "summarize_host"]

# Rows of each table kept.
HOST_ROWS = 30
# Where a file's path stops being the machine's and starts being the package's.
_MARKERS = ("/site-packages/", "/dist-packages/", "/src/", "/lib/python")


def short_location(filename: str, line: int, function: str) -> str:
    """``package/module.py:line(function)``: the path from its package on (the machine's
    folders dropped), or the built-in's name as cProfile gives it."""
    if filename == "~":  # a built-in: cProfile names it in the function field
        return function
    path = filename.replace("\\", "/")
    for marker in _MARKERS:
        if marker in path:
            path = path.rsplit(marker, 1)[1]
            if marker == "/lib/python":  # .../lib/python3.11/module.py: drop the version
                path = path.split("/", 1)[-1]
            break
    else:
        path = path.rsplit("/", 1)[-1]
    return f"{path}:{line}({function})"


def host_table(profile: pstats.Stats, per: int, key: str) -> list[dict[str, Any]]:
    """The profile's functions, per iteration (``per``), ranked by ``key`` (``cumulative_ms``
    or ``self_ms``), the first :data:`HOST_ROWS`: ``name``, ``calls``, ``self_ms`` and
    ``cumulative_ms``."""
    if key not in ("cumulative_ms", "self_ms"):
        raise ValueError(f"rank by cumulative_ms or self_ms, not {key!r}")
    rows = [
        {
            "name": short_location(filename, line, function),
            "calls": calls / per,
            "self_ms": own * 1e3 / per,
            "cumulative_ms": cumulative * 1e3 / per,
        }
        for (filename, line, function), (_, calls, own, cumulative, _) in profile.stats.items()  # type: ignore[attr-defined]
    ]
    rows.sort(key=lambda r: -r[key])
    return rows[:HOST_ROWS]


class _HostProfile:
    """A ``cProfile.Profile`` of the main thread as the window's profiler (entered and left at
    the window's ends)."""

    def __init__(self) -> None:
        self.profile = cProfile.Profile()

    def __enter__(self) -> _HostProfile:
        self.profile.enable()
        return self

    def __exit__(self, kind: Any, value: Any, trace: Any, /) -> None:
        self.profile.disable()


def host_profiler(cuda: bool) -> _HostProfile:
    """The window's profiler (the host's, on any device)."""
    del cuda
    return _HostProfile()


def summarize_host(profile: Any, iterations: int, wall_s: float, cuda: bool) -> dict[str, Any]:
    """The window's summary: the profiled wall time per iteration and the two tables."""
    del cuda
    assert isinstance(profile, _HostProfile)
    stats = pstats.Stats(profile.profile)
    return {
        "iterations": iterations,
        "timed": "host functions (cProfile, main thread)",
        "wall_ms": wall_s * 1e3 / iterations,
        "functions": len(stats.stats),  # type: ignore[attr-defined]
        "by_cumulative": host_table(stats, iterations, "cumulative_ms"),
        "by_self": host_table(stats, iterations, "self_ms"),
    }
