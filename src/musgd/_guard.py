"""The non-finite guard: skip a step whose gradients are not all finite, decided on the device.

``skip_nonfinite=True`` (a constructor argument and a param-group setting of both flavours)
protects the parameters and every buffer of the groups that ask for it. Around the engine's step
the guard

1. checks the guarded groups' gradients for inf and NaN with one fused device reduction
   (``torch._amp_foreach_non_finite_check_and_unscale_`` with a scale of exactly 1, so the
   gradients keep their bits: ``g * 1.0 == g`` in IEEE arithmetic, NaN included),
2. copies the protected tensors into backups (``torch._foreach_copy_``),
3. lets the step run as always (eager, replayed or inside a whole-step CUDA graph),
4. selects, bit for bit, the stepped value where the gradients were finite and the backup where
   they were not: on integer views of the same bytes, ``new * keep + old * skip`` with ``keep``
   and ``skip`` 0 or 1, so a NaN the skipped step wrote is multiplied out as an integer and
   never reaches a float operation,
5. adds the skip to a device counter.

No step reads the decision on the host: ``torch.amp.GradScaler`` skips its step by reading its
found-inf flag with ``.item()`` every iteration, a host synchronization that a captured or
launch-bound training loop pays for. The counter is read when asked
(:attr:`musgd.MuSGD.skipped_steps`), e.g. every few hundred iterations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from musgd._device import capturing
from musgd._flat import runs

# The integer type of each float width: the select runs on these views of the same bytes.
_INT_OF_WIDTH = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True)
class _Lane:
    """The protected tensors of one (device, element width), with their backups, as integers."""

    device: torch.device
    live: list[Tensor]
    saved: list[Tensor]
    int_dtype: torch.dtype


class Snapshot:
    """Backups of a fixed list of tensors (allocated once) and the bitwise select back.

    The optimizer's guard protects parameters and buffers with one; the trainer's guarded EMA
    (``musgd.ultralytics``) protects the EMA weights with another, skipped by the same flag.
    Consecutive tensors that lie in one buffer of ``musgd._flat`` (momentum buffers, the
    guarded EMA) are saved and selected as one flat view (:func:`musgd._flat.runs`): fewer
    tensors in each multi-tensor pass, whose host work is per tensor.
    """

    def __init__(self, protected: Sequence[Tensor]) -> None:
        self.protected = list(protected)
        self.devices = list(dict.fromkeys(t.device for t in protected))
        lanes: dict[tuple[torch.device, int], list[Tensor]] = {}
        for t in protected:
            lanes.setdefault((t.device, t.element_size()), []).append(t)
        self.lanes = []
        for (device, width), members in lanes.items():
            tensors = runs(members)
            self.lanes.append(
                _Lane(
                    device,
                    [t.view(_INT_OF_WIDTH[width]) for t in tensors],
                    [torch.empty_like(t).view(_INT_OF_WIDTH[width]) for t in tensors],
                    _INT_OF_WIDTH[width],
                )
            )

    def serves(self, protected: Sequence[Tensor]) -> bool:
        """Whether this snapshot was built for exactly these tensors (by identity, in order)."""
        return len(protected) == len(self.protected) and all(
            a is b for a, b in zip(protected, self.protected, strict=True)
        )

    def save(self) -> None:
        """Copy every protected tensor into its backup."""
        for lane in self.lanes:
            torch._foreach_copy_(lane.saved, lane.live)

    def select(self, skip: Callable[[torch.device], Tensor]) -> None:
        """Each protected tensor keeps its value where ``skip(device)`` (a 0-d 0/1 tensor) is 0
        and takes its backup's bits where it is 1."""
        for lane in self.lanes:
            drop = skip(lane.device).to(lane.int_dtype)
            torch._foreach_mul_(lane.live, 1 - drop)
            torch._foreach_mul_(lane.saved, drop)
            torch._foreach_add_(lane.live, lane.saved)


