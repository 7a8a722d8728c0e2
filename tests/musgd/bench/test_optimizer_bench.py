"""The optimizer-step benchmark on a tiny set: rows per variant, shared operands, speed-ups."""

from __future__ import annotations

import statistics

import pytest
import torch

from musgd.bench._models import ParamSpec, make_parameters
from musgd.bench._optimizer_bench import (
    _operands,
    format_optimizer_table,
    paired_speedups,
    run_optimizer_benchmark,
)
from musgd.bench._timing import Timing
from musgd.bench._variants import select_variants, torch_muon_variant

CPU = torch.device("cpu")
SPECS = [ParamSpec("conv", (4, 2, 3, 3)), ParamSpec("conv2", (4, 2, 3, 3)), ParamSpec("b", (4,))]


def test_rows_per_variant_and_baseline_speedup() -> None:
    variants = select_variants(None, CPU)
    out = run_optimizer_benchmark({"tiny": SPECS}, variants, device=CPU, steps=2, warmup=1)
    entry = out["sets"]["tiny"]
    assert (entry["parameters"], entry["matrices"], entry["distinct_matrix_shapes"]) == (3, 2, 1)
    assert entry["numel"] == 2 * 72 + 4
    rows = {r["variant"]: r for r in entry["variants"]}
    assert list(rows) == [v.name for v in variants]
    assert rows["per-matrix eager"]["speedup_vs_per_matrix"] == 1.0
    assert rows["bucketed eager"]["tensors"] == 3
    assert all(r["steps"] == 2 and r["warmup"] == 1 for r in rows.values())
    # The NS-only variants run on the CPU too (eager, no graph) and say what they ran.
    assert rows["NS-only aol4"]["stepper"]["backends"] == ["torch"]
    assert "stepper" not in rows["bucketed eager"]
    if "torch.optim.Muon" in rows:
        assert rows["torch.optim.Muon"]["tensors"] == 2  # matrices only
    table = format_optimizer_table(out)
    assert "per-matrix eager" in table
    assert "1.00x" in table


def test_no_baseline_gives_no_speedup() -> None:
    variants = select_variants(["bucketed eager"], CPU)
    out = run_optimizer_benchmark({"tiny": SPECS}, variants, device=CPU, steps=1, warmup=0)
    assert out["sets"]["tiny"]["variants"][0]["speedup_vs_per_matrix"] is None


def test_operands_are_fresh_copies_and_peer_gets_2d_matrices() -> None:
    params, grads = make_parameters(SPECS, device=CPU, seed=0)
    full = _operands(select_variants(["bucketed eager"], CPU)[0], params, grads)
    assert [tuple(p.shape) for p in full] == [s.shape for s in SPECS]
    assert all(torch.equal(p, q) and p is not q for p, q in zip(full, params, strict=True))
    assert all(
        q.grad is not None and torch.equal(q.grad, g) for q, g in zip(full, grads, strict=True)
    )
    peer = torch_muon_variant()
    if peer is not None:
        flat = _operands(peer, params, grads)
        assert [tuple(p.shape) for p in flat] == [(4, 18), (4, 18)]
        assert torch.equal(flat[0], params[0].reshape(4, 18))


def test_variants_start_from_identical_state() -> None:
    # Two identical variants stepping the same operands end in the same bytes.
    variant = select_variants(["bucketed eager"], CPU)[0]
    params, grads = make_parameters(SPECS, device=CPU, seed=1)
    a, b = _operands(variant, params, grads), _operands(variant, params, grads)
    variant.build(a).step()
    variant.build(b).step()
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], params[0])  # the step changed the copy, not the source


def test_rounds_share_the_steps_and_pool_the_samples() -> None:
    variants = select_variants(["per-matrix eager", "bucketed eager"], CPU)
    out = run_optimizer_benchmark(
        {"tiny": SPECS}, variants, device=CPU, steps=5, warmup=1, rounds=2
    )
    for row in out["sets"]["tiny"]["variants"]:
        assert (row["steps"], row["rounds"], len(row["samples_ms"])) == (5, 2, 5)
        assert row["setup_ms"] > 0
        assert len(row["round_medians_ms"]) == 2
        # Rounds of 3 and 2 steps: each round's median is that of its own slice of the samples.
        first, second = row["samples_ms"][:3], row["samples_ms"][3:]
        assert row["round_medians_ms"] == [statistics.median(first), statistics.median(second)]
    rows = {r["variant"]: r for r in out["sets"]["tiny"]["variants"]}
    paired = rows["per-matrix eager"]["speedup_vs_bucketed_by_round"]
    expected = [
        b / p
        for b, p in zip(
            rows["bucketed eager"]["round_medians_ms"],
            rows["per-matrix eager"]["round_medians_ms"],
            strict=True,
        )
    ]
    assert paired["per_round"] == expected
    assert (paired["min"], paired["max"]) == (min(expected), max(expected))
    assert rows["bucketed eager"]["speedup_vs_bucketed_by_round"]["per_round"] == [1.0, 1.0]
    assert "1.00x (1.00\u20131.00)" in format_optimizer_table(out)


def test_paired_speedups_follow_each_round_not_the_pooled_medians() -> None:
    """A slow phase in one round slows both sides of that round's ratio."""

    def runs(*rounds: list[float]) -> list[tuple[Timing, int, dict[str, float | None]]]:
        return [(Timing(samples_ms=tuple(r), warmup=0, clock="test"), 1, {}) for r in rounds]

    # The host slows down for bucketed eager's second round and for the replay's second and
    # third: pooled, the medians are 10 and 9 (1.11x); round by round the ratio is 3.33x twice.
    bucketed = runs([10.0] * 3, [30.0] * 3, [10.0] * 3)
    replayed = runs([3.0] * 3, [9.0] * 3, [9.0] * 3)
    paired = paired_speedups(bucketed, replayed)
    assert paired["per_round"] == [10 / 3, 30 / 9, 10 / 9]
    assert paired["median"] == pytest.approx(10 / 3)
    assert (paired["min"], paired["max"]) == (pytest.approx(10 / 9), pytest.approx(10 / 3))
