"""``musgd.NSConfig``: validation, the flat shorthands, state dicts, both flavours, the trainer.

The Ultralytics flavour's reference here is written from shared/specs/ultralytics-compat.md in
float64 with a step count of its own (it calls no production code), so that ``ns=`` is shown to
reach the rule, not only to be stored.
"""

from __future__ import annotations

import dataclasses
import io
import math
import sys
import types
from typing import Any

import pytest
import torch
from test_ultralytics import KW, _StockLike, make_params, set_grads, stock_groups
from torch import Tensor, nn

from musgd import DEFAULT_COEFFICIENTS, MuSGD, NSConfig
from musgd import _newton_schulz as newton_schulz
from musgd.ultralytics import UltralyticsMuSGD, from_stock, main, musgd_trainer

NAN = float("nan")


@pytest.mark.parametrize(
    ("fields", "named", "fix"),
    [
        ({"steps": 0}, "steps", "1..100"),
        ({"steps": 101}, "steps", "1..100"),
        ({"steps": 2.0}, "steps", "an int"),
        ({"steps": True}, "steps", "an int"),
        ({"coefficients": "polar"}, "coefficients", "'quintic'"),
        ({"coefficients": []}, "coefficients", "1..100"),
        ({"coefficients": [(1.0, 2.0, 3.0)] * 101}, "coefficients", "1..100"),
        ({"coefficients": [(1.0, 2.0)]}, r"coefficients\[0\]", "triple"),
        ({"coefficients": [(1.0, -1.0, 1.0), (1.0, 2.0, NAN)]}, r"coefficients\[1\]", "finite"),
        ({"coefficients": 3.0}, "coefficients", "triples"),
        ({"coefficients": b"quintic"}, "coefficients", "a schedule name"),
        ({"coefficients": b"\x01\x02\x03"}, "coefficients", "a schedule name"),
        ({"eps": 0.0}, "eps", "> 0"),
        ({"eps": NAN}, "eps", "finite"),
        ({"eps": "1e-7"}, "eps", "number"),
        ({"dtype": torch.float64}, "dtype", "torch.bfloat16"),
        ({"dtype": "bf16"}, "dtype", '"auto"'),
        ({"backend": "cuda"}, "backend", "'triton'"),
        ({"scale": "adam"}, "scale", "'ultralytics'"),
        ({"normalize": "spectral"}, "normalize", "'frobenius'"),
    ],
)
def test_each_bad_field_raises_naming_it_and_what_it_must_be(
    fields: dict[str, Any], named: str, fix: str
) -> None:
    with pytest.raises(ValueError, match=rf"^NSConfig: {named} must be .*{fix}") as info:
        NSConfig(**fields)
    assert not str(info.value).endswith("got None")  # the value given is shown (b"quintic")


def test_the_record_is_keyword_only_frozen_and_expands_its_schedule() -> None:
    with pytest.raises(TypeError):
        NSConfig(3)  # type: ignore[call-arg]
    config = NSConfig(steps=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.steps = 4  # type: ignore[misc]
    assert config.coefficients == "quintic"
    assert config.triples == (DEFAULT_COEFFICIENTS,) * 3
    # One triple for every iteration, or a schedule whose last triple repeats.
    assert NSConfig(coefficients=(3, -3, 1), steps=2).triples == ((3.0, -3.0, 1.0),) * 2  # type: ignore[arg-type]
    schedule = NSConfig(coefficients=[(4, -4, 2), (3, -3, 1)], steps=3)  # type: ignore[arg-type]
    assert schedule.coefficients == ((4.0, -4.0, 2.0), (3.0, -3.0, 1.0))
    assert schedule.triples == ((4.0, -4.0, 2.0), (3.0, -3.0, 1.0), (3.0, -3.0, 1.0))
    assert hash(schedule) == hash(NSConfig(coefficients=((4, -4, 2), (3, -3, 1)), steps=3))


def test_a_named_schedule_is_one_registry_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="'quintic'"):
        NSConfig(coefficients="cubic")
    cubic = newton_schulz.Schedule("cubic", ((1.5, -0.5, 0.0),) * 2, "frobenius", "a test")
    monkeypatch.setitem(newton_schulz._NAMED_SCHEDULES, "cubic", cubic)
    assert NSConfig(coefficients="cubic").triples == ((1.5, -0.5, 0.0),) * 2  # its own length
    # The flat shorthand and the public functions read the same registry.
    opt = MuSGD([nn.Parameter(torch.zeros(4, 4))], lr=0.1, ns_coefficients="cubic", ns_steps=2)
    assert opt.param_groups[0]["ns_coefficients"] == ((1.5, -0.5, 0.0),) * 2
    G = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    by_name = newton_schulz.orthogonalize(G, coefficients="cubic", dtype=torch.float32)
    by_value = newton_schulz.orthogonalize(
        G, coefficients=(1.5, -0.5, 0.0), steps=2, dtype=torch.float32
    )
    assert torch.equal(by_name, by_value)


