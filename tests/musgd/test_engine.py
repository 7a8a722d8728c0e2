"""The step engine: both flavours hold it, a flavour is an update rule, one body signature.

A toy rule (SGD with momentum, written here) runs on the engine without any MuSGD code of its
own, through the fake recorder's replay too: what the engine offers a flavour is the protocol,
not a base class to override.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

import pytest
import torch
from replay_fakes import FakeRecorder, fake_graph_pools
from torch import Tensor, nn

from musgd import MuSGD
from musgd import _engine as engine_module
from musgd import _optimizer as musgd_optimizer
from musgd._distributed import ShardedStep
from musgd._engine import EngineOptimizer, StepEngine, StepValues
from musgd._functional import NSSettings, StepRecord, Structure
from musgd._optimizer import DefaultRule
from musgd._replay import CudaGraphRecorder
from musgd._ultralytics_optim import UltralyticsHyper, UltralyticsRule
from musgd.ultralytics import UltralyticsMuSGD


@dataclasses.dataclass(frozen=True)
class ToyHyper:
    momentum: float | Tensor
    weight_decay: float | Tensor


@dataclasses.dataclass(frozen=True)
class ToyRule:
    """SGD with momentum: ``m <- mu*m + g``, ``U = m``; no Newton-Schulz."""

    name: str = "Toy"

    def admit_group(
        self, group: dict[str, Any], defaults: Mapping[str, Any], *, where: str
    ) -> dict[str, Any]:
        self.check_settings({**defaults, **group}, where=where)
        return group

    def check_settings(self, group: Mapping[str, Any], *, where: str) -> None:
        if not 0.0 <= group["momentum"] < 1.0:
            raise ValueError(f"{where}: momentum must be in [0, 1)")

    def check_params(self, group: Mapping[str, Any], *, where: str) -> None:
        pass  # any parameter takes the one route

    def buffers(self, group: Mapping[str, Any]) -> tuple[str, ...]:
        return ("toy_buffer",)

    @property
    def known_buffers(self) -> tuple[str, ...]:
        return ("toy_buffer",)

    def shares(self, group: Mapping[str, Any], params: list[Tensor], sharded: ShardedStep) -> bool:
        return False

    def values(
        self, group: Mapping[str, Any], device: torch.device, live: torch.device | None
    ) -> StepValues:
        ns = NSSettings(1, ((1.0, 0.0, 0.0),), 1e-7, torch.float32)
        structure = Structure(nesterov=False, decay=False, muon=False, ns=ns)
        return StepValues(ToyHyper(float(group["momentum"]), 0.0), structure, float(group["lr"]))

    def prepare(self, record: StepRecord) -> list[Tensor]:
        bufs = list(record.bufs)
        torch._foreach_mul_(bufs, record.hyper.momentum)
        torch._foreach_add_(bufs, list(record.grads))
        return bufs

    def step_shared(self, engine: StepEngine, record: StepRecord, lr: float) -> None:
        raise AssertionError("never shared")


class Toy(EngineOptimizer):
    def __init__(self, params: Any, lr: float, momentum: float = 0.5, **kw: Any) -> None:
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "use_muon": False,
            "capture_orthogonalization": False,
            "capture_updates": kw.pop("capture_updates", False),
        }
        super().__init__(params, defaults, ToyRule(), **kw)


def _toy_run(**kw: Any) -> tuple[list[Tensor], Toy]:
    gen = torch.Generator().manual_seed(0)
    params = [nn.Parameter(torch.randn(s, generator=gen)) for s in [(4, 4), (3,)]]
    opt = Toy(params, lr=0.1, **kw)
    for _ in range(4):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
    return [t.detach().clone() for p in params for t in (p, opt.state[p]["toy_buffer"])], opt


def test_a_rule_written_outside_musgd_runs_on_the_engine_eager_and_replayed() -> None:
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(s, generator=gen) for s in [(4, 4), (3,)]]
    bufs = [torch.zeros_like(p) for p in params]
    for _ in range(4):  # the reference: SGD with momentum, in plain tensor code
        for p, m in zip(params, bufs, strict=True):
            g = torch.randn(p.shape, generator=gen)
            m.mul_(0.5).add_(g)
            p.sub_(0.1 * m)
    eager, opt = _toy_run()
    expected = [t for p, m in zip(params, bufs, strict=True) for t in (p, m)]
    for a, b in zip(eager, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert opt._replay.stats.recordings == 0
    replayed, opt = _toy_run(capture_updates=True, recorder=FakeRecorder())
    assert opt._replay.stats.recordings == 1  # one group layout
    assert opt._replay.stats.replays == 4
    for a, b in zip(replayed, eager, strict=True):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match=r"param_groups\[1\]: momentum"):
        opt.add_param_group({"params": [nn.Parameter(torch.zeros(2))], "momentum": 1.0})


def test_both_flavours_hold_the_one_engine_with_their_own_rule() -> None:
    p = [nn.Parameter(torch.zeros(4, 4))]
    default = MuSGD(p, lr=0.1, foreach=False)
    ultra = UltralyticsMuSGD([{"params": p, "use_muon": True}], muon=0.2, sgd=1.0)
    for opt in (default, ultra):
        assert isinstance(opt, EngineOptimizer)
        assert type(opt._engine) is StepEngine
    assert default._engine.rule == DefaultRule(foreach=False)
    assert isinstance(ultra._engine.rule, UltralyticsRule)
    assert (ultra._engine.rule.muon, ultra._engine.rule.sgd) == (0.2, 1.0)
    # Composed, not inherited through private overrides: neither flavour is the other, and
    # neither defines a private method (everything of the step is the engine's).
    assert not issubclass(UltralyticsMuSGD, MuSGD)
    for cls in (MuSGD, UltralyticsMuSGD):
        private = [n for n in vars(cls) if n.startswith("_") and not n.startswith("__")]
        assert private == [], f"{cls.__name__} overrides {private}"


def test_the_ultralytics_learning_rate_is_its_own_field() -> None:
    p = [nn.Parameter(torch.zeros(4, 4))]
    ultra = UltralyticsMuSGD([{"params": p, "use_muon": True}], lr=0.03, momentum=0.9)
    group = ultra.param_groups[0]
    values = ultra._engine.rule.values(group, torch.device("cpu"), None)
    assert values.hyper == UltralyticsHyper(
        momentum=0.9, weight_decay=0.0, lr=0.03, damping=1 - 0.9
    )
    assert values.lr == 0.03
    assert "w_muon" not in {f.name for f in dataclasses.fields(UltralyticsHyper)}


def test_rules_compare_by_value_so_recordings_are_keyed_by_them() -> None:
    from musgd import NSConfig

    ns = NSConfig(dtype=torch.bfloat16, scale="ultralytics")
    assert UltralyticsRule(0.2, 1.0, ns) == UltralyticsRule(0.2, 1.0, ns)
    assert hash(UltralyticsRule(0.2, 1.0, ns)) == hash(UltralyticsRule(0.2, 1.0, ns))
    assert UltralyticsRule(0.2, 1.0, ns) != UltralyticsRule(0.2, 1.0, NSConfig(steps=3))
    assert DefaultRule(foreach=True) != DefaultRule(foreach=False)


def test_share_pool_points_only_the_engines_own_recorder_at_the_pool_once() -> None:
    from musgd._replay import GraphPool

    params = [nn.Parameter(torch.randn(8, 4))]
    own = MuSGD(params, lr=0.02)
    pool, other = GraphPool(), GraphPool()
    recorder = own._replay.recorder
    assert isinstance(recorder, CudaGraphRecorder)
    assert recorder.pool is None
    assert own._engine.share_pool(pool) is True
    assert recorder.pool is pool
    # Already in a pool: a second pool is refused, the first kept.
    assert own._engine.share_pool(other) is False
    assert recorder.pool is pool
    # A caller's recorder is the caller's: left as it was.
    given = CudaGraphRecorder()
    theirs = MuSGD(params, lr=0.02, recorder=given)
    assert theirs._engine.share_pool(pool) is False
    assert given.pool is None
    fake = MuSGD(params, lr=0.02, recorder=FakeRecorder())
    assert fake._engine.share_pool(pool) is False


def test_a_network_joining_the_pool_late_drops_the_optimizers_recordings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from musgd._replay import GraphPool

    given_back = fake_graph_pools(monkeypatch)
    opt = MuSGD([nn.Parameter(torch.randn(8, 4))], lr=0.02)
    pool = GraphPool()
    assert opt._engine.share_pool(pool)
    recorder = opt._replay.recorder
    assert isinstance(recorder, CudaGraphRecorder)
    assert recorder.droppable
    device = torch.device("cuda", 0)
    token = pool.consumer(device, droppable=recorder.droppable)  # as its record() asks
    opt._replay.orth_cache.publish("key", object())  # type: ignore[arg-type]
    opt._replay.orth_cache.refuse("refused")
    assert pool.producer(device) != token  # a fresh pool: every graph of the old one is gone
    assert given_back == [1]
    assert len(opt._replay.orth_cache) == 0
    assert opt._replay.orth_cache.admits("refused") is None


def _two_groups(**kw: Any) -> tuple[nn.Module, nn.Module, MuSGD]:
    torch.manual_seed(0)
    a, b = nn.Linear(4, 8), nn.Linear(8, 2)
    opt = MuSGD([{"params": a.parameters()}, {"params": b.parameters()}], lr=0.01, **kw)
    b(a(torch.randn(3, 4))).sum().backward()
    opt.step()
    return a, b, opt


def _snapshot(opt: MuSGD) -> list[Tensor]:
    return [p.clone() for g in opt.param_groups for p in g["params"]] + [
        s["momentum_buffer"].clone() for s in opt.state.values()
    ]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("lr", "x", "lr must be a number"),
        ("lr", -1.0, "lr must be a finite number >= 0, got -1.0"),
        ("lr", float("nan"), "lr must be a finite number >= 0"),
        ("momentum", 5.0, "momentum must be a number in [0, 1)"),
        ("ns_steps", 0, "ns_steps must be an int"),
        ("ns_coefficients", "bogus", "names no known schedule"),
        ("ns_coefficients", "polar_express", "holds the schedule's (a, b, c) triples"),
        ("lr", torch.zeros(2), "a tensor of shape (2,)"),
        ("ns_normalize", None, "ns_normalize must be one of 'frobenius', 'aol', got None"),
        # 1 == True: the check's memory of the settings tells them apart by type.
        ("nesterov", 1, "nesterov must be True or False, got 1"),
    ],
)
def test_a_setting_changed_after_the_group_was_added_is_refused_before_any_write(
    key: str, value: object, message: str
) -> None:
    """An outside audit set a later group's value between steps: the first group had been
    written before the second's value failed to parse. Every group is checked first now."""
    _, _, opt = _two_groups()
    before = _snapshot(opt)
    opt.param_groups[1][key] = value
    with pytest.raises(ValueError, match=r"param_groups\[1\]") as info:
        opt.step()
    assert message in str(info.value)
    assert "no group was stepped" in str(info.value)
    assert all(torch.equal(x, y) for x, y in zip(before, _snapshot(opt), strict=True))


