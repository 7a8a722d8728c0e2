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

The guarded update saves the entries, averages them and selects back. At its first call the
EMA's entries are moved, in place, into one buffer per (device, dtype) (each tensor keeps its
object, values and strides), so that the save and the select are a few single launches over
that buffer. Where the training model's entries lie in such a buffer too (the trainer lays them
out so, ``musgd.ultralytics``), the EMA's take the same order and the same offsets, and the
average is one ``lerp`` of the two buffers (:func:`musgd._flat.paired_runs`); else it is a
multi-tensor pass over the entries. Before, the four multi-tensor passes
cost about 2 ms of host work an iteration for YOLO26n on an H200 host (WP-024). Given a
recorder, the guarded update is recorded once and replayed: the decay and the skip flag are
device tensors the replay reads (the decay written into a weight per entry, one flat buffer, so
that the recording's ``_foreach_lerp_`` takes its weights from memory; its ``List`` form
computes each entry with the same lerp as the scalar form). The recording's own passes run with
the skip flag set, so they leave every EMA bit as it was.

The Ultralytics trainer (``musgd.ultralytics``) does not give it a recorder: with the recording,
yolo26s b16 training runs on the H100 died with a segmentation fault early in training (one in
four at bd053d4, two of two at 8df1d1f and 4596433), the cause not found
(docs/work_packages/wp-024.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from musgd._flat import adopt_flat, memory_order, paired_runs
from musgd._guard import Snapshot
from musgd._replay import Recorder, Recording, ReplayStats, context_fallback

LOGGER = logging.getLogger("musgd")

# The layouts a recorded entry may have besides contiguous, by its number of dimensions.
_CHANNELS_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}


@dataclass(frozen=True)
class _Recorded:
    """The recorded guarded update and the device values its replay reads."""

    weight: Tensor  # 0-d float32: 1 - decay
    drop: Tensor  # 0-d float32: 1.0 to keep every EMA bit
    recording: Recording