def _run(make: Any, steps: int = 4) -> list[Tensor]:
    """Parameters and momentum buffers after ``steps`` steps of ``make(params)``."""
    gen = torch.Generator().manual_seed(0)
    params = [nn.Parameter(torch.randn(s, generator=gen)) for s in [(8, 8), (6, 3, 3, 3), (8,)]]
    opt = make(params)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
    return [t.detach().clone() for p in params for t in (p, *opt.state[p].values())]


@pytest.mark.parametrize(
    ("flat", "fields"),
    [
        ({"ns_steps": 3}, {"steps": 3}),
        ({"ns_coefficients": [(3.0, -3.2, 1.2)]}, {"coefficients": [(3.0, -3.2, 1.2)]}),
        ({"ns_coefficients": "quintic", "ns_steps": 2}, {"steps": 2}),
        ({"eps": 1e-3}, {"eps": 1e-3}),
        ({"ns_dtype": torch.float32}, {"dtype": torch.float32}),
        ({"ns_backend": "torch"}, {"backend": "torch"}),
    ],
)
def test_flat_shorthands_step_bit_for_bit_as_the_record(
    flat: dict[str, Any], fields: dict[str, Any]
) -> None:
    shorthand = _run(lambda p: MuSGD(p, lr=0.05, **flat))
    record = _run(lambda p: MuSGD(p, lr=0.05, ns=NSConfig(**fields)))
    for a, b in zip(shorthand, record, strict=True):
        assert torch.equal(a, b)
    # A shorthand that changes something changes the step (the comparison can fail).
    if "ns_steps" in flat or "ns_coefficients" in flat or "eps" in flat:
        plain = _run(lambda p: MuSGD(p, lr=0.05))
        assert not all(torch.equal(a, b) for a, b in zip(plain, record, strict=True))


def test_a_flat_argument_that_contradicts_ns_raises_and_an_agreeing_one_does_not() -> None:
    p = [nn.Parameter(torch.zeros(4, 4))]
    with pytest.raises(ValueError, match=r"MuSGD: ns_steps=4 conflicts with ns.steps=3"):
        MuSGD(p, lr=0.1, ns=NSConfig(steps=3), ns_steps=4)
    with pytest.raises(ValueError, match=r"ns_dtype=torch.float32 conflicts with ns.dtype=None"):
        MuSGD(p, lr=0.1, ns=NSConfig(), ns_dtype=torch.float32)
    with pytest.raises(ValueError, match=r"ns must be a musgd\.NSConfig"):
        MuSGD(p, lr=0.1, ns={"steps": 3})  # type: ignore[arg-type]
    opt = MuSGD(p, lr=0.1, ns=NSConfig(steps=3, eps=1e-5), ns_steps=3, eps=1e-5)
    assert (opt.param_groups[0]["ns_steps"], opt.param_groups[0]["eps"]) == (3, 1e-5)
    with pytest.raises(ValueError, match="UltralyticsMuSGD: ns_backend='torch' conflicts"):
        UltralyticsMuSGD(p, ns=NSConfig(backend="triton"), ns_backend="torch")


def test_the_default_flavour_refuses_the_ultralytics_scale() -> None:
    with pytest.raises(ValueError, match=r"MuSGD: ns\.scale='ultralytics'.*UltralyticsMuSGD"):
        MuSGD([nn.Parameter(torch.zeros(4, 4))], lr=0.1, ns=NSConfig(scale="ultralytics"))
    opt = MuSGD([nn.Parameter(torch.zeros(4, 4))], lr=0.1, ns=NSConfig(scale="muon"))
    assert opt.ns_config().scale == "muon"


