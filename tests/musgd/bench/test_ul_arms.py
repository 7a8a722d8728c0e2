"""The trainer benchmark's arms: the table, what each records, the channels-last callback."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from musgd.bench import _ul_arms as arms

# The six arms issue #32 asks for, by the names --arms takes.
ISSUE_32 = (
    "stock",
    "stock-compile",
    "stock-channels-last",
    "ours",
    "ours-network",
    "ours-network-compiled",
)


def test_the_table_holds_the_six_arms_of_issue_32_with_what_each_trains() -> None:
    assert set(ISSUE_32) <= set(arms.ARM_TABLE)
    assert arms.DEFAULT_ARMS == ("stock", "ours")
    flags = {"capture_network": False, "skip_nonfinite": True}
    records = {name: arms.ARM_TABLE[name].record(flags) for name in arms.ARM_TABLE}
    stock_like = [name for name in records if name.startswith("stock")]
    assert all(records[name]["base"] == "stock trainer, optimizer=MuSGD" for name in stock_like)
    assert all(records[name]["options"] is None for name in stock_like)
    assert records["stock"]["train_args"] == {}
    assert records["stock"]["callback"] is None
    assert records["stock-compile"]["train_args"] == {"compile": True}
    assert records["stock-channels-last"]["callback"] == (
        "on_train_start: model and EMA to channels_last"
    )
    assert records["stock-channels-last-arg"]["train_args"] == {"channels_last": True}
    # ours takes the --ours-* flags; the other ours arms are fixed, whatever the flags say.
    assert records["ours"]["base"] == "musgd_trainer"
    assert records["ours"]["options"] == flags
    assert records["ours-network"]["options"] == {
        "capture_network": True,
        "skip_nonfinite": False,
        "channels_last": False,
        "compile_network": False,
        "device_loss": False,
    }
    loss = records["ours-network-loss"]["options"]
    assert (loss["capture_network"], loss["device_loss"], loss["skip_nonfinite"]) == (True,) * 3
    compiled = records["ours-network-compiled"]["options"]
    assert (compiled["capture_network"], compiled["compile_network"]) == (True, True)
    assert compiled["channels_last"] is False
    assert records["ours-network-compiled-channels-last"]["options"]["channels_last"] is True
    # Only the compiling arms add a guessed start-up to the budget's first estimate.
    slow = {name for name, arm in arms.ARM_TABLE.items() if arm.startup_s > 0}
    assert slow == {"stock-compile", "ours-network-compiled", "ours-network-compiled-channels-last"}


def test_unknown_arms_are_named() -> None:
    assert arms.unknown_arms(["stock", "ours", "stock-fast", "ours2"]) == ["stock-fast", "ours2"]
    assert arms.unknown_arms(list(ISSUE_32)) == []


def _model() -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8))


@pytest.mark.parametrize("with_ema", [True, False])
def test_the_callback_makes_the_model_and_the_ema_channels_last(with_ema: bool) -> None:
    model = _model()
    conv = model[0]
    assert isinstance(conv, torch.nn.Conv2d)
    weight = conv.weight
    ema = SimpleNamespace(ema=_model()) if with_ema else None
    trainer = SimpleNamespace(model=model, ema=ema)
    assert arms.channels_last_weights(model) == {"four_d": 1, "channels_last": 0, "contiguous": 1}
    callback = arms.ChannelsLastAtStart()
    callback(trainer)
    assert conv.weight is weight  # in place: the optimizer's parameter object stays
    assert weight.is_contiguous(memory_format=torch.channels_last)
    assert arms.channels_last_weights(model) == {"four_d": 1, "channels_last": 1, "contiguous": 0}
    assert callback.converted == {"model": True, "ema": with_ema}
    if ema is not None:
        assert arms.channels_last_weights(ema.ema)["channels_last"] == 1


def test_the_callback_leaves_a_trainer_without_a_module_model_alone() -> None:
    callback = arms.ChannelsLastAtStart()
    callback(SimpleNamespace(model="yolo26n.yaml"))
    assert callback.converted == {"model": False, "ema": False}
    assert arms.channels_last_weights("yolo26n.yaml") == {
        "four_d": 0,
        "channels_last": 0,
        "contiguous": 0,
    }


def test_a_kernel_that_is_both_layouts_counts_for_neither() -> None:
    # One input channel and 1x1: contiguous and channels-last at once.
    both = torch.nn.Conv2d(1, 4, 1).to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    assert arms.channels_last_weights(both) == {"four_d": 1, "channels_last": 0, "contiguous": 0}