def test_an_unchanged_group_is_not_checked_again_and_a_cpu_tensor_lr_is_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A group is checked again only when a setting changed: a number, a tensor replaced, or
    a CPU tensor's value written in place (reading it waits for nothing); a refused value
    leaves every parameter as it was."""
    _, _, opt = _two_groups()
    calls: list[str] = []
    original = musgd_optimizer._validate_group

    def counting(group: dict[str, Any], *, where: str) -> None:
        calls.append(where)
        original(group, where=where)

    monkeypatch.setattr(musgd_optimizer, "_validate_group", counting)
    opt.step()
    assert calls == []  # checked at the first step, unchanged since
    opt.param_groups[0]["lr"] = 0.02  # a scheduler's write
    opt.step()
    assert calls == ["param_groups[0]"]
    lr = torch.tensor(0.03)
    opt.param_groups[1]["lr"] = lr
    opt.step()
    assert calls == ["param_groups[0]", "param_groups[1]"]
    opt.step()
    assert calls == ["param_groups[0]", "param_groups[1]"]  # the same tensor, the same value
    before = [p.detach().clone() for g in opt.param_groups for p in g["params"]]
    for bad in (-1.0, float("nan")):
        lr.fill_(bad)  # written in place: checked, as a number would be
        with pytest.raises(ValueError, match=r"param_groups\[1\]: lr must be a finite number"):
            opt.step()
    after = [p.detach() for g in opt.param_groups for p in g["params"]]
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    opt.param_groups[1]["lr"] = torch.tensor(float("nan"))  # a new tensor: checked too
    with pytest.raises(ValueError, match="lr must be a finite number"):
        opt.step()


def test_a_tensor_setting_of_another_kind_at_a_reused_id_is_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A freed tensor's id may be given to the next tensor: a setting replaced by one of
    another dtype or size that got the old one's id (and has the same value) is still checked."""
    _, _, opt = _two_groups()
    old = torch.tensor(1.0)
    opt.param_groups[0]["lr"] = old
    opt.step()
    reused, real_id = id(old), id
    for bad in (torch.tensor(1), torch.tensor([1.0, 1.0])):  # an integer; two elements
        monkeypatch.setattr(
            engine_module,
            "id",
            lambda t, b=bad, r=real_id: reused if t is b else r(t),
            raising=False,
        )
        opt.param_groups[0]["lr"] = bad
        with pytest.raises(ValueError, match="one-element floating-point tensor"):
            opt.step()


