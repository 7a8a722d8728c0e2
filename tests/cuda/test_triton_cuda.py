"""The Triton Newton–Schulz backend on CUDA: YOLO26 shapes against float64, replay bit-identity."""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from musgd_reference import MUON_TRIPLE, rel_err
from replay_common import CaptureFlags, params_and_momentum
from replay_helpers import REPLAY_FLAG_IDS, REPLAY_FLAGS, recorded
from torch import Tensor

from musgd import MuSGD, orthogonalize
from musgd import _triton_ns as T

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton"),
]

DEVICE = torch.device("cuda")
DATA = Path(__file__).resolve().parents[2] / "src" / "musgd" / "bench" / "data"
TRIPLES = (MUON_TRIPLE,) * 5
# tests/musgd/test_newton_schulz.py: the band of five default iterations over normalized singular
# values in [0.003, 1], with 0.02 of bf16 margin; condition number 4 keeps them >= 0.031 here
# for every YOLO26 shape (min dimension <= 512).
BAND = (0.6818 - 0.02, 1.2024 + 0.02)


def yolo_matrices(name: str) -> list[list[int]]:
    shapes: list[list[int]] = json.loads((DATA / f"{name}_shapes.json").read_text())["matrices"]
    return shapes


def well_conditioned(rows: int, cols: int, gen: torch.Generator) -> Tensor:
    k = min(rows, cols)
    U, _ = torch.linalg.qr(torch.randn(rows, k, generator=gen, device=DEVICE, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(cols, k, generator=gen, device=DEVICE, dtype=torch.float64))
    s = torch.linspace(1.0, 0.25, k, dtype=torch.float64, device=DEVICE)
    out: Tensor = (U * s) @ V.T
    return out


def ns64(G: Tensor) -> Tensor:
    X = G.double()
    tall = X.shape[0] > X.shape[1]
    X = X.T if tall else X
    X = X / (torch.linalg.vector_norm(X) + 1e-7)
    for a, b, c in TRIPLES:
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    out: Tensor = X.T if tall else X
    return out


@pytest.mark.parametrize("name", ["yolo26n", "yolo26s", "yolo26m"])
def test_yolo26_table_in_the_polar_band_and_close_to_the_torch_backend(name: str) -> None:
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    members, shapes = [], []
    for shape in yolo_matrices(name):
        rows, cols = shape[0], math.prod(shape) // shape[0]
        members.append(well_conditioned(rows, cols, gen).float().reshape(shape))
        shapes.append((rows, cols))
    result = T.orthogonalize_table(
        members, tuple(shapes), requested="triton", triples=TRIPLES, eps=1e-7, dtype=torch.bfloat16
    )
    assert result is not None
    worst: dict[str, float] = {"triton": 0.0, "torch": 0.0, "gap": 0.0}
    for G, O, (rows, cols) in zip(members, result[1], shapes, strict=True):
        scale = 0.2 * math.sqrt(max(rows, cols))
        Q = O.reshape(rows, cols).double() / scale
        G2 = G.reshape(rows, cols)
        expected = ns64(G2)
        reference = orthogonalize(G2).double()
        errs = {
            "triton": rel_err(Q, expected),
            "torch": rel_err(reference, expected),
            "gap": rel_err(Q, reference),
        }
        worst = {k: max(worst[k], v) for k, v in errs.items()}
        svals = torch.linalg.svdvals(Q)
        assert BAND[0] <= float(svals.min()), (rows, cols)
        assert float(svals.max()) <= BAND[1], (rows, cols)
        assert errs["triton"] < 0.04, (rows, cols, errs)
        assert errs["gap"] < 3 * errs["torch"] + 1e-3, (rows, cols, errs)
    print(name, worst)


def test_table_is_deterministic_on_cuda() -> None:
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    members = [torch.randn(s, generator=gen, device=DEVICE) for s in ([256, 128, 3, 3], [64, 640])]
    shapes = ((256, 1152), (64, 640))
    kwargs: dict[str, Any] = {"requested": "triton", "triples": TRIPLES, "eps": 1e-7}
    first = T.orthogonalize_table(members, shapes, dtype=torch.bfloat16, **kwargs)
    second = T.orthogonalize_table(members, shapes, dtype=torch.bfloat16, **kwargs)
    assert first is not None
    assert second is not None
    assert torch.equal(first[0], second[0])


def test_programmatic_dependent_launch_gives_the_same_bits_eager_and_replayed() -> None:
    """The yolo26n table launched as a chain with programmatic dependent launch (where the
    device has it) against the same tiles launched plainly: equal bits, eagerly and replayed
    from a CUDA graph, repeatedly (an ordering bug would show as a race)."""
    shapes = tuple((s[0], math.prod(s[1:])) for s in yolo_matrices("yolo26n"))
    gen = torch.Generator(device=DEVICE).manual_seed(4)
    src = torch.randn(sum(r * c for r, c in shapes), generator=gen, device=DEVICE)
    plans = {
        pdl: T.build_plan(shapes, DEVICE, T.TileConfig(**{**T.SMALL_TILES.__dict__, "pdl": pdl}))
        for pdl in (True, False)
    }

    def run(pdl: bool) -> Tensor:
        return T.run_plan(plans[pdl], src, TRIPLES, 1e-7, torch.bfloat16)

    plain = run(False)
    for _ in range(3):
        assert torch.equal(run(True), plain)
    graph, captured = recorded(lambda: run(True))
    for _ in range(20):
        captured.zero_()
        graph.replay()
        assert torch.equal(captured, plain)
    if torch.cuda.get_device_capability(DEVICE)[0] >= 9:
        assert T.pdl_applies(DEVICE), "a Hopper GPU should run the chain with PDL"


@pytest.mark.parametrize("name", ["yolo26n", "yolo26s"])
def test_fused_small_matrices_give_the_chains_bits_eager_and_replayed(name: str) -> None:
    """A YOLO26 table with its matrices of at most 64 working rows run whole in one program
    each (``TileConfig(fuse_small=True)``, X updated in place between barriers) against the
    chain alone: equal bits, plain and mixed, eagerly, again and replayed from a CUDA graph
    (a missing barrier would show as a race)."""
    shapes = tuple((s[0], math.prod(s[1:])) for s in yolo_matrices(name))
    gen = torch.Generator(device=DEVICE).manual_seed(6)
    src = torch.randn(sum(r * c for r, c in shapes), generator=gen, device=DEVICE)
    chain_plan = T.build_plan(shapes, DEVICE, T.SMALL_TILES)
    fused_plan = T.build_plan(
        shapes, DEVICE, T.TileConfig(**{**T.SMALL_TILES.__dict__, "fuse_small": True})
    )
    assert fused_plan.small.numel() > 0
    mix = (torch.tensor(0.5, device=DEVICE), torch.tensor(0.25, device=DEVICE))
    for weights in (None, mix):

        def run(plan: T.TablePlan, weights: Any = weights) -> Tensor:
            return T.run_plan(plan, src, TRIPLES, 1e-7, torch.bfloat16, mix=weights)

        def fused(run: Callable[[T.TablePlan], Tensor] = run) -> Tensor:
            return run(fused_plan)

        chain = run(chain_plan)
        for _ in range(3):
            assert torch.equal(fused(), chain)
        graph, captured = recorded(fused)
        for _ in range(20):
            captured.zero_()
            graph.replay()
            assert torch.equal(captured, chain)


def _run(name: str, options: dict[str, Any], steps: int = 4) -> tuple[MuSGD, list[Tensor]]:
    gen = torch.Generator(device=DEVICE).manual_seed(2)
    data = json.loads((DATA / f"{name}_shapes.json").read_text())
    shapes = [*data["matrices"][:40], *data["biases"][:10]]
    params = [torch.randn(s, generator=gen, device=DEVICE).requires_grad_() for s in shapes]
    opt = MuSGD(params, lr=0.02, weight_decay=5e-4, ns_backend="triton", **options)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen, device=DEVICE)
        opt.step()
    torch.cuda.synchronize()
    return opt, [p.detach().clone() for p in params]