class GuardPlan:
    """What one set of protected tensors needs: their :class:`Snapshot`, the per-device
    found-inf flags, the unit scale the check multiplies by, and the step's skip flags."""

    def __init__(self, protected: Sequence[Tensor]) -> None:
        self.snapshot = Snapshot(protected)
        devices = self.snapshot.devices
        self.found = {d: torch.zeros(1, dtype=torch.float32, device=d) for d in devices}
        self.one = {d: torch.ones(1, dtype=torch.float32, device=d) for d in devices}
        self.skip = {d: torch.zeros((), dtype=torch.float32, device=d) for d in devices}

    def check_and_save(self, grads: Sequence[Tensor]) -> None:
        """Steps 1-2: the found-inf flags of this step's gradients, and the backups."""
        by_device: dict[torch.device, list[Tensor]] = {}
        for g in grads:  # a gradient is on its parameter's device, a protected one
            by_device.setdefault(g.device, []).append(g)
        for device, found in self.found.items():
            found.zero_()
            if device in by_device:
                torch._amp_foreach_non_finite_check_and_unscale_(
                    by_device[device], found, self.one[device]
                )
        # Every device takes the same decision: any device's non-finite gradient skips the step.
        flags = list(self.found.values())
        for device, skip in self.skip.items():
            total = flags[0].to(device, non_blocking=True)
            for flag in flags[1:]:
                total = total + flag.to(device, non_blocking=True)
            skip.copy_((total > 0).reshape(()))
        self.snapshot.save()

    def skip_on(self, device: torch.device) -> Tensor:
        """This step's skip flag (0-d float32, 1.0 to skip) on ``device``."""
        if device in self.skip:
            return self.skip[device]
        return next(iter(self.skip.values())).to(device, non_blocking=True)

    def select(self) -> None:
        """Step 4: the stepped value where the gradients were finite, else the backup."""
        self.snapshot.select(self.skip_on)


class NonFiniteGuard:
    """The guard of one optimizer: its plan (rebuilt when the protected tensors change, never
    inside a CUDA-graph capture) and its device counter of skipped steps."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.plan: GuardPlan | None = None
        self.count: Tensor | None = None

    def begin(self, protected: Sequence[Tensor], grads: Sequence[Tensor]) -> GuardPlan:
        """Check the gradients and save the protected tensors; the plan's :meth:`end` follows
        the step."""
        plan = self.plan
        if plan is None or not plan.snapshot.serves(protected):
            if capturing(protected[0].device):
                raise RuntimeError(
                    f"{self.name}(skip_nonfinite=True) allocates its backups at the first step "
                    "of a new set of parameters, which a CUDA-graph capture cannot do: run one "
                    "step outside the capture first (as torch.cuda.graph's warm-up does), then "
                    "capture"
                )
            _refuse_sharded_gradients(self.name, grads)
            plan = self.plan = GuardPlan(protected)
            if self.count is None:
                self.count = torch.zeros((), dtype=torch.int64, device=protected[0].device)
        plan.check_and_save(grads)
        return plan

    def end(self, plan: GuardPlan) -> None:
        """Steps 4-5: keep or restore, and count."""
        plan.select()
        count = self.count
        assert count is not None  # made with the first plan
        count.add_(plan.skip[count.device].to(torch.int64))

    def skipped(self) -> Tensor:
        """The number of steps skipped so far, as a 0-d int64 tensor on the parameters' device
        (reading it, e.g. with ``int()``, waits for the device)."""
        if self.count is None:
            return torch.zeros((), dtype=torch.int64)
        return self.count

    def last_skipped(self, device: torch.device) -> Tensor:
        """Whether the last guarded step was skipped, as a 0-d float32 tensor (1.0 or 0.0) on
        ``device``: what a caller's own guarded update (the trainer's EMA) selects by."""
        if self.plan is None:
            return torch.zeros((), dtype=torch.float32, device=device)
        return self.plan.skip_on(device)


def _refuse_sharded_gradients(name: str, grads: Sequence[Tensor]) -> None:
    """FSDP2's DTensor gradients hold a rank's shard only: ranks would decide apart."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a build without torch.distributed
        return
    if any(isinstance(g, DTensor) for g in grads):
        raise RuntimeError(
            f"{name}(skip_nonfinite=True) does not support FSDP2 (DTensor) parameters: each rank "
            "sees only its shard of the gradients, so ranks could decide apart; turn "
            "skip_nonfinite off for them (torch.amp.GradScaler skips non-finite steps, reading "
            "its flag on the host)"
        )
