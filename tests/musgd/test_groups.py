"""``param_groups``: matrices with decay, vectors without; plain parameters work too."""

from __future__ import annotations

import torch
from torch import nn

from musgd import MuSGD, param_groups


class Net(nn.Module):
    """Conv kernels, a linear weight, biases, norm weights and a (C, 1, 1) gain."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2d(8)
        self.gain = nn.Parameter(torch.ones(8, 1, 1))
        self.proj = nn.Conv2d(8, 8, 1, bias=False)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.norm(self.conv(x))) * self.gain
        return self.head(self.proj(x).mean(dim=(2, 3)))


def test_matrices_get_decay_and_vectors_do_not() -> None:
    net = Net()
    groups = param_groups(net, weight_decay=5e-4, lr=0.02, momentum=0.9)
    matrices, vectors = groups
    assert [id(p) for p in matrices["params"]] == [
        id(net.conv.weight),
        id(net.proj.weight),
        id(net.head.weight),
    ]
    assert {id(p) for p in vectors["params"]} == {
        id(net.conv.bias),
        id(net.norm.weight),
        id(net.norm.bias),
        id(net.gain),
        id(net.head.bias),
    }
    assert matrices["weight_decay"] == 5e-4
    assert vectors["weight_decay"] == 0.0
    # Extra keyword arguments are copied into both groups.
    assert matrices["lr"] == vectors["lr"] == 0.02
    assert matrices["momentum"] == vectors["momentum"] == 0.9


def test_frozen_parameters_are_left_out_and_empty_groups_dropped() -> None:
    net = Net()
    for p in (net.conv.weight, net.proj.weight, net.head.weight):
        p.requires_grad_(False)
    groups = param_groups(net, weight_decay=0.1)
    assert len(groups) == 1
    assert groups[0]["weight_decay"] == 0.0
    assert len(groups[0]["params"]) == 5
    only_vectors = param_groups(nn.LayerNorm(8), weight_decay=0.1)
    assert [g["weight_decay"] for g in only_vectors] == [0.0]
    assert param_groups(nn.ReLU(), weight_decay=0.1) == []


def _train(opt_from: str, steps: int = 3) -> list[torch.Tensor]:
    torch.manual_seed(0)
    net = Net()
    if opt_from == "groups":
        opt = MuSGD(param_groups(net, weight_decay=0.0), lr=0.05)
    else:
        opt = MuSGD(net.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y = torch.randn(2, 3, 6, 6, generator=gen), torch.randn(2, 4, generator=gen)
        opt.zero_grad()
        (net(x) - y).square().mean().backward()
        opt.step()
    return [p.detach().clone() for p in net.parameters()]


def test_plain_parameters_route_by_shape_like_the_helper() -> None:
    # With no decay the split into groups changes nothing: routing is by shape either way, and
    # the three matrices have distinct shapes, so bucketing is the same too.
    helper, plain = _train("groups"), _train("plain")
    for a, b in zip(helper, plain, strict=True):
        assert torch.equal(a, b)
    assert not all(torch.equal(a, b) for a, b in zip(helper, _train("groups", 0), strict=True))


def test_helper_groups_decay_only_the_matrices() -> None:
    net = Net()
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    before = {name: p.detach().clone() for name, p in net.named_parameters()}
    MuSGD(param_groups(net, weight_decay=0.5), lr=0.1).step()
    for name, p in net.named_parameters():
        if name in {"conv.weight", "proj.weight", "head.weight"}:
            # Zero gradient: the update is weight_decay*W only, so W shrinks by lr*0.5.
            torch.testing.assert_close(p.detach(), before[name] * (1 - 0.1 * 0.5))
        else:
            assert torch.equal(p.detach(), before[name])