@pytest.mark.parametrize("split", [2, 4, 8])
def test_a_split_gram_product_replays_its_bits_and_stays_in_the_band(split: int) -> None:
    """The yolo26s table with each Gram tile dealt to ``split`` programs (yolo26s's widest
    matrices take 72 slices; its smallest one, so most splits of a small matrix are empty):
    within the table's bound of the float64 iteration and of the unsplit result, singular
    values in the band, and the same bits eagerly, again and replayed from a CUDA graph."""
    gen = torch.Generator(device=DEVICE).manual_seed(5)
    shapes, members = [], []
    for shape in yolo_matrices("yolo26s"):
        rows, cols = shape[0], math.prod(shape) // shape[0]
        shapes.append((rows, cols))
        members.append(well_conditioned(rows, cols, gen).float().reshape(-1))
    src = torch.cat(members)
    whole_plan = T.build_plan(tuple(shapes), DEVICE, T.SMALL_TILES)
    split_plan = T.build_plan(
        tuple(shapes), DEVICE, T.TileConfig(**{**T.SMALL_TILES.__dict__, "split_k": split})
    )

    def run(plan: T.TablePlan) -> Tensor:
        return T.run_plan(plan, src, TRIPLES, 1e-7, torch.bfloat16)

    whole, dealt = run(whole_plan), run(split_plan)
    assert torch.equal(run(split_plan), dealt)
    offset = 0
    for rows, cols in shapes:
        piece = slice(offset, offset + rows * cols)
        offset = piece.stop
        scale = 0.2 * math.sqrt(max(rows, cols))
        Q = dealt[piece].reshape(rows, cols).double() / scale
        W = whole[piece].reshape(rows, cols).double() / scale
        # The table's own bound against the float64 iteration, and as far from the unsplit.
        assert rel_err(Q, ns64(src[piece].reshape(rows, cols))) < 0.04, (rows, cols)
        assert rel_err(Q, W) < 0.04, (rows, cols)
        svals = torch.linalg.svdvals(Q)
        assert BAND[0] <= float(svals.min()), (rows, cols)
        assert float(svals.max()) <= BAND[1], (rows, cols)
    graph, captured = recorded(lambda: run(split_plan))
    for _ in range(5):
        captured.zero_()
        graph.replay()
        assert torch.equal(captured, dealt)