@pytest.mark.parametrize(
    ("key", "value", "owner"), [("dampening", 0.0, "SGD"), ("betas", (0.9, 0.99), "Adam")]
)
def test_a_group_with_another_optimizers_setting_is_refused_when_added(
    key: str, value: object, owner: str
) -> None:
    """Such a group was taken, and its own checkpoint then refused as another optimizer's."""
    layer = nn.Linear(4, 3)
    with pytest.raises(ValueError, match=f"has '{key}', a setting of another optimizer \\({owner}"):
        MuSGD([{"params": list(layer.parameters()), key: value}])
    opt = MuSGD([layer.weight])
    with pytest.raises(ValueError, match="remove it from the group"):
        opt.add_param_group({"params": [layer.bias], key: value})
    assert len(opt.param_groups) == 1
    with pytest.raises(TypeError, match=r"add_param_group takes one group, a dict .* got list"):
        opt.add_param_group([{"params": [layer.bias]}])  # type: ignore[arg-type]


def test_a_device_tensor_setting_is_not_read_on_the_host() -> None:
    """Reading a device tensor's value would synchronize the host with the device: a check
    lets it stand as 0.0, and its identity alone marks it (a meta tensor has no value)."""
    lr = torch.tensor(0.5, device="meta")
    view = engine_module.settings_view({"lr": lr, "params": [1]}, where="g")
    assert view == {"lr": 0.0, "params": []}
    assert engine_module._settings_mark({"lr": lr}) == (("lr", (id(lr), lr.dtype, 1, 0.0)),)


