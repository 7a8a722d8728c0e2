"""Complete training steps: hashes, repeatability, arm summaries and hash groups."""

from __future__ import annotations

import pytest
import torch

from musgd.bench._train_bench import (
    RunResult,
    TrainConfig,
    format_training_table,
    hash_groups,
    hash_tensors,
    make_batches,
    run_training_benchmark,
    summarize_arms,
    train_in_lockstep,
    train_run,
)
from musgd.bench._variants import Variant, select_variants

# Complete training steps of the benchmark harness (make test-fast skips it; make test runs it).
pytestmark = pytest.mark.slow

CPU = torch.device("cpu")
TINY = TrainConfig(batch_size=2, image_size=32, steps=2, warmup=1, seed=0)


def test_hash_tensors_sees_bytes_dtype_shape_and_order() -> None:
    a, b = torch.arange(4.0), torch.arange(4.0).flip(0)
    base = hash_tensors([a, b])
    assert base == hash_tensors([a.clone(), b.clone()])
    assert base != hash_tensors([b, a])
    assert base != hash_tensors([a.double(), b])
    assert base != hash_tensors([a.reshape(2, 2), b])
    c = a.clone()
    c[3] = torch.nextafter(c[3], torch.tensor(10.0))  # one ulp
    assert base != hash_tensors([c, b])
    assert hash_tensors([None]) != hash_tensors([])


def test_train_run_is_repeatable_and_records_every_step() -> None:
    variant = select_variants(["bucketed eager"], CPU)[0]
    batches = make_batches(TINY, CPU)
    first = train_run(variant, batches, TINY, CPU)
    second = train_run(variant, batches, TINY, CPU)
    assert len(first.losses) == 3
    assert len(first.step_ms) == 2 == len(first.optimizer_ms)
    assert first.sha256 == second.sha256
    assert first.losses == second.losses


def _result(tag: str, ms: float) -> RunResult:
    return RunResult((ms, ms), (ms / 2,), (2.0, 1.0), tag, tag, tag)


def test_summarize_arms_time_saved_and_groups() -> None:
    names = ["slow", "fast", "odd"]
    variants = [Variant(n, select_variants(None, CPU)[0].build) for n in names]
    runs = {
        "slow": [_result("x", 10.0), _result("x", 12.0)],
        "fast": [_result("x", 5.0), _result("x", 6.0)],
        "odd": [_result("y", 10.0), _result("z", 10.0)],
    }
    arms = summarize_arms(variants, runs)
    assert arms[0]["step"] == {"median_ms": 11.0, "min_ms": 10.0, "max_ms": 12.0}
    assert arms[1]["time_saved_vs_first"] == (11.0 - 5.5) / 11.0
    assert [a["repeatable"] for a in arms] == [True, True, False]
    assert hash_groups(arms) == [["slow", "fast"], ["odd"]]


def test_benchmark_results_and_table() -> None:
    variants = select_variants(None, CPU, trainable=True)
    out = run_training_benchmark(
        variants, device=CPU, batch_sizes=[2], image_size=32, pairs=1, steps=1, warmup=0
    )
    assert out["config"]["precision"] == "float32"
    assert 100 <= out["model"]["matrices"] <= 140
    entry = out["batch_sizes"]["2"]
    assert [a["arm"] for a in entry["arms"]] == [v.name for v in variants]
    assert entry["arms"][0]["time_saved_vs_first"] == 0.0
    flat = [g for group in entry["hash_groups"] for g in group]
    assert sorted(flat) == sorted(v.name for v in variants)
    assert entry["hashes_match_across_arms"] == (len(entry["hash_groups"]) == 1)
    assert torch.backends.cudnn.deterministic is False  # restored after the run
    assert "identical bytes" in format_training_table(out)


def test_config_rejects_sizes_batchnorm_cannot_train_on() -> None:
    with pytest.raises(ValueError, match="BatchNorm"):
        TrainConfig(batch_size=1, image_size=32, steps=1, warmup=0)
    with pytest.raises(ValueError, match="multiple of 32"):
        TrainConfig(batch_size=2, image_size=40, steps=1, warmup=0)
    with pytest.raises(ValueError, match="steps >= 1"):
        TrainConfig(batch_size=2, image_size=64, steps=0, warmup=0)


def test_lockstep_arms_compute_what_each_computes_alone() -> None:
    variants = select_variants(["per-matrix eager", "bucketed eager"], CPU)
    batches = make_batches(TINY, CPU)
    alone = [train_run(v, batches, TINY, CPU) for v in variants]
    together = train_in_lockstep(variants, batches, TINY, CPU)
    for a, b in zip(alone, together, strict=True):
        assert (a.model_sha256, a.momentum_sha256, a.losses) == (
            b.model_sha256,
            b.momentum_sha256,
            b.losses,
        )
        assert len(b.step_ms) == len(a.step_ms) == TINY.steps


def test_benchmark_records_whether_arms_ran_in_lockstep() -> None:
    variants = select_variants(["bucketed eager"], CPU, trainable=True)
    for lockstep in (False, True):
        out = run_training_benchmark(
            variants,
            device=CPU,
            batch_sizes=[2],
            image_size=32,
            pairs=2,
            steps=1,
            warmup=0,
            lockstep=lockstep,
        )
        assert out["config"]["lockstep"] is lockstep
        assert out["batch_sizes"]["2"]["arms"][0]["repeatable"]