def test_a_group_may_hold_its_own_record() -> None:
    a, b = nn.Parameter(torch.zeros(4, 4)), nn.Parameter(torch.zeros(4, 4))
    opt = MuSGD([{"params": [a]}, {"params": [b], "ns": NSConfig(steps=2)}], lr=0.1)  # type: ignore[arg-type]
    assert "ns" not in opt.param_groups[1]
    assert opt.ns_config(0) == NSConfig(
        coefficients=(DEFAULT_COEFFICIENTS,) * 5, dtype="auto", scale="muon"
    )
    assert opt.ns_config(1).steps == 2
    with pytest.raises(ValueError, match=r"param_groups\[2\]: ns_steps=3 conflicts"):
        opt.add_param_group(
            {"params": [nn.Parameter(torch.zeros(2, 2))], "ns": NSConfig(steps=2), "ns_steps": 3}
        )


def test_the_record_survives_a_state_dict_round_trip() -> None:
    params = [nn.Parameter(torch.randn(6, 6))]
    config = NSConfig(steps=3, coefficients=[(3.0, -3.2, 1.2)], eps=1e-6, dtype=torch.float32)  # type: ignore[arg-type]
    opt = MuSGD(params, lr=0.1, ns=config)
    params[0].grad = torch.ones(6, 6)
    opt.step()
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)  # plain values only
    fresh = MuSGD(params, lr=0.1)
    assert fresh.ns_config() != opt.ns_config()
    fresh.load_state_dict(saved)
    assert fresh.ns_config() == opt.ns_config()
    assert fresh.ns_config().triples == ((3.0, -3.2, 1.2),) * 3
    # A state dict written before ns_backend existed loads with the constructor's value.
    old = opt.state_dict()
    del old["param_groups"][0]["ns_backend"]
    other = MuSGD(params, lr=0.1, ns=NSConfig(backend="torch"))
    other.load_state_dict(old)
    assert other.ns_config().backend == "torch"
    assert other.ns_config().steps == 3


def _ns64(G: Tensor, steps: int) -> Tensor:
    a, b, c = DEFAULT_COEFFICIENTS
    X = G.double()
    tall = X.shape[0] > X.shape[1]
    X = X.T if tall else X
    X = X / (X.norm() + 1e-7)
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    out: Tensor = X.T if tall else X
    return out


def _ultralytics64(
    params: list[Tensor], grads: list[Tensor], steps: int, scale: str
) -> list[Tensor]:
    """One step of the spec's use_muon rule (momentum 0.9, Nesterov, no decay) in float64."""
    out = []
    for param, grad in zip(params, grads, strict=True):
        P, g = param.detach().double().clone(), grad.double()
        beta = KW["momentum"]
        m = (1 - beta) * g
        u = beta * m + (1 - beta) * g
        O = _ns64(u.reshape(P.shape[0], -1), steps).reshape(P.shape)
        rows, cols = P.shape[0], P.numel() // P.shape[0]
        k = (
            math.sqrt(max(1.0, P.shape[-2] / P.shape[-1]))
            if scale == "ultralytics"
            else 0.2 * math.sqrt(max(rows, cols))
        )
        muon_written = P - KW["lr"] * KW["muon"] * k * O
        v = g + beta * g
        out.append(muon_written - KW["lr"] * KW["sgd"] * v)
    return out


@pytest.mark.parametrize(
    ("config", "steps", "scale"),
    [
        (NSConfig(steps=3, dtype=torch.float32), 3, "ultralytics"),
        (NSConfig(dtype=torch.float32), 5, "ultralytics"),
        (NSConfig(steps=3, dtype=torch.float32, scale="muon"), 3, "muon"),
    ],
)
def test_ultralytics_flavour_steps_with_the_record_it_is_given(
    config: NSConfig, steps: int, scale: str
) -> None:
    params = make_params()[:5]
    groups = [{"params": params, "use_muon": True, "weight_decay": 0.0}]
    opt = UltralyticsMuSGD(groups, **KW, ns=config)
    assert opt.ns_config() == config.with_defaults(dtype=torch.bfloat16, scale="ultralytics")
    set_grads(params, 0)
    grads = [p.grad for p in params]
    before = [p.detach().clone() for p in params]
    expected = _ultralytics64(before, grads, steps, scale)  # type: ignore[arg-type]
    others = [
        _ultralytics64(before, grads, k, s)  # type: ignore[arg-type]
        for k, s in ((3, "ultralytics"), (5, "ultralytics"), (3, "muon"))
        if (k, s) != (steps, scale)
    ]
    opt.step()

    def distance(reference: list[Tensor], i: int) -> float:
        change = (expected[i] - before[i].double()).norm()
        return float((params[i].detach().double() - reference[i]).norm() / change)

    for i in range(len(params)):
        assert distance(expected, i) < 1e-5, tuple(params[i].shape)
    # Another step count or scale is far off for some matrix: the record reached the rule.
    for other in others:
        assert max(distance(other, i) for i in range(len(params))) > 1e-3


