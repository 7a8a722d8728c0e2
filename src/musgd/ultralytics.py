"""YOLO26 users: an Ultralytics-compatible MuSGD with replay, and a trainer that uses it.

``UltralyticsMuSGD`` takes the Ultralytics 8.4 ``MuSGD`` constructor and state-dict layout and
needs only PyTorch. The trainer needs the optional Ultralytics package
(``pip install "wpgate[ultralytics]"``), imported only when a trainer is asked for::

    from ultralytics import YOLO
    from musgd.ultralytics import MuSGDTrainer

    YOLO("yolo26n.yaml").train(data="coco8.yaml", epochs=10, trainer=MuSGDTrainer)

``MuSGDTrainer`` is a ``DetectionTrainer`` whose ``build_optimizer`` lets the stock trainer build
its MuSGD param groups (weight, bn, bias, muon and the lr x 3 head groups, with their
hyperparameters) and moves them into :class:`UltralyticsMuSGD` with both replay flags on.
``musgd_trainer(base)`` does the same for any other Ultralytics trainer class.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.optim import Optimizer

from musgd._ultralytics_optim import ULTRALYTICS_DEFAULTS, UltralyticsMuSGD, muon_scale

__all__ = [  # noqa: F822 - MuSGDTrainer is built by the module's __getattr__ on first use
    "MuSGDTrainer",
    "UltralyticsMuSGD",
    "from_stock",
    "muon_scale",
    "musgd_trainer",
    "require_ultralytics",
]

INSTALL_HINT = 'pip install "wpgate[ultralytics]"'
_STOCK_NAME = "MuSGD"


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


def from_stock(
    stock: Optimizer,
    *,
    capture_orthogonalization: bool = True,
    capture_updates: bool = True,
    ns_dtype: torch.dtype = torch.bfloat16,
) -> UltralyticsMuSGD:
    """An :class:`UltralyticsMuSGD` over the same param groups as an Ultralytics ``MuSGD``.

    Every key of every group (``param_group`` names, ``lr``, ``momentum``, ...) is kept, and
    ``muon``/``sgd`` are read from the stock optimizer. The stock optimizer must not have
    stepped yet: its state is not carried over (load a checkpoint's state dict instead).
    """
    if any(stock.state.values()):
        raise ValueError(
            "from_stock needs an optimizer that has not stepped yet (its momentum buffers would "
            "be lost); load its state_dict() into the new optimizer instead"
        )
    defaults = {k: stock.defaults.get(k, v) for k, v in ULTRALYTICS_DEFAULTS.items()}
    muon = getattr(stock, "muon", ULTRALYTICS_DEFAULTS["muon"])
    sgd = getattr(stock, "sgd", ULTRALYTICS_DEFAULTS["sgd"])
    groups = [dict(group) for group in stock.param_groups]
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
    )


def musgd_trainer(
    base: type[Any] | None = None,
    *,
    capture_orthogonalization: bool = True,
    capture_updates: bool = True,
    ns_dtype: torch.dtype = torch.bfloat16,
) -> type[Any]:
    """A subclass of the Ultralytics trainer ``base`` (default ``DetectionTrainer``) using ours.

    Its ``build_optimizer`` asks the stock trainer for its ``MuSGD`` (whatever ``optimizer=``
    says: this trainer exists to train with MuSGD) and returns :func:`from_stock` of it. The
    trainer's warm-up and scheduler keep writing ``lr`` and ``momentum`` into the groups; its
    checkpoints hold ``UltralyticsMuSGD.state_dict()``, which loads into the stock optimizer and
    back.
    """
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
    options: dict[str, Any] = {
        "capture_orthogonalization": capture_orthogonalization,
        "capture_updates": capture_updates,
        "ns_dtype": ns_dtype,
    }

    def build_optimizer(
        self: Any, model: Any, name: str = "auto", *args: Any, **kwargs: Any
    ) -> Any:
        stock = base.build_optimizer(self, model, _STOCK_NAME, *args, **kwargs)
        return from_stock(stock, **options)

    # The default's name is the one this module exports, so `from musgd.ultralytics import
    # MuSGDTrainer` (what a DDP launch file would write) finds it.
    return type(
        name,
        (base,),
        {
            "build_optimizer": build_optimizer,
            "__module__": __name__,
            "__doc__": f"{base.__name__} training with UltralyticsMuSGD (replay flags on).",
        },
    )


def __getattr__(name: str) -> Any:
    """``MuSGDTrainer``: built on first access, so importing this module needs no Ultralytics."""
    if name == "MuSGDTrainer":
        trainer = musgd_trainer()
        globals()[name] = trainer
        return trainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
