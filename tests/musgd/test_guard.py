"""``skip_nonfinite``: a step with a non-finite gradient leaves every bit as it was.

Each run is compared with a reference that is simply not stepped where the guarded run's
gradients were poisoned: parameters and every buffer must be bit-identical after the run, in
every mode (eager, the replay flags through the CPU fake recorder, and the whole guarded step
recorded once and replayed, as a CUDA graph of the step would be), for both flavours.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from replay_fakes import FakeRecorder
from test_flat import mixed_tensors
from torch import Tensor

from musgd import MuSGD
from musgd._flat import adopt_flat
from musgd._guard import Snapshot
from musgd.bench import same_bits
from musgd.ultralytics import UltralyticsMuSGD

SHAPES = [(8, 4), (16, 3, 3, 3), (5,), (4, 4), (12, 8)]
POISONED = {1: float("nan"), 4: float("inf"), 5: float("-inf")}
STEPS = 8


def make_params(dtype: torch.dtype = torch.float32) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(1)
    return [torch.nn.Parameter(torch.randn(s, generator=gen).to(dtype)) for s in SHAPES]


def build(
    flavour: str, params: list[torch.nn.Parameter], **options: Any
) -> MuSGD | UltralyticsMuSGD:
    matrices = [p for p in params if p.ndim >= 2]
    vectors = [p for p in params if p.ndim < 2]
    if flavour == "MuSGD":
        return MuSGD([{"params": matrices}, {"params": vectors}], lr=0.02, **options)
    groups = [{"params": matrices, "use_muon": True}, {"params": vectors, "use_muon": False}]
    return UltralyticsMuSGD(
        groups, lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4, **options
    )


def gradients(step: int, params: list[torch.nn.Parameter]) -> list[Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    grads = [torch.randn(p.shape, generator=gen).to(p.dtype) for p in params]
    if step in POISONED:  # one element of one parameter, a different one each time
        grads[step % len(grads)].view(-1)[step % 3] = POISONED[step]
    return grads


def bits(t: Tensor) -> Tensor:
    """The tensor's bytes as integers: NaN payloads and signed zeros compare too."""
    return t.detach().reshape(-1).view(torch.uint8).clone()


def assert_bit_identical(
    a: list[torch.nn.Parameter], opt_a: Any, b: list[torch.nn.Parameter], opt_b: Any
) -> None:
    for p, q in zip(a, b, strict=True):
        assert torch.equal(bits(p), bits(q))
        assert opt_a.state[p].keys() == opt_b.state[q].keys()
        for key in opt_b.state[q]:
            assert torch.equal(bits(opt_a.state[p][key]), bits(opt_b.state[q][key])), key


def reference_run(flavour: str) -> tuple[list[torch.nn.Parameter], Any]:
    """The unguarded optimizer, not stepped at the poisoned steps."""
    params = make_params()
    opt = build(flavour, params)
    for step in range(STEPS):
        if step in POISONED:
            continue
        for p, g in zip(params, gradients(step, params), strict=True):
            p.grad = g
        opt.step()
    return params, opt


@pytest.mark.parametrize("flavour", ["MuSGD", "UltralyticsMuSGD"])
@pytest.mark.parametrize("mode", ["eager", "replay-flags", "whole-step-recorded"])
def test_skips_exactly_the_poisoned_steps_and_leaves_every_bit(flavour: str, mode: str) -> None:
    ref_params, ref = reference_run(flavour)
    params = make_params()
    recorder = FakeRecorder()
    flags = (
        {"capture_updates": True, "capture_orthogonalization": True, "recorder": recorder}
        if mode == "replay-flags"
        else {}
    )
    opt = build(flavour, params, skip_nonfinite=True, **flags)
    step_fn: Callable[[], object] = opt.step
    for step in range(STEPS):
        grads = gradients(step, params)
        if mode == "whole-step-recorded" and step >= 1:
            # Static gradient tensors, as a captured training step reads them.
            for p, g in zip(params, grads, strict=True):
                assert p.grad is not None
                p.grad.copy_(g)
            if step == 1:  # recorded once (it refuses any host read), then only replayed
                recording = recorder.record(lambda: (opt.step(), [])[1], torch.device("cpu"))
                step_fn = torch.no_grad()(recording.replay)  # as the step runs
                continue  # the warm-up ran the (poisoned, so skipped) step; capture runs none
        else:
            for p, g in zip(params, grads, strict=True):
                p.grad = g
        step_fn()
    if mode == "whole-step-recorded":
        # The recording's warm-up ran at the poisoned step 1 and skipped it (its capture ran
        # nothing), so the state is that of step 0 and the replays followed; the steps match
        # the reference.
        assert recorder.replays == STEPS - 2
    assert int(opt.skipped_steps) == len(POISONED)
    if mode == "replay-flags":
        assert recorder.replays > 0
    assert_bit_identical(params, opt, ref_params, ref)


def test_without_the_guard_a_poisoned_step_reaches_the_parameters() -> None:
    """The control: the same run unguarded is not the reference (the test above can fail)."""
    params = make_params()
    opt = build("MuSGD", params)
    for step in range(3):
        for p, g in zip(params, gradients(step, params), strict=True):
            p.grad = g
        opt.step()
    assert not all(bool(p.isfinite().all()) for p in params)
    assert int(opt.skipped_steps) == 0


def test_the_check_leaves_the_gradients_bits() -> None:
    params = make_params()
    opt = build("MuSGD", params, skip_nonfinite=True)
    grads = gradients(1, params)
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    opt.step()
    assert all(
        torch.equal(bits(p.grad), bits(g))
        for p, g in zip(params, grads, strict=True)
        if p.grad is not None
    )