def test_from_stock_and_the_trainer_pass_the_record_on() -> None:
    config = NSConfig(steps=3, coefficients="quintic")
    stock = _StockLike(stock_groups(make_params()), **KW)
    assert from_stock(stock, ns=config).ns.steps == 3

    class FakeTrainer:
        def build_optimizer(self, model: Any, name: str = "auto", **kw: Any) -> Any:
            return _StockLike(stock_groups(model), **KW)

    trainer_cls = musgd_trainer(FakeTrainer, ns=config)
    assert trainer_cls.musgd_options["ns"] is config
    opt = trainer_cls().build_optimizer(make_params())
    assert opt.ns_config() == config.with_defaults(dtype=torch.bfloat16, scale="ultralytics")
    assert "ns" not in musgd_trainer(FakeTrainer).musgd_options
    with pytest.raises(ValueError, match=r"musgd_trainer: ns_dtype=torch\.float32 conflicts"):
        musgd_trainer(FakeTrainer, ns=NSConfig(dtype=torch.float16), ns_dtype=torch.float32)


def _fake_yolo(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    import musgd.ultralytics as module

    made: list[dict[str, Any]] = []

    class FakeYOLO:
        def __init__(self, model: str) -> None:
            self.model = model
            self.task = "detect"

        def train(self, **kw: Any) -> None:
            made.append(kw)

    monkeypatch.setitem(sys.modules, "ultralytics", types.SimpleNamespace(YOLO=FakeYOLO))
    monkeypatch.setattr(module, "require_ultralytics", lambda: None)
    monkeypatch.setattr(module, "musgd_trainer", lambda base=None, **kw: kw)
    return made


def test_command_line_ns_keys_make_one_record(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _fake_yolo(monkeypatch)
    args = ["ns_steps=3", "ns_coefficients=quintic", "ns_dtype=fp32", "ns_eps=1e-6", "epochs=2"]
    assert main(args) == 0
    assert main(["ns_coefficients=[[3, -3.2, 1.2]]", "ns_backend=torch"]) == 0
    assert main(["epochs=1"]) == 0
    first, second, plain = made
    assert first["epochs"] == 2
    assert first["trainer"]["ns"] == NSConfig(steps=3, dtype=torch.float32, eps=1e-6)
    assert second["trainer"]["ns"] == NSConfig(coefficients=[(3, -3.2, 1.2)], backend="torch")  # type: ignore[arg-type]
    assert plain["trainer"] == {"capture_network": False}


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("ns_steps=0", "ns_steps must be an int in 1..100, got 0"),
        ("ns_steps=x", "ns_steps must be an int"),
        ("ns_coefficients=polar", "ns_coefficients must be one of the names 'quintic'"),
        ("ns_dtype=int8", "ns_dtype must be \"auto\" or one of 'bfloat16', 'bf16'"),
        ("ns_backend=cuda", "ns_backend must be one of 'auto', 'triton', 'torch', 'gram'"),
        ("ns_stepz=3", "ns_stepz= is not a Newton-Schulz setting; the settings are"),
    ],
)
def test_command_line_bad_ns_values_exit_2_with_a_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], arg: str, message: str
) -> None:
    made = _fake_yolo(monkeypatch)
    assert main([arg]) == 2
    err = capsys.readouterr().err
    assert err.startswith("musgd-yolo: ")
    assert message in err
    assert made == []


