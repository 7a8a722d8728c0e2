"""Ours against the installed Ultralytics MuSGD (black box), 20 steps, and its trainer.

Steps. 20 where bf16 is fast (a GPU or a bf16-native CPU), 3 where it is emulated (the
``parity_steps`` fixture says why).

Tolerance. Both run Newton-Schulz in bfloat16 (8 significant bits, unit roundoff u = 2**-8) but
in different orders (the package batches by column count with zero-padded rows, we batch equal
shapes), so their orthogonalized parts differ by bf16 rounding, which each of the five
iterations adds to: up to about 5u (2%) of the Muon part. Each parameter's difference must
therefore stay within 5u of its total change over the run (measured worst: 7e-5 on the YOLO26n
shapes, 6e-3 on the real model). The Muon buffer sees only gradients and agrees to float32
rounding (1e-6); the SGD buffer carries the decay of the Muon-updated parameter and gets the
bf16 bound. With float32 Newton-Schulz ours agrees tighter with the exact rule (1e-5 against a
float64 reference: tests/musgd/test_ultralytics.py), not with the bf16 package.
"""

from __future__ import annotations

import copy
import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

pytest.importorskip("ultralytics", reason="ultralytics is not installed: make test-ultralytics")
from ultralytics.optim.muon import MuSGD as StockMuSGD

from musgd import _functional
from musgd._flat import runs
from musgd.ultralytics import MuSGDTrainer, UltralyticsMuSGD, muon_scale, musgd_trainer

BF16_TOL = 5 * 2.0**-8
FP32_TOL = 1e-6
KW: dict[str, Any] = {"lr": 0.01, "momentum": 0.937, "nesterov": True, "muon": 0.2, "sgd": 1.0}
SHAPES = json.loads((Path(__file__).parent / "data" / "yolo26n_shapes.json").read_text())


def _groups(
    muon: Sequence[Tensor], bn: Sequence[Tensor], bias: Sequence[Tensor]
) -> list[dict[str, Any]]:
    return [
        {"params": muon, "use_muon": True, "weight_decay": 5e-4, "param_group": "muon"},
        {"params": bn, "weight_decay": 0.0, "param_group": "bn"},
        {"params": bias, "weight_decay": 0.0, "param_group": "bias"},
    ]


def _warmup(opts: tuple[torch.optim.Optimizer, ...], step: int) -> None:
    """lr and momentum written into every group each iteration, as the trainer's warm-up does."""
    for opt in opts:
        for group in opt.param_groups:
            group["lr"] = KW["lr"] * (step + 1) / 20
            group["momentum"] = 0.8 + (KW["momentum"] - 0.8) * step / 20


@torch.no_grad()
def _rel(a: Tensor, b: Tensor, scale: Tensor) -> float:
    return float((a.double() - b.double()).norm() / scale.double().norm().clamp_min(1e-30))


class _Path:
    """Each stock parameter's path length: the sum over steps of its change's norm."""

    def __init__(self, ps: Sequence[Tensor]) -> None:
        self.ps = ps
        self.last = [p.detach().double().clone() for p in ps]
        self.length = [0.0] * len(ps)

    @torch.no_grad()
    def step(self) -> None:
        for i, p in enumerate(self.ps):
            now = p.detach().double()
            self.length[i] += float((now - self.last[i]).norm())
            self.last[i] = now.clone()


def _assert_parity(
    ps: Sequence[Tensor],
    pu: Sequence[Tensor],
    init: Sequence[Tensor],
    ours: Any,
    stock: Any,
    path: _Path,
    steps: int,
) -> dict[str, float]:
    """Each step's bf16 difference is within 5u of that step's change, so a parameter's
    difference is within 5u of its path length; over 20 steps (where warm-up has ended and
    steps no longer cancel) also within 5u of its net change."""
    worst = {"param": 0.0, "param_path": 0.0, "momentum_buffer": 0.0, "momentum_buffer_SGD": 0.0}
    for i, (p_s, p_u, p0) in enumerate(zip(ps, pu, init, strict=True)):
        worst["param"] = max(worst["param"], _rel(p_u, p_s, p_s.detach() - p0))
        diff = float((p_u.detach().double() - p_s.detach().double()).norm())
        worst["param_path"] = max(worst["param_path"], diff / max(path.length[i], 1e-30))
        s_state, u_state = stock.state.get(p_s, {}), ours.state.get(p_u, {})
        assert s_state.keys() == u_state.keys()
        for name in s_state:
            worst[name] = max(worst[name], _rel(u_state[name], s_state[name], s_state[name]))
    assert worst["param_path"] < BF16_TOL, worst
    if steps >= 20:
        assert worst["param"] < BF16_TOL, worst
    assert worst["momentum_buffer_SGD"] < BF16_TOL, worst
    return worst


