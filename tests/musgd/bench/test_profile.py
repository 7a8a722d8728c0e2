"""``python -m musgd.bench profile`` on the CPU with tiny settings: rows, phases, evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from musgd.bench._cli import EXIT_OK, EXIT_USAGE, main
from musgd.bench._profile import DEFAULT_VARIANTS, choose_variants, positive_int_list

TINY = ["--device", "cpu", "--steps", "2", "--warmup", "1", "--top", "3", "--phase-repeats", "2"]


def test_profile_writes_replay_profile_evidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["profile", *TINY, "--variants", "bucketed eager", "--out", str(tmp_path)]
    assert main(argv) == EXIT_OK
    out = capsys.readouterr().out
    (path,) = tmp_path.glob("musgd-replay-profile-*.json")
    assert f"evidence: {path}" in out
    assert "phase bucket jobs, eager NS" in out
    doc = json.loads(path.read_text())
    assert doc["kind"] == "replay-profile"
    assert doc["command"][1:] == ["-m", "musgd.bench", *argv]
    results = doc["results"]
    assert (results["benchmark"], results["set"]) == ("replay-profile", "nano")
    (row,) = results["variants"]
    assert row["variant"] == "bucketed eager"
    assert row["device_busy_ms"] is None  # no torch.profiler device time on CPU
    assert row["kernel_table"] is None
    assert len(row["host_top"]) == 3
    assert {p["phase"] for p in results["phases"]} >= {"gather gradients", "write (foreach)"}


def test_profile_without_evidence_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["profile", *TINY, "--variants", "bucketed eager", "--no-evidence"]
    assert main(argv) == EXIT_OK
    assert "evidence:" not in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_profile_on_cpu_leaves_out_the_cuda_variants_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by an audit: the default variants failed on the CPU without a hint."""
    assert main(["profile", *TINY, "--out", str(tmp_path)]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith(
        "note: on cpu the default variants leave out capture_orthogonalization, "
        "capture_updates, both (CUDA-graph replay: run on a GPU with --device cuda to profile "
        "them)\n"
    )
    (path,) = tmp_path.glob("musgd-replay-profile-*.json")
    results = json.loads(path.read_text())["results"]
    assert [row["variant"] for row in results["variants"]] == ["bucketed eager"]
    assert results["skipped_variants"] == ["capture_orthogonalization", "capture_updates", "both"]


def test_the_default_variants_on_cuda_are_all_four() -> None:
    chosen, skipped = choose_variants(None, torch.device("cuda"))  # chosen, not built: no GPU
    assert ([v.name for v in chosen], skipped) == (DEFAULT_VARIANTS, [])


def test_profile_refuses_a_named_variant_that_needs_cuda(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["profile", *TINY, "--variants", "bucketed eager,both", "--no-evidence"]
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(
        "error: 'both' needs CUDA (--device cuda on a machine with a GPU); on --device cpu "
        "pass --variants from 'per-matrix eager', 'bucketed eager', 'float32-NS eager'"
    )


@pytest.mark.parametrize("value", ["x", "0", "1,x", ",", "-1"])
def test_branches_are_comma_separated_positive_integers(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["profile", *TINY, f"--branches={value}", "--no-evidence"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.endswith(
        "error: argument --branches: expected comma-separated positive integers, e.g. 1,2,4; "
        f"got {value!r}\n"
    )
    assert "Traceback" not in err


def test_branches_parse_to_a_sweep() -> None:
    assert positive_int_list(" 1, 4,") == [1, 4]


def test_branches_without_an_update_replay_variant_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["profile", *TINY, "--branches", "1,4", "--no-evidence"]) == EXIT_USAGE
    assert capsys.readouterr().err == (
        "error: --branches sweeps the capture_updates and both variants, which this run does "
        "not profile; add one to --variants on a GPU (--device cuda), or drop --branches\n"
    )


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the message of a machine without CUDA"
)
@pytest.mark.parametrize("command", ["profile", "optimizer"])
def test_cuda_without_a_gpu_is_a_usage_error_before_any_work(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tried as a stranger: ``profile --device cuda`` on a CPU machine ended in a traceback."""
    assert main([command, "--device", "cuda"]) == EXIT_USAGE
    assert "--device cuda was requested but this torch sees no CUDA GPU" in capsys.readouterr().err


def test_an_unknown_device_is_a_usage_error() -> None:
    assert main(["profile", "--device", "foo"]) == EXIT_USAGE
