"""``param_groups``: matrices with decay, vectors without, embeddings and the head off
Newton–Schulz, an ``exclude`` hook and a one-line summary; plain parameters work too."""

from __future__ import annotations

import logging

import pytest
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
        out: torch.Tensor = self.head(self.proj(x).mean(dim=(2, 3)))
        return out


def test_matrices_get_decay_and_vectors_do_not() -> None:
    net = Net()
    groups = param_groups(net, weight_decay=5e-4, lr=0.02, momentum=0.9)
    matrices, head, vectors = groups
    assert [id(p) for p in matrices["params"]] == [id(net.conv.weight), id(net.proj.weight)]
    # The output head (the last module with parameters, a Linear) takes the SGD route.
    assert [id(p) for p in head["params"]] == [id(net.head.weight)]
    assert head["use_muon"] is False
    assert head["weight_decay"] == 5e-4
    assert {id(p) for p in vectors["params"]} == {
        id(net.conv.bias),
        id(net.norm.weight),
        id(net.norm.bias),
        id(net.gain),
        id(net.head.bias),
    }
    assert matrices["weight_decay"] == 5e-4
    assert vectors["weight_decay"] == 0.0
    # Extra keyword arguments are copied into every group.
    assert matrices["lr"] == head["lr"] == vectors["lr"] == 0.02
    assert matrices["momentum"] == head["momentum"] == vectors["momentum"] == 0.9


def test_a_use_muon_override_leaves_the_vectors_on_the_sgd_route() -> None:
    """Found by an audit: use_muon=True was copied into the vectors' group, which forced the
    biases and norm weights through Newton-Schulz against the documented routing."""
    net = Net()
    groups = param_groups(net, weight_decay=0.0, use_muon=True)
    assert [g["use_muon"] for g in groups] == [True, False, False]
    reference = Net()
    reference.load_state_dict(net.state_dict())
    plain = param_groups(reference, weight_decay=0.0)  # vectors by shape: the SGD route
    x = torch.randn(2, 3, 8, 8)
    for model, opt in ((net, MuSGD(groups, lr=0.1)), (reference, MuSGD(plain, lr=0.1))):
        model(x).sum().backward()
        opt.step()
    assert torch.equal(net.norm.weight, reference.norm.weight)
    assert net.conv.bias is not None
    assert reference.conv.bias is not None
    assert torch.equal(net.conv.bias, reference.conv.bias)


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
        opt = MuSGD(param_groups(net, weight_decay=0.0, exclude_head=False), lr=0.05)
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
    # With no decay and the head kept on Newton–Schulz the split into groups changes nothing:
    # routing is by shape either way, and the matrices form the same buckets.
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


class TinyLM(nn.Module):
    """An embedding, a hidden linear layer, a norm and an output head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.hidden = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.lm_head = nn.Linear(8, 16, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.lm_head(self.norm(torch.relu(self.hidden(self.embed(tokens)))))
        return out


def _ids(group: dict[str, object]) -> list[int]:
    return [id(p) for p in group["params"]]  # type: ignore[attr-defined]


def test_embeddings_and_the_head_take_the_sgd_route_and_the_summary_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lm = TinyLM()
    with caplog.at_level(logging.INFO, logger="musgd"):
        muon, sgd, vectors = param_groups(lm, weight_decay=0.01)
    assert _ids(muon) == [id(lm.hidden.weight)]
    assert _ids(sgd) == [id(lm.embed.weight), id(lm.lm_head.weight)]
    assert sgd["use_muon"] is False
    assert "use_muon" not in muon
    assert len(vectors["params"]) == 3  # hidden bias, norm weight and bias
    assert caplog.messages == [
        "musgd.param_groups: 1 matrices Newton-Schulz (weight_decay=0.01), 2 matrices SGD "
        "route (embedding 1, head 1; weight_decay=0.01), 3 vectors SGD route (weight_decay=0.0)"
    ]
    # The optimizer honours the routing: nothing of the SGD group is orthogonalized.
    opt = MuSGD([muon, sgd, vectors], lr=0.1)
    assert opt._count_matrices() == 1


def test_exclude_hook_and_keeping_the_head_on_newton_schulz() -> None:
    lm = TinyLM()
    muon, sgd, _ = param_groups(
        lm, weight_decay=0.0, exclude=lambda name, p: name == "hidden.weight", exclude_head=False
    )
    assert _ids(muon) == [id(lm.lm_head.weight)]
    assert _ids(sgd) == [id(lm.embed.weight), id(lm.hidden.weight)]
    seen: list[str] = []
    param_groups(lm, weight_decay=0.0, exclude=lambda name, p: bool(seen.append(name)))  # type: ignore[func-returns-value]
    # The hook sees matrices only, by qualified name; embeddings and the head are decided first.
    assert seen == ["hidden.weight"]


def test_models_without_a_linear_head_exclude_nothing_but_embeddings() -> None:
    conv = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Conv2d(8, 4, 1))
    assert len(param_groups(conv, weight_decay=0.0)) == 2  # matrices, vectors
    ends_in_norm = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))
    assert len(param_groups(ends_in_norm, weight_decay=0.0)) == 2


def test_exclude_must_be_callable() -> None:
    with pytest.raises(TypeError, match="exclude must be a callable"):
        param_groups(TinyLM(), weight_decay=0.0, exclude="lm_head")  # type: ignore[arg-type]


def test_exclude_must_answer_true_or_false() -> None:
    """A truthy answer such as "no" excluded the matrix (an audit's finding)."""
    with pytest.raises(TypeError, match=r"exclude\('.*', param\) returned 'no'; it must return"):
        param_groups(TinyLM(), weight_decay=0.0, exclude=lambda name, p: "no")  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize("weight_decay", [-1.0, float("nan"), "a", True])
def test_a_bad_weight_decay_is_refused_before_anything_is_logged(
    weight_decay: object, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ValueError, match="weight_decay must be a finite number >= 0"):
        param_groups(TinyLM(), weight_decay=weight_decay)  # type: ignore[arg-type]
    assert caplog.records == []


def test_a_group_without_params_says_what_a_group_is() -> None:
    with pytest.raises(ValueError, match=r"param_groups\[0\] has no 'params'; a group is a dict"):
        MuSGD([{"lr": 0.1}])
    opt = MuSGD([nn.Parameter(torch.zeros(2, 2))])
    with pytest.raises(ValueError, match=r"param_groups\[1\] has no 'params'"):
        opt.add_param_group({"lr": 0.1})


def test_a_meta_tensor_setting_is_refused_as_holding_no_value() -> None:
    with pytest.raises(ValueError, match="lr must be a number or a one-element floating-point"):
        MuSGD([nn.Parameter(torch.zeros(2, 2))], lr=torch.tensor(0.1, device="meta"))  # type: ignore[arg-type]


def test_param_groups_of_a_list_says_it_takes_the_model() -> None:
    with pytest.raises(TypeError, match=r"param_groups takes the model \(an nn.Module\), got list"):
        param_groups([torch.zeros(2)], weight_decay=0.0)  # type: ignore[arg-type]


def test_a_parameter_listed_twice_in_a_group_is_refused() -> None:
    """torch.optim only warns, and the step then moves the parameter twice."""
    p = nn.Parameter(torch.randn(4, 4))
    with pytest.raises(ValueError, match=r"params\[1\] is listed twice in the group"):
        MuSGD([p, p], lr=0.1)
    opt = MuSGD([p], lr=0.1)
    with pytest.raises(ValueError, match="listed twice"):
        opt.add_param_group({"params": [q := nn.Parameter(torch.zeros(3, 3)), q]})
    assert len(opt.param_groups) == 1
