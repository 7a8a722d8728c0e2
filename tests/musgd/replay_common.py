"""Fixtures shared by the CPU (fake recorder) and CUDA update-replay tests; device-agnostic."""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import Any

import pytest
import torch
from torch import Tensor

import musgd._newton_schulz as ns_module
from musgd import MuSGD
from musgd._functional import GroupStep, Hyper, build_layout
from musgd._optimizer import group_structure


def split_groups(
    params: list[torch.nn.Parameter], matrices: int, **extra: Any
) -> list[dict[str, Any]]:
    """A matrix group with weight decay and a vector group without, as ``param_groups`` makes."""
    return [
        {"params": params[:matrices], "weight_decay": 0.01, **extra},
        {"params": params[matrices:], "weight_decay": 0.0, **extra},
    ]


def set_grads(params: Sequence[Tensor], step: int, skip: Set[int] = frozenset()) -> None:
    """Seeded gradients for ``step`` on each parameter's device; ``skip`` indices get None."""
    gen = torch.Generator().manual_seed(1000 + step)
    for i, p in enumerate(params):
        g = torch.randn(p.shape, generator=gen).to(p.device, p.dtype)
        p.grad = None if i in skip else g


def assert_same(pa: Sequence[Tensor], pb: Sequence[Tensor], oa: MuSGD, ob: MuSGD) -> None:
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
    step = GroupStep(
        params=params,
        grads=grads,
        bufs=bufs,
        layout=build_layout(params, None),
        hyper=Hyper(0.95, 0.01, 0.5, 0.5),
        structure=group_structure(group),
    )
    return opt._update_replay._record(key, step, opt._prepare), [*params, *grads, *bufs]


def count_ns_bodies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count executions of the eager Newton-Schulz body (the count regressions' probe)."""
    calls = [0]
    body = ns_module._newton_schulz

    def counting(*args: Any, **kwargs: Any) -> Tensor:
        calls[0] += 1
        return body(*args, **kwargs)

    monkeypatch.setattr(ns_module, "_newton_schulz", counting)
    return calls