class FusedEMA:
    """The EMA update of one (EMA model, training model) pair.

    The entry lists are made at the first update and kept while both models are the same
    objects (as Ultralytics keeps its own pairs); a model whose tensors are replaced in place of
    the old ones (``module.weight = nn.Parameter(...)``) needs :meth:`reset`.

    With a ``recorder`` (``musgd._replay.CudaGraphRecorder``), the guarded update's first call
    runs eagerly and the second records it (where every entry is float32 on one device the
    recorder supports; else it stays eager, the reason counted in ``stats.fallbacks``); the
    recording holds one float32 weight per entry beside the snapshot's backups.
    """

    def __init__(self, recorder: Recorder | None = None) -> None:
        self.recorder = recorder
        self.stats = ReplayStats()
        self.key: tuple[int, int] | None = None
        self.pairs: tuple[list[Tensor], list[Tensor]] = ([], [])
        self.snapshot: Snapshot | None = None
        # The guarded average's operands: the pairs with their runs in one buffer merged.
        self.merged: tuple[list[Tensor], list[Tensor]] = ([], [])
        self.recorded: _Recorded | None = None
        self._refused: str | None = None  # why this pair's update stays eager
        # The tensors the lists alias (the EMA's, the model's), to see them moved.
        self._owners: tuple[list[Tensor], list[Tensor]] = ([], [])

    def reset(self) -> None:
        """Forget the entry lists, the snapshot and the recording (made again as needed)."""
        self.key, self.pairs, self.snapshot = None, ([], []), None
        self._owners, self.merged = ([], []), ([], [])
        self.drop_recording()

    def drop_recording(self) -> None:
        """Drop the recording: the next guarded update runs eagerly, the one after records."""
        self.recorded, self._refused = None, None

    def entries(
        self, ema_model: torch.nn.Module, model: torch.nn.Module
    ) -> tuple[list[Tensor], list[Tensor]]:
        """The floating-point entries of ``ema_model``'s state dict and ``model``'s entries of
        the same names (the live tensors, so that the lists can be reused and recorded).

        The lists are kept while both models are the same objects and their tensors were not
        moved: a conversion in place (``ema_model.half()`` then ``.float()``, a change of
        memory format) gives each tensor new memory, which the first and last entries of each
        list reveal, and the lists are made again."""
        key = (id(ema_model), id(model))
        if key == self.key and not self._moved():
            return self.pairs
        current = model.state_dict(keep_vars=True)
        owners: tuple[list[Tensor], list[Tensor]] = ([], [])
        averaged, live = [], []
        for name, v in ema_model.state_dict(keep_vars=True).items():
            if v.dtype.is_floating_point:
                if name not in current:
                    raise ValueError(
                        f"the EMA model has an entry {name!r} the training model lacks: build "
                        "the EMA from the model it averages"
                    )
                owners[0].append(v)
                owners[1].append(current[name])
                averaged.append(v.detach())
                live.append(current[name].detach())
        self.key, self.pairs, self.snapshot = key, (averaged, live), None
        self._owners = owners
        self.drop_recording()
        return self.pairs

    def _moved(self) -> bool:
        """Whether a kept entry's tensor now has other memory than its list's alias."""
        for owners, aliases in zip(self._owners, self.pairs, strict=True):
            for i in (0, -1)[: len(owners)]:
                if owners[i].data_ptr() != aliases[i].data_ptr():
                    return True
        return False

    def _adopt(self) -> None:
        """Put the EMA's entries back to back in one buffer per (device, dtype), in place
        (:func:`musgd._flat.adopt_flat`), in the order the model's entries lie in memory
        (:func:`musgd._flat.memory_order`), so that the guard's save and select are single
        launches and the average pairs runs of the two buffers; the averaged list becomes the
        buffer's views, both lists in that order."""
        order = memory_order(self.pairs[1])
        ema, model = ([owners[i] for i in order] for owners in self._owners)
        self._owners = (ema, model)
        self.pairs = (adopt_flat(ema), [self.pairs[1][i] for i in order])
        self.merged = paired_runs(*self.pairs)

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
        first = self.snapshot is None
        if first:
            self._adopt()
            averaged, live = self.pairs
            self.snapshot = Snapshot(averaged)
        recorded = self.recorded
        if recorded is None and not first and self.recorder is not None:
            recorded = self._record(averaged, live)
        if recorded is not None:
            recorded.weight.fill_(1.0 - decay)
            recorded.drop.copy_(skip(recorded.drop.device))
            recorded.recording.replay()
            self.stats.replays += 1
            return
        if first and self.recorder is not None:
            self.stats.fallbacks["first-call"] += 1
        snapshot = self.snapshot
        assert snapshot is not None  # made above
        snapshot.save()
        torch._foreach_lerp_(*self.merged, 1.0 - decay)
        snapshot.select(skip)

    def _fallback(self, averaged: list[Tensor], live: list[Tensor]) -> str | None:
        """Why this pair's guarded update cannot be recorded, or None where it can."""
        assert self.recorder is not None
        device = averaged[0].device
        reason = context_fallback(self.recorder, device)
        if reason is not None:
            return reason
        for t in (*averaged, *live):
            if t.dtype != torch.float32:
                return "dtype"  # the scalar lerp computes in float32: so do float32 weights
            if t.device != device:
                return "mixed-devices"
        for v, m in zip(averaged, live, strict=True):
            if v.shape != m.shape or v.stride() != m.stride():
                return "layout"
            layout = _CHANNELS_LAST.get(v.dim(), torch.contiguous_format)
            if not (v.is_contiguous() or v.is_contiguous(memory_format=layout)):
                return "non-dense"
        return None

    def _record(self, averaged: list[Tensor], live: list[Tensor]) -> _Recorded | None:
        """The recorded guarded update of these entries, or None (it stays eager)."""
        if self._refused is not None:
            self.stats.fallbacks[self._refused] += 1
            return None
        reason = self._fallback(averaged, live)
        if reason is not None:
            self._refused = reason
            self.stats.fallbacks[reason] += 1
            return None
        assert self.recorder is not None
        assert self.snapshot is not None
        snapshot, device = self.snapshot, averaged[0].device
        weight = torch.zeros((), dtype=torch.float32, device=device)
        drop = torch.ones((), dtype=torch.float32, device=device)  # the recording's passes keep
        flat = torch.empty(sum(v.numel() for v in averaged), dtype=torch.float32, device=device)
        weights, offset = [], 0
        for v in averaged:  # each weight in its entry's layout (the lerp's fast path wants it)
            weights.append(flat[offset : offset + v.numel()].as_strided(v.shape, v.stride()))
            offset += v.numel()

        def guarded() -> tuple[Tensor, ...]:
            snapshot.save()
            flat.copy_(weight.expand_as(flat))
            torch._foreach_lerp_(averaged, live, weights)
            snapshot.select(lambda _: drop)
            return (drop,)

        snapshot.save()  # the backups hold the entries as they are: a failed pass restores them
        try:
            recording = self.recorder.record(guarded, device)
        except Exception as exc:  # the entries put back; this pair's update stays eager
            snapshot.select(lambda _: drop)
            self.stats.count_failure(exc)
            self._refused = f"record-failed:{type(exc).__name__}"
            LOGGER.warning("musgd: the guarded EMA's recording failed, so it runs eagerly: %r", exc)
            return None
        self.stats.recordings += 1
        self.recorded = _Recorded(weight, drop, recording)
        return self.recorded
