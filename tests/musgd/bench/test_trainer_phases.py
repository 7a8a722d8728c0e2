"""Phase marks of a trainer iteration: splitting, summaries, the clock's chaining."""

from __future__ import annotations

import io

import pytest

from musgd.bench._trainer_phases import (
    MARKS,
    PhaseClock,
    data_wait_share,
    phase_trace,
    split_iteration,
    summarize_phases,
)


def _marks(offset: float, data: float, step: float) -> dict[str, float]:
    """One iteration's marks (seconds): ``data`` waiting, 2 ms apart otherwise, ``step`` long."""
    t = offset
    marks = {"previous_end": t}
    t += data
    for name in MARKS[1:]:
        marks[name] = t
        t += step if name == "step_start" else 0.002
    return marks


def test_split_iteration_phases_and_derived() -> None:
    phases = split_iteration(_marks(10.0, data=0.050, step=0.010))
    assert phases["data_wait"] == pytest.approx(50.0)
    assert phases["optimizer_step"] == pytest.approx(10.0)
    # 20 gaps of 2 ms between the 21 marks from batch_start to batch_end, one of them the step.
    assert phases["iteration"] == pytest.approx(50.0 + 19 * 2.0 + 10.0)
    # The network's forward, the loss and the backward call: one gap each; the backward up to
    # the optimizer step, two.
    assert (phases["forward"], phases["loss"], phases["loss_backward"]) == pytest.approx((2, 2, 2))
    assert phases["backward"] == pytest.approx(4.0)
    assert phases["forward_backward"] == pytest.approx(5 * 2.0)
    assert phases["compute"] == pytest.approx(phases["iteration"] - 50.0)
    # optimizer_enter .. optimizer_exit spans 13 gaps, one of them the 10 ms step.
    assert phases["trainer_optimizer_step"] == pytest.approx(12 * 2.0 + 10.0)
    assert phases["around_optimizer"] == pytest.approx(24.0)
    assert phases["scaler_step_overhead"] == pytest.approx(4.0)


def test_split_iteration_leaves_out_what_was_not_marked() -> None:
    marks = _marks(0.0, data=0.01, step=0.01)
    for name in ("previous_end", "step_start"):  # first of an epoch; the scaler skipped the step
        del marks[name]
    phases = split_iteration(marks)
    for missing in ("data_wait", "iteration", "compute", "optimizer_step", "around_optimizer"):
        assert missing not in phases
    assert "forward_backward" in phases


def test_phase_trace_keeps_every_iteration_in_order() -> None:
    first = _marks(0.0, data=0.010, step=0.010)
    del first["previous_end"]  # an epoch's first iteration: no data wait, no iteration time
    slow = _marks(1.0, data=0.010, step=0.0301234)
    trace = phase_trace([first, _marks(0.5, data=0.010, step=0.010), slow])
    assert set(trace) == {"iteration", "forward_backward", "trainer_optimizer_step"}
    assert trace["iteration"][0] is None
    assert trace["iteration"][1:] == [pytest.approx(58.0), pytest.approx(78.12)]
    assert trace["trainer_optimizer_step"] == [
        pytest.approx(34.0),
        pytest.approx(34.0),
        pytest.approx(54.12),
    ]
    assert trace["iteration"][2] == round(trace["iteration"][2], 2)  # type: ignore[arg-type]  # 0.01 ms, for the JSON
    assert phase_trace([first], names=("data_wait",)) == {"data_wait": [None]}
    empty = phase_trace([])
    assert empty == {"iteration": [], "forward_backward": [], "trainer_optimizer_step": []}


def test_summarize_phases_medians_ranges_shares_and_skip() -> None:
    iterations = [_marks(i, data=d, step=0.010) for i, d in enumerate([0.5, 0.01, 0.03, 0.02])]
    summary = summarize_phases(iterations, skip=1)
    data = summary["data_wait"]
    assert (data["median"], data["min"], data["max"], data["count"]) == pytest.approx(
        (20.0, 10.0, 30.0, 3)
    )
    assert data_wait_share(summary) == pytest.approx(20.0 / summary["iteration"]["median"])
    assert summary["iteration"]["share"] == 1.0
    with pytest.raises(ValueError, match="skip"):
        summarize_phases(iterations, skip=-1)
    assert data_wait_share(summarize_phases([{"batch_start": 0.0, "batch_end": 1.0}])) is None


def test_clock_chains_iterations_and_breaks_at_epochs() -> None:
    ticks = iter(float(t) for t in range(100))
    syncs: list[int] = []
    clock = PhaseClock(synchronize=lambda: syncs.append(1), clock=lambda: next(ticks))
    clock.mark("zero_grad_start")  # outside an iteration: nothing recorded
    clock.start_iteration()  # t=0
    clock.mark("step_start")  # 1
    clock.mark("step_start")  # only the first of a name counts
    clock.end_iteration()  # 2
    clock.start_iteration()  # 3
    clock.end_iteration()  # 4
    clock.break_chain()
    clock.start_iteration()  # 5
    clock.end_iteration()  # 6
    first, second, third = clock.iterations
    assert first == {"batch_start": 0.0, "step_start": 1.0, "batch_end": 2.0}
    assert second == {"previous_end": 2.0, "batch_start": 3.0, "batch_end": 4.0}
    assert "previous_end" not in third
    assert len(syncs) == 7  # every reading but the ignored mark and the repeated one
    with pytest.raises(ValueError, match="unknown mark"):
        clock.mark("nope")


def test_the_trace_writes_the_first_iterations_marks_before_reading_the_clock() -> None:
    out = io.StringIO()
    read: list[str] = []

    def reading() -> float:  # the trace line must already be out when the clock is read
        read.append(out.getvalue().splitlines()[-1])
        return 0.0

    clock = PhaseClock(clock=reading, trace_iterations=1, trace_to=out)
    clock.mark("zero_grad_start")  # outside an iteration: neither recorded nor traced
    clock.start_iteration()
    clock.mark("forward_start")
    clock.mark("forward_start")  # a repeated mark is not read again, nor traced
    clock.end_iteration()
    clock.start_iteration()  # the second iteration: past trace_iterations
    clock.mark("forward_start")
    clock.end_iteration()
    lines = out.getvalue().splitlines()
    assert lines == [
        "phase-trace: iteration 0 batch_start",
        "phase-trace: iteration 0 forward_start",
        "phase-trace: iteration 0 batch_end",
    ]
    assert read[:3] == lines
    assert PhaseClock().trace_iterations == 0  # off by default


def test_the_trace_lines_carry_the_probes_reading_at_each_mark() -> None:
    out = io.StringIO()
    readings = iter(["reserved=1.0", "reserved=2.0"])
    clock = PhaseClock(trace_iterations=1, trace_to=out, probe=lambda: next(readings))
    clock.start_iteration()
    clock.end_iteration()
    assert out.getvalue().splitlines() == [
        "phase-trace: iteration 0 batch_start reserved=1.0",
        "phase-trace: iteration 0 batch_end reserved=2.0",
    ]
