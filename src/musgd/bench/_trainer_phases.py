"""Where a trainer's iteration goes: clock marks at its phase boundaries, split into phases.

A framework trainer's iteration (the Ultralytics one: the next batch from the data loader, the
batch moved to the device, forward and backward, then its ``optimizer_step``: gradient
unscaling, clipping, the optimizer's step, the scaler update, ``zero_grad`` and the EMA update)
is marked at every boundary its public objects let one observe. A :class:`PhaseClock` keeps the
marks (``time.perf_counter`` seconds) of each iteration; :func:`split_iteration` turns them into
milliseconds per phase and :func:`summarize_phases` into medians and ranges.

Host clocks see when the host got past a boundary, not when the GPU did. Unsynchronised, a
phase that ends in a wait for the GPU (the gradient scaler's inf check, a loss read) absorbs the
GPU work queued before it, so only ``data_wait`` (the host blocked on the data loader) and the
whole iteration keep their meaning. With ``synchronize`` each mark first waits for the device, so
each phase holds its own GPU work; that removes the overlap of host and device, and is therefore
a separate measurement, never the headline iteration time.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from musgd.bench._timing import summarize

__all__ = [
    "DERIVED",
    "MARKS",
    "PHASES",
    "Phase",
    "PhaseClock",
    "data_wait_share",
    "split_iteration",
    "summarize_phases",
]

# The marks of one iteration, in the order the trainer passes them.
MARKS = (
    "previous_end",  # the previous iteration's batch_end, when in the same epoch
    "batch_start",
    "preprocessed",
    "forward_start",  # the network's forward (the model's predict), inside the loss call
    "forward_end",
    "backward_start",  # the loss scaled for its backward (the scaler's scale)
    "backward_end",  # that scaled loss's backward() returned (every iteration, stepping or not)
    "optimizer_enter",
    "unscale_start",
    "unscale_end",
    "scaler_step_start",
    "step_start",
    "step_end",
    "scaler_step_end",
    "update_start",
    "update_end",
    "zero_grad_start",
    "zero_grad_end",
    "ema_start",
    "ema_end",
    "optimizer_exit",
    "batch_end",
)


@dataclass(frozen=True)
class Phase:
    """A phase: the time from mark ``start`` to mark ``end`` of the same iteration."""

    name: str
    start: str
    end: str


PHASES = (
    Phase("data_wait", "previous_end", "batch_start"),
    Phase("preprocess", "batch_start", "preprocessed"),  # warm-up writes, batch to the device
    Phase("forward_backward", "preprocessed", "optimizer_enter"),
    Phase("forward", "forward_start", "forward_end"),  # the network (replayed where captured)
    Phase("loss", "forward_end", "backward_start"),  # the detection loss and its bookkeeping
    Phase("backward", "backward_start", "optimizer_enter"),
    # The backward call alone: in every iteration, also those that accumulate and do not step
    # (where "backward", up to the optimizer step, has no end).
    Phase("loss_backward", "backward_start", "backward_end"),
    Phase("trainer_optimizer_step", "optimizer_enter", "optimizer_exit"),
    Phase("unscale", "unscale_start", "unscale_end"),
    Phase("clip", "unscale_end", "scaler_step_start"),  # gradient clipping, between the two
    # Unscale's end to the optimizer's step: the clip, and the scaler's check where it steps.
    Phase("clip_to_step", "unscale_end", "step_start"),
    Phase("scaler_step", "scaler_step_start", "scaler_step_end"),
    Phase("optimizer_step", "step_start", "step_end"),
    Phase("scaler_update", "update_start", "update_end"),
    Phase("zero_grad", "zero_grad_start", "zero_grad_end"),
    Phase("ema_update", "ema_start", "ema_end"),
    Phase("after_optimizer", "optimizer_exit", "batch_end"),  # loss bookkeeping, progress bar
    Phase("iteration", "previous_end", "batch_end"),
)

# Differences of phases: (name, minuend, subtrahend).
DERIVED = (
    ("compute", "iteration", "data_wait"),  # the iteration without the data loader's share
    ("around_optimizer", "trainer_optimizer_step", "optimizer_step"),  # unscale..EMA
    ("scaler_step_overhead", "scaler_step", "optimizer_step"),  # the scaler's inf check
)


def split_iteration(marks: Mapping[str, float]) -> dict[str, float]:
    """Milliseconds per phase of one iteration's marks (seconds); phases lacking a mark are left
    out, as are derived phases lacking an operand."""
    out = {
        p.name: (marks[p.end] - marks[p.start]) * 1e3
        for p in PHASES
        if p.start in marks and p.end in marks
    }
    for name, minuend, subtrahend in DERIVED:
        if minuend in out and subtrahend in out:
            out[name] = out[minuend] - out[subtrahend]
    return out


def summarize_phases(
    iterations: Sequence[Mapping[str, float]], *, skip: int = 0
) -> dict[str, dict[str, float]]:
    """Per phase, over the iterations after the first ``skip``: median, min, max (ms), count
    and the median's share of the median iteration (when the iteration was measured)."""
    if skip < 0:
        raise ValueError(f"skip must be >= 0, got {skip}")
    split = [split_iteration(marks) for marks in iterations[skip:]]
    names = [p.name for p in PHASES] + [name for name, _, _ in DERIVED]
    out: dict[str, dict[str, float]] = {}
    for name in names:
        values = [phases[name] for phases in split if name in phases]
        if values:
            s = summarize(values)
            out[name] = {"median": s.median, "min": s.min, "max": s.max, "count": s.count}
    iteration = out.get("iteration", {}).get("median")
    if iteration:
        for entry in out.values():
            entry["share"] = entry["median"] / iteration
    return out


