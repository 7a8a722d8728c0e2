"""MuSGD: Muon's Newton–Schulz orthogonalization mixed with SGD momentum, for PyTorch.

Install with ``pip install "wpgate[optim]"``; then ``from musgd import MuSGD``.
"""

from __future__ import annotations

try:
    import torch as _torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a torch-free subprocess test
    raise ImportError(
        'musgd needs PyTorch, which is not installed. Install it with: pip install "wpgate[optim]"'
    ) from exc

from musgd._clip_replay import GradClipReplay
from musgd._functional import matrix_shape
from musgd._groups import param_groups
from musgd._newton_schulz import (
    DEFAULT_COEFFICIENTS,
    orthogonalize,
    orthogonalize_batched,
)
from musgd._nsconfig import NSConfig
from musgd._optimizer import MuSGD

__all__ = [
    "DEFAULT_COEFFICIENTS",
    "GradClipReplay",
    "MuSGD",
    "NSConfig",
    "matrix_shape",
    "orthogonalize",
    "orthogonalize_batched",
    "param_groups",
]
