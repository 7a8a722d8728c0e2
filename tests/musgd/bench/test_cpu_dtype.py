"""``python -m musgd.bench cpu-dtype``: the crossover, the flags, the sets and the evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torch import nn

from musgd import _newton_schulz
from musgd.bench import _cpu_dtype
from musgd.bench._cli import EXIT_OK, EXIT_USAGE, main
from musgd.bench._cpu_dtype import (
    REAL_SETS,
    DtypeResult,
    Workload,
    cpu_flags,
    crossover,
    measure,
    square_workloads,
)
from musgd.bench._models import ParamSpec
from musgd.bench._timing import summarize

TINY = ["--steps", "1", "--warmup", "0", "--rounds", "2", "--threads", "1"]


def _result(n: int, fp32_ms: float, bf16_ms: float) -> DtypeResult:
    (workload,) = square_workloads([n])
    return DtypeResult(
        workload, {"float32": summarize([fp32_ms]), "bfloat16": summarize([bf16_ms])}, "float32"
    )


def test_the_crossover_is_the_smallest_size_from_which_bf16_stays_faster() -> None:
    sweep = [_result(64, 1.0, 2.0), _result(128, 2.0, 1.5), _result(256, 8.0, 4.0)]
    found = crossover(list(reversed(sweep)))  # the order of the sweep does not matter
    assert found is not None
    assert found.workload.name == "128x128"
    assert (found.faster, found.bf16_speedup) == ("bfloat16", pytest.approx(2.0 / 1.5))  # type: ignore[comparison-overlap]


def test_a_bf16_win_below_a_float32_win_is_not_a_crossover() -> None:
    assert crossover([_result(16, 2.0, 1.0), _result(64, 1.0, 2.0)]) is None
    noisy = [_result(16, 2.0, 1.0), _result(64, 1.0, 2.0), _result(256, 4.0, 3.0)]
    found = crossover(noisy)
    assert found is not None
    assert found.workload.name == "256x256"
    assert crossover([]) is None


def test_cpu_flags_read_the_first_flags_line() -> None:
    text = "processor : 0\nflags\t\t: fpu avx2 fma amx_tile amx_bf16 avx512_bf16\nflags : sse\n"
    flags = cpu_flags(text)
    assert [flags[f] for f in ("amx_bf16", "avx512_bf16", "avx2")] == [True, True, True]
    assert not flags["avx512f"]
    assert set(flags) == set(_cpu_dtype.CPU_FLAGS)
    assert cpu_flags("processor : 0\n") == {}


def test_the_digits_mlp_is_the_network_of_the_digits_test() -> None:
    net = nn.Sequential(
        nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)
    )
    assert [s.shape for s in REAL_SETS["digits-mlp"]()] == [
        tuple(p.shape) for p in net.parameters()
    ]
    cnn = Workload("digits-cnn", tuple(REAL_SETS["digits-cnn"]()))
    assert cnn.matrices == ((16, 9), (32, 144), (64, 288), (10, 256))
    yolo = Workload("yolo26n", tuple(REAL_SETS["yolo26n"]()))
    assert max(_newton_schulz.ns_work(r, c) for r, c in yolo.matrices) == _newton_schulz.ns_work(
        256, 1152
    )


def test_measure_records_what_auto_picks_on_a_native_bf16_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_newton_schulz, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setattr(_newton_schulz, "CPU_BF16_MIN_WORK", _newton_schulz.ns_work(8, 8))
    small = Workload("small", (ParamSpec("w", (4, 4)), ParamSpec("b", (4,))))
    large = Workload("large", (ParamSpec("w", (8, 8)),))
    for workload, auto in ((small, "float32"), (large, "bfloat16")):
        result = measure(workload, steps=2, warmup=0, rounds=3, seed=0)
        assert result.auto == auto
        # The two dtypes took turns three times, two timed steps each.
        assert {s.count for s in result.steps.values()} == {6}
    assert measure(small, steps=1, warmup=0, rounds=1, seed=0).as_dict()["matrices"] == 1


def test_cpu_dtype_writes_its_evidence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_newton_schulz, "cpu_has_native_bf16", lambda: False)
    argv = ["cpu-dtype", *TINY, "--sizes", "4,8", "--sets", "digits-mlp", "--out", str(tmp_path)]
    assert main(argv) == EXIT_OK
    out = capsys.readouterr().out
    (path,) = tmp_path.glob("musgd-cpu-dtype-*.json")
    assert f"evidence: {path}" in out
    assert "native bf16: no" in out
    doc = json.loads(path.read_text())
    assert doc["kind"] == "cpu-dtype"
    assert doc["environment"]["torch_threads"] == 1
    results = doc["results"]
    assert list(results["sweep"]) == ["4x4", "8x8"]
    assert list(results["sets"]) == ["digits-mlp"]
    row = results["sets"]["digits-mlp"]
    assert (row["matrices"], row["auto"]) == (3, "float32")
    assert row["largest_work"] == _newton_schulz.ns_work(128, 128)
    assert row["float32"]["count"] == row["bfloat16"]["count"] == 2
    assert results["cpu"]["native_bf16"] is False
    assert results["cpu"]["torch_threads"] == 1
    assert results["rule"]["CPU_BF16_MIN_WORK"] == _newton_schulz.CPU_BF16_MIN_WORK
    assert results["config"]["quick"] is False


@pytest.mark.parametrize(
    ("option", "message"),
    [(["--sets", "digits,nope"], "unknown set 'digits'"), (["--sizes", "1"], "sizes must be")],
)
def test_cpu_dtype_refuses_bad_options(
    option: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cpu-dtype", *option, "--no-evidence"]) == EXIT_USAGE
    assert message in capsys.readouterr().err
