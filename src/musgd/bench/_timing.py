"""Step timing: CUDA events on a GPU, ``time.perf_counter`` on the CPU; warm-up, then stats.

CUDA kernels run asynchronously, so a host clock around a step measures only the launch. Events
recorded on the current stream before and after each step time the GPU's view of it instead
(R62); the host waits once, after the last step, so timing adds no synchronization between steps.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

CUDA_CLOCK = "cuda-events"
CPU_CLOCK = "perf_counter"


@dataclass(frozen=True)
class Summary:
    """Median and range of a set of measurements, in milliseconds."""

    median: float
    min: float
    max: float
    count: int

    def as_ms(self) -> dict[str, float | int]:
        """JSON-ready: ``median_ms``, ``min_ms``, ``max_ms`` and ``count``."""
        return {
            "median_ms": self.median,
            "min_ms": self.min,
            "max_ms": self.max,
            "count": self.count,
        }

    def format(self, digits: int = 3) -> str:
        """``median (min-max)`` with an en dash, the house notation for a measured range."""
        return f"{self.median:.{digits}f} ({self.min:.{digits}f}\u2013{self.max:.{digits}f})"


def summarize(values: Sequence[float]) -> Summary:
    """Median, min and max of ``values`` (at least one)."""
    if not values:
        raise ValueError("cannot summarize an empty list of measurements")
    return Summary(
        median=float(statistics.median(values)),
        min=float(min(values)),
        max=float(max(values)),
        count=len(values),
    )


def paired_ratios(baseline: Sequence[float], variant: Sequence[float]) -> dict[str, Any]:
    """``baseline[i] / variant[i]`` for each pair (round) ``i``: median, range and the values.

    Pairing, rather than dividing the pooled medians, keeps a slow spell of the machine that
    lands on one round out of the other rounds' ratios.
    """
    if len(baseline) != len(variant):
        raise ValueError(
            f"need as many variant as baseline values, got {len(variant)} and {len(baseline)}"
        )
    if not baseline:
        raise ValueError("cannot pair empty lists of measurements")
    if any(v <= 0 for v in variant):
        raise ValueError(f"variant values must be positive to divide by, got {list(variant)}")
    ratios = [b / v for b, v in zip(baseline, variant, strict=True)]
    return {
        "median": float(statistics.median(ratios)),
        "min": min(ratios),
        "max": max(ratios),
        "per_round": ratios,
    }


@dataclass(frozen=True)
class Timing:
    """Per-step durations of one timed run, in milliseconds, and the clock that took them."""

    samples_ms: tuple[float, ...]
    warmup: int
    clock: str

    @property
    def summary(self) -> Summary:
        """Median and range of the samples."""
        return summarize(self.samples_ms)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form: the stats, the clock, the warm-up count and every sample."""
        s = self.summary
        return {
            "median_ms": s.median,
            "min_ms": s.min,
            "max_ms": s.max,
            "steps": s.count,
            "warmup": self.warmup,
            "clock": self.clock,
            "samples_ms": list(self.samples_ms),
        }


def clock_for(device: torch.device) -> str:
    """The clock used on ``device``."""
    return CUDA_CLOCK if device.type == "cuda" else CPU_CLOCK


def time_steps(
    step: Callable[[], object], *, steps: int, warmup: int, device: torch.device
) -> Timing:
    """Run ``step`` ``warmup`` times untimed, then ``steps`` times, timing each call."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    for _ in range(warmup):
        step()
    if device.type == "cuda":
        return Timing(_time_cuda(step, steps, device), warmup, CUDA_CLOCK)
    return Timing(_time_host(step, steps), warmup, CPU_CLOCK)


def _event() -> torch.cuda.Event:
    """A timing-enabled CUDA event."""
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


def _time_host(step: Callable[[], object], steps: int) -> tuple[float, ...]:
    """Wall-clock each call with ``perf_counter``."""
    samples = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        samples.append((time.perf_counter() - start) * 1e3)
    return tuple(samples)


def _time_cuda(step: Callable[[], object], steps: int, device: torch.device) -> tuple[float, ...]:
    """Bracket each call with CUDA events; synchronize once at the end."""
    torch.cuda.synchronize(device)
    events = [(_event(), _event()) for _ in range(steps)]
    for start, end in events:
        start.record()
        step()
        end.record()
    torch.cuda.synchronize(device)
    return tuple(float(start.elapsed_time(end)) for start, end in events)


class StepClock:
    """Marks inside a step (e.g. start, after backward, end) read back after the run.

    On CUDA each mark is an event on the current stream; on the CPU a ``perf_counter`` reading.
    ``intervals(a, b)`` returns the milliseconds between marks ``a`` and ``b`` of every step.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.clock = clock_for(device)
        self._steps: list[dict[str, torch.cuda.Event | float]] = []

    def begin_step(self) -> None:
        """Start a new step's set of marks."""
        self._steps.append({})

    def mark(self, name: str) -> None:
        """Record mark ``name`` in the current step."""
        if not self._steps:
            raise RuntimeError("StepClock.mark called before begin_step")
        if self.device.type == "cuda":
            event = _event()
            event.record()
            self._steps[-1][name] = event
        else:
            self._steps[-1][name] = time.perf_counter()

    def intervals(self, first: str, last: str, *, skip: int = 0) -> tuple[float, ...]:
        """Milliseconds from ``first`` to ``last`` for each step after the first ``skip``."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        out = []
        for marks in self._steps[skip:]:
            a, b = marks[first], marks[last]
            if isinstance(a, torch.cuda.Event) and isinstance(b, torch.cuda.Event):
                out.append(float(a.elapsed_time(b)))
            else:
                out.append((float(b) - float(a)) * 1e3)  # type: ignore[arg-type]
        return tuple(out)