@pytest.mark.parametrize("nesterov", [True, False])
@pytest.mark.parametrize("stacks", ["cpu", "cuda"])
def test_yolo26n_shaped_parameters_agree_with_stock_over_20_steps(
    nesterov: bool, stacks: str, monkeypatch: pytest.MonkeyPatch, parity_steps: int
) -> None:
    """``stacks="cuda"``: the matrices stacked as on a GPU (41 shapes in 6 padded stacks)."""
    if stacks == "cuda":
        monkeypatch.setitem(_functional.PAD_BOUNDS, "cpu", _functional.PAD_BOUNDS["cuda"])
        zeros = [torch.zeros(s) for s in SHAPES["matrices"]]
        pad = _functional.pad_bound(torch.device("cpu"))
        assert len(_functional.build_layout(zeros, True, pad=pad).buckets) == 6

    def make() -> dict[str, list[torch.nn.Parameter]]:
        gen = torch.Generator().manual_seed(1)
        return {
            k: [torch.nn.Parameter(torch.randn(s, generator=gen) * 0.1) for s in SHAPES[k]]
            for k in ("matrices", "norm_weights", "biases")
        }

    a, b = make(), make()
    kw = {**KW, "nesterov": nesterov}
    stock = StockMuSGD(_groups(a["matrices"], a["norm_weights"], a["biases"]), **kw)
    ours = UltralyticsMuSGD(_groups(b["matrices"], b["norm_weights"], b["biases"]), **kw)
    ps, pu = [p for v in a.values() for p in v], [p for v in b.values() for p in v]
    init = [p.detach().clone() for p in ps]
    path = _Path(ps)
    gen = torch.Generator().manual_seed(2)
    for step in range(parity_steps):
        for p_s, p_u in zip(ps, pu, strict=True):
            g = torch.randn(p_s.shape, generator=gen)
            p_s.grad, p_u.grad = g.clone(), g.clone()
        _warmup((stock, ours), step)
        stock.step()
        ours.step()
        path.step()
    worst = _assert_parity(ps, pu, init, ours, stock, path, parity_steps)
    assert worst["momentum_buffer"] < FP32_TOL, worst


