"""``param_groups``: ready-made MuSGD groups for a model (matrices decay, vectors do not)."""

from __future__ import annotations

from typing import Any

from torch import nn

from musgd._functional import matrix_shape


def param_groups(
    model: nn.Module, *, weight_decay: float, **overrides: Any
) -> list[dict[str, Any]]:
    """Split a model's trainable parameters into a matrix group and a vector group.

    Matrices (conv kernels, linear weights: see :class:`musgd.MuSGD` for the rule) get
    ``weight_decay``; vectors (biases, norm weights, ``(C, 1, 1)`` gains) get none. Extra keyword
    arguments (``lr``, ``momentum``, ...) are copied into both groups. Empty groups are left out.
    """
    matrices: list[nn.Parameter] = []
    vectors: list[nn.Parameter] = []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        (matrices if matrix_shape(p.shape) is not None else vectors).append(p)
    groups: list[dict[str, Any]] = []
    if matrices:
        groups.append({"params": matrices, "weight_decay": weight_decay, **overrides})
    if vectors:
        groups.append({"params": vectors, "weight_decay": 0.0, **overrides})
    return groups
