"""``musgd.bench.same_bits``: the bitwise comparison behind the replay-identity checks."""

from __future__ import annotations

import torch

from musgd.bench import same_bits


def test_same_bits_treats_equal_nans_as_equal_and_sees_any_difference() -> None:
    a = torch.tensor([1.0, float("nan"), float("inf")])
    assert same_bits(a, a.clone())
    assert not same_bits(a, torch.tensor([1.0, float("nan"), -float("inf")]))
    assert not same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert not same_bits(a, a.double())
    half = torch.tensor([[1.0, 2.0]], dtype=torch.bfloat16).t()  # non-contiguous, two bytes
    assert same_bits(half, half.clone())
