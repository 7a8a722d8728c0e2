"""Fixtures shared by the CPU (fake recorder) and CUDA update-replay tests; device-agnostic."""

from __future__ import annotations

import math
from collections.abc import Sequence, Set
from types import ModuleType
from typing import Any, TypedDict

import pytest
import torch
from torch import Tensor

import musgd._newton_schulz as ns_module
from musgd import MuSGD
from musgd._functional import (
    Bucket,
    EagerOrthogonalizer,
    Hyper,
    NSSettings,
    Orthogonalizer,
    StepRecord,
    build_layout,
)
from musgd._optimizer import group_structure


class CaptureFlags(TypedDict, total=False):
    """The replay keywords of ``MuSGD``, typed so that ``**flags`` type-checks."""

    capture_orthogonalization: bool
    capture_updates: bool


def split_groups(
    params: list[torch.nn.Parameter], matrices: int, **extra: Any
) -> list[dict[str, Any]]:
    """A matrix group with weight decay and a vector group without, as ``param_groups`` makes."""
    return [
        {"params": params[:matrices], "weight_decay": 0.01, **extra},
        {"params": params[matrices:], "weight_decay": 0.0, **extra},
    ]


def params_and_momentum(opt: torch.optim.Optimizer, params: Sequence[Tensor]) -> list[Tensor]:
    """Copies of ``params`` and then of their momentum buffers, to compare two runs bitwise."""
    bufs = [opt.state[p]["momentum_buffer"] for p in params]
    return [t.detach().clone() for t in (*params, *bufs)]


def set_grads(params: Sequence[Tensor], step: int, skip: Set[int] = frozenset()) -> None:
    """Seeded gradients for ``step`` on each parameter's device; ``skip`` indices get None."""
    gen = torch.Generator().manual_seed(1000 + step)
    for i, p in enumerate(params):
        g = torch.randn(p.shape, generator=gen).to(p.device, p.dtype)
        p.grad = None if i in skip else g


def assert_same(
    pa: Sequence[Tensor], pb: Sequence[Tensor], oa: torch.optim.Optimizer, ob: torch.optim.Optimizer
) -> None:
    """Parameters and every state tensor are bit-identical (``torch.equal``)."""
    for a, b in zip(pa, pb, strict=True):
        assert torch.equal(a, b)
        sa, sb = oa.state.get(a, {}), ob.state.get(b, {})
        assert sa.keys() == sb.keys()
        for k in sa:
            assert torch.equal(sa[k], sb[k])


def step_both(
    ref_p: list[torch.nn.Parameter],
    ref: MuSGD,
    rep_p: list[torch.nn.Parameter],
    rep: MuSGD,
    step: int,
    *,
    skip: frozenset[int] = frozenset(),
) -> None:
    """The same gradients into both optimizers' parameters, then one step of each."""
    for ps, opt in ((ref_p, ref), (rep_p, rep)):
        set_grads(ps, step, skip)
        opt.step()


def step_with_changes(
    ref_p: list[torch.nn.Parameter],
    ref: MuSGD,
    rep_p: list[torch.nn.Parameter],
    rep: MuSGD,
    changes: Sequence[dict[str, Any]],
) -> None:
    """One step of both optimizers per entry of ``changes``, each first written into both
    optimizers' first group; bit-identical after every step."""
    for step, change in enumerate(changes):
        for opt in (ref, rep):
            opt.param_groups[0].update(change)
        step_both(ref_p, ref, rep_p, rep, step)
        assert_same(ref_p, rep_p, ref, rep)


def record_first_group(
    opt: MuSGD, key: tuple[str, ...]
) -> tuple[list[Tensor] | None, list[Tensor]]:
    """Call the update replayer's ``_record`` directly on the optimizer's first group.

    Returns what it returned and the group's parameters, gradients and momentum buffers (the
    tensors a failed recording must leave as they were), in that order.
    """
    group = opt.param_groups[0]
    params, grads = opt._gather(0, group)
    bufs = opt._buffers(params)
    step = StepRecord(
        params=params,
        grads=grads,
        bufs=bufs,
        layout=build_layout(params, None),
        hyper=Hyper(0.95, 0.01, 0.5, 0.5),
        structure=group_structure(group, params[0].device),
    )
    recorded = opt._update_replay._record(key, [step], opt._engine.body, together=False)
    return None if recorded is None else recorded[0], [*params, *grads, *bufs]


def count_calls(monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str) -> list[int]:
    """Count calls of ``module.name`` (looked up through the module at each call)."""
    calls = [0]
    real = getattr(module, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


def count_ns_bodies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count executions of the eager Newton-Schulz body (the count regressions' probe)."""
    return count_calls(monkeypatch, ns_module, "_newton_schulz")


def check_stacked(
    orth: Orthogonalizer,
    shapes: Sequence[tuple[int, ...]],
    device: torch.device,
    ns: NSSettings,
    *,
    dtype: torch.dtype = torch.float32,
    layout: torch.memory_format = torch.contiguous_format,
    steps: int = 4,
) -> None:
    """``orth.stacked`` on fresh members each step: the eager bits, owned, inputs untouched.

    The expected value is built without ``stack_bucket``, so a test may count that function
    to tell the default path from a direct fill of the recording.
    """
    rows = shapes[0][0]
    bucket = Bucket(rows, math.prod(shapes[0]) // rows, tuple(range(len(shapes))))
    gen = torch.Generator().manual_seed(7)
    results: list[Tensor] = []
    for _ in range(steps):
        members = [
            torch.randn(s, generator=gen).to(device, dtype).to(memory_format=layout)
            if len(s) == 4
            else torch.randn(s, generator=gen).to(device, dtype)
            for s in shapes
        ]
        before = [m.clone() for m in members]
        stack = torch.stack([m.reshape(bucket.rows, bucket.cols) for m in before])
        expected = EagerOrthogonalizer().batched(stack, ns).mul_(bucket.scale)
        out = orth.stacked(members, bucket, ns)
        assert torch.equal(out, expected)
        assert all(torch.equal(m, b) for m, b in zip(members, before, strict=True))
        results.append(out)
    kept = [r.clone() for r in results]
    results[-1].zero_()  # owned storage: zeroing one result leaves the others as they were
    assert all(torch.equal(r, k) for r, k in zip(results[:-1], kept[:-1], strict=True))
