"""The variant table: names, selection, and the torch.optim.Muon peer's detection."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from musgd import MuSGD
from musgd.bench import _variants
from musgd.bench._variants import musgd_variants, select_variants, torch_muon_variant

CPU = torch.device("cpu")


def test_baseline_first_and_builds_musgd() -> None:
    variants = musgd_variants()
    assert [v.name for v in variants[:2]] == ["per-matrix eager", "bucketed eager"]
    opt = variants[0].build([torch.zeros(3, 3, requires_grad=True)])
    assert isinstance(opt, MuSGD)
    assert opt.param_groups[0]["lr"] == _variants.LR


def test_select_by_name_and_unknown_name() -> None:
    chosen = select_variants(["bucketed eager"], CPU)
    assert [v.name for v in chosen] == ["bucketed eager"]
    with pytest.raises(ValueError, match=r"unknown or unavailable variant 'nope'.*per-matrix"):
        select_variants(["nope"], CPU)


def test_cpu_drops_cuda_only_and_trainable_drops_matrix_peers() -> None:
    on_cpu = select_variants(None, CPU)
    assert not any(v.cuda_only for v in on_cpu)
    assert not any(v.matrices_only for v in select_variants(None, CPU, trainable=True))


def test_muon_peer_present_when_torch_has_it() -> None:
    peer = torch_muon_variant()
    if getattr(torch.optim, "Muon", None) is None:
        assert peer is None
        return
    assert peer is not None
    assert peer.matrices_only
    assert isinstance(peer.build([torch.zeros(4, 3, requires_grad=True)]), torch.optim.Optimizer)


def test_muon_peer_absent_or_incompatible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch.optim, "Muon", raising=False)
    assert torch_muon_variant() is None
    assert all(v.name != "torch.optim.Muon" for v in select_variants(None, CPU))

    class OtherMuon:  # a constructor without the arguments the benchmark passes
        def __init__(self, params: Any, lr: float) -> None: ...

    monkeypatch.setattr(torch.optim, "Muon", OtherMuon, raising=False)
    assert torch_muon_variant() is None
