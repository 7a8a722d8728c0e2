"""YOLO26 users: an Ultralytics-compatible MuSGD with replay, and a trainer that uses it.

``UltralyticsMuSGD`` takes the Ultralytics 8.4 ``MuSGD`` constructor and state-dict layout and
needs only PyTorch. The trainer needs the optional Ultralytics package
(``pip install "wpgate[ultralytics]"``), imported only when a trainer is asked for::

    from ultralytics import YOLO
    from musgd.ultralytics import MuSGDTrainer

    YOLO("yolo26n.yaml").train(data="coco8.yaml", epochs=10, trainer=MuSGDTrainer)

From a shell, in the ``yolo train`` style (``key=value`` pairs; ``model`` names the model,
``task`` picks the trainer class and the default model)::

    musgd-yolo model=yolo26n.yaml data=coco8.yaml epochs=10 imgsz=640 batch=16
    musgd-yolo task=segment data=coco8-seg.yaml epochs=10

``MuSGDTrainer`` is a ``DetectionTrainer`` whose ``build_optimizer`` lets the stock trainer build
its MuSGD param groups (weight, bn, bias, muon and the lr x 3 head groups, with their
hyperparameters) and moves them into :class:`UltralyticsMuSGD` with both replay flags on.
``musgd_trainer(base)`` does the same for any other Ultralytics trainer class, such as every
task's (:func:`task_trainer`: ``SegmentationTrainer``, ``PoseTrainer``, ``OBBTrainer``,
``ClassificationTrainer``).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import math
import os
from typing import Any

import torch
from torch.optim import Optimizer

from musgd._clip_replay import EagerUnscale, GradClipReplay
from musgd._compile_cache import cache_path as compile_cache_path
from musgd._compile_cache import load as load_compile_cache
from musgd._compile_cache import save as save_compile_cache
from musgd._ema import FusedEMA
from musgd._engine import StepEngine, without_foreign_settings
from musgd._flat import adopt_flat, laid_flat
from musgd._loss_capture import LossCapture
from musgd._network_capture import NetworkCapture, compiled_predict
from musgd._newton_schulz import SUPPORTED_NS_DTYPES
from musgd._nsconfig import NSConfig, merge_flat, pop_command_line
from musgd._replay import CudaGraphRecorder, GraphPool
from musgd._triton_ns import BACKENDS as NS_BACKENDS
from musgd._ultralytics_optim import (
    FLAT_DEFAULTS,
    ULTRALYTICS_DEFAULTS,
    UltralyticsMuSGD,
    muon_scale,
)
from musgd._yolo_loss import (
    TARGETS_KEY,
    VALID_KEY,
    DeviceE2ELoss,
    device_loss_reason,
    padded_targets,
)

__all__ = [  # noqa: F822 - MuSGDTrainer is built by the module's __getattr__ on first use
    "CLIP_MAX_NORM",
    "TASKS",
    "TASK_TRAINERS",
    "MuSGDTrainer",
    "UltralyticsMuSGD",
    "from_stock",
    "main",
    "muon_scale",
    "musgd_trainer",
    "parse_train_args",
    "require_ultralytics",
    "task_trainer",
]

INSTALL_HINT = (
    'pip install "wpgate[ultralytics]" (on a machine without an NVIDIA GPU, first `pip install '
    "torch torchvision --index-url https://download.pytorch.org/whl/cpu`: PyPI's torch is the "
    "CUDA build, several GB)"
)
_STOCK_NAME = "MuSGD"
# The `optimizer=` values this trainer trains with UltralyticsMuSGD, case-folded.
_MUSGD_NAMES = frozenset({"auto", "musgd"})
LOGGER = logging.getLogger("musgd")
# The gradient-norm bound of the stock trainer's optimizer step (observed on 8.4: WP-011).
CLIP_MAX_NORM = 10.0
# With skip_nonfinite, the trainer reads the optimizer's skip counter every this many steps.
SKIP_REPORT_EVERY = 200
# The trainer's true/false keys of musgd-yolo (capture_network first: always passed).
_TRAINER_FLAGS = ("capture_network", "skip_nonfinite", "compile_network", "device_loss")
# Per Ultralytics task: the module and name of its documented trainer class, and the YOLO26n
# model configuration of the task.
TASK_TRAINERS: dict[str, tuple[str, str, str]] = {
    "detect": ("ultralytics.models.yolo.detect", "DetectionTrainer", "yolo26n.yaml"),
    "segment": ("ultralytics.models.yolo.segment", "SegmentationTrainer", "yolo26n-seg.yaml"),
    "pose": ("ultralytics.models.yolo.pose", "PoseTrainer", "yolo26n-pose.yaml"),
    "obb": ("ultralytics.models.yolo.obb", "OBBTrainer", "yolo26n-obb.yaml"),
    "classify": ("ultralytics.models.yolo.classify", "ClassificationTrainer", "yolo26n-cls.yaml"),
}
TASKS = tuple(TASK_TRAINERS)


def require_ultralytics() -> Any:
    """Import and return the ``ultralytics`` package, or raise ImportError saying how to get it."""
    try:
        import ultralytics
    except ImportError as exc:
        raise ImportError(
            "musgd.ultralytics needs the Ultralytics package for its trainer, and it is not "
            f"installed (or failed to import: {exc}). Install it with: {INSTALL_HINT}"
        ) from exc
    return ultralytics


def task_trainer(task: str) -> type[Any]:
    """The documented Ultralytics trainer class of ``task`` (one of :data:`TASKS`); ValueError
    for another name, ImportError (saying how to install it) without Ultralytics."""
    if task not in TASK_TRAINERS:
        raise ValueError(f"unknown task {task!r}: use one of {', '.join(TASKS)}")
    require_ultralytics()
    module, name, _ = TASK_TRAINERS[task]
    trainer: type[Any] = getattr(importlib.import_module(module), name)
    return trainer


def from_stock(
    stock: Optimizer,
    *,
    capture_orthogonalization: bool = True,
    capture_updates: bool = True,
    ns_dtype: torch.dtype = torch.bfloat16,
    ns_backend: str = "auto",
    ns: NSConfig | None = None,
    skip_nonfinite: bool = False,
) -> UltralyticsMuSGD:
    """An :class:`UltralyticsMuSGD` over the same param groups as an Ultralytics ``MuSGD``.

    Every key of every group (``param_group`` names, ``lr``, ``momentum``, ...) is kept but
    the settings only other optimizers have (an SGD-derived optimizer's ``dampening``), and
    ``muon``/``sgd`` are read from the stock optimizer. The stock optimizer must not have
    stepped yet: its state is not carried over (load a checkpoint's state dict instead).
    ``ns`` (a :class:`musgd.NSConfig`) sets the Newton-Schulz settings, as in
    :class:`UltralyticsMuSGD`; ``skip_nonfinite`` guards every group, as there.
    """
    if not isinstance(stock, Optimizer) or not (hasattr(stock, "muon") and hasattr(stock, "sgd")):
        raise TypeError(
            "from_stock converts Ultralytics' MuSGD (an optimizer with `muon` and `sgd` "
            f"weights), got {type(stock).__name__}; for other groups build "
            "musgd.ultralytics.UltralyticsMuSGD(groups, ...) or musgd.MuSGD directly"
        )
    if any(stock.state.values()):
        raise ValueError(
            "from_stock needs an optimizer that has not stepped yet (its momentum buffers would "
            "be lost); load its state_dict() into the new optimizer instead"
        )
    defaults = {k: stock.defaults.get(k, v) for k, v in ULTRALYTICS_DEFAULTS.items()}
    muon = getattr(stock, "muon", ULTRALYTICS_DEFAULTS["muon"])
    sgd = getattr(stock, "sgd", ULTRALYTICS_DEFAULTS["sgd"])
    # Settings of other optimizers (an SGD-derived stock's `dampening`) mean nothing here.
    groups = [without_foreign_settings(group) for group in stock.param_groups]
    return UltralyticsMuSGD(
        groups,
        lr=defaults["lr"],
        momentum=defaults["momentum"],
        weight_decay=defaults["weight_decay"],
        nesterov=defaults["nesterov"],
        use_muon=defaults["use_muon"],
        muon=muon,
        sgd=sgd,
        ns_dtype=ns_dtype,
        capture_orthogonalization=capture_orthogonalization,
        capture_updates=capture_updates,
        ns_backend=ns_backend,
        ns=ns,
        skip_nonfinite=skip_nonfinite,
    )


def musgd_trainer(
    base: type[Any] | None = None,
    *,
    capture_orthogonalization: bool = True,
    capture_updates: bool = True,
    ns_dtype: torch.dtype = torch.bfloat16,
    ns_backend: str = "auto",
    capture_clip: bool = True,
    capture_network: bool = False,
    ns: NSConfig | None = None,
    skip_nonfinite: bool = False,
    channels_last: bool = False,
    compile_network: bool = False,
    compile_cache: str | os.PathLike[str] | None = None,
    device_loss: bool = False,
) -> type[Any]:
    """A subclass of the Ultralytics trainer ``base`` (default ``DetectionTrainer``) using ours.

    With ``optimizer=auto`` (the default) or ``MuSGD`` its ``build_optimizer`` asks the stock
    trainer for its ``MuSGD`` and returns :func:`from_stock` of it; any other ``optimizer=``
    (``SGD``, ``AdamW``, ...) builds that stock optimizer, logging one warning that the MuSGD
    options do not apply (:func:`_trains_with_musgd` decides). The
    trainer's warm-up and scheduler keep writing ``lr`` and ``momentum`` into the groups; its
    checkpoints hold ``UltralyticsMuSGD.state_dict()``, which loads into the stock optimizer and
    back.

    With ``capture_clip`` (and a ``base`` that keeps the stock ``optimizer_step``) its
    ``optimizer_step`` is the stock sequence -- unscale the gradients, clip their norm to 10,
    the scaler's step, its update, ``zero_grad``, the EMA update -- with the clipping replayed by
    :class:`musgd.GradClipReplay` (the instance is the trainer's ``musgd_clip``): the same
    kernels on the same values, without the host time of the eager call.

    With ``capture_network`` (experimental, off by default) the model's training forward and
    backward run from CUDA graphs (:class:`musgd._network_capture.NetworkCapture`, the trainer's
    ``musgd_network``), installed at the first batch and removed when training ends; a
    multi-process (DDP) run keeps the eager network (``musgd_network`` is None, and
    ``musgd_network_reason`` says why).

    ``channels_last`` (off by default) puts the model, its EMA and every training batch in
    channels-last memory at the first batch (the gradients, the momentum buffers and the
    checkpoints' tensors follow; the optimizer orthogonalizes the same rows x (in*kh*kw)
    matrices), so that cuDNN runs its NHWC kernels. Results differ from NCHW's at rounding, as
    two convolution algorithms do, and with the captured network it measured no faster on the
    H200 (yolo26m b16: WP-025), hence opt-in. A multi-process (DDP) run keeps the layout it
    has, saying why in ``musgd_layout_reason``.

    ``compile_network`` (off by default: minutes of compilation at start-up) runs the training
    forward and backward as Inductor's kernels (:func:`musgd._network_capture.compiled_predict`),
    and with ``capture_network`` the recordings hold those kernels (``torch.compile`` makes no
    CUDA graphs of its own here). Inductor caches its compilations on disk, so a second run of
    the same model starts faster. ``compile_cache`` (a file path, with ``compile_network``)
    carries that cache to other machines: the trainer loads the file's artifacts before it
    compiles and writes them when training ends (:mod:`musgd._compile_cache`; the trainer's
    ``musgd_compile_cache`` says what was loaded and saved).

    ``device_loss`` (off by default) computes YOLO26 detection's end-to-end loss on the device
    with no host read (:class:`musgd._yolo_loss.DeviceE2ELoss`, written anew and matched to the
    installed criterion within float rounding, not bit for bit): each batch's targets are padded
    per image to a power-of-two bucket on the host before they go to the device. The stock
    criterion keeps its state (its head weights, which the trainer moves each epoch) and serves
    every other call (validation). A model whose criterion is not that loss (segment, pose, obb,
    classify, or a DFL head) keeps the stock loss, and ``musgd_loss_reason`` says why. With
    ``capture_network`` too, the loss's forward and backward are recorded in CUDA graphs
    (:class:`musgd._loss_capture.LossCapture`, ``trainer.musgd_loss.capture``): the iteration's
    loss is two graph launches. On CUDA the loss items the trainer prints and averages into
    its epoch's train losses are copied to the host without waiting
    (:class:`musgd._yolo_loss.HostItems`): each iteration's line shows the newest items the
    device has finished, usually those of an iteration or two before, and nothing in the
    iteration waits for the device.

    ``ns`` (a :class:`musgd.NSConfig`) reaches every optimizer the trainer builds
    (``musgd_options["ns"]``); ``ns_dtype`` and ``ns_backend`` are shorthands for its fields.

    With ``skip_nonfinite`` (off by default) a step whose gradients are not all finite leaves
    the parameters, both momentum buffers and the EMA weights bit-identical, decided on the
    device with no host read (the scaler's own skip reads its flag every iteration): see
    :func:`_optimizer_step`. The skips are counted on the device, read every
    ``SKIP_REPORT_EVERY`` steps and at the end of training, logged when there are new ones, and
    kept as the trainer's ``musgd_skipped``.
    """
    if base is not None and not isinstance(base, type):
        raise TypeError(
            "musgd_trainer takes an Ultralytics trainer class (e.g. DetectionTrainer or "
            f"SegmentationTrainer from ultralytics.models.yolo), got {type(base).__name__} "
            f"{base!r}"
        )
    # Checked now, not when the trainer builds its optimizer after setting up the whole run.
    if ns_backend not in NS_BACKENDS:
        raise ValueError(
            f"musgd_trainer: ns_backend must be {' or '.join(map(repr, NS_BACKENDS))}, "
            f"got {ns_backend!r}"
        )
    if ns_dtype not in SUPPORTED_NS_DTYPES:
        raise ValueError(
            f"musgd_trainer: ns_dtype must be torch.bfloat16, float16 or float32, got {ns_dtype!r}"
        )
    if ns is not None:  # a conflict with the flat settings is an error now, not at training
        merge_flat(
            ns,
            {"ns_dtype": ns_dtype, "ns_backend": ns_backend},
            FLAT_DEFAULTS,
            where="musgd_trainer",
        )
    name = "MuSGDTrainer"
    if base is None:
        require_ultralytics()
        from ultralytics.models.yolo.detect import DetectionTrainer

        base = DetectionTrainer
    else:
        name = f"MuSGD{base.__name__}"
    if not callable(getattr(base, "build_optimizer", None)):
        raise TypeError(
            f"musgd_trainer needs an Ultralytics trainer class with build_optimizer, got {base!r}"
        )
    flags = (
        ("capture_clip", capture_clip),
        ("capture_network", capture_network),
        ("skip_nonfinite", skip_nonfinite),
    )
    more = (
        ("channels_last", channels_last),
        ("compile_network", compile_network),
        ("device_loss", device_loss),
        # The optimizer's own: checked here too, not after the run's set-up (an audit's).
        ("capture_orthogonalization", capture_orthogonalization),
        ("capture_updates", capture_updates),
    )
    for flag, value in (*flags, *more):
        if not isinstance(value, bool):
            raise ValueError(f"musgd_trainer: {flag} must be True or False, got {value!r}")
    try:
        cache = compile_cache_path(compile_cache)
    except ValueError as exc:
        raise ValueError(f"musgd_trainer: {exc}") from None
    if cache is not None and not compile_network:
        raise ValueError(
            "musgd_trainer: compile_cache holds the compiled network's kernels: it needs "
            "compile_network=True"
        )
    options: dict[str, Any] = {
        "capture_orthogonalization": capture_orthogonalization,
        "capture_updates": capture_updates,
        "ns_dtype": ns_dtype,
        "ns_backend": ns_backend,
    }
    if ns is not None:  # only when given: the default's options stay plain values
        options["ns"] = ns
    if skip_nonfinite:  # likewise
        options["skip_nonfinite"] = True

    def build_optimizer(
        self: Any, model: Any, name: str = "auto", *args: Any, **kwargs: Any
    ) -> Any:
        add_callback = getattr(self, "add_callback", None)  # every Ultralytics trainer's
        if callable(add_callback):
            add_callback("on_train_end", release_recordings)
        if not _trains_with_musgd(name):
            # The user's choice is honoured, not replaced: the stock optimizer, and one line.
            LOGGER.warning(
                "musgd_trainer: optimizer=%s builds Ultralytics' own %s; the MuSGD options "
                "(capture_orthogonalization, capture_updates, ns_dtype, ns_backend) do not "
                "apply (optimizer=auto or MuSGD trains with UltralyticsMuSGD)",
                name,
                name,
            )
            return base.build_optimizer(self, model, name, *args, **kwargs)
        stock = base.build_optimizer(self, model, _STOCK_NAME, *args, **kwargs)
        train_args = getattr(self, "args", None)
        if getattr(train_args, "optimizer", None) == "auto":
            # Recorded as built: a checkpoint's train arguments saying `auto` made the stock
            # trainer resume it with the optimizer its own `auto` picks (AdamW on a short
            # run), whose groups the saved MuSGD state does not fit.
            train_args.optimizer = _STOCK_NAME  # type: ignore[union-attr]
        if skip_nonfinite:  # the last count, read once when training ends
            self.add_callback("on_train_end", report_skips)
        return from_stock(stock, **options)

    namespace: dict[str, Any] = {
        "build_optimizer": build_optimizer,
        # What this class was made with, for inspection (a DDP launch carries the class itself).
        "musgd_options": {
            **options,
            "capture_clip": capture_clip,
            "capture_network": capture_network,
            "channels_last": channels_last,
            "compile_network": compile_network,
            "compile_cache": cache,
            "device_loss": device_loss,
        },
        # Until the first batch sets them: NCHW, and why (None: not decided yet).
        "musgd_channels_last": False,
        "musgd_layout_reason": None if channels_last else "channels_last=False",
        "__module__": __name__,
        "__doc__": f"{base.__name__} training with UltralyticsMuSGD (replay flags on).",
    }
    if (capture_clip or skip_nonfinite) and _stock_optimizer_step(base):
        namespace["optimizer_step"] = _optimizer_step
        namespace["musgd_unscale"] = _eager_unscale
        if skip_nonfinite:
            namespace["musgd_report_skips"] = report_skips
            namespace["musgd_update_ema"] = _guarded_ema_update
    elif skip_nonfinite:
        LOGGER.warning(
            "musgd_trainer: %s has its own optimizer_step: skip_nonfinite guards the optimizer "
            "(parameters and momentum buffers), not the EMA, and the scaler keeps its host read",
            base.__name__,
        )
    if capture_network or compile_network or channels_last or device_loss or skip_nonfinite:
        namespace["preprocess_batch"] = _preprocess_batch
    if device_loss:
        namespace["validate"] = _validate
    # The default's name is the one this module exports: Ultralytics' DDP launch pickles the
    # trainer class with cloudpickle, which writes that class by reference (module and name) and
    # any other made here by value, options included (tests/ultralytics checks both).
    return type(name, (base,), namespace)


def _trains_with_musgd(name: object) -> bool:
    """Whether a trainer's ``optimizer=`` value asks for MuSGD: ``auto`` (the default, which
    this trainer resolves to MuSGD) or ``MuSGD``, in any case; any other name is the user's
    choice of a stock optimizer."""
    return name is None or str(name).casefold() in _MUSGD_NAMES


def _preprocess_batch(self: Any, batch: Any) -> Any:
    """The base's ``preprocess_batch``; at the first batch, the layout set, the model laid out
    flat for the guard (:func:`_lay_flat`), the network capture (or compilation) and the device
    loss installed; with channels-last, the batch's images in it; with the device loss, its
    padded targets beside the batch's own."""
    first = "musgd_network" not in self.__dict__  # the first batch: set up what it asks for
    if first:
        self.musgd_loss, self.musgd_loss_reason = _install_loss(self)
    padded = _padded_batch(batch) if self.musgd_loss is not None else None
    out = _base_method(self, "preprocess_batch", _preprocess_batch)(batch)
    if padded is not None and isinstance(out, dict):
        device = out["img"].device
        out[TARGETS_KEY], out[VALID_KEY] = (t.to(device, non_blocking=True) for t in padded)
    if first:
        self.musgd_channels_last, self.musgd_layout_reason = _set_layout(self)
        self.musgd_flat = _lay_flat(self)
        _install_network(self)
    img = out.get("img") if isinstance(out, dict) else None
    if self.musgd_channels_last and isinstance(img, torch.Tensor) and img.dim() == 4:
        out["img"] = img.contiguous(memory_format=torch.channels_last)
    return out


def _base_method(self: Any, name: str, ours: Any) -> Any:
    """The bound method ``name`` of the class above the one that defines ``ours`` as it."""
    owner: type[Any] = next(c for c in type(self).__mro__ if vars(c).get(name) is ours)
    return getattr(super(owner, self), name)


def _validate(self: Any) -> Any:
    """The base's ``validate``, the loss items put back on the device first: with the device
    loss they are host tensors (:class:`musgd._yolo_loss.HostItems`), and the validator adds
    the EMA model's device items to zeros shaped like them."""
    loss = self.__dict__.get("musgd_loss")
    items = getattr(self, "loss_items", None)
    device_items = None if loss is None else loss.device_items
    if isinstance(items, dict) and device_items is not None:
        device = device_items.device
        self.loss_items = {
            k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
            for k, v in items.items()
        }
    return _base_method(self, "validate", _validate)()


def _padded_batch(batch: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The host batch's targets padded per image (:func:`musgd._yolo_loss.padded_targets`), or
    None where the batch lacks the detection keys."""
    if not isinstance(batch, dict):
        return None
    index, cls, boxes, img = (batch.get(k) for k in ("batch_idx", "cls", "bboxes", "img"))
    if not (
        isinstance(index, torch.Tensor)
        and isinstance(cls, torch.Tensor)
        and isinstance(boxes, torch.Tensor)
        and isinstance(img, torch.Tensor)
    ):
        return None
    return padded_targets(index.cpu(), cls.cpu(), boxes.cpu(), int(img.shape[0]))


def _install_loss(self: Any) -> tuple[DeviceE2ELoss | None, str | None]:
    """With ``device_loss``, the model's criterion made a :class:`DeviceE2ELoss` over its stock
    one (put back when training ends); None and why where the stock loss stays."""
    if not type(self).musgd_options.get("device_loss", False):
        return None, "device_loss=False"
    model = self.model
    init = getattr(model, "init_criterion", None)
    if not callable(init):
        return None, f"the model is a {type(model).__name__}, without init_criterion"
    stock = getattr(model, "criterion", None)
    if stock is None:
        stock = init()
    elif isinstance(stock, DeviceE2ELoss):
        return stock, None
    reason = device_loss_reason(stock)
    if reason is not None:
        LOGGER.warning("musgd_trainer: device_loss keeps the stock loss: %s", reason)
        return None, reason
    ours = DeviceE2ELoss(stock, host_items=True)
    if type(self).musgd_options["capture_network"] and not _distributed():
        ours.__dict__["capture"] = LossCapture()  # recorded on CUDA; eager elsewhere, counted
    model.criterion = ours

    def restore(trainer: Any) -> None:
        if getattr(model, "criterion", None) is ours:
            model.criterion = stock

    self.add_callback("on_train_end", restore)
    return ours, None


def _distributed() -> bool:
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _set_layout(self: Any) -> tuple[bool, str | None]:
    """Put the model and its EMA in channels-last memory where ``channels_last`` asks for it;
    whether it did, and why not where it did not."""
    model = self.model
    if not type(self).musgd_options.get("channels_last", False):
        return False, "channels_last=False"
    if _distributed():
        return False, "distributed: the model keeps the layout its DDP buckets were made for"
    if not isinstance(model, torch.nn.Module):
        return False, f"the model is a {type(model).__name__}, not a torch module"
    # In place: the optimizer's parameters stay (torch's annotations lack this overload).
    model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    ema = getattr(self, "ema", None)
    if ema is not None and isinstance(getattr(ema, "ema", None), torch.nn.Module):
        ema.ema.to(memory_format=torch.channels_last)
    return True, None


def _lay_flat(self: Any) -> int:
    """With ``skip_nonfinite``, the model's parameters and floating-point buffers moved, in
    place, into one buffer per (device, dtype) (:func:`musgd._flat.adopt_flat`): the parameters
    in the optimizer's group order, then the buffers. The optimizer's guard then saves and
    selects each group's parameters in one launch instead of one per tensor (366 for YOLO26),
    and the guarded EMA, laid out alike, averages them in one (:class:`musgd._ema.FusedEMA`).

    At the first batch, before anything records their addresses (the network's capture) and
    after the layout is set; the tensors keep their objects, values and strides. Not with
    several ranks (DDP's buckets were made for the parameters as they were). Returns how many
    tensors were moved."""
    optimizer = getattr(self, "optimizer", None)
    model = self.model
    if not (
        type(self).musgd_options.get("skip_nonfinite", False)
        and isinstance(optimizer, UltralyticsMuSGD)
        and isinstance(model, torch.nn.Module)
        and not _distributed()
    ):
        return 0
    entries = [p for group in optimizer.param_groups for p in group["params"]]
    entries += list(model.parameters())
    entries += [v for v in model.state_dict(keep_vars=True).values() if v.is_floating_point()]
    unique = list({id(t): t for t in entries}.values())
    adopt_flat(unique)
    return sum(laid_flat(t) for t in unique)


def _install_network(self: Any) -> None:
    """Set ``musgd_network`` (a :class:`NetworkCapture` installed on the model, removed at the
    end of training) or None with ``musgd_network_reason`` where the network stays eager; with
    ``compile_network`` alone, the model's compiled ``predict`` installed (``musgd_compiled``)."""
    options = type(self).musgd_options
    self.musgd_network, self.musgd_network_reason = None, None
    self.musgd_compiled = False
    self.musgd_compile_cache = None
    capture, compile_ = options["capture_network"], options.get("compile_network", False)
    if not (capture or compile_):
        return
    if _distributed():
        self.musgd_network_reason = "distributed: each rank runs its network eagerly"
        return
    cache = options.get("compile_cache")
    if compile_ and cache is not None:  # before anything compiles; written when training ends
        report = self.musgd_compile_cache = load_compile_cache(cache)
        self.add_callback("on_train_end", lambda trainer: save_compile_cache(cache, report))
    model = self.model
    # The compiled network's recordings keep pools of their own: sharing one is checked bit
    # for bit on the H200 for the eager kernels only (WP-025).
    pool = None if compile_ else GraphPool()
    try:
        if capture:
            network = NetworkCapture(model, compile=compile_, pool=pool).install()
        else:
            compiled = compiled_predict(model)
    except TypeError as exc:
        self.musgd_network_reason = str(exc)
        return
    self.musgd_compiled = compile_
    if capture:
        self.musgd_network = network
        if pool is not None:
            _share_pool(self, pool)
        self.add_callback("on_train_end", lambda trainer: network.uninstall())
        return
    model.__dict__["predict"] = compiled

    def uncompile(trainer: Any) -> None:
        if model.__dict__.get("predict") is compiled:
            del model.__dict__["predict"]

    self.add_callback("on_train_end", uncompile)


def _share_pool(self: Any, pool: GraphPool) -> None:
    """The optimizer's recordings and the clip's in the network's pool (``musgd_graph_pool``).

    They replay after the network's backward and before its next forward, never at the same
    time, and use their outputs at once: their scratch and the network's take turns in one
    pool (:class:`musgd._replay.GraphPool`) instead of one pool each (WP-025, "Reserved
    memory"). The network's first recording joins it, and the optimizer's recordings made
    before it (the trainer's first steps come first) are dropped and made anew after it; a
    later network recording, such as a short last batch's, records on its own. The loss keeps
    its own pool: it replays between the network's forward and backward, while the activations
    the forward saved are live in memory the allocator counts as free.
    """
    self.musgd_graph_pool = pool
    engine = getattr(getattr(self, "optimizer", None), "_engine", None)
    if isinstance(engine, StepEngine):
        engine.share_pool(pool)


def _stock_optimizer_step(base: type[Any]) -> bool:
    """Whether ``base`` runs the Ultralytics ``BaseTrainer.optimizer_step`` (or none of its own).

    A base that overrides ``optimizer_step`` keeps its own: its clipping is not replayed.
    """
    own = getattr(base, "optimizer_step", None)
    if own is None:
        return True
    try:
        from ultralytics.engine.trainer import BaseTrainer
    except ImportError:
        return False
    return own is BaseTrainer.optimizer_step


def _optimizer_step(self: Any) -> None:
    """The stock trainer's optimizer step, its gradient clipping replayed (``capture_clip``) and,
    with ``skip_nonfinite``, its non-finite skip decided on the device.

    The stock step, as observed on Ultralytics 8.4 (tests/ultralytics checks it bit for bit):
    the scaler unscales the gradients, their norm is clipped to 10 over
    ``self.model.parameters()``, the scaler steps the optimizer (skipping a step whose gradients
    are not finite) and updates its scale, the gradients are dropped, and the EMA follows.

    With ``skip_nonfinite`` (and our optimizer) the scaler's skip, which reads its found-inf
    flag on the host every iteration, is the optimizer's guard instead: the optimizer steps
    directly and leaves every bit where the unscaled gradients are not finite, the scaler's
    update still lowers its scale from the flag its ``unscale_`` made, and the EMA is
    :class:`musgd._ema.FusedEMA`, skipped with the step. Every ``SKIP_REPORT_EVERY`` steps
    (and at the end of training) the skip counter is read, and new skips are logged.

    The scaler's unscale and the clip are not one recording here
    (:meth:`GradClipReplay.unscale_and_clip` could make them one where the network is
    captured): measured on an H100 it was no faster in the trainer and its peak reserved
    memory rose (WP-024).
    """
    options = type(self).musgd_options
    if options["capture_clip"]:
        clip = self.__dict__.get("musgd_clip")
        if clip is None:
            # One branch: a clip is a handful of kernels in one chain (GradClipReplay's own).
            pool = self.__dict__.get("musgd_graph_pool")
            recorder = CudaGraphRecorder(branches=1, pool=pool)
            clip = self.musgd_clip = GradClipReplay(CLIP_MAX_NORM, recorder=recorder)
            if pool is not None:
                recorder.drops_with(clip.clear)
    else:
        clip = _clip_eagerly
    optimizer = self.optimizer
    guarded = options.get("skip_nonfinite", False) and isinstance(optimizer, UltralyticsMuSGD)
    self.musgd_unscale(optimizer)
    clip(_model_parameters(self) if options["capture_clip"] else self.model.parameters())
    if guarded and self.scaler.is_enabled():
        optimizer.step()
    else:
        self.scaler.step(optimizer)
    self.scaler.update()
    optimizer.zero_grad()
    if self.ema:
        if guarded:
            self.musgd_update_ema(optimizer)
        else:
            self.ema.update(self.model)
    if guarded:
        steps = self.__dict__.get("musgd_steps", 0) + 1
        self.musgd_steps = steps
        if steps % SKIP_REPORT_EVERY == 0:
            report_skips(self)


def _eager_unscale(self: Any, optimizer: torch.optim.Optimizer) -> None:
    """``self.scaler.unscale_(optimizer)``, the same bits, as
    :class:`musgd._clip_replay.EagerUnscale` runs it: one multi-tensor call over the gradients,
    listed again only when they are other objects (a captured network's are the same every
    iteration), instead of the scaler's walk over the optimizer's parameters (about 1 ms of host
    time for YOLO26 on a CPU host, WP-024). The trainer's ``musgd_unscale`` (a method, so that
    benchmarks can mark it)."""
    unscale = self.__dict__.get("musgd_unscaler")
    if unscale is None:
        unscale = self.musgd_unscaler = EagerUnscale()
    unscale(self.scaler, optimizer)


def _model_parameters(self: Any) -> list[torch.Tensor]:
    """``list(self.model.parameters())``, listed once an epoch (walking an Ultralytics model's
    modules took 0.5 ms of host time per iteration for YOLO26n); the same tensors in the same
    order, so the clip's norm has the same bits. A model whose parameters are replaced inside an
    epoch is listed anew at the next epoch (or when the trainer's model is another object)."""
    model, epoch = self.model, getattr(self, "epoch", None)
    cached = self.__dict__.get("musgd_parameters")
    # The model itself, not its id: a freed model's id may name the next one.
    if cached is None or cached[0] is not model or cached[1] != epoch:
        cached = self.musgd_parameters = (model, epoch, list(model.parameters()))
    params: list[torch.Tensor] = cached[2]
    return params


def _clip_eagerly(parameters: Any) -> None:
    """The stock clip, eagerly (``capture_clip=False``)."""
    torch.nn.utils.clip_grad_norm_(parameters, max_norm=CLIP_MAX_NORM)


def _guarded_ema_update(self: Any, optimizer: UltralyticsMuSGD) -> None:
    """The EMA's update as the stock ``ModelEMA.update`` makes it (its ``updates`` counted, its
    ``decay(updates)``, every floating-point entry averaged, the same bits), skipped with the
    step: the trainer's ``musgd_update_ema`` (a method, so that benchmarks can mark it).

    ``updates`` still counts a skipped step (the host cannot know of the skip without a read),
    so the decay schedule runs one update ahead per skip; the EMA weights keep every bit.
    """
    ema = self.ema
    if not getattr(ema, "enabled", True):
        return
    fused = self.__dict__.get("musgd_ema")
    if fused is None:
        fused = self.musgd_ema = FusedEMA()
    ema.updates += 1
    model = self.model
    if isinstance(model, torch.nn.parallel.DistributedDataParallel | torch.nn.DataParallel):
        model = model.module
    fused.update(ema.ema, model, float(ema.decay(ema.updates)), optimizer.last_step_skipped)


def release_recordings(self: Any) -> None:
    """When training ends, drop every recording the trainer made -- the network's, the loss's,
    the clip's and the optimizer's -- and give their memory back (the guarded EMA records
    none: :func:`_guarded_ema_update`).

    Training is over, and nothing replays them again; held, they would keep the recordings'
    pools reserved for as long as the trainer lives (4748 MiB for yolo26s at batch 16, WP-025),
    and keep the graphs of the next trainer's in the same process from ever being destroyed
    (:data:`musgd._replay.GRAPHS` destroys a graph only once no other of its device is owned).
    A later ``train()`` would record anew, into a fresh pool.

    The trainer's last ``loss`` is detached too (same value): its autograd graph's replay
    nodes hold the network's and the loss's recordings for their backward, so while it lived
    they stayed owned after their caches let them go (7 graphs kept idle in the H100 identity
    run at f62ac4a).
    """
    loss = self.__dict__.get("loss")
    if isinstance(loss, torch.Tensor) and loss.grad_fn is not None:
        self.loss = loss.detach()
    network = self.__dict__.get("musgd_network")
    if network is not None:
        network.release()
    capture = getattr(self.__dict__.get("musgd_loss"), "capture", None)
    if isinstance(capture, LossCapture):
        capture.release()
    clip = self.__dict__.get("musgd_clip")
    if isinstance(clip, GradClipReplay):
        clip.clear()
    engine = getattr(getattr(self, "optimizer", None), "_engine", None)
    if isinstance(engine, StepEngine):
        engine.replay.clear()
    pool = self.__dict__.get("musgd_graph_pool")
    if isinstance(pool, GraphPool):
        pool.reset()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # a no-op where CUDA was never initialized


def report_skips(self: Any) -> int:
    """Read the optimizer's skip counter (one host read), log the steps skipped since the last
    read, and return the count (also kept as the trainer's ``musgd_skipped``)."""
    optimizer = self.optimizer
    if not isinstance(optimizer, UltralyticsMuSGD):
        return 0
    total = int(optimizer.skipped_steps)
    before = self.__dict__.get("musgd_skipped", 0)
    self.musgd_skipped = total
    if total > before:
        LOGGER.warning(
            "musgd: skipped %d optimizer step(s) whose gradients were not finite (%d in all, "
            "parameters, momentum buffers and EMA left as they were)",
            total - before,
            total,
        )
    return total


def _scalar(value: str, load: Any) -> Any:
    """An int or float where ``value`` reads as one (``1e-3`` too), else its YAML value."""
    if not value:
        return None
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return load(value)


# Keys whose empty value (``data=``) would reach Ultralytics as None, which it cannot take
# (a traceback from inside its dataset check for data=): refused, with what each takes.
_NEEDS_A_VALUE = {
    "model": "a model to build or load, e.g. model=yolo26n.yaml",
    "data": "a dataset's YAML, e.g. data=coco8.yaml",
    "task": "one of " + ", ".join(TASKS),
    "imgsz": "the image size in pixels, e.g. imgsz=640",
}


def _check_imgsz(value: object) -> None:
    """``imgsz=``: a positive number of pixels, or ``[height, width]``; anything else is a
    usage error here, where Ultralytics' own check raises only once the model is built."""
    if value is None:
        return
    items = value if isinstance(value, list) else [value]
    if not 1 <= len(items) <= 2 or any(
        isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < math.inf for v in items
    ):
        raise ValueError(
            f"imgsz={value!r}: takes the image size in pixels, a positive number (imgsz=640) "
            "or [height, width] (imgsz=[480,640])"
        )


def parse_train_args(argv: list[str]) -> tuple[str, dict[str, Any]]:
    """``model`` and the ``model.train`` keyword arguments of ``key=value`` command-line pairs.

    Values are read as YAML scalars (``epochs=10`` is an int, ``amp=false`` a bool, ``lr0=1e-3``
    a float); ``model`` defaults to ``yolo26n.yaml``. ``trainer`` and ``optimizer`` are refused:
    this command always trains with :data:`MuSGDTrainer`.
    """
    import yaml

    model = "yolo26n.yaml"
    kwargs: dict[str, Any] = {}
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or not key:
            raise ValueError(f"arguments are key=value pairs (yolo train style), got {arg!r}")
        if key in ("trainer", "optimizer"):
            other = (
                f", or train with that optimizer through yolo train optimizer={value}"
                if key == "optimizer" and value
                else ""
            )
            raise ValueError(
                f"{key}= is fixed by musgd-yolo (it trains with UltralyticsMuSGD): leave {key}= "
                f"out{other}"
            )
        if not value.strip() and (key in _NEEDS_A_VALUE or key.startswith("ns_")):
            raise ValueError(
                f"{key}= needs a value ({_NEEDS_A_VALUE.get(key, 'see musgd.NSConfig')}); "
                f"leave {key}= out for its default"
            )
        try:
            parsed = _scalar(value, yaml.safe_load)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or type(exc).__name__
            raise ValueError(
                f"{key}={value} does not read as a value ({problem}); give a number, a word, "
                f'a list such as [640, 480], or quote text that holds YAML\'s signs: {key}="..."'
            ) from None
        if isinstance(parsed, dict):
            # No train argument takes a mapping: `name=a: b` reached Ultralytics as a dict and
            # failed inside training with a TypeError.
            raise ValueError(
                f"{key}={value} reads as a mapping, which no train argument takes; quote text "
                f'that holds ": ": {key}="..."'
            )
        if key == "model":
            model = str(parsed)
        else:
            kwargs[key] = parsed
    return model, kwargs


def _task_of(task: Any, model_given: bool) -> tuple[str | None, str | None]:
    """``task=``'s value checked (None: not given) and the model it trains by default (None:
    ``model=`` was given, or no task); ValueError listing the tasks for another value."""
    if task is None:
        return None, None
    if task not in TASK_TRAINERS:
        raise ValueError(f"task= takes one of {', '.join(TASKS)}, got {task!r}")
    return task, None if model_given else TASK_TRAINERS[task][2]


def _check_train_arguments(kwargs: dict[str, Any]) -> None:
    """Ultralytics' own check of ``model.train`` arguments (``ultralytics.cfg.get_cfg``, as its
    reference documents it, R388), run before any model is built, quietly: an unknown key, a
    wrong type or a value out of range raises ValueError with Ultralytics' message, where it
    would otherwise end training in a traceback. Skipped where that function is not there."""
    try:
        from ultralytics.cfg import get_cfg
    except ImportError:
        return
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)  # its help text for an unknown key goes to its logger
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            get_cfg(overrides=dict(kwargs))
    except (ValueError, TypeError, SyntaxError) as exc:
        message = " ".join(str(exc).split())
        raise ValueError(f"{message} (`yolo cfg` lists the train arguments)") from None
    finally:
        logging.disable(previous)


def _check_device(value: object) -> None:
    """``device=``: a CUDA device where none is visible (or an index past the last) is a
    usage error here, not Ultralytics' traceback from inside its trainer; ``cpu``, ``mps``
    and what Ultralytics picks itself (no value, ``-1``) are left to it."""
    if isinstance(value, (list, tuple)):  # device=[0,1], as YAML reads it
        value = ",".join(map(str, value))
    text = "" if value is None else str(value).strip().lower()
    if text in ("", "cpu", "mps", "none") or text.startswith("-"):
        return
    named = text.removeprefix("cuda").lstrip(":")  # "cuda" alone: the current device
    ids = [part.strip() for part in named.split(",")] if named else []
    if not all(part.isdigit() for part in ids):
        raise ValueError(
            f"device={value}: name cpu, mps, a CUDA device by its index (device=0 or "
            "device=cuda:0) or several by a comma list (device=0,1)"
        )
    if not torch.cuda.is_available():
        raise ValueError(
            f"device={value}: no CUDA GPU is visible here (torch.cuda.is_available() is False); "
            "train with device=cpu, or on a machine with a GPU and a CUDA build of torch"
        )
    count = torch.cuda.device_count()
    past = [part for part in ids if part.isdigit() and int(part) >= count]
    if past:
        raise ValueError(
            f"device={value}: this machine has {count} CUDA device(s), numbered from 0; "
            f"there is no {', '.join(past)}"
        )


def main(argv: list[str] | None = None) -> int:
    """``musgd-yolo key=value ...``: ``YOLO(model).train(..., trainer=MuSGDTrainer)``;
    ``capture_network=true`` trains with ``musgd_trainer(capture_network=True)``; ``task=``
    (default: the model's own task) trains with ``musgd_trainer`` of that task's trainer class,
    the task's YOLO26n unless ``model=`` names another model of that task."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in args) or args[:1] == ["help"]:
        print(
            "usage: musgd-yolo [model=yolo26n.yaml] [task=detect|segment|pose|obb|classify] "
            "[capture_network=true] [compile_network=true [compile_cache=FILE]] "
            "[channels_last=false] "
            "[skip_nonfinite=true] [device_loss=true] "
            "[ns_steps=5 ns_coefficients=quintic ns_dtype=bf16 ...] "
            "key=value ...  (model.train arguments; ns_* are musgd.NSConfig fields)"
        )
        return 0
    try:
        model_name, kwargs = parse_train_args(args)
        flags = {key: kwargs.pop(key, False) for key in _TRAINER_FLAGS}
        for key, value in flags.items():
            if not isinstance(value, bool):
                raise ValueError(f"{key}= takes true or false, got {value!r}")
        layout = kwargs.pop("channels_last", None)
        if layout is not None and not isinstance(layout, bool):
            raise ValueError(f"channels_last= takes true or false, got {layout!r}")
        given = "compile_cache" in kwargs
        cache = kwargs.pop("compile_cache", None)
        if given and cache in (None, ""):
            raise ValueError("compile_cache= takes the path of a file, e.g. compile_cache=net.bin")
        if cache is not None:
            compile_cache_path(str(cache))  # a bad path is a usage error now, not after setup
            if not flags["compile_network"]:
                raise ValueError("compile_cache= needs compile_network=true")
        ns = pop_command_line(kwargs)  # ns_steps=3 ns_coefficients=quintic ...
        model_given = any(a.partition("=")[0] == "model" for a in args)
        task, task_model = _task_of(kwargs.pop("task", None), model_given)
        _check_device(kwargs.get("device"))
        _check_imgsz(kwargs.get("imgsz"))
        require_ultralytics()
        _check_train_arguments(kwargs)
    except (ValueError, ImportError) as exc:
        print(f"musgd-yolo: {exc}", file=sys.stderr)
        return 2
    from ultralytics import YOLO

    try:
        model = YOLO(task_model or model_name)
    except FileNotFoundError as exc:
        print(
            f"musgd-yolo: model={task_model or model_name}: {exc}; name a model Ultralytics "
            "builds (e.g. model=yolo26n.yaml) or a weights file on this machine",
            file=sys.stderr,
        )
        return 2
    task = task or model.task
    if model.task != task or task not in TASK_TRAINERS:
        print(
            f"musgd-yolo: {model_name} is a {model.task} model and task={task}: name a model of "
            f"the task (or leave task= out), tasks being {', '.join(TASKS)}",
            file=sys.stderr,
        )
        return 2
    # Detection keeps the exported MuSGDTrainer (a DDP launch writes it by reference).
    base = None if task == "detect" else task_trainer(task)
    options: dict[str, Any] = {"capture_network": flags["capture_network"]}
    # Given only when asked for: the trainer's own defaults stay the defaults.
    options.update({key: True for key in _TRAINER_FLAGS[1:] if flags[key]})
    if layout is not None:
        options["channels_last"] = layout
    if cache is not None:
        options["compile_cache"] = str(cache)
    if ns is not None:
        options["ns"] = ns
    try:
        model.train(trainer=musgd_trainer(base, **options), **kwargs)
    except RuntimeError as exc:
        message = str(exc)
        # Ultralytics' dataset check ("Dataset '<data>' error ..."; observed on 8.4.190): a
        # missing or unreachable dataset is the user's to fix, not a traceback.
        if not message.startswith("Dataset '"):
            raise
        hint = "" if "data" in kwargs else " (no data= given: Ultralytics' default downloads it)"
        print(
            f"musgd-yolo: {' '.join(message.split())}{hint}; name a dataset on this machine "
            "with data=PATH/data.yaml",
            file=sys.stderr,
        )
        return 2
    return 0


def __getattr__(name: str) -> Any:
    """``MuSGDTrainer``: built on first access, so importing this module needs no Ultralytics."""
    if name == "MuSGDTrainer":
        trainer = musgd_trainer()
        globals()[name] = trainer
        return trainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    raise SystemExit(main())