def test_polar_express_by_name_is_its_triples_in_both_flavours() -> None:
    """``coefficients="polar_express"`` steps both flavours exactly as the explicit triples of
    :data:`~musgd._ns_schedules.SCHEDULES` do, and not as the quintic does (WP-023)."""
    from musgd._ns_schedules import SCHEDULES

    triples = SCHEDULES["polar_express"].triples
    assert NSConfig(coefficients="polar_express").triples == triples

    def run(flavour: type[Any], config: NSConfig) -> list[Tensor]:
        params = make_params()[:5]
        groups = [{"params": params, "use_muon": True, "weight_decay": 0.0}]
        kw = KW if flavour is UltralyticsMuSGD else {"lr": 0.02}
        opt = flavour(groups, **kw, ns=config)
        for k in range(2):
            set_grads(params, k)
            opt.step()
        return [p.detach().clone() for p in params]

    for flavour in (MuSGD, UltralyticsMuSGD):
        named = run(flavour, NSConfig(coefficients="polar_express", dtype=torch.float32))
        explicit = run(flavour, NSConfig(coefficients=triples, dtype=torch.float32))
        quintic = run(flavour, NSConfig(dtype=torch.float32))
        assert all(torch.equal(a, b) for a, b in zip(named, explicit, strict=True))
        assert any(not torch.equal(a, b) for a, b in zip(named, quintic, strict=True))


def test_aol4_brings_its_normalization_and_its_four_steps() -> None:
    config = NSConfig(coefficients="aol4")
    assert (config.steps, config.normalize) == (4, "aol")
    assert config.triples == newton_schulz.AOL4_COEFFICIENTS
    assert NSConfig(coefficients="aol4", steps=6).steps == 6  # an explicit count is kept
    assert NSConfig().normalize == "frobenius"
    triples = newton_schulz.AOL4_COEFFICIENTS
    assert NSConfig(coefficients=triples, normalize="aol").normalize == "aol"
    with pytest.raises(
        ValueError, match=r"normalize must be the schedule's own.*tuned for the 'aol'"
    ):
        NSConfig(coefficients="aol4", normalize="frobenius")
    # A schedule tuned after the Frobenius normalization takes AOL too (AOL keeps its interval).
    assert NSConfig(coefficients="polar_express", normalize="aol").normalize == "aol"
    assert NSConfig(coefficients="quintic").normalize == "frobenius"
    with pytest.raises(ValueError, match="'quintic', 'polar_express', 'aol4'"):
        NSConfig(coefficients="polar")
    # The flat shorthand: ns_steps left at None takes the name's own four.
    opt = MuSGD([nn.Parameter(torch.zeros(4, 4))], ns_coefficients="aol4")
    group = opt.param_groups[0]
    assert (group["ns_steps"], group["ns_normalize"], len(group["ns_coefficients"])) == (
        4,
        "aol",
        4,
    )
    assert opt.ns_config().normalize == "aol"


def test_an_explicit_ns_steps_of_five_is_kept_with_a_four_step_schedule() -> None:
    """``ns_steps`` defaults to None (the schedule's own), so an explicit 5 is told apart from
    the default: ``"aol4"`` with ``ns_steps=5`` runs five steps, and contradicts an ``ns=`` of
    four."""
    p = nn.Parameter(torch.zeros(4, 4))
    assert MuSGD([p], ns_coefficients="aol4", ns_steps=5).param_groups[0]["ns_steps"] == 5
    assert MuSGD([p], ns_coefficients="aol4", ns_steps=None).param_groups[0]["ns_steps"] == 4
    assert MuSGD([p]).param_groups[0]["ns_steps"] == 5
    assert MuSGD([p], ns=NSConfig(coefficients="aol4")).param_groups[0]["ns_steps"] == 4
    with pytest.raises(ValueError, match=r"ns_steps=5 conflicts with ns.steps=4"):
        MuSGD([p], ns=NSConfig(coefficients="aol4"), ns_steps=5)


def test_an_explicit_schedule_longer_than_five_runs_all_its_triples_by_default() -> None:
    """Six triples and no ``ns_steps``: six steps (the sixth had been dropped, silently), in
    ``NSConfig``, both flavours and a group's own schedule; shorter schedules keep five steps
    (their last triple repeated), and an explicit ``ns_steps`` still takes the first triples."""
    six = tuple((3.0 + i / 10, -4.0, 2.0) for i in range(6))
    p = nn.Parameter(torch.zeros(4, 4))
    assert NSConfig(coefficients=six).steps == 6
    assert NSConfig(coefficients=six).triples == six
    group = MuSGD([p], ns_coefficients=six).param_groups[0]
    assert (group["ns_steps"], group["ns_coefficients"]) == (6, six)
    ultralytics = UltralyticsMuSGD([p], **KW, ns=NSConfig(coefficients=six))
    assert (ultralytics.ns.steps, ultralytics.ns.triples) == (6, six)
    own = MuSGD([{"params": [p], "ns_coefficients": six}]).param_groups[0]
    assert (own["ns_steps"], own["ns_coefficients"]) == (6, six)
    assert NSConfig(coefficients=six[:3]).steps == 5
    assert NSConfig(coefficients=six, steps=3).triples == six[:3]


