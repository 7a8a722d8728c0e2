"""The timing harness: warm-up is untimed, samples are per step, stats are right."""

from __future__ import annotations

import time

import pytest
import torch

from musgd.bench._timing import (
    CPU_CLOCK,
    StepClock,
    Timing,
    clock_for,
    paired_ratios,
    summarize,
    time_steps,
)

CPU = torch.device("cpu")


def test_summarize() -> None:
    s = summarize([5.0, 1.0, 3.0, 100.0])
    assert (s.median, s.min, s.max, s.count) == (4.0, 1.0, 100.0, 4)
    assert s.format(1) == "4.0 (1.0\u2013100.0)"
    with pytest.raises(ValueError, match="empty"):
        summarize([])


def test_time_steps_runs_warmup_untimed_then_times_each_step() -> None:
    calls: list[int] = []
    # The long step is 50 times the short ones, so a scheduler delay cannot reorder them.
    delays = iter([0.0, 0.0, 0.002, 0.1, 0.002])

    def step() -> None:
        calls.append(1)
        time.sleep(next(delays))

    timing = time_steps(step, steps=3, warmup=2, device=CPU)
    assert len(calls) == 5
    assert timing.clock == CPU_CLOCK == clock_for(CPU)
    assert timing.warmup == 2
    assert len(timing.samples_ms) == 3
    # The 100 ms step is the slowest sample and the two 2 ms steps bracket the median.
    assert timing.samples_ms[1] == max(timing.samples_ms) >= 100.0
    assert 2.0 <= timing.summary.median < 100.0
    d = timing.as_dict()
    assert d["steps"] == 3
    assert d["warmup"] == 2
    assert d["clock"] == CPU_CLOCK
    assert d["samples_ms"] == list(timing.samples_ms)
    assert d["median_ms"] == timing.summary.median


@pytest.mark.parametrize(("steps", "warmup"), [(0, 1), (1, -1)])
def test_time_steps_rejects_bad_counts(steps: int, warmup: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        time_steps(lambda: None, steps=steps, warmup=warmup, device=CPU)


def test_timing_as_dict_min_max() -> None:
    d = Timing((3.0, 1.0, 2.0), warmup=0, clock=CPU_CLOCK).as_dict()
    assert (d["median_ms"], d["min_ms"], d["max_ms"]) == (2.0, 1.0, 3.0)


def test_step_clock_intervals_skip_warmup() -> None:
    clock = StepClock(CPU)
    for delay in (0.0, 0.1, 0.0):
        clock.begin_step()
        clock.mark("a")
        time.sleep(delay)
        clock.mark("b")
    all_steps = clock.intervals("a", "b")
    assert len(all_steps) == 3
    assert all_steps[1] >= 100.0 > all_steps[0]
    assert clock.intervals("a", "b", skip=1) == all_steps[1:]


def test_step_clock_needs_a_step() -> None:
    with pytest.raises(RuntimeError, match="begin_step"):
        StepClock(CPU).mark("a")


def test_paired_ratios_divide_round_by_round() -> None:
    paired = paired_ratios([10.0, 30.0, 12.0], [5.0, 10.0, 8.0])
    assert paired["per_round"] == [2.0, 3.0, 1.5]
    assert (paired["median"], paired["min"], paired["max"]) == (2.0, 1.5, 3.0)


@pytest.mark.parametrize(
    ("baseline", "variant", "message"),
    [([1.0, 2.0], [1.0], "as many"), ([], [], "empty"), ([1.0], [0.0], "positive")],
)
def test_paired_ratios_refuse_bad_pairs(
    baseline: list[float], variant: list[float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        paired_ratios(baseline, variant)