def _damaged(change: str) -> object:
    _, _, other = _two_groups()
    sd = other.state_dict()
    first = next(iter(sd["state"]))
    if change == "another model":
        torch.manual_seed(0)
        wide = nn.Linear(4, 16)
        opt = MuSGD([{"params": wide.parameters()}, {"params": nn.Linear(16, 2).parameters()}])
        wide(torch.randn(3, 4)).sum().backward()
        opt.step()
        return opt.state_dict()
    if change == "buffer shape":
        sd["state"][first]["momentum_buffer"] = torch.zeros(3)
    elif change == "buffer type":
        sd["state"][first]["momentum_buffer"] = "x"
    elif change == "buffer nan":
        sd["state"][first]["momentum_buffer"][0, 0] = float("nan")
    elif change == "twice":
        sd["param_groups"][0]["params"] = [0, 0]
    elif change == "unknown id":
        sd["state"][99] = {"momentum_buffer": torch.zeros(1)}
    elif change == "lr":
        sd["param_groups"][0]["lr"] = -5.0
    elif change == "nesterov":
        sd["param_groups"][1]["nesterov"] = "yes"
    elif change == "normalize":
        sd["param_groups"][1]["ns_normalize"] = "bogus"
    elif change == "adam":  # found by an audit: Adam's groups and buffers were taken in
        sd["param_groups"][0]["betas"] = (0.9, 0.999)
    elif change == "adam buffers":
        sd["state"][first] = {"exp_avg": torch.zeros(8, 4), "step": torch.tensor(1.0)}
    elif change == "no state":
        del sd["state"]
    else:
        return {"model": change} if change == "model" else None
    return sd


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ("another model", ValueError, "has shape (16, 4), its parameter (8, 4)"),
        ("buffer shape", ValueError, "has shape (3,), its parameter (8, 4)"),
        ("buffer type", ValueError, "must be a floating-point tensor, got str"),
        ("buffer nan", ValueError, "holds inf or NaN; the checkpoint is corrupted"),
        ("twice", ValueError, "lists parameter 0 twice"),
        ("unknown id", ValueError, "entries for parameters no group lists (99)"),
        ("lr", ValueError, "param_groups[0]: lr must be a finite number >= 0, got -5.0"),
        ("nesterov", ValueError, "param_groups[1]: nesterov must be True or False"),
        ("model", TypeError, "this looks like a model's state_dict"),
        ("none", TypeError, "got NoneType without them"),
        ("normalize", ValueError, "param_groups[1]: ns_normalize must be one of"),
        ("adam", ValueError, "has 'betas', a setting of another optimizer (Adam, AdamW)"),
        ("adam buffers", ValueError, "holds 'exp_avg', 'step', which MuSGD does not keep"),
        ("no state", TypeError, "got dict without 'state'"),
    ],
)
def test_a_damaged_state_dict_is_refused_and_the_optimizer_kept(
    change: str, error: type[Exception], message: str
) -> None:
    _, _, opt = _two_groups()
    before = _snapshot(opt)
    settings = [dict(g, params=None) for g in opt.param_groups]
    with pytest.raises(error) as info:
        opt.load_state_dict(_damaged(change))  # type: ignore[arg-type]
    assert message in str(info.value)
    assert all(torch.equal(x, y) for x, y in zip(before, _snapshot(opt), strict=True))
    assert [dict(g, params=None) for g in opt.param_groups] == settings
    opt.load_state_dict(_two_groups()[2].state_dict())  # a good one still loads