def _split(
    model: torch.nn.Module,
) -> tuple[list[torch.nn.Parameter], list[torch.nn.Parameter], list[torch.nn.Parameter]]:
    muon, bn, bias = [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim >= 2:
            muon.append(p)
        elif name.endswith("bias"):
            bias.append(p)
        else:
            bn.append(p)
    return muon, bn, bias


def _loss(out: Any) -> Tensor:
    if isinstance(out, Tensor):
        return out.float().pow(2).mean()
    items = out.values() if isinstance(out, dict) else out
    return sum((_loss(o) for o in items), torch.zeros(()))


def test_real_yolo26n_model_agrees_with_stock_over_20_steps() -> None:
    """A real YOLO26n's parameters, groups and gradients (forward and backward on images).

    The gradients come from the stock-trained copy and are given to both optimizers: a free run
    of this model is chaotic (two stock runs 1e-6 apart end 80% of their change apart after 20
    steps at batch 4, 128 px), so only the same gradients compare the optimizers themselves.

    Always 20 steps, even where bf16 is emulated (about 5 minutes there): over the first few
    steps a real model's momenta are far from full rank, and Newton-Schulz maps their small
    singular directions, where bf16 rounding is relatively large, to unit size, so the two
    packages' first steps differ by more than 5u (4% after 3 steps on this project's EPYC).
    """
    from ultralytics import YOLO

    torch.manual_seed(0)
    base = YOLO("yolo26n.yaml").model.float().train()
    m_s, m_u = copy.deepcopy(base), copy.deepcopy(base)
    stock = StockMuSGD(_groups(*_split(m_s)), **KW)
    ours = UltralyticsMuSGD(_groups(*_split(m_u)), **KW)
    ps = [p for g in stock.param_groups for p in g["params"]]
    pu = [p for g in ours.param_groups for p in g["params"]]
    assert len(ps) > 300
    init = [p.detach().clone() for p in ps]
    path = _Path(ps)
    gen = torch.Generator().manual_seed(3)
    for step in range(20):
        x = torch.rand(2, 3, 64, 64, generator=gen)
        _warmup((stock, ours), step)
        stock.zero_grad(set_to_none=True)
        _loss(m_s(x)).backward()
        for p_s, p_u in zip(ps, pu, strict=True):
            p_u.grad = None if p_s.grad is None else p_s.grad.clone()
        stock.step()
        ours.step()
        path.step()
    worst = _assert_parity(ps, pu, init, ours, stock, path, 20)
    assert worst["momentum_buffer"] < FP32_TOL, worst


@pytest.mark.parametrize("shape", [(48, 16, 1, 1), (32, 16, 3, 1), (64, 2, 5, 1), (256, 1, 3, 3)])
def test_muon_scale_is_the_stock_one(shape: tuple[int, ...]) -> None:
    """One pure-Muon step from zero (lr=1, momentum=0, muon=1, sgd=0): ||step|| / ||NS||."""
    from musgd import orthogonalize

    w = torch.nn.Parameter(torch.zeros(shape))
    opt = StockMuSGD([{"params": [w], "use_muon": True}], lr=1.0, muon=1.0, sgd=0.0)
    g = torch.randn(shape, generator=torch.Generator().manual_seed(4))
    w.grad = g
    opt.step()
    ns = orthogonalize(g.reshape(shape[0], -1))
    assert float(w.detach().norm() / ns.norm()) == pytest.approx(muon_scale(shape), rel=0.01)
    assert muon_scale(shape) != pytest.approx(math.sqrt(max(1.0, shape[0] / ns.shape[1])))


def _train(
    data: Path,
    project: Path,
    name: str,
    *,
    callback: Any = None,
    callbacks: dict[str, Any] | None = None,
    **kw: Any,
) -> Any:
    """A tiny real training run (64 px, batch 4, CPU); ``callback`` runs at each model save,
    ``callbacks`` at their events."""
    from ultralytics import YOLO

    model = YOLO("yolo26n.yaml")
    if callback is not None:
        model.add_callback("on_model_save", callback)
    for event, function in (callbacks or {}).items():
        model.add_callback(event, function)
    settings: dict[str, Any] = {
        "data": str(data),
        "epochs": 1,
        "imgsz": 64,
        "batch": 4,
        "device": "cpu",
        "workers": 0,
        "plots": False,
        "project": str(project),
        "name": name,
        "exist_ok": True,
        "seed": 0,
        "deterministic": True,
        "amp": False,
        "verbose": False,
    }
    model.train(**{**settings, **kw})
    return model


def _layout(opt: torch.optim.Optimizer) -> list[tuple[Any, ...]]:
    return [
        (g.get("param_group"), g["use_muon"], g["weight_decay"], g["nesterov"], len(g["params"]))
        for g in opt.param_groups
    ]


def test_trainer_builds_the_stock_groups_into_ours_and_checkpoints_cross_load(
    tiny_dataset: Path, tmp_path: Path, ours_trainer: Any
) -> None:
    saved: list[dict[str, Any]] = []

    def keep_checkpoint(trainer: Any) -> None:  # before the final strip removes the optimizer
        saved.append(torch.load(trainer.last, weights_only=False))

    stock_model = _train(tiny_dataset, tmp_path, "stock", optimizer="MuSGD")
    ours_model = _train(
        tiny_dataset, tmp_path, "ours", callback=keep_checkpoint, epochs=2, trainer=ours_trainer
    )
    stock_opt, ours_opt = stock_model.trainer.optimizer, ours_model.trainer.optimizer
    assert isinstance(ours_opt, UltralyticsMuSGD)
    assert _layout(ours_opt) == _layout(stock_opt)
    assert {g["param_group"] for g in ours_opt.param_groups} >= {"bn", "bias", "muon"}
    assert (ours_opt.muon, ours_opt.sgd) == (stock_opt.muon, stock_opt.sgd)
    assert all(
        g["capture_updates"] and g["capture_orthogonalization"] for g in ours_opt.param_groups
    )
    # Warm-up wrote the groups' lr every iteration: the head groups keep their lr x 3.
    lrs = sorted({round(g["lr"], 12) for g in ours_opt.param_groups})
    assert len(lrs) == 2
    assert lrs[1] == pytest.approx(3 * lrs[0])

    assert saved
    assert saved[0]["optimizer"] is not None
    sd = saved[0]["optimizer"]
    # Ours -> stock: a freshly built stock optimizer over the same groups takes our state.
    fresh = StockMuSGD([{**g, "params": list(g["params"])} for g in stock_opt.param_groups])
    fresh.load_state_dict(sd)
    buffers = {tuple(sorted(s)) for s in fresh.state_dict()["state"].values()}
    assert buffers == {("momentum_buffer",), ("momentum_buffer", "momentum_buffer_SGD")}
    # Stock -> ours: and back, with every buffer bit-identical.
    back = UltralyticsMuSGD([{**g, "params": list(g["params"])} for g in ours_opt.param_groups])
    back.load_state_dict(fresh.state_dict())
    for key, state in fresh.state_dict()["state"].items():
        for name, t in state.items():
            assert torch.equal(back.state_dict()["state"][key][name], t)


def test_trainer_honours_a_stock_optimizer_choice_and_says_so_once(
    tiny_dataset: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # optimizer=SGD with our trainer trains with Ultralytics' own SGD, not silently with MuSGD.
    with caplog.at_level(logging.WARNING, logger="musgd"):
        model = _train(tiny_dataset, tmp_path, "user-sgd", optimizer="SGD", trainer=MuSGDTrainer)
    opt = model.trainer.optimizer
    assert type(opt) is torch.optim.SGD
    assert not isinstance(opt, UltralyticsMuSGD)
    assert {g["param_group"] for g in opt.param_groups} >= {"bn", "bias", "weight"}
    (record,) = [r for r in caplog.records if r.name == "musgd"]
    assert "optimizer=SGD builds Ultralytics' own SGD" in record.getMessage()
    assert "do not apply" in record.getMessage()


@pytest.mark.parametrize("first", ["ours", "stock"])
def test_resume_with_our_trainer_from_a_checkpoint_of_ours_or_stock(
    tiny_dataset: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    first: str,
    ours_trainer: Any,
) -> None:
    from ultralytics import YOLO

    checkpoints: list[Path] = []

    def keep(trainer: Any) -> None:
        if trainer.epoch == 0:
            target = tmp_path / "epoch1.pt"
            target.write_bytes(Path(trainer.last).read_bytes())
            checkpoints.append(target)

    chosen = {"trainer": ours_trainer} if first == "ours" else {"optimizer": "MuSGD"}
    _train(tiny_dataset, tmp_path, "run", callback=keep, epochs=2, **chosen)
    assert checkpoints
    saved = torch.load(checkpoints[0], weights_only=False)["optimizer"]
    loaded: list[dict[str, Any]] = []
    original = UltralyticsMuSGD.load_state_dict

    def spy(self: UltralyticsMuSGD, state_dict: dict[str, Any]) -> None:
        loaded.append(state_dict)
        original(self, state_dict)
        # Right after loading, every buffer is the checkpoint's (cast to the parameter dtype).
        for key, state in state_dict["state"].items():
            for name, t in state.items():
                assert torch.equal(self.state_dict()["state"][key][name], t.float())

    monkeypatch.setattr(UltralyticsMuSGD, "load_state_dict", spy)
    resumed = YOLO(str(checkpoints[0]))
    resumed.train(resume=True, trainer=ours_trainer, device="cpu", workers=0)
    assert len(loaded) == 1
    assert len(loaded[0]["state"]) == len(saved["state"]) > 0
    opt = resumed.trainer.optimizer
    assert isinstance(opt, UltralyticsMuSGD)
    assert resumed.trainer.start_epoch == 1
    assert any("momentum_buffer_SGD" in s for s in opt.state.values())


def test_command_line_entry_point_trains_with_ours(
    tiny_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import musgd.ultralytics as module

    built: list[UltralyticsMuSGD] = []
    original = module.from_stock

    def spy(stock: Any, **kw: Any) -> UltralyticsMuSGD:
        built.append(original(stock, **kw))
        return built[-1]

    monkeypatch.setattr(module, "from_stock", spy)
    args = [f"data={tiny_dataset}", "epochs=1", "imgsz=64", "batch=4", "device=cpu", "workers=0"]
    args += ["plots=false", f"project={tmp_path}", "name=cli", "amp=false", "verbose=false"]
    assert module.main(args) == 0
    assert len(built) == 1
    assert any("momentum_buffer_SGD" in s for s in built[0].state.values()), "it stepped"
    assert (tmp_path / "cli" / "results.csv").is_file()


def _trainer_state(trainer: Any) -> dict[str, Any]:
    """Deep copies of what an optimizer step changes: weights, gradients, optimizer, EMA, scaler."""
    ema = trainer.ema
    return {
        "params": [p.detach().clone() for p in trainer.model.parameters()],
        "grads": [None if p.grad is None else p.grad.clone() for p in trainer.model.parameters()],
        "optimizer": copy.deepcopy(trainer.optimizer.state_dict()),
        # The step's hyperparameters and the buffers (load_state_dict may add bookkeeping keys).
        "groups": [
            {k: g[k] for k in ("lr", "momentum", "weight_decay", "nesterov", "use_muon")}
            for g in trainer.optimizer.param_groups
        ],
        "ema": None if ema is None else copy.deepcopy(ema.ema.state_dict()),
        "ema_updates": None if ema is None else ema.updates,
        "scaler": copy.deepcopy(trainer.scaler.state_dict()),
    }


def _restore(trainer: Any, state: dict[str, Any]) -> None:
    with torch.no_grad():
        for p, saved, g in zip(
            trainer.model.parameters(), state["params"], state["grads"], strict=True
        ):
            p.copy_(saved)
            p.grad = None if g is None else g.clone()
    trainer.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
    if trainer.ema is not None:
        trainer.ema.ema.load_state_dict(copy.deepcopy(state["ema"]))
        trainer.ema.updates = state["ema_updates"]
    trainer.scaler.load_state_dict(copy.deepcopy(state["scaler"]))


def _same_state(a: dict[str, Any], b: dict[str, Any]) -> bool:
    a = {**a, "optimizer": a["optimizer"]["state"]}
    b = {**b, "optimizer": b["optimizer"]["state"]}

    def same(x: Any, y: Any) -> bool:
        if isinstance(x, Tensor):
            return isinstance(y, Tensor) and x.dtype == y.dtype and torch.equal(x, y)
        if isinstance(x, dict):
            return isinstance(y, dict) and x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
        if isinstance(x, list | tuple):
            return len(x) == len(y) and all(same(u, v) for u, v in zip(x, y, strict=True))
        return bool(x == y)

    return same(a, b)


def test_trainer_optimizer_step_with_the_replayed_clip_is_the_stock_one_bit_for_bit(
    tiny_dataset: Path, tmp_path: Path, ours_trainer: Any
) -> None:
    """Each optimizer step of a real training run is taken twice from the same state: by the stock
    trainer's method and by ours (its clip replayed through the CPU fake recorder)."""
    from replay_fakes import FakeRecorder
    from ultralytics.engine.trainer import BaseTrainer

    from musgd import GradClipReplay

    results: list[bool] = []
    clips: list[GradClipReplay] = []

    class Checked(ours_trainer):  # type: ignore[misc]
        def optimizer_step(self) -> None:
            if "musgd_clip" not in self.__dict__:
                self.musgd_clip = GradClipReplay(10.0, recorder=FakeRecorder())
                clips.append(self.musgd_clip)
            before = _trainer_state(self)
            BaseTrainer.optimizer_step(self)
            stock = _trainer_state(self)
            _restore(self, before)
            super().optimizer_step()
            results.append(_same_state(stock, _trainer_state(self)))

    _train(tiny_dataset, tmp_path, "checked", epochs=3, nbs=4, trainer=Checked)
    assert len(results) == 6
    assert all(results), results
    assert clips[0].stats.replays == 5
    assert "optimizer_step" in vars(MuSGDTrainer)


_LOAD_LAUNCH_STATE = """
import json, sys
from ultralytics.utils.patches import torch_load
import musgd.ultralytics as module
cls = torch_load(sys.argv[1], map_location="cpu")["trainer"]
options = dict(cls.musgd_options)
options["ns_dtype"] = str(options["ns_dtype"])
print(json.dumps({
    "name": cls.__name__,
    "bases": [b.__name__ for b in cls.__mro__[1:3]],
    "module_default": cls is module.MuSGDTrainer,
    "replays_clip": "optimizer_step" in vars(cls),
    "options": options,
}))
"""


@pytest.mark.parametrize("made", ["default", "options", "segment"])
def test_the_multi_gpu_launch_file_carries_the_trainer_class_with_its_options(
    tiny_dataset: Path, tmp_path: Path, made: str
) -> None:
    """Ultralytics' DDP launch writes the trainer into a file its worker processes load; a class
    that ``musgd_trainer`` made with options must arrive there with them, in a fresh process."""
    import os
    import subprocess
    import sys

    pytest.importorskip("cloudpickle", reason="Ultralytics' DDP launch needs cloudpickle")
    from ultralytics.models.yolo.segment import SegmentationTrainer
    from ultralytics.utils import dist

    from musgd.ultralytics import musgd_trainer

    cls = {  # type: ignore[no-untyped-call]
        "default": lambda: MuSGDTrainer,
        "options": lambda: musgd_trainer(ns_backend="torch", capture_clip=False),
        "segment": lambda: musgd_trainer(SegmentationTrainer, ns_dtype=torch.float32),
    }[made]()
    overrides = {"model": "yolo26n.yaml", "data": str(tiny_dataset), "device": "cpu"}
    trainer = cls(overrides={**overrides, "project": str(tmp_path)})
    launch = Path(dist.generate_ddp_file(trainer))
    state = launch.with_suffix(".pt")
    try:
        src = str(Path(__file__).resolve().parents[2] / "src")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run(
            [sys.executable, "-c", _LOAD_LAUNCH_STATE, str(state)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        seen = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        launch.unlink(missing_ok=True)
        state.unlink(missing_ok=True)
    assert seen["options"] == {**cls.musgd_options, "ns_dtype": str(cls.musgd_options["ns_dtype"])}
    assert seen["replays_clip"] == cls.musgd_options["capture_clip"]
    assert seen["module_default"] == (made == "default")
    assert seen["name"] == cls.__name__
    if made == "segment":
        assert seen["bases"][0] == "SegmentationTrainer"


def test_the_network_capture_trains_exactly_as_the_eager_network(
    tiny_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ours_trainer: Any
) -> None:
    """``musgd_trainer(capture_network=True)`` through the real trainer, with a fake grapher that
    warms up as the real one does (moving BatchNorm statistics) and then runs eagerly: the
    losses, weights and statistics of every step must be the eager network's, bit for bit."""
    from replay_fakes import FakeNetworkGrapher

    import musgd._network_capture as network_capture

    monkeypatch.setattr(network_capture, "CudaNetworkGrapher", FakeNetworkGrapher)
    runs = {}
    for name, capture in (("eager", False), ("captured", True)):
        losses: list[Tensor] = []

        def keep(trainer: Any, losses: list[Tensor] = losses) -> None:
            losses.append(trainer.loss.detach().clone())

        model = _train_capturing(
            tiny_dataset,
            tmp_path,
            name,
            keep,
            capture=capture,
            dtype=ours_trainer.musgd_options["ns_dtype"],
        )
        runs[name] = (model, losses)
    (eager, eager_losses), (captured, captured_losses) = runs["eager"], runs["captured"]
    assert len(captured_losses) == len(eager_losses) == 6  # 3 epochs of 2 batches
    assert all(torch.equal(a, b) for a, b in zip(captured_losses, eager_losses, strict=True))
    states = [m.trainer.model.state_dict() for m in (eager, captured)]
    assert states[0].keys() == states[1].keys()
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    network = captured.trainer.musgd_network
    assert network.stats.recordings == 1
    assert network.stats.replays == 5
    assert network.stats.fallbacks["first-call"] == 1
    assert not network.installed  # removed when training ended
    assert eager.trainer.__dict__.get("musgd_network") is None


def _train_capturing(
    data: Path, project: Path, name: str, keep: Any, *, capture: bool, dtype: torch.dtype
) -> Any:
    """Three epochs of two batches with ``musgd_trainer(capture_network=capture)``; ``keep``
    runs at each batch's end."""
    return _train(
        data,
        project,
        name,
        epochs=3,
        nbs=4,
        val=False,
        save=False,
        trainer=musgd_trainer(capture_network=capture, ns_dtype=dtype),
        callbacks={"on_train_batch_end": keep},
    )


def test_the_fused_ema_is_the_stock_model_ema_bit_for_bit() -> None:
    """``musgd._ema.FusedEMA`` (the EMA of ``skip_nonfinite``) against Ultralytics' ``ModelEMA``
    as a black box, on a real YOLO26n whose weights and BatchNorm statistics move."""
    from ultralytics.utils.torch_utils import ModelEMA

    from musgd._ema import FusedEMA
    from ultralytics import YOLO

    torch.manual_seed(0)
    model = YOLO("yolo26n.yaml").model.float().train()
    stock = ModelEMA(model)
    ours = copy.deepcopy(stock.ema)
    fused = FusedEMA()
    gen = torch.Generator().manual_seed(5)
    for _ in range(3):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * 0.01)
        model(torch.rand(2, 3, 64, 64, generator=gen))  # the BatchNorm statistics move
        stock.update(model)
        fused.update(ours, model, float(stock.decay(stock.updates)))
    expected = stock.ema.state_dict()
    got = ours.state_dict()
    assert expected.keys() == got.keys()
    assert all(torch.equal(got[k], v) for k, v in expected.items())
    assert any(not torch.equal(v, model.state_dict()[k]) for k, v in expected.items())


def test_a_guarded_training_run_skips_the_poisoned_step_and_says_so(
    tiny_dataset: Path, tmp_path: Path, ours_trainer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """``musgd_trainer(skip_nonfinite=True)`` in the real trainer: the optimizer step whose
    gradient was poisoned leaves the weights, both buffers and the EMA bit-identical; the other
    steps move them; the end of training reads the count once and logs it."""
    guarded = musgd_trainer(skip_nonfinite=True, ns_dtype=ours_trainer.musgd_options["ns_dtype"])
    kept: list[bool] = []

    def snapshot(trainer: Any) -> dict[str, Any]:
        return {
            "model": {k: v.clone() for k, v in trainer.model.state_dict().items()},
            "ema": {k: v.clone() for k, v in trainer.ema.ema.state_dict().items()},
            "optimizer": copy.deepcopy(trainer.optimizer.state_dict()["state"]),
        }

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, Tensor):
            return torch.equal(a, b)
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)

    class Poisoning(guarded):  # type: ignore[misc,valid-type]
        def optimizer_step(self) -> None:
            calls = self.__dict__.get("poison_calls", 0)
            self.poison_calls = calls + 1
            before = snapshot(self)
            if calls == 2:
                next(p for p in self.model.parameters() if p.grad is not None).grad.view(-1)[0] = (
                    float("nan")
                )
            super().optimizer_step()
            after = snapshot(self)
            # BatchNorm statistics move in the forward, not the step: compare what it writes.
            weights = {k: v for k, v in after["model"].items() if "running" not in k}
            kept.append(
                same(weights, {k: before["model"][k] for k in weights})
                and same(after["ema"], before["ema"])
                and same(after["optimizer"], before["optimizer"])
            )

    with caplog.at_level(logging.WARNING, logger="musgd"):
        model = _train(tiny_dataset, tmp_path, "guarded", epochs=2, nbs=4, trainer=Poisoning)
    assert kept == [False, False, True, False]  # 2 epochs of 2 batches; the third is poisoned
    assert model.trainer.musgd_skipped == 1
    assert "skipped 1 optimizer step(s) whose gradients were not finite" in caplog.text


def test_the_guarded_ema_in_one_buffer_is_what_the_checkpoints_hold(
    tiny_dataset: Path, tmp_path: Path, ours_trainer: Any
) -> None:
    """With ``skip_nonfinite`` the trainer's EMA lies in one buffer (``musgd._flat``): each
    epoch's checkpoint still holds that epoch's EMA, bit for bit in the checkpoint's float16,
    it moves from epoch to epoch, and the stock ``YOLO`` loads the last one."""
    from ultralytics import YOLO

    guarded = musgd_trainer(skip_nonfinite=True, ns_dtype=ours_trainer.musgd_options["ns_dtype"])
    kept: list[tuple[dict[str, Tensor], dict[str, Tensor]]] = []

    def keep(trainer: Any) -> None:
        ema = {k: v.detach().half() for k, v in trainer.ema.ema.state_dict().items()}
        on_disk = torch.load(trainer.last, weights_only=False)["ema"].state_dict()
        kept.append((ema, on_disk))

    model = _train(
        tiny_dataset, tmp_path, "guarded-save", callback=keep, epochs=3, nbs=4, trainer=guarded
    )
    fused = model.trainer.musgd_ema
    assert len(runs(fused.pairs[0])) == 1  # the EMA's entries are one buffer
    assert len(kept) == 3
    for ema, on_disk in kept:
        assert ema.keys() == on_disk.keys()
        assert all(torch.equal(on_disk[k], v) for k, v in ema.items())
    first, last = kept[0][1], kept[-1][1]
    assert any(not torch.equal(first[k], last[k]) for k in first if first[k].is_floating_point())
    loaded = YOLO(str(model.trainer.last))
    got = loaded.model.state_dict()
    assert all(torch.equal(got[k].half(), v) for k, v in last.items() if k in got)


def test_the_guarded_trainer_lays_the_model_flat_and_trains_the_same_bits(
    tiny_dataset: Path, tmp_path: Path, ours_trainer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``skip_nonfinite`` the trainer moves the model's parameters and float buffers into
    one buffer at the first batch (the optimizer's order): the guard saves and selects a few
    runs instead of 366 tensors, the EMA's average is one lerp, and two epochs end with the
    model, the EMA and the checkpoint bit for bit those of the same trainer without it."""
    import musgd.ultralytics as module

    guarded = musgd_trainer(skip_nonfinite=True, ns_dtype=ours_trainer.musgd_options["ns_dtype"])

    def train(name: str) -> Any:
        return _train(tiny_dataset, tmp_path, name, epochs=2, nbs=4, trainer=guarded).trainer

    flat = train("flat")
    with monkeypatch.context() as patch:
        patch.setattr(module, "_lay_flat", lambda trainer: 0)
        apart = train("apart")
    params = list(flat.model.parameters())
    assert flat.musgd_flat == len(params) + sum(b.is_floating_point() for b in flat.model.buffers())
    assert len(runs([p for group in flat.optimizer.param_groups for p in group["params"]])) == 1
    lanes = flat.optimizer._engine.guard.plan.snapshot.lanes
    assert sum(len(lane.live) for lane in lanes) < 20  # a run per group and buffer key
    assert sum(len(lane.live) for lane in apart.optimizer._engine.guard.plan.snapshot.lanes) > 366
    assert len(flat.musgd_ema.merged[0]) == 1
    for a, b in ((flat.model, apart.model), (flat.ema.ema, apart.ema.ema)):
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys()
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert Path(flat.last).stat().st_size == Path(apart.last).stat().st_size
