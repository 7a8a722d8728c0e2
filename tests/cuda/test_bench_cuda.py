"""The benchmark harness on a real GPU: CUDA-event timing, the CLI, repeatable training hashes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from musgd.bench._cli import EXIT_OK, main
from musgd.bench._timing import CUDA_CLOCK, time_steps
from musgd.bench._train_bench import TrainConfig, make_batches, train_run
from musgd.bench._variants import select_variants

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_cuda_events_time_gpu_work() -> None:
    device = torch.device("cuda")
    x = torch.randn(2048, 2048, device=device)
    timing = time_steps(lambda: x @ x, steps=5, warmup=1, device=device)
    assert timing.clock == CUDA_CLOCK
    assert len(timing.samples_ms) == 5
    assert all(v > 0 for v in timing.samples_ms)


def test_optimizer_cli_on_cuda(tmp_path: Path) -> None:
    out = tmp_path / "e.json"
    argv = ["optimizer", "--device", "cuda", "--quick", "--steps", "3", "--out", str(out)]
    assert main(argv) == EXIT_OK
    doc = json.loads(out.read_text())
    assert doc["environment"]["gpu"]
    rows = doc["results"]["sets"]["nano"]["variants"]
    assert all(r["clock"] == CUDA_CLOCK for r in rows)


def test_bf16_training_run_is_repeatable_on_cuda() -> None:
    device = torch.device("cuda")
    config = TrainConfig(batch_size=2, image_size=64, steps=2, warmup=1, autocast=True)
    variant = select_variants(["bucketed eager"], device)[0]
    batches = make_batches(config, device)
    torch.backends.cudnn.deterministic = True
    try:
        a = train_run(variant, batches, config, device)
        b = train_run(variant, batches, config, device)
    finally:
        torch.backends.cudnn.deterministic = False
    assert a.sha256 == b.sha256
    assert a.losses[-1] < a.losses[0]


@pytest.mark.parametrize("ns_backend", ["auto", "torch"])
def test_whole_step_graph_replays_the_eager_step_bit_for_bit(ns_backend: str) -> None:
    """A MuSGD step captured whole (our step inside a user's capture runs its eager body)
    replays exactly the eager steps: WARMUP eager steps, then one step per replay."""
    from musgd import MuSGD
    from musgd.bench._variants import WholeStepGraph

    gen = torch.Generator().manual_seed(0)
    shapes = [(64, 32, 3, 3), (128, 64), (48, 200), (64,), (16, 16)]
    start = [torch.randn(s, generator=gen).cuda() for s in shapes]
    grads = [torch.randn(s, generator=gen).cuda() for s in shapes]
    twins = []
    for _ in range(2):
        ps = [p.clone().requires_grad_() for p in start]
        for p, g in zip(ps, grads, strict=True):
            p.grad = g.clone()
        twins.append((ps, MuSGD(ps, lr=0.02, weight_decay=0.01, ns_backend=ns_backend)))
    (eager_p, eager), (graph_p, graphed) = twins
    stepper = WholeStepGraph(graphed)
    for _ in range(WholeStepGraph.WARMUP):
        eager.step()
    for _ in range(4):
        eager.step()
        stepper.step()
    torch.cuda.synchronize()
    for a, b in zip(eager_p, graph_p, strict=True):
        assert torch.equal(a, b)


def test_a_training_step_captured_whole_matches_eager_steps_bit_for_bit() -> None:
    """The trainable whole-step variant: fresh gradients every step (set_to_none) copied into
    the graph's inputs, lr and momentum in device tensors moved by a schedule, bit-identical to
    the same optimizer stepped eagerly; a changed set of gradients raises."""
    from musgd.bench._variants import WholeStepGraph, musgd_variants

    variant = next(v for v in musgd_variants() if v.name == "tensor-hyperparameters graphed")
    device = torch.device("cuda")
    shapes = [(32, 16, 3, 3), (64, 32), (32,), (16, 64, 1, 1)]

    def make() -> tuple[list[torch.nn.Parameter], torch.optim.Optimizer]:
        gen = torch.Generator(device=device).manual_seed(8)
        params = [torch.nn.Parameter(torch.randn(s, generator=gen, device=device)) for s in shapes]
        return params, variant.build([{"params": params, "weight_decay": 5e-4}])

    ref_p, ref = make()
    cap_p, cap = make()
    stepper = variant.stepper(cap, training=True)
    assert isinstance(stepper, WholeStepGraph)
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: 0.8**s) for o in (ref, cap)]
    gen = torch.Generator(device=device).manual_seed(9)
    for step in range(6):
        grads = [torch.randn(p.shape, generator=gen, device=device) for p in ref_p]
        for params in (ref_p, cap_p):
            for p, g in zip(params, grads, strict=True):
                p.grad = g.clone()
        ref.step()
        stepper.step()
        for opt in (ref, cap):
            opt.zero_grad(set_to_none=True)
        for sched in scheds:
            sched.step()
        torch.cuda.synchronize()
        for a, b in zip(ref_p, cap_p, strict=True):
            assert torch.equal(a.detach(), b.detach()), f"step {step}"
    cap_p[0].grad = torch.zeros_like(cap_p[0])
    with pytest.raises(RuntimeError, match="set of parameters with gradients changed"):
        stepper.step()