def test_a_recorder_that_cannot_record_is_refused_at_construction() -> None:
    """Found by an audit: recorder='x' was taken, and the first captured step raised an
    AttributeError from deep inside the replay."""
    with pytest.raises(TypeError, match="got str without supports, capturing, stream_key, record"):
        MuSGD([nn.Parameter(torch.randn(3, 3))], recorder="x")  # type: ignore[arg-type]


def test_a_misspelt_setting_is_warned_of_and_a_key_of_ones_own_is_not() -> None:
    """Found by an audit: `weigth_decay` was kept silently and the default 0.0 applied."""
    net = nn.Linear(3, 3)
    with pytest.warns(UserWarning, match="'weigth_decay' is no setting, so the group keeps"):
        MuSGD([{"params": net.parameters(), "weigth_decay": 0.1}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MuSGD([{"params": net.parameters(), "initial_lr": 0.5, "name": "head"}])


def test_the_same_gradient_objects_are_laid_out_once_and_other_ones_anew(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A captured network's gradients are the same objects every step: the group's layout is
    planned at the first step only; new gradient objects (a new backward), another gradient
    set or a changed ``use_muon`` plan anew, and every step gives the bits of a plain one."""
    planned: list[int] = []
    original = StepEngine.layout

    def spy(self: StepEngine, params: list[Tensor], *args: Any, **kwargs: Any) -> Any:
        planned.append(len(params))
        return original(self, params, *args, **kwargs)

    monkeypatch.setattr(StepEngine, "layout", spy)
    gen = torch.Generator().manual_seed(3)
    shapes = [(8, 4), (6, 4, 3, 3), (5,), (3, 7)]
    ours = [nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
    plain = [nn.Parameter(p.detach().clone()) for p in ours]
    opt = MuSGD(ours, lr=0.05, momentum=0.9, weight_decay=0.01)
    reference = MuSGD(plain, lr=0.05, momentum=0.9, weight_decay=0.01)
    for p in ours:
        p.grad = torch.zeros_like(p)
    held = [p.grad for p in ours]
    for _ in range(4):
        for g, q in zip(held, plain, strict=True):
            assert g is not None
            g.copy_(torch.randn(g.shape, generator=gen))
            q.grad = g.clone()  # new objects every step: the plain path
        opt.step()
        reference.step()
    assert planned == [4] * 5  # ours once; the reference at each of its four steps
    assert all(torch.equal(p, q) for p, q in zip(ours, plain, strict=True))
    ours[2].grad = None  # another gradient set
    opt.step()
    assert planned == [4] * 5 + [3]
    opt.step()
    assert planned == [4] * 5 + [3]
    opt.param_groups[0]["use_muon"] = False
    opt.step()
    assert planned == [4] * 5 + [3, 3]


def test_a_sparse_gradient_in_place_of_a_dense_one_is_still_refused() -> None:
    p = nn.Parameter(torch.zeros(4, 3))
    opt = MuSGD([p], lr=0.1)
    p.grad = torch.ones(4, 3)
    opt.step()
    p.grad = torch.ones(4, 3).to_sparse()
    with pytest.raises(RuntimeError, match="does not support sparse gradients"):
        opt.step()
    assert torch.equal(opt.state[p]["momentum_buffer"], torch.ones(4, 3))


def _ultralytics_two_groups() -> tuple[nn.Parameter, nn.Parameter, UltralyticsMuSGD]:
    torch.manual_seed(0)
    matrix, vector = nn.Parameter(torch.randn(4, 4)), nn.Parameter(torch.randn(4))
    opt = UltralyticsMuSGD(
        [{"params": [matrix], "use_muon": True}, {"params": [vector], "use_muon": False}],
        lr=0.1,
        momentum=0.9,
    )
    for p in (matrix, vector):
        p.grad = torch.randn_like(p)
    opt.step()
    return matrix, vector, opt


def _ultralytics_snapshot(opt: UltralyticsMuSGD) -> list[Tensor]:
    params = [p.detach().clone() for g in opt.param_groups for p in g["params"]]
    return params + [b.clone() for s in opt.state.values() for b in s.values()]


@pytest.mark.parametrize("edit", ["route", "appended", "int"])
def test_an_ultralytics_group_routed_to_newton_schulz_with_a_vector_is_refused_before_any_write(
    edit: str,
) -> None:
    """An audit set ``use_muon=True`` on the vectors' group after the first step: the matrix
    group was written, the vector's buffers changed and a second buffer made before an
    IndexError. The route is checked again whenever it or the group's parameter list changes."""
    _, _, opt = _ultralytics_two_groups()
    if edit == "route":
        opt.param_groups[1]["use_muon"] = True
    elif edit == "appended":
        extra = nn.Parameter(torch.randn(3))
        extra.grad = torch.randn(3)
        opt.param_groups[0]["params"].append(extra)
    else:
        opt.param_groups[1]["use_muon"] = 1  # equal to True, but not a bool
    before, keys = _ultralytics_snapshot(opt), [sorted(s) for s in opt.state.values()]
    message = "True or False, got 1" if edit == "int" else r"use_muon=True needs matrices"
    with pytest.raises(ValueError, match=message):
        opt.step()
    assert all(torch.equal(x, y) for x, y in zip(before, _ultralytics_snapshot(opt), strict=True))
    assert [sorted(s) for s in opt.state.values()] == keys
    opt.param_groups[1]["use_muon"] = False
    if edit == "appended":
        opt.param_groups[0]["params"].pop()
    opt.step()  # put back, the optimizer steps again


def test_a_state_dict_routing_a_vector_to_newton_schulz_is_refused_at_load() -> None:
    _, _, opt = _ultralytics_two_groups()
    saved = opt.state_dict()
    saved["param_groups"][1]["use_muon"] = True
    with pytest.raises(ValueError, match=r"param_groups\[1\]: use_muon=True needs matrices"):
        opt.load_state_dict(saved)
    assert opt.param_groups[1]["use_muon"] is False


def test_an_ultralytics_flavour_state_dict_is_refused_by_musgd() -> None:
    """Its groups hold none of MuSGD's settings; loaded, MuSGD took its use_muon, lr and
    momentum (whose buffer means another thing there) without a word."""
    matrix, vector, flavour = _ultralytics_two_groups()
    opt = MuSGD([{"params": [matrix]}, {"params": [vector]}])
    with pytest.raises(ValueError, match=r"param_groups\[0\] holds none of MuSGD's settings"):
        opt.load_state_dict(flavour.state_dict())
    assert opt.param_groups[0]["use_muon"] is None
    assert len(opt.state) == 0
