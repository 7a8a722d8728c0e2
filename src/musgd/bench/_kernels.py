"""The device's work over a window of steady training iterations: its kernels and busy time.

:class:`KernelWindow` profiles iterations ``start`` to ``start + count - 1`` of a training run
(counted between the trainer's batch callbacks) with ``torch.profiler``: on CUDA the device's
kernels and copies, a CUDA graph's replay traced kernel by kernel; elsewhere the host's
operators (a check that the window works). The device is synchronized at both ends of the
window, so its wall time holds all of the window's device work.

Its summary says per iteration of the window: the wall time, the device's busy time (its
kernels' summed times; kernels of concurrent streams each count), the busy share of the wall
time, how many kernels ran, and the kernels with the most time. A busy share near 1 is an
iteration that waits on the device's own work; well below 1, on the host.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch

__all__ = [
    "KERNEL_ROWS",
    "WINDOW",
    "KernelWindow",
    "kernel_table",
    "summarize_kernels",
    "window_bounds",
]

# Iterations profiled per run, and rows of the kernel table kept.
WINDOW = 10
KERNEL_ROWS = 25
# A kernel's name is cut to this many characters in the table (templated names run long).
NAME_CHARS = 96


class _Profile(Protocol):
    """What :class:`KernelWindow` uses of its profiler (``torch.profiler.profile``, or the
    host's ``cProfile``: ``musgd.bench._host``): entered and left at the window's ends."""

    def __enter__(self) -> Any: ...
    def __exit__(self, kind: Any, value: Any, trace: Any, /) -> Any: ...


def window_bounds(total: int, skip: int, count: int = WINDOW) -> tuple[int, int]:
    """The window's first iteration and length in a run of ``total`` iterations: after the
    first ``skip`` (recordings, compilation) where the run is long enough, else its second
    half; at least one iteration."""
    if total < 1:
        raise ValueError(f"a run of {total} iterations has none to profile")
    start = skip if total >= skip + count else total // 2
    return start, max(1, min(count, total - start))


def kernel_table(rows: Iterable[Any], per: int, *, device: bool = True) -> list[dict[str, Any]]:
    """One row per profiler row (``key_averages()``) with time, longest first: ``name`` (at
    most :data:`NAME_CHARS` characters), ``calls`` and ``us`` divided by ``per`` (steps or
    iterations); the time is the device's self time where ``device`` (CUDA), else the host's."""
    attribute = "self_device_time_total" if device else "self_cpu_time_total"
    table: list[dict[str, Any]] = []
    for row in rows:
        us = float(getattr(row, attribute, 0.0) or 0.0)
        if us > 0:
            table.append(
                {"name": str(row.key)[:NAME_CHARS], "calls": row.count / per, "us": us / per}
            )
    table.sort(key=lambda r: -r["us"])
    return table


def summarize_kernels(
    rows: Iterable[Any], *, iterations: int, wall_s: float, device: bool
) -> dict[str, Any]:
    """The window's summary from the profiler's ``key_averages()`` ``rows``: the device's
    self time of each row where ``device`` (CUDA), else the host's (microseconds)."""
    table = kernel_table(rows, iterations, device=device)
    busy_ms = sum(r["us"] for r in table) / 1e3
    wall_ms = wall_s * 1e3 / iterations
    return {
        "iterations": iterations,
        "timed": "device kernels and copies" if device else "host operators",
        "wall_ms": wall_ms,
        "busy_ms": busy_ms,
        "busy_share": busy_ms / wall_ms if wall_ms > 0 else None,
        "kernels": sum(r["calls"] for r in table),
        "table": table[:KERNEL_ROWS],
        "rows_left_out": max(0, len(table) - KERNEL_ROWS),
    }


# A window's summary from its profiler, its iterations, its wall seconds and whether it ran on
# CUDA.
Summarize = Callable[[Any, int, float, bool], dict[str, Any]]


def _summarize_profile(profile: Any, iterations: int, wall_s: float, cuda: bool) -> dict[str, Any]:
    """The kernel summary of a ``torch.profiler`` window (the device's kernels on CUDA)."""
    return summarize_kernels(
        profile.key_averages(), iterations=iterations, wall_s=wall_s, device=cuda
    )


def _profiler(cuda: bool) -> _Profile:
    from torch.profiler import ProfilerActivity, profile

    activity = ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU
    return profile(activities=[activity])


class KernelWindow:
    """Profiles the iterations ``start`` to ``start + count - 1`` of a run on ``device``
    (:func:`start_iteration` and :func:`end_iteration` at each iteration's batch callbacks);
    :attr:`summary` is None until the window has closed. ``profiler`` and ``summarize`` are
    the device's kernels by default, the host's functions with ``musgd.bench._host``'s."""

    def __init__(
        self,
        device: str,
        *,
        start: int,
        count: int = WINDOW,
        clock: Callable[[], float] = time.perf_counter,
        profiler: Callable[[bool], _Profile] = _profiler,
        summarize: Summarize = _summarize_profile,
    ) -> None:
        if start < 0 or count < 1:
            raise ValueError(
                f"a window starts at iteration 0 or later and holds 1 or more, got {start}, {count}"
            )
        self.cuda = torch.device(device).type == "cuda"
        self.start, self.count = start, count
        self.summary: dict[str, Any] | None = None
        self._clock, self._make, self._summarize = clock, profiler, summarize
        self._index = 0  # the iteration being run, counted from 0
        self._open: _Profile | None = None
        self._t0 = 0.0

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def start_iteration(self) -> None:
        if self._index == self.start and self.summary is None:
            self._sync()
            self._open = self._make(self.cuda)
            self._open.__enter__()
            self._t0 = self._clock()

    def end_iteration(self) -> None:
        if self._open is not None and self._index == self.start + self.count - 1:
            self._close(self.count)
        self._index += 1

    def finish(self) -> None:
        """At the run's end: a window still open (the run ended inside it) closes over the
        iterations it saw."""
        if self._open is None:
            return
        seen = self._index - self.start
        if seen > 0:
            self._close(seen)
        else:  # opened, but no iteration of it ended: nothing to say
            self._open.__exit__(None, None, None)
            self._open = None

    def _close(self, iterations: int) -> None:
        assert self._open is not None
        self._sync()
        wall = self._clock() - self._t0
        profile, self._open = self._open, None
        profile.__exit__(None, None, None)
        self.summary = self._summarize(profile, iterations, wall, self.cuda)
