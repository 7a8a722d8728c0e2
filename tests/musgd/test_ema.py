"""The fused EMA: the per-tensor average bit for bit, and skipped bitwise with the step."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

import pytest
import torch
from replay_fakes import FakeRecorder

from musgd._ema import FusedEMA
from musgd._flat import adopt_flat, runs
from musgd.bench import same_bits


def model_pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.Conv2d(8, 4, 1)
    )
    model.train()(torch.randn(2, 3, 8, 8))  # moves the BatchNorm statistics and its counter
    ema = copy.deepcopy(model).eval().requires_grad_(False)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    model(torch.randn(2, 3, 8, 8))
    return ema, model


def per_tensor(ema: torch.nn.Module, model: torch.nn.Module, d: float) -> None:
    """The average one entry at a time: ``v.lerp_(m, 1 - d)``."""
    current = model.state_dict()
    with torch.no_grad():
        for name, v in ema.state_dict().items():
            if v.dtype.is_floating_point:
                v.lerp_(current[name].detach(), 1 - d)


@pytest.mark.parametrize("decay", [0.0, 0.5, 0.9999 * (1 - 2.718281828**-0.5)])
def test_fused_average_is_the_per_tensor_lerp_bit_for_bit(decay: float) -> None:
    ema, model = model_pair()
    reference = copy.deepcopy(ema)
    fused = FusedEMA()
    for _ in range(3):
        fused.update(ema, model, decay)
        per_tensor(reference, model, decay)
    for (name, v), r in zip(ema.state_dict().items(), reference.state_dict().values(), strict=True):
        assert v.dtype == r.dtype, name
        assert torch.equal(v, r), name
    counter = ema.state_dict()["1.num_batches_tracked"]
    assert int(counter) == 1  # integer entries are not averaged


def test_a_skip_flag_keeps_every_bit_and_a_clear_one_averages() -> None:
    ema, model = model_pair()
    before = {k: v.clone() for k, v in ema.state_dict().items()}
    fused = FusedEMA()
    one, zero = torch.ones(()), torch.zeros(())
    fused.update(ema, model, 0.7, skip=lambda device: one)
    assert all(torch.equal(v, before[k]) for k, v in ema.state_dict().items())
    reference = copy.deepcopy(ema)
    fused.update(ema, model, 0.7, skip=lambda device: zero)
    per_tensor(reference, model, 0.7)
    assert all(
        torch.equal(v, r)
        for v, r in zip(ema.state_dict().values(), reference.state_dict().values(), strict=True)
    )
    assert not all(torch.equal(v, before[k]) for k, v in ema.state_dict().items())


def test_an_ema_of_another_model_is_refused_with_a_message() -> None:
    ema, _ = model_pair()
    before = {k: v.clone() for k, v in ema.state_dict().items()}
    other = torch.nn.Sequential(torch.nn.Linear(2, 2))
    with pytest.raises(
        ValueError, match=r"the EMA model has an entry '1\.weight' the training model lacks"
    ):
        FusedEMA().update(ema, other, 0.5)
    assert all(torch.equal(v, before[k]) for k, v in ema.state_dict().items())  # nothing written


def test_the_entry_lists_are_kept_until_reset() -> None:
    ema, model = model_pair()
    fused = FusedEMA()
    first = fused.entries(ema, model)
    assert fused.entries(ema, model) is first
    fused.reset()
    again = fused.entries(ema, model)
    assert again is not first
    assert [t.data_ptr() for t in again[0]] == [t.data_ptr() for t in first[0]]


# Decays as the trainer's schedule gives them: the first updates weigh the model most (lerp's
# second branch, weight >= 0.5), later ones the average (its first branch).
SCHEDULE = [0.0, 0.3, 0.55, 0.9, 0.999, 0.9999 * (1 - 2.718281828**-0.5)]
SKIPS = [0.0, 0.0, 1.0, 0.0, 1.0, 0.0]


def _flag(flag: torch.Tensor) -> Callable[[torch.device], torch.Tensor]:
    """The guard's skip flag as the EMA asks for it."""
    return lambda _: flag


def _run(fused: FusedEMA, ema: torch.nn.Module, model: torch.nn.Module) -> None:
    for step, (decay, skip) in enumerate(zip(SCHEDULE, SKIPS, strict=True)):
        with torch.no_grad():  # the model moves between updates, as training moves it
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        fused.update(ema, model, decay, skip=_flag(torch.tensor(skip)))
        first = next(model.parameters())
        if step == 3:  # a skipped step's model may hold NaN (4 skips): the EMA must not take it
            with torch.no_grad():
                first[(0,) * first.dim()] = float("nan")
        if step == 4:
            with torch.no_grad():
                first[(0,) * first.dim()] = 0.25


