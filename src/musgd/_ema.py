"""A weight EMA in a few fused launches, skipped bitwise with the optimizer's guarded step.

The exponential moving average detectors evaluate with (Ultralytics' ``ModelEMA``, after
Polyak and Juditsky's averaging, R302) keeps, for every floating-point entry ``v`` of the EMA
model's state dict and the training model's entry ``m`` of the same name::

    v <- d*v + (1 - d)*m

with a decay ``d`` the caller computes on the host. :class:`FusedEMA` runs it as three
``torch._foreach_*`` calls over all entries (a multiply, a scaled copy, an add: the same two
roundings per element as the per-tensor ``v *= d; v += (1 - d)*m``), and, given the guarded
optimizer's skip flag, keeps every EMA bit where the step was skipped (a
:class:`musgd._guard.Snapshot` select) -- all on the device, no host read.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from musgd._guard import Snapshot


class FusedEMA:
    """The EMA update of one (EMA model, training model) pair; its snapshot (for the guarded
    update) is made at the first guarded update and remade when the entries change."""

    def __init__(self) -> None:
        self.snapshot: Snapshot | None = None

    def entries(
        self, ema_model: torch.nn.Module, model: torch.nn.Module
    ) -> tuple[list[Tensor], list[Tensor]]:
        """The floating-point entries of ``ema_model``'s state dict and ``model``'s entries of
        the same names (the live tensors, so that the lists can be reused and recorded)."""
        current = model.state_dict(keep_vars=True)
        averaged, live = [], []
        for name, v in ema_model.state_dict(keep_vars=True).items():
            if v.dtype.is_floating_point:
                if name not in current:
                    raise ValueError(
                        f"the EMA model has an entry {name!r} the training model lacks: build "
                        "the EMA from the model it averages"
                    )
                averaged.append(v)
                live.append(current[name])
        return averaged, live

    @torch.no_grad()
    def update(
        self,
        ema_model: torch.nn.Module,
        model: torch.nn.Module,
        decay: float,
        skip: Callable[[torch.device], Tensor] | None = None,
    ) -> None:
        """``v <- d*v + (1-d)*m`` for every entry; where ``skip(device)`` is 1.0 on the
        device, every EMA entry keeps its bits."""
        averaged, live = self.entries(ema_model, model)
        if not averaged:
            return
        snapshot = None
        if skip is not None:
            snapshot = self.snapshot
            if snapshot is None or not snapshot.serves(averaged):
                snapshot = self.snapshot = Snapshot(averaged)
            snapshot.save()
        torch._foreach_mul_(averaged, decay)
        torch._foreach_add_(averaged, torch._foreach_mul(live, 1.0 - decay))
        if snapshot is not None and skip is not None:
            snapshot.select(skip)
