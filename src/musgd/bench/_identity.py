"""Bit-for-bit comparison of tensors, the check every replay-identity claim rests on."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["same_bits"]

_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def same_bits(a: Tensor, b: Tensor) -> bool:
    """Equal dtype, shape and bit patterns: a NaN equals the same NaN (an overflowed AMP
    step's gradients), ``0.0`` differs from ``-0.0``. Strides are not compared."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    as_int = _SAME_SIZE_INT[a.element_size()]
    return torch.equal(a.detach().view(as_int), b.detach().view(as_int))