def _same_state(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(
        same_bits(x, y)
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


def _twins(memory_format: torch.memory_format = torch.contiguous_format) -> tuple[Any, Any]:
    ema, model = model_pair()
    ema.to(memory_format=memory_format)  # type: ignore[call-overload]
    model.to(memory_format=memory_format)  # type: ignore[call-overload]
    return (copy.deepcopy(ema), copy.deepcopy(model)), (ema, model)


def _matches_eager(
    fused: FusedEMA,
    memory_format: torch.memory_format = torch.contiguous_format,
    dtype: torch.dtype | None = None,
) -> bool:
    """Whether ``fused`` over the schedule leaves the EMA the eager FusedEMA leaves, bit for
    bit, from twin models (in ``memory_format``, cast to ``dtype`` where given)."""
    (ema_a, model_a), (ema_b, model_b) = _twins(memory_format)
    if dtype is not None:
        for m in (ema_a, model_a, ema_b, model_b):
            m.to(dtype)
    torch.manual_seed(1)
    _run(FusedEMA(), ema_a, model_a)
    torch.manual_seed(1)
    _run(fused, ema_b, model_b)
    return _same_state(ema_a, ema_b)


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_a_recorded_guarded_update_gives_the_eager_bits(
    memory_format: torch.memory_format,
) -> None:
    recorder = FakeRecorder()
    recorded = FusedEMA(recorder)
    assert _matches_eager(recorded, memory_format)
    assert recorder.records == 1
    assert recorded.stats.recordings == 1
    assert recorded.stats.replays == len(SCHEDULE) - 1  # the first call runs eagerly
    assert dict(recorded.stats.fallbacks) == {"first-call": 1}


def test_the_recording_passes_leave_the_ema_as_it_was() -> None:
    ema, model = model_pair()
    fused = FusedEMA(FakeRecorder())
    zero = torch.zeros(())
    fused.update(ema, model, 0.5, skip=lambda device: zero)  # eager; the snapshot made
    before = copy.deepcopy(ema)
    recorded = fused._record(*fused.entries(ema, model))  # its warm-up and its capture
    assert recorded is not None
    assert _same_state(ema, before)


@pytest.mark.parametrize("where", ["warmup", "capture"])
def test_a_failed_recording_leaves_the_entries_and_stays_eager(
    where: str, caplog: pytest.LogCaptureFixture
) -> None:
    fused = FusedEMA(FakeRecorder(fail_in=where))
    with caplog.at_level(logging.WARNING, logger="musgd"):
        assert _matches_eager(fused)
    said = [r.getMessage() for r in caplog.records if "guarded EMA" in r.getMessage()]
    assert len(said) == 1, "said once, not at every update"
    assert "InjectedFailureError" in said[0]
    assert fused.stats.failures == 1
    assert fused.stats.recordings == 0
    assert fused.stats.fallbacks["record-failed:InjectedFailureError"] == len(SCHEDULE) - 1


def test_entries_that_are_not_float32_stay_eager_and_say_why() -> None:
    recorder = FakeRecorder()
    fused = FusedEMA(recorder)
    assert _matches_eager(fused, dtype=torch.float64)
    assert recorder.records == 0
    assert fused.stats.fallbacks["dtype"] == len(SCHEDULE) - 1


def test_a_recorder_for_another_device_keeps_the_update_eager() -> None:
    ema, model = model_pair()
    fused = FusedEMA(FakeRecorder(device_type="cuda"))
    zero = torch.zeros(())
    for _ in range(3):
        fused.update(ema, model, 0.5, skip=lambda device: zero)
    assert fused.stats.recordings == 0
    assert fused.stats.fallbacks["device:cpu"] == 2


def test_reset_and_dropping_record_anew() -> None:
    ema, model = model_pair()
    recorder = FakeRecorder()
    fused = FusedEMA(recorder)
    zero = torch.zeros(())
    for _ in range(3):
        fused.update(ema, model, 0.5, skip=lambda device: zero)
    fused.drop_recording()
    fused.update(ema, model, 0.5, skip=lambda device: zero)  # records at once: entries known
    assert recorder.records == 2
    fused.reset()
    fused.update(ema, model, 0.5, skip=lambda device: zero)  # the snapshot made anew: eager
    assert recorder.records == 2
    fused.update(ema, model, 0.5, skip=lambda device: zero)
    assert recorder.records == 3


def _move_alike(model: torch.nn.Module, twin: torch.nn.Module) -> None:
    """Move both models' parameters by the same noise, as training moves a model."""
    with torch.no_grad():
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            noise = torch.randn_like(p) * 0.1
            p.add_(noise)
            q.add_(noise)


def _float_entries(module: torch.nn.Module) -> list[torch.Tensor]:
    return [v for v in module.state_dict(keep_vars=True).values() if v.dtype.is_floating_point]


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_the_guarded_ema_lies_in_one_buffer_and_still_averages_bit_for_bit(
    memory_format: torch.memory_format,
) -> None:
    (reference, model_r), (ema, model) = _twins(memory_format)
    objects = [id(v) for v in _float_entries(ema)]
    strides = [v.stride() for v in _float_entries(ema)]
    fused = FusedEMA()
    clear = torch.zeros(())
    torch.manual_seed(2)
    for decay in SCHEDULE:
        _move_alike(model, model_r)
        fused.update(ema, model, decay, skip=_flag(clear))
        per_tensor(reference, model_r, decay)
    entries = _float_entries(ema)
    assert [id(v) for v in entries] == objects
    assert [v.stride() for v in entries] == strides
    assert len(runs(fused.pairs[0])) == 1  # the save and the select are single launches
    assert fused.snapshot is not None
    assert len(fused.snapshot.lanes[0].live) == 1
    assert _same_state(ema, reference)


@pytest.mark.parametrize(
    "convert",
    [
        lambda m: m.half().float(),  # as a float16 validation pass and back would
        lambda m: m.to(memory_format=torch.channels_last),
    ],
    ids=["half-and-back", "channels-last"],
)
@pytest.mark.parametrize("which", ["ema", "model"])
def test_tensors_moved_in_place_are_averaged_where_they_now_are(
    convert: Callable[[torch.nn.Module], Any], which: str
) -> None:
    (reference, model_r), (ema, model) = _twins()
    fused = FusedEMA()
    clear = torch.zeros(())
    torch.manual_seed(2)
    for step, decay in enumerate(SCHEDULE):
        if step == 2:
            for pair in (ema, reference) if which == "ema" else (model, model_r):
                convert(pair)
        _move_alike(model, model_r)
        fused.update(ema, model, decay, skip=_flag(clear))
        per_tensor(reference, model_r, decay)
    assert _same_state(ema, reference)
    assert not _same_state(ema, model)  # the average moved, and not onto the model


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_a_model_laid_flat_is_averaged_in_one_pass_bit_for_bit(
    memory_format: torch.memory_format,
) -> None:
    """The trainer lays the model out flat in its optimizer's order (not the state dict's): the
    guarded EMA takes the model's order and offsets, and its average is one lerp of two
    buffers, with the per-tensor bits, skips and a NaN in a skipped step's model included."""
    (reference, model_r), (ema, model) = _twins(memory_format)
    entries = _float_entries(model)
    adopt_flat(entries[::-1])  # another order than the state dict's
    fused = FusedEMA()
    torch.manual_seed(2)
    for step, (decay, skip) in enumerate(zip(SCHEDULE, SKIPS, strict=True)):
        _move_alike(model, model_r)
        fused.update(ema, model, decay, skip=_flag(torch.tensor(skip)))
        if not skip:
            per_tensor(reference, model_r, decay)
        if step == 1:  # the next step is skipped: its model's NaN must not reach the EMA
            for m in (model, model_r):
                first = next(m.parameters())
                with torch.no_grad():
                    first[(0,) * first.dim()] = float("nan")
        if step == 2:
            for m in (model, model_r):
                first = next(m.parameters())
                with torch.no_grad():
                    first[(0,) * first.dim()] = 0.5
    merged_ema, merged_model = fused.merged
    assert len(merged_ema) == len(merged_model) == 1  # one lerp of two buffers
    assert merged_ema[0].numel() == merged_model[0].numel()
    assert _same_state(ema, reference)
    assert not _same_state(ema, model)


def test_a_model_not_laid_flat_keeps_the_per_entry_average() -> None:
    (reference, model_r), (ema, model) = _twins()
    fused = FusedEMA()
    fused.update(ema, model, 0.5, skip=_flag(torch.zeros(())))
    per_tensor(reference, model_r, 0.5)
    assert len(fused.merged[0]) == len(_float_entries(model))
    assert _same_state(ema, reference)
