"""Replay of a param group's update preparation (spec §1 steps 1-4; ``capture_updates``).

One recording per group layout runs momentum, Nesterov, Newton-Schulz (recorded inside the same
recording, so a group costs one replay per step) and the mix into static update tensors; the
learning-rate read and the write (step 5) stay outside as one foreach call.

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
    """A recorded update preparation: owned gradient inputs, hyperparameter slots, recording."""

    grads: list[Tensor]
    slots: HyperSlots
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
    """Runs a group's update preparation from a recording when it can, eagerly otherwise.

    Parameters and momentum buffers are read and written in place by address, so their
    addresses are part of the key; gradients are copied into owned static inputs.
    """

    def __init__(self, state: ReplayState) -> None:
        self._state = state
        self._eager_orth = EagerOrthogonalizer()

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
                return self._replay(entry, step.grads, step.hyper)
            reason = _storage_fallback(step.params, step.grads, step.bufs, device)
            reason = reason or state.update_cache.admits(key)
        if reason is not None:
            state.fallback(reason)
            return body(step)
        recorded = self._record(key, step, body)
        return body(step) if recorded is None else recorded

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

    def _replay(
        self, entry: _UpdateEntry, grads: Sequence[Tensor], hyper: HyperValues
    ) -> list[Tensor]:
        entry.slots.fill(hyper)
        torch._foreach_copy_(entry.grads, list(grads))
        entry.recording.replay()
        self._state.stats.replays += 1
        return list(entry.recording.outputs)

    def _record(self, key: Hashable, step: StepRecord, body: PrepareFn) -> list[Tensor] | None:
        """Record, publish and replay once; on any failure restore momentum, return None.

        The warm-up pass really runs the preparation (momentum moves), the capture pass may fail
        half-way, and the first replay moves momentum again: every one of these is covered by
        the same snapshot of the momentum buffers, taken before the warm-up runs (the gap seed
        003's review found). A key recorded before is captured without a warm-up
        (:meth:`ReplayState.record`); a capture runs nothing, so a failed one moved nothing, and
        no snapshot is made (the buffers' size again in memory, at the top of a training run's
        peak). What that leaves uncovered is a fault of the first replay's launch itself, a
        device error after which no step runs. The gradients are only read (the recording
        reads its own copies of them).
        """
        state = self._state
        buf_list = list(step.bufs)
        device = step.params[0].device
        saved: list[list[Tensor]] = []  # the buffers before a warm-up, where one runs

        def snapshot() -> None:
            saved.append([m.clone() for m in buf_list])

        try:
            slots = HyperSlots(device, type(step.hyper))
            slots.fill(step.hyper)
            # Owned inputs of the gradients' own layout (empty_like keeps dense strides).
            static = [torch.empty_like(g) for g in step.grads]
            torch._foreach_copy_(static, list(step.grads))
            # The recording reads owned gradient copies and hyperparameters from device tensors;
            # its bucket jobs are independent, so the recorder may spread them over parallel
            # branches.
            recorded = dataclasses.replace(
                step,
                params=list(step.params),
                grads=static,
                bufs=buf_list,
                hyper=slots.hyper,
                orth=state.recorder.concurrent(self._eager_orth, device),
            )
            recording = state.record(key, lambda: body(recorded), device, before_warm_up=snapshot)
            if saved:  # the warm-up moved momentum (capture did not)
                torch._foreach_copy_(buf_list, saved[0])
            entry = _UpdateEntry(static, slots, recording)
            updates = self._replay(entry, step.grads, step.hyper)
        except Exception as exc:  # any failure: restore, publish nothing, this key stays eager
            if saved:
                torch._foreach_copy_(buf_list, saved[0])
            state.update_cache.refuse(key)
            n = len(step.params)
            state.failed(f"the update preparation of a group of {n} tensors", exc)
            return None
        state.update_cache.publish(key, entry)
        state.stats.recordings += 1
        return updates
