"""A weight EMA in a few fused launches, skipped bitwise with the optimizer's guarded step.

The exponential moving average detectors evaluate with (Ultralytics' ``ModelEMA``, after
Polyak and Juditsky's averaging, R302) keeps, for every floating-point entry ``v`` of the EMA
model's state dict and the training model's entry ``m`` of the same name::

    v <- v + (1 - d)*(m - v)        (torch.lerp(v, m, 1 - d))

with a decay ``d`` the caller computes on the host. Ultralytics 8.4's ``ModelEMA.update`` gives
exactly ``torch.lerp``'s bits on every entry (observed as a black box against the candidate
formulas: ``d*v + (1-d)*m`` differs in the last bit on about a third of the weights;
tests/ultralytics checks the result bit for bit). :class:`FusedEMA` runs it as one
``torch._foreach_lerp_`` over all entries and, given the guarded optimizer's skip flag, keeps
every EMA bit where the step was skipped (a :class:`musgd._guard.Snapshot` select) -- all on the
device, no host read.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from musgd._guard import Snapshot


class FusedEMA:
    """The EMA update of one (EMA model, training model) pair.

    The entry lists are made at the first update and kept while both models are the same
    objects (as Ultralytics keeps its own pairs); a model whose tensors are replaced in place of
    the old ones (``module.weight = nn.Parameter(...)``) needs :meth:`reset`.
    """

    def __init__(self) -> None:
        self.key: tuple[int, int] | None = None
        self.pairs: tuple[list[Tensor], list[Tensor]] = ([], [])
        self.snapshot: Snapshot | None = None

    def reset(self) -> None:
        """Forget the entry lists and the snapshot (made again at the next update)."""
        self.key, self.pairs, self.snapshot = None, ([], []), None

    def entries(
        self, ema_model: torch.nn.Module, model: torch.nn.Module
    ) -> tuple[list[Tensor], list[Tensor]]:
        """The floating-point entries of ``ema_model``'s state dict and ``model``'s entries of
        the same names (the live tensors, so that the lists can be reused and recorded)."""
        key = (id(ema_model), id(model))
        if key == self.key:
            return self.pairs
        current = model.state_dict(keep_vars=True)
        averaged, live = [], []
        for name, v in ema_model.state_dict(keep_vars=True).items():
            if v.dtype.is_floating_point:
                if name not in current:
                    raise ValueError(
                        f"the EMA model has an entry {name!r} the training model lacks: build "
                        "the EMA from the model it averages"
                    )
                averaged.append(v.detach())
                live.append(current[name].detach())
        self.key, self.pairs, self.snapshot = key, (averaged, live), None
        return self.pairs

    @torch.no_grad()
    def update(
        self,
        ema_model: torch.nn.Module,
        model: torch.nn.Module,
        decay: float,
        skip: Callable[[torch.device], Tensor] | None = None,
    ) -> None:
        """``v <- lerp(v, m, 1 - d)`` for every entry; where ``skip(device)`` is 1.0 on the
        device, every EMA entry keeps its bits."""
        averaged, live = self.entries(ema_model, model)
        if not averaged:
            return
        if skip is None:
            torch._foreach_lerp_(averaged, live, 1.0 - decay)
            return
        if self.snapshot is None:
            self.snapshot = Snapshot(averaged)
        self.snapshot.save()
        torch._foreach_lerp_(averaged, live, 1.0 - decay)
        self.snapshot.select(skip)
