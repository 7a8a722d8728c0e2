"""Replay of the param groups' update preparation (spec §1 steps 1-4; ``capture_updates``).

One recording per step's set of group layouts (or, where the groups cannot share one, per
group) runs momentum, Nesterov, Newton-Schulz (recorded inside the same recording, so a step
costs one replay) and the mix into static update tensors; the learning-rate read and the write
(step 5) stay outside as one foreach call per group.

Hyperparameters that schedules change every step (``momentum``, ``weight_decay``, ``w_muon``,
``w_sgd``) are held in float32 0-d device tensors that the recording reads, refilled outside it
whenever their value changes: no stale value is ever replayed and no re-recording is needed.
That a float32 0-d tensor and a Python float scale a float32 tensor to the same bits is
assumption A1, which does not hold for bfloat16/float16 tensors, so only all-float32 groups are
replayed. Whether a hyperparameter is zero changes which operations run (``Structure``) and so
is part of the key instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from operator import attrgetter

import torch
from torch import Tensor

from musgd._functional import (
    EagerOrthogonalizer,
    Hyper,
    HyperValues,
    PrepareFn,
    StepRecord,
)
from musgd._replay import (
    Recording,
    ReplayState,
    is_float32,
    same_float,
    tensor_fallback,
)


class HyperSlots:
    """Float32 0-d device tensors a recording reads its hyperparameters from: one per field of
    the flavour's hyperparameter record ``kind`` (:class:`~musgd._functional.Hyper` by default)."""

    def __init__(self, device: torch.device, kind: type[HyperValues] = Hyper) -> None:
        self._kind = kind
        self._fields = tuple(f.name for f in dataclasses.fields(kind))  # type: ignore[arg-type]
        self.tensors = tuple(
            torch.zeros((), dtype=torch.float32, device=device) for _ in self._fields
        )
        self._values: list[float | None] = [None] * len(self._fields)

    @property
    def hyper(self) -> HyperValues:
        """A record of ``kind`` whose every field is its device tensor."""
        return self._kind(*self.tensors)

    def fill(self, hyper: HyperValues) -> None:
        """Write each value that changed since the last fill (outside any recording); a value
        held in a device tensor is copied on the device at every fill (never read on the host)."""
        for i, name in enumerate(self._fields):
            value = getattr(hyper, name)
            if isinstance(value, Tensor):
                self.tensors[i].copy_(value)
                self._values[i] = None
                continue
            value = float(value)
            if not same_float(self._values[i], value):
                self.tensors[i].fill_(value)
                self._values[i] = value


@dataclass
class _UpdateEntry:
    """A recorded update preparation of one group or of several together: owned gradient
    inputs (group after group), each group's hyperparameter slots and number of updates, and
    the recording, whose outputs are every group's updates in the same order."""

    grads: list[Tensor]
    slots: list[HyperSlots]
    counts: list[int]
    recording: Recording


_requires_grad = attrgetter("requires_grad")
# Layouts besides contiguous that a recording takes: channels-last. A model converted with
# ``.to(memory_format=torch.channels_last)`` has such weights, gradients and momentum buffers
# (issue #16's trainer does this on CUDA: one group fell back at every step until they were
# admitted). Gradients are copied into owned inputs of the same strides, so the recording
# computes on the layout eager would.
_DENSE_FORMATS = {4: torch.channels_last, 5: torch.channels_last_3d}


_ALL_CONTIGUOUS = ()


def _gradient_check(grads: Sequence[Tensor]) -> tuple[str | None, tuple[bool, ...]]:
    """Why this step's gradients must run eagerly (checked every step, cheaply), or None; and
    their layouts for the key (empty when all are contiguous, the common case)."""
    if any(map(_requires_grad, grads)):
        return "requires-grad", _ALL_CONTIGUOUS
    if all(map(Tensor.is_contiguous, grads)):
        return None, _ALL_CONTIGUOUS
    layouts = _gradient_layouts(grads)
    return ("non-contiguous", _ALL_CONTIGUOUS) if layouts is None else (None, layouts)


def _gradient_layouts(grads: Sequence[Tensor]) -> tuple[bool, ...] | None:
    """Which gradients are channels-last, or None where one is neither that nor contiguous (a
    transposed view, say: eager only). A storage offset needs no entry: gradients are copied
    into owned inputs."""
    layouts = []
    for g in grads:
        if g.is_contiguous():
            layouts.append(False)
        elif _dense_format(g):
            layouts.append(True)
        else:
            return None
    return tuple(layouts)


