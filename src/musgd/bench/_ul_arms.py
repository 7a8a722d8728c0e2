"""The trainer benchmark's arms: every configuration a training run can take, in one table.

An arm is a name for what ``python -m musgd.bench ultralytics --arms a,b,c`` trains: its base
(the task's stock trainer with its own ``optimizer="MuSGD"``, or
:func:`musgd.ultralytics.musgd_trainer` of that class with options), the extra ``model.train``
arguments it adds (documented train arguments only), and whether a documented callback puts the
model in channels-last memory when training starts (:class:`ChannelsLastAtStart`). A child
process is told its arm by name and looks it up here. Nothing here imports Ultralytics.

The ``ours`` arm takes its ``musgd_trainer`` options from the ``--ours-*`` flags (its
``options`` here are None); every other arm's options are fixed, so its name says what ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = [
    "ARM_TABLE",
    "BASE_SUFFIX",
    "DEFAULT_ARMS",
    "STOCK",
    "Arm",
    "ChannelsLastAtStart",
    "arm_of",
    "channels_last_weights",
    "is_base",
    "unknown_arms",
]

STOCK = "stock"  # the arm every other one is compared with
DEFAULT_ARMS = (STOCK, "ours")


@dataclass(frozen=True)
class Arm:
    """One configuration of a training run.

    ``ours``: the base is ``musgd_trainer`` of the task's trainer class with ``options`` (None:
    the ``--ours-*`` flags), else the stock trainer with ``optimizer="MuSGD"``. ``train_args``:
    added to ``model.train``'s arguments. ``channels_last_callback``: a
    :class:`ChannelsLastAtStart` is added as the ``on_train_start`` callback. ``startup_s``: a
    first guess at the one-time start it adds to a run (compilation) before a run was seen.
    """

    summary: str
    ours: bool = False
    options: Mapping[str, bool] | None = field(default_factory=dict)
    train_args: Mapping[str, Any] = field(default_factory=dict)
    channels_last_callback: bool = False
    startup_s: float = 0.0

    def record(self, ours_flags: Mapping[str, bool]) -> dict[str, Any]:
        """JSON-ready: the base, its ``musgd_trainer`` options (``ours_flags`` for ``ours``),
        the extra train arguments and the callback."""
        options = dict(ours_flags if self.options is None else self.options)
        return {
            "base": "musgd_trainer" if self.ours else "stock trainer, optimizer=MuSGD",
            "options": options if self.ours else None,
            "train_args": dict(self.train_args),
            "callback": "on_train_start: model and EMA to channels_last"
            if self.channels_last_callback
            else None,
            "summary": self.summary,
        }


def _ours(**options: bool) -> dict[str, bool]:
    """``musgd_trainer`` options: the five the benchmark sets, False unless given."""
    keys = ("capture_network", "skip_nonfinite", "channels_last", "compile_network", "device_loss")
    return {key: options.get(key, False) for key in keys}


# Compilation is minutes of start-up for YOLO26 (Inductor caches it on disk for the next run).
_COMPILE_S = 240.0

ARM_TABLE: dict[str, Arm] = {
    STOCK: Arm("the task's stock trainer with its own MuSGD"),
    "stock-compile": Arm(
        "stock, with Ultralytics' compile=True train argument (torch.compile, Inductor)",
        train_args={"compile": True},
        startup_s=_COMPILE_S,
    ),
    "stock-channels-last": Arm(
        "stock, its model (and EMA) made channels-last by an on_train_start callback",
        channels_last_callback=True,
    ),
    "stock-channels-last-arg": Arm(
        "stock, with Ultralytics' channels_last=True train argument (its docs: ignored on CPU)",
        train_args={"channels_last": True},
    ),
    "ours": Arm("musgd_trainer with the --ours-* options", ours=True, options=None),
    "ours-network": Arm(
        "musgd_trainer(capture_network=True)", ours=True, options=_ours(capture_network=True)
    ),
    "ours-network-loss": Arm(
        "musgd_trainer(capture_network=True, device_loss=True, skip_nonfinite=True): the "
        "network and the loss recorded, the step guarded on the device",
        ours=True,
        options=_ours(capture_network=True, device_loss=True, skip_nonfinite=True),
    ),
    "ours-network-compiled": Arm(
        "musgd_trainer(capture_network=True, compile_network=True)",
        ours=True,
        options=_ours(capture_network=True, compile_network=True),
        startup_s=_COMPILE_S,
    ),
    "ours-network-compiled-channels-last": Arm(
        "musgd_trainer(capture_network=True, compile_network=True, channels_last=True)",
        ours=True,
        options=_ours(capture_network=True, compile_network=True, channels_last=True),
        startup_s=_COMPILE_S,
    ),
}


# An arm name ending in this trains the arm with the musgd of ``--base-src`` (another source
# tree, e.g. an earlier commit's ``src``) in place of this one: ``ours-network-loss@base``
# beside ``ours-network-loss`` compares two versions of ours in the same rounds.
BASE_SUFFIX = "@base"


def is_base(name: str) -> bool:
    """Whether ``name`` is an arm trained with the ``--base-src`` musgd."""
    return name.endswith(BASE_SUFFIX)


def arm_of(name: str) -> Arm:
    """The :class:`Arm` of an arm name, ``@base`` or not."""
    return ARM_TABLE[name.removesuffix(BASE_SUFFIX)]


def unknown_arms(names: list[str]) -> list[str]:
    """The names in ``names`` that are not arms of :data:`ARM_TABLE` (``@base`` or not)."""
    return [name for name in names if name.removesuffix(BASE_SUFFIX) not in ARM_TABLE]


class ChannelsLastAtStart:
    """The ``on_train_start`` callback of ``stock-channels-last``: what a user of the stock
    trainer can do today to train channels-last, through the documented callbacks alone.

    It converts ``trainer.model`` in place (``Module.to(memory_format=torch.channels_last)``: its
    4-D parameters and buffers; the parameters stay the optimizer's objects) and the trainer's
    EMA copy (``trainer.ema.ema``) if the trainer has made it by then; the batches stay as the
    trainer makes them (NCHW), so each convolution's output follows its weight's layout. What
    it converted is kept (``converted``) for the run's record.
    """

    def __init__(self) -> None:
        self.converted: dict[str, bool] = {"model": False, "ema": False}

    def __call__(self, trainer: Any) -> None:
        model = getattr(trainer, "model", None)
        if isinstance(model, torch.nn.Module):
            model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
            self.converted["model"] = True
        ema = getattr(getattr(trainer, "ema", None), "ema", None)
        if isinstance(ema, torch.nn.Module):
            ema.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
            self.converted["ema"] = True


def channels_last_weights(model: Any) -> dict[str, int]:
    """Of ``model``'s 4-D parameters: how many there are, how many are in channels-last memory
    and not also contiguous, and how many are contiguous and not also channels-last (a 1x1
    kernel, or one of a single input channel, is both, and counts for neither)."""
    if not isinstance(model, torch.nn.Module):
        return {"four_d": 0, "channels_last": 0, "contiguous": 0}
    four_d = [p for p in model.parameters() if p.dim() == 4]
    last = [p.is_contiguous(memory_format=torch.channels_last) for p in four_d]
    first = [p.is_contiguous() for p in four_d]
    return {
        "four_d": len(four_d),
        "channels_last": sum(cl and not c for cl, c in zip(last, first, strict=True)),
        "contiguous": sum(c and not cl for cl, c in zip(last, first, strict=True)),
    }
