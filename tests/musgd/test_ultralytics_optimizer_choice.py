"""``musgd_trainer``'s ``build_optimizer`` honours a user's ``optimizer=`` (no Ultralytics needed).

``auto`` and ``MuSGD`` train with ours; any other name builds the stock optimizer of that name,
with one warning that the MuSGD options do not apply. The real trainer is
``tests/ultralytics/test_parity.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import torch

from musgd.ultralytics import UltralyticsMuSGD, _trains_with_musgd, musgd_trainer

STOCK: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "SGD": torch.optim.SGD,
    "AdamW": torch.optim.AdamW,
    "Adam": torch.optim.Adam,
}


class FakeTrainer:
    """The part of an Ultralytics trainer ``musgd_trainer`` calls: ``build_optimizer``."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def build_optimizer(
        self, model: Any, name: str = "auto", lr: float = 0.001, momentum: float = 0.9, **kw: Any
    ) -> torch.optim.Optimizer:
        self.asked.append(name)
        params = list(model.parameters())
        matrices = [p for p in params if p.dim() > 1]
        vectors = [p for p in params if p.dim() <= 1]
        if name == "MuSGD":  # the stock MuSGD: its groups, and muon/sgd attributes
            groups: list[dict[str, Any]] = [
                {"params": matrices, "use_muon": True, "param_group": "muon"},
                {"params": vectors, "param_group": "bias"},
            ]
            opt = torch.optim.SGD(groups, lr=lr, momentum=momentum, nesterov=True)
            opt.muon, opt.sgd = 0.2, 1.0  # type: ignore[attr-defined]
            return opt
        return STOCK[name](params, lr=lr)


def model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


@pytest.mark.parametrize("name", ["auto", "MuSGD", "musgd", "AUTO", None])
def test_auto_and_musgd_train_with_ours(name: str | None) -> None:
    assert _trains_with_musgd(name)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "NAdam", "RAdam", "RMSProp", "Adamax"])
def test_every_other_name_is_the_users_stock_choice(name: str) -> None:
    assert not _trains_with_musgd(name)


@pytest.mark.parametrize("name", ["auto", "MuSGD"])
def test_build_optimizer_with_auto_or_musgd_returns_ours(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    trainer = musgd_trainer(FakeTrainer, capture_orthogonalization=False)()
    with caplog.at_level(logging.INFO, logger="musgd"):
        opt = trainer.build_optimizer(model(), name, lr=0.01)
    assert isinstance(opt, UltralyticsMuSGD)
    assert trainer.asked == ["MuSGD"]
    assert opt.param_groups[0]["lr"] == 0.01
    assert not caplog.records


@pytest.mark.parametrize("name", sorted(STOCK))
def test_build_optimizer_with_a_stock_name_builds_it_and_says_so_once(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    trainer = musgd_trainer(FakeTrainer)()
    with caplog.at_level(logging.INFO, logger="musgd"):
        opt = trainer.build_optimizer(model(), name=name, lr=0.01)
    assert type(opt) is STOCK[name]
    assert not isinstance(opt, UltralyticsMuSGD)
    assert trainer.asked == [name], "the user's name reaches the stock trainer unchanged"
    assert opt.param_groups[0]["lr"] == 0.01
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert "\n" not in message
    assert f"optimizer={name} builds Ultralytics' own {name}" in message
    assert "do not apply" in message
    assert "capture_updates" in message