# Phases :func:`phase_trace` keeps iteration by iteration.
TRACED_PHASES = ("iteration", "forward_backward", "trainer_optimizer_step")


def phase_trace(
    iterations: Sequence[Mapping[str, float]], names: Sequence[str] = TRACED_PHASES
) -> dict[str, list[float | None]]:
    """Each iteration's phases ``names`` in ms (rounded to 0.01 ms; None where a mark is
    missing), in order: whether a slow run was slow throughout or in a stretch, which the
    medians of :func:`summarize_phases` cannot tell."""
    split = [split_iteration(marks) for marks in iterations]
    return {name: [round(one[name], 2) if name in one else None for one in split] for name in names}


def data_wait_share(phases: Mapping[str, Mapping[str, float]]) -> float | None:
    """The median data wait as a share of the median iteration, where both were measured."""
    entry = phases.get("data_wait")
    return None if entry is None or "share" not in entry else float(entry["share"])


class PhaseClock:
    """Marks of each iteration, ``time.perf_counter`` seconds; ``synchronize`` runs before each.

    ``start_iteration`` (at the batch start) opens an iteration, carrying the previous one's end
    as ``previous_end`` unless ``break_chain`` was called in between (a new epoch: the wait for
    its first batch includes the loader's restart). ``mark`` outside an open iteration (the
    ``zero_grad`` before the first batch, a validation pass) records nothing.

    With ``trace_iterations`` = N > 0, each mark of the first N iterations is also written to
    ``trace_to`` (standard error) as ``phase-trace: iteration I MARK``, flushed before the clock
    is read: where a run dies without a Python exception (a segmentation fault early in
    training), the last line says in which phase. ``probe`` (e.g. the CUDA allocator's reserved
    memory and its peak so far) adds its text to each trace line: where a peak is reached.
    """

    def __init__(
        self,
        synchronize: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        trace_iterations: int = 0,
        trace_to: TextIO | None = None,
        probe: Callable[[], str] | None = None,
    ) -> None:
        self.synchronize = synchronize
        self.clock = clock
        self.trace_iterations = trace_iterations
        self.trace_to = trace_to
        self.probe = probe
        self.iterations: list[dict[str, float]] = []
        self._open: dict[str, float] | None = None
        self._last_end: float | None = None

    def _trace(self, name: str) -> None:
        index = len(self.iterations)
        if index < self.trace_iterations:
            out = self.trace_to if self.trace_to is not None else sys.stderr
            extra = "" if self.probe is None else f" {self.probe()}"
            print(f"phase-trace: iteration {index} {name}{extra}", file=out, flush=True)

    def _now(self) -> float:
        if self.synchronize is not None:
            self.synchronize()
        return self.clock()

    def break_chain(self) -> None:
        """The next iteration has no ``previous_end`` (call at an epoch's start)."""
        self._last_end = None

    def start_iteration(self) -> None:
        """Open an iteration at its ``batch_start`` mark."""
        self._trace("batch_start")
        now = self._now()
        marks = {"batch_start": now}
        if self._last_end is not None:
            marks["previous_end"] = self._last_end
        self._open = marks

    def mark(self, name: str) -> None:
        """Record mark ``name`` in the open iteration (the first one of a name counts)."""
        if name not in MARKS:
            raise ValueError(f"unknown mark {name!r}; marks are {', '.join(MARKS)}")
        if self._open is not None and name not in self._open:
            self._trace(name)
            self._open[name] = self._now()

    def end_iteration(self) -> None:
        """Close the open iteration at its ``batch_end`` mark."""
        if self._open is None:
            return
        self._trace("batch_end")
        now = self._now()
        self._open["batch_end"] = now
        self.iterations.append(self._open)
        self._open = None
        self._last_end = now
