"""``python -m musgd.bench ns-quality`` on small recorded momenta: rows, summary, errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from musgd.bench._cli import EXIT_OK, EXIT_USAGE, main
from musgd.bench._ns_quality import (
    QualityRow,
    as_matrix,
    load_momenta,
    measure,
    momentum_like,
    summarize,
    yolo26n_random,
)


def _momenta(tmp_path: Path) -> Path:
    gen = torch.Generator().manual_seed(0)
    data = {
        "stem.weight": torch.randn(8, 3, 3, 3, generator=gen),
        "a.weight": torch.randn(16, 8, 1, 1, generator=gen),
        "b.weight": torch.randn(16, 8, 1, 1, generator=gen),
        "bn.weight": torch.randn(16, generator=gen),  # a vector: skipped
    }
    path = tmp_path / "momenta.pt"
    torch.save(data, path)
    return path


def test_measure_groups_by_shape_and_skips_vectors(tmp_path: Path) -> None:
    rows = measure(
        load_momenta(_momenta(tmp_path)),
        source="recorded",
        schedules=["quintic", "aol4"],
        dtypes=["fp32"],
    )
    assert [(r.schedule, r.rows, r.cols, r.matrices) for r in rows] == [
        ("quintic", 8, 27, 1),
        ("aol4", 8, 27, 1),
        ("quintic", 16, 8, 2),
        ("aol4", 16, 8, 2),
    ]
    for r in rows:
        assert 0 < r.sv_min <= r.sv_max < 1.25
        assert 0 <= r.orth_err_mean <= r.orth_err_max
        assert r.polar_dist_max > 0
    # Each row's error is the computed one: redo the 8x27 quintic row by hand.
    G = load_momenta(_momenta(tmp_path))["stem.weight"].reshape(8, 27)
    from musgd import orthogonalize

    O = orthogonalize(G, dtype=torch.float32).double()
    err = torch.linalg.matrix_norm(O @ O.T - torch.eye(8, dtype=torch.float64)) / math.sqrt(8)
    assert rows[0].orth_err_mean == pytest.approx(float(err), rel=1e-9)


def test_summary_counts_flop_per_step_against_the_quintic() -> None:
    def row(schedule: str, flop: int, err: float, matrices: int) -> QualityRow:
        return QualityRow("random", schedule, "fp32", 4, 9, matrices, 0.5, 1.1, err, err, 0.2, flop)

    summary = summarize(
        [row("quintic", 100, 0.4, 1), row("quintic", 10, 0.1, 3), row("aol4", 80, 0.2, 1)]
    )
    by = {e["schedule"]: e for e in summary}
    assert by["quintic"]["flop_per_step"] == 130
    assert by["quintic"]["orth_err_mean"] == pytest.approx((0.4 + 3 * 0.1) / 4)
    assert by["aol4"]["flop_vs_quintic"] == pytest.approx(80 / 130)
    assert by["quintic"]["matrices"] == 4


def test_random_matrices_cover_the_yolo26n_matrix_shapes() -> None:
    mats = yolo26n_random(seed=0)
    assert len(mats) == 126
    assert all(as_matrix(t) is not None for t in mats.values())
    s = torch.linalg.svdvals(momentum_like(6, 10, seed=1).double())
    torch.testing.assert_close(s, 1 / torch.arange(1, 7, dtype=torch.float64), rtol=1e-5, atol=0)


def test_the_command_writes_ns_quality_evidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _momenta(tmp_path)
    argv = ["ns-quality", "--no-random", "--momenta", str(path), "--out", str(tmp_path / "e.json")]
    assert main(argv) == EXIT_OK
    out = capsys.readouterr().out
    assert "recorded  aol4" in out
    doc = json.loads((tmp_path / "e.json").read_text())
    results = doc["results"]
    assert results["benchmark"] == "ns-quality"
    assert results["momenta"]["file"] == "momenta.pt"
    assert len(results["momenta"]["sha256"]) == 64
    assert results["schedules"]["aol4"]["normalize"] == "aol"
    assert len(results["rows"]) == 2 * 3 * 2  # shapes x schedules x dtypes
    assert {e["schedule"] for e in results["summary"]} == {"quintic", "polar_express", "aol4"}


def test_the_gram_iteration_is_measured_beside_the_standard_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _momenta(tmp_path)
    out = tmp_path / "e.json"
    argv = ["ns-quality", "--no-random", "--momenta", str(path), "--schedules", "quintic"]
    assert main([*argv, "--iterations", "standard,gram", "--out", str(out)]) == EXIT_OK
    assert "recorded  quintic        gram" in capsys.readouterr().out
    summary = {
        (e["iteration"], e["dtype"]): e for e in json.loads(out.read_text())["results"]["summary"]
    }
    assert set(summary) == {(i, d) for i in ("standard", "gram") for d in ("fp32", "bf16")}
    # Fewer FLOP where a matrix is wide enough; fp32 results within rounding of the standard's.
    assert summary[("gram", "fp32")]["flop_vs_quintic"] < 1.0
    assert summary[("gram", "fp32")]["orth_err_mean"] == pytest.approx(
        summary[("standard", "fp32")]["orth_err_mean"], rel=1e-3
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--schedules", "cubic"], "unknown schedule 'cubic'; choose from quintic"),
        (["--dtypes", "fp64"], "unknown dtype 'fp64'; choose from fp32, bf16, fp16"),
        (["--iterations", "gramm"], "unknown iteration 'gramm'; choose from standard, gram"),
        (["--momenta", "missing.pt"], "no such file; record one with --record-from-yolo"),
        ([], "--no-random leaves nothing to measure"),
    ],
)
def test_bad_usage_exits_2_with_a_message(
    extra: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["ns-quality", "--no-random", "--no-evidence", *extra]) == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_a_file_that_is_not_momenta_is_refused(tmp_path: Path) -> None:
    (tmp_path / "junk.pt").write_text("not a tensor file")
    with pytest.raises(ValueError, match=r"not a torch\.save file of tensors") as info:
        load_momenta(tmp_path / "junk.pt")
    # One line, and not torch's advice to load with weights_only=False (an audit's finding).
    assert "\n" not in str(info.value)
    assert "weights_only" not in str(info.value)
    torch.save({"w": [1, 2]}, tmp_path / "list.pt")
    with pytest.raises(ValueError, match="'w' is not a str -> tensor pair"):
        load_momenta(tmp_path / "list.pt")
    torch.save({}, tmp_path / "empty.pt")
    with pytest.raises(ValueError, match="non-empty dict"):
        load_momenta(tmp_path / "empty.pt")
    # Tensors with nothing to measure: a traceback (ZeroDivisionError), an empty table with
    # exit 0, or a silent cast to real before (an audit's finding).
    for tensors, said in (
        ({"e": torch.zeros(0, 4)}, "no entry is a matrix"),
        ({"v": torch.zeros(4)}, "no entry is a matrix"),
        ({"n": torch.full((3, 3), float("nan"))}, "'n' holds non-finite values"),
        ({"c": torch.ones(3, 3, dtype=torch.complex64)}, "'c' is a torch.complex64 tensor"),
        ({"i": torch.ones(3, 3, dtype=torch.int64)}, "'i' is a torch.int64 tensor"),
    ):
        torch.save(tensors, tmp_path / "odd.pt")
        with pytest.raises(ValueError, match=said):
            load_momenta(tmp_path / "odd.pt")
    torch.save({"w": torch.randn(3, 3), "b": torch.zeros(3)}, tmp_path / "mixed.pt")
    assert set(load_momenta(tmp_path / "mixed.pt")) == {"w", "b"}  # a vector beside a matrix


def test_recording_without_ultralytics_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import musgd.ultralytics as mu

    def missing() -> None:
        raise ImportError("musgd.ultralytics needs the Ultralytics package; pip install it")

    monkeypatch.setattr(mu, "require_ultralytics", missing)
    argv = ["ns-quality", "--no-evidence", "--record-from-yolo", str(tmp_path / "m.pt")]
    assert main(argv) == EXIT_USAGE
    assert "needs the Ultralytics package" in capsys.readouterr().err
    assert not (tmp_path / "m.pt").exists()