def test_a_skipped_first_step_leaves_zero_buffers_and_the_next_step_is_a_first_step() -> None:
    params, fresh_params = make_params(), make_params()
    opt = build("UltralyticsMuSGD", params, skip_nonfinite=True)
    fresh = build("UltralyticsMuSGD", fresh_params)
    for p, g in zip(params, gradients(1, params), strict=True):  # step 1 is poisoned
        p.grad = g
    opt.step()
    assert all(torch.equal(p, q) for p, q in zip(params, fresh_params, strict=True))
    assert all(not t.any() for s in opt.state.values() for t in s.values())
    for ps, o in ((params, opt), (fresh_params, fresh)):
        for p, g in zip(ps, gradients(0, ps), strict=True):
            p.grad = g
        o.step()
    assert_bit_identical(params, opt, fresh_params, fresh)
    assert int(opt.skipped_steps) == 1


@pytest.mark.parametrize("poisoned_group", [0, 1])
def test_the_guard_is_a_group_setting(poisoned_group: int) -> None:
    """Only the guarded group (0) is checked and protected; group 1 steps as always."""
    params = make_params()
    matrices = [p for p in params if p.ndim >= 2]
    vectors = [p for p in params if p.ndim < 2]
    groups: list[dict[str, Any]] = [
        {"params": matrices, "skip_nonfinite": True},
        {"params": vectors},
    ]
    opt = MuSGD(groups, lr=0.02)
    before = [p.detach().clone() for p in params]
    for p, g in zip(params, gradients(0, params), strict=True):
        p.grad = g
    target = (matrices if poisoned_group == 0 else vectors)[0]
    assert target.grad is not None
    target.grad.view(-1)[0] = float("nan")
    opt.step()
    guarded_kept = all(
        torch.equal(p, b) for p, b in zip(params, before, strict=True) if p.ndim >= 2
    )
    assert guarded_kept == (poisoned_group == 0)
    assert int(opt.skipped_steps) == (1 if poisoned_group == 0 else 0)
    assert all(bool(p.isfinite().all()) for p in matrices)
    assert all(bool(p.isfinite().all()) for p in vectors) == (poisoned_group == 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_other_parameter_dtypes_are_guarded_bit_for_bit(dtype: torch.dtype) -> None:
    params, ref_params = make_params(dtype), make_params(dtype)
    opt = MuSGD(params, lr=0.02, skip_nonfinite=True)
    ref = MuSGD(ref_params, lr=0.02)
    for step in range(3):
        for p, g in zip(params, gradients(step, params), strict=True):
            p.grad = g
        opt.step()
        if step not in POISONED:
            for p, g in zip(ref_params, gradients(step, ref_params), strict=True):
                p.grad = g
            ref.step()
    assert_bit_identical(params, opt, ref_params, ref)
    assert int(opt.skipped_steps) == 1


@pytest.mark.parametrize("flavour", ["MuSGD", "UltralyticsMuSGD"])
def test_the_setting_is_checked_and_kept_by_state_dicts_and_copies(flavour: str) -> None:
    with pytest.raises(ValueError, match=r"skip_nonfinite must be True or False, got 'yes'"):
        build(flavour, make_params(), skip_nonfinite="yes")
    opt = build(flavour, make_params(), skip_nonfinite=True)
    assert all(g["skip_nonfinite"] for g in opt.param_groups)
    assert all(g["skip_nonfinite"] for g in copy.deepcopy(opt).param_groups)
    other = build(flavour, make_params())
    other.load_state_dict(opt.state_dict())
    assert all(g["skip_nonfinite"] for g in other.param_groups)
    older = opt.state_dict()
    for group in older["param_groups"]:
        del group["skip_nonfinite"]  # a state dict from before the setting existed
    other = build(flavour, make_params())
    other.load_state_dict(older)
    assert not any(g["skip_nonfinite"] for g in other.param_groups)


def test_the_last_step_flag_says_whether_it_was_skipped() -> None:
    params = make_params()
    opt = build("MuSGD", params, skip_nonfinite=True)
    cpu = torch.device("cpu")
    assert float(opt.last_step_skipped(cpu)) == 0.0
    seen = []
    for step in range(3):
        for p, g in zip(params, gradients(step, params), strict=True):
            p.grad = g
        opt.step()
        seen.append(float(opt.last_step_skipped(cpu)))
    assert seen == [0.0, 1.0, 0.0]


@pytest.mark.parametrize("adopted", [False, True], ids=["lists", "one-view"])
def test_a_snapshot_of_one_buffer_selects_the_bits_a_list_snapshot_selects(
    adopted: bool,
) -> None:
    tensors = mixed_tensors()
    snapshot = Snapshot(adopt_flat(tensors) if adopted else tensors)
    assert len(snapshot.lanes[0].live) == (1 if adopted else 4)  # the float32 lane
    saved = [t.clone() for t in tensors]
    snapshot.save()
    for t in tensors:
        t.fill_(float("nan"))
    snapshot.select(lambda _: torch.ones(()))
    assert all(same_bits(t, s) for t, s in zip(tensors, saved, strict=True))
    written = [torch.full_like(t, -0.0) for t in tensors]
    snapshot.save()
    for t, w in zip(tensors, written, strict=True):
        t.copy_(w)
    snapshot.select(lambda _: torch.zeros(()))
    assert all(same_bits(t, w) for t, w in zip(tensors, written, strict=True))
