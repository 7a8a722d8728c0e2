"""The fused EMA: the per-tensor average bit for bit, and skipped bitwise with the step."""

from __future__ import annotations

import copy

import pytest
import torch

from musgd._ema import FusedEMA


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