def _storage_fallback(
    params: Sequence[Tensor], grads: Sequence[Tensor], bufs: Sequence[Tensor], device: torch.device
) -> str | None:
    """Why a group's parameters and buffers cannot be recorded, or None (checked on new keys)."""
    if not (is_float32(params) and is_float32(grads) and is_float32(bufs)):
        return "not-float32"
    for t in (*params, *bufs):
        # Parameters require grad by nature; only their placement and layout matter here.
        reason = _in_place_fallback(t.detach(), device)
        if reason is not None:
            return reason
    return None


def _dense_format(t: Tensor) -> bool:
    """Whether ``t`` is laid out channels-last (the 4-d or 5-d kind)."""
    fmt = _DENSE_FORMATS.get(t.dim())
    return fmt is not None and t.is_contiguous(memory_format=fmt)


def _in_place_fallback(t: Tensor, device: torch.device) -> str | None:
    """:func:`tensor_fallback` for a tensor the recording reads and writes in place, which may
    also be channels-last or lie at an offset of its storage: a model converted with
    ``.to(memory_format=torch.channels_last)`` (the Ultralytics trainer does this on CUDA) has
    such parameters, momentum buffers follow their parameter's format, and the buffers lie back
    to back in one storage (``musgd._flat``). The recording works on them by address (the
    key holds each one's address, offset included), as eager does."""
    reason = tensor_fallback(t, device)
    if reason == "storage-offset" or (reason == "non-contiguous" and _dense_format(t)):
        return None
    return reason