@pytest.mark.parametrize(
    "flags",
    REPLAY_FLAGS,
    ids=REPLAY_FLAG_IDS,
)
def test_replayed_triton_steps_are_bit_identical_to_eager(flags: CaptureFlags) -> None:
    _, eager = _run("yolo26n", {})
    opt, replayed = _run("yolo26n", dict(flags))
    stats = opt._replay.stats
    assert stats.failures == 0
    assert stats.recordings >= 1
    assert stats.replays >= 3, "replay must not silently turn eager"
    for a, b in zip(eager, replayed, strict=True):
        assert torch.equal(a, b)


def test_triton_and_torch_backends_agree_on_a_step() -> None:
    _, triton_params = _run("yolo26n", {}, steps=1)
    gen = torch.Generator(device=DEVICE).manual_seed(2)
    data = json.loads((DATA / "yolo26n_shapes.json").read_text())
    shapes = [*data["matrices"][:40], *data["biases"][:10]]
    params = [torch.randn(s, generator=gen, device=DEVICE).requires_grad_() for s in shapes]
    before = [p.detach().clone() for p in params]
    opt = MuSGD(params, lr=0.02, weight_decay=5e-4, ns_backend="torch")
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen, device=DEVICE)
    opt.step()
    for p, q, w0 in zip(params, triton_params, before, strict=True):
        # The orthogonalized part of the change differs by bf16 rounding only.
        assert rel_err(q - w0, p.detach() - w0) < 0.05


@pytest.mark.parametrize("nesterov", [True, False])
def test_packed_momentum_kernel_gives_the_multi_tensor_bits(
    nesterov: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one-launch momentum of a packed group rounds each product and sum on its own, as
    the multi-tensor calls do (no fused multiply-add): parameters and buffers stay bit-identical
    over four steps, and the kernel did run."""
    from musgd import _functional

    launched: list[bool] = []
    real = T.run_momentum

    def counted(*args: Any, **kwargs: Any) -> bool:
        launched.append(real(*args, **kwargs))
        return launched[-1]

    monkeypatch.setattr(T, "run_momentum", counted)

    def run(fused: bool) -> list[Tensor]:
        gen = torch.Generator(device=DEVICE).manual_seed(3)
        data = json.loads((DATA / "yolo26n_shapes.json").read_text())
        shapes = [*data["matrices"][:40], *data["biases"][:10]]
        params = [torch.randn(s, generator=gen, device=DEVICE).requires_grad_() for s in shapes]
        opt = MuSGD(params, lr=0.02, weight_decay=5e-4, nesterov=nesterov, ns_backend="triton")
        launched.clear()
        for _ in range(4):
            for p in params:
                p.grad = torch.randn(p.shape, generator=gen, device=DEVICE)
            opt.step()
        torch.cuda.synchronize()
        assert launched == [True] * 4 if fused else launched == [], "the kernel ran as meant"
        return params_and_momentum(opt, params)

    fused = run(fused=True)
    monkeypatch.setattr(_functional, "_packed_momentum", lambda *args: False)
    for a, b in zip(fused, run(fused=False), strict=True):
        assert torch.equal(a, b)