# Equal column counts, rows within 2x: one CPU stack, a tall, a wide and a square matrix.
MIXED = [(12, 8), (6, 8), (8, 8), (12, 8)]


def _aol_run(flavour: type[Any], *, pad: bool, orient: bool = True) -> list[Tensor]:
    gen = torch.Generator().manual_seed(7)
    params = [nn.Parameter(torch.randn(s, generator=gen)) for s in MIXED]
    groups = [{"params": params, "use_muon": True, "weight_decay": 0.0}]
    kw = KW if flavour is UltralyticsMuSGD else {"lr": 0.02}
    opt = flavour(groups, **kw, ns=NSConfig(coefficients="aol4", dtype=torch.float32))
    opt._engine.pad_buckets = pad
    if not orient:  # the control: stacks left in their mixed orientation
        layout = opt._engine.layout
        opt._engine.layout = lambda *a, **k: layout(*a, **{**k, "orient": False})
    for k in range(2):
        grads = torch.Generator().manual_seed(20 + k)
        for p in params:
            p.grad = torch.randn(p.shape, generator=grads)
        opt.step()
    return [p.detach().clone() for p in params]


@pytest.mark.parametrize("flavour", [MuSGD, UltralyticsMuSGD])
def test_aol4_in_a_padded_mixed_stack_is_each_matrix_alone(flavour: type[Any]) -> None:
    """The AOL rescaling acts on the rows of a matrix's wide orientation: in a stack it must
    keep every matrix wide (tall ones transposed) to give each its unpadded result (float32,
    up to rounding); left as they were, the wide ones are rescaled by columns, not rows."""
    alone = _aol_run(flavour, pad=False)
    stacked = _aol_run(flavour, pad=True)
    unoriented = _aol_run(flavour, pad=True, orient=False)
    for a, b in zip(alone, stacked, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    rounding = max(float((b - a).abs().max()) for b, a in zip(stacked, alone, strict=True))
    wrong = max(float((u - a).abs().max()) for u, a in zip(unoriented, alone, strict=True))
    assert wrong > 100 * max(rounding, 1e-7)


def test_aol4_replays_bit_identically_and_round_trips_a_state_dict() -> None:
    from replay_fakes import FakeRecorder

    gen = torch.Generator().manual_seed(8)
    shapes = [*MIXED, (5,)]
    ref_p = [nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
    rep_p = [nn.Parameter(p.detach().clone()) for p in ref_p]
    config = NSConfig(coefficients="aol4", dtype=torch.float32)
    ref = MuSGD(ref_p, lr=0.02, ns=config)
    rep = MuSGD(
        rep_p,
        lr=0.02,
        ns=config,
        capture_updates=True,
        capture_orthogonalization=True,
        recorder=FakeRecorder(),
    )
    for k in range(3):
        grads = torch.Generator().manual_seed(30 + k)
        for p, q in zip(ref_p, rep_p, strict=True):
            p.grad = torch.randn(p.shape, generator=grads)
            q.grad = p.grad.clone()
        ref.step()
        rep.step()
    assert all(torch.equal(a, b) for a, b in zip(ref_p, rep_p, strict=True))
    back = MuSGD([nn.Parameter(p.detach().clone()) for p in ref_p], lr=0.02)
    back.load_state_dict(ref.state_dict())
    assert back.ns_config() == ref.ns_config()
    assert back.ns_config().normalize == "aol"


def test_aol4_asked_of_the_triton_backend_runs_torch_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from musgd import _triton_ns

    monkeypatch.setattr(_triton_ns, "_WARNED", set())
    p = nn.Parameter(torch.randn(8, 8))
    opt = MuSGD([p], ns=NSConfig(coefficients="aol4", backend="triton", dtype=torch.float32))
    p.grad = torch.randn(8, 8)
    with pytest.warns(RuntimeWarning, match="normalize by the Frobenius norm, not 'aol'"):
        opt.step()