class UpdateReplayer:
    """Runs the groups' update preparation from a recording when it can (a step's groups
    together where they can share one), eagerly otherwise.

    Parameters and momentum buffers are read and written in place by address, so their
    addresses are part of the key; gradients are copied into owned static inputs.
    """

    def __init__(self, state: ReplayState) -> None:
        self._state = state
        self._eager_orth = EagerOrthogonalizer()
        # Whether a step's groups are recorded together (:meth:`prepare_groups`); tests set it
        # False to hold the group-by-group path, which serves where they cannot be, to its
        # contracts.
        self.together = True

    def prepare_groups(
        self, items: Sequence[tuple[int, StepRecord]], *, body: PrepareFn
    ) -> list[list[Tensor]]:
        """Steps 1-4 for each ``(index, record)`` of one optimizer step, in order; the same
        results, bit for bit, as ``body(record)`` for each.

        Where every group can be recorded, all of them run from one recording (one replay,
        one copy of the gradients, where each group on its own costs one of each: six of each
        per YOLO26 iteration in the Ultralytics trainer, WP-024); else, or where
        :data:`~musgd._replay.STEP_RECORDINGS` such recordings exist already (groups whose
        settings keep changing), group by group (:meth:`prepare`, which says why a group runs
        eagerly).
        """
        if self.together and len(items) > 1:
            together = self._prepare_together(items, body)
            if together is not None:
                return together
        return [self.prepare(index, step, body=body) for index, step in items]

    def _prepare_together(
        self, items: Sequence[tuple[int, StepRecord]], body: PrepareFn
    ) -> list[list[Tensor]] | None:
        """Every group's updates from the step's one recording, made where it can be; None
        where the groups must go one by one (a group that cannot be recorded, or the bound)."""
        state = self._state
        device = items[0][1].params[0].device
        if state.context_fallback(device) is not None:
            return None
        keys = []
        for index, step in items:
            reason, layouts = _gradient_check(step.grads)
            if reason is not None or step.params[0].device != device:
                return None
            keys.append(self._key(index, step, body, device, layouts))
        key = ("groups", tuple(keys))
        steps = [step for _, step in items]
        cache = state.step_cache
        entry = cache.get(key)
        if isinstance(entry, _UpdateEntry):
            return self._replay(entry, steps)
        if cache.admits(key) is not None:
            return None
        if any(_storage_fallback(s.params, s.grads, s.bufs, device) for s in steps):
            cache.refuse(key)  # checked once: storage changes only with a new key
            return None
        return self._record(key, steps, body, together=True)

    def prepare(self, index: int, step: StepRecord, *, body: PrepareFn) -> list[Tensor]:
        """Steps 1-4 for one group; same results, bit for bit, as ``body(step)``.

        Every step checks the context and the new gradients; parameters and buffers are checked
        when their storage is first seen (a new key), since only new storage can change them.
        """
        state = self._state
        device = step.params[0].device
        reason, layouts = _gradient_check(step.grads)
        reason = state.context_fallback(device) or reason
        if reason is None:
            key = self._key(index, step, body, device, layouts)
            entry = state.update_cache.get(key)
            if isinstance(entry, _UpdateEntry):
                return self._replay(entry, [step])[0]
            reason = _storage_fallback(step.params, step.grads, step.bufs, device)
            reason = reason or state.update_cache.admits(key)
        if reason is not None:
            state.fallback(reason)
            return body(step)
        recorded = self._record(key, [step], body, together=False)
        return body(step) if recorded is None else recorded[0]

    def _key(
        self,
        index: int,
        step: StepRecord,
        body: PrepareFn,
        device: torch.device,
        layouts: tuple[bool, ...],
    ) -> Hashable:
        """What selects a recording: the group's operations, layout, storage and environment.

        PyTorch makes a gradient match its parameter's shape, dtype and device; the gradients'
        entry is their layout (channels-last or not, see :func:`_gradient_layouts`; empty when
        all are contiguous, so the common case costs no per-tensor key).
        """
        structure = step.structure
        return (
            "prepare",
            body,
            index,
            device,
            step.layout,
            structure.nesterov,
            structure.decay,
            structure.muon,
            self._state.ns_key(structure.ns),
            tuple(map(Tensor.data_ptr, step.params)),
            tuple(map(Tensor.data_ptr, step.bufs)),
            layouts,
            self._state.environment_key(device),
        )

    def _replay(self, entry: _UpdateEntry, steps: Sequence[StepRecord]) -> list[list[Tensor]]:
        """Fill the slots, copy the gradients in, replay once; each group's updates."""
        for slots, step in zip(entry.slots, steps, strict=True):
            slots.fill(step.hyper)
        torch._foreach_copy_(entry.grads, [g for step in steps for g in step.grads])
        entry.recording.replay()
        self._state.stats.replays += len(steps)  # counted per group prepared, as eagerly
        return _split(entry.recording.outputs, entry.counts)

    def _record(
        self, key: Hashable, steps: Sequence[StepRecord], body: PrepareFn, *, together: bool
    ) -> list[list[Tensor]] | None:
        """Record, publish and replay once; on any failure restore momentum, return None.

        The warm-up pass really runs the preparation (momentum moves), the capture pass may fail
        half-way, and the first replay moves momentum again: every one of these is covered by
        the same snapshot of the momentum buffers, taken before the warm-up runs (the gap seed
        003's review found). A key recorded before is captured without a warm-up
        (:meth:`ReplayState.record`); a capture runs nothing, so a failed one moved nothing, and
        no snapshot is made (the buffers' size again in memory, at the top of a training run's
        peak). What that leaves uncovered is a fault of the first replay's launch itself, a
        device error after which no step runs. The gradients are only read (the recording
        reads its own copies of them). ``together``: the step's groups in one recording
        (published in the step cache), else one group (in the update cache).
        """
        state = self._state
        cache = state.step_cache if together else state.update_cache
        buf_list = [b for step in steps for b in step.bufs]
        device = steps[0].params[0].device
        saved: list[list[Tensor]] = []  # the buffers before a warm-up, where one runs

        def snapshot() -> None:
            saved.append([m.clone() for m in buf_list])

        try:
            slots = [HyperSlots(device, type(step.hyper)) for step in steps]
            # Owned inputs of the gradients' own layout (empty_like keeps dense strides).
            static = [[torch.empty_like(g) for g in step.grads] for step in steps]
            # The recording reads owned gradient copies and hyperparameters from device tensors;
            # its bucket jobs are independent, so the recorder may spread them over parallel
            # branches.
            orth = state.recorder.concurrent(self._eager_orth, device)
            recorded = [
                dataclasses.replace(
                    step,
                    params=list(step.params),
                    grads=grads,
                    bufs=list(step.bufs),
                    hyper=slot.hyper,
                    orth=orth,
                )
                for step, grads, slot in zip(steps, static, slots, strict=True)
            ]
            inputs = [g for grads in static for g in grads]
            for slot, step in zip(slots, steps, strict=True):
                slot.fill(step.hyper)
            torch._foreach_copy_(inputs, [g for step in steps for g in step.grads])
            recording = state.record(
                key,
                lambda: [u for step in recorded for u in body(step)],
                device,
                before_warm_up=snapshot,
            )
            if saved:  # the warm-up moved momentum (capture did not)
                torch._foreach_copy_(buf_list, saved[0])
            entry = _UpdateEntry(inputs, slots, [len(step.params) for step in steps], recording)
            updates = self._replay(entry, steps)
        except Exception as exc:  # any failure: restore, publish nothing, this key stays eager
            if saved:
                torch._foreach_copy_(buf_list, saved[0])
            cache.refuse(key)
            n = sum(len(step.params) for step in steps)
            what = f"{len(steps)} groups" if together else "a group"
            state.failed(f"the update preparation of {what} of {n} tensors", exc)
            return None
        cache.publish(key, entry)
        state.stats.recordings += 1
        return updates


def _split(outputs: Sequence[Tensor], counts: Sequence[int]) -> list[list[Tensor]]:
    """``outputs`` cut into consecutive runs of ``counts`` tensors."""
    runs: list[list[Tensor]] = []
    start = 0
    for count in counts:
        runs.append(list(outputs[start : start + count]))
        start += count
    return runs
