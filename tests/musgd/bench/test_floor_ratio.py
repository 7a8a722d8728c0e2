"""``python -m musgd.bench floor-ratio``: which trained arm is compared with which floor, the
ratios and verdicts, and the refusals (evidence documents written here, no GPU needed)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from musgd.bench._cli import EXIT_USAGE, main
from musgd.bench._floor_ratio import compare, read_inputs
from musgd.bench._yolo_data import CLASSES
from wpgate.parsers.evidence import parse_evidence
from wpgate.rules import EVIDENCE_FILE_VALID

H100 = "NVIDIA H100 80GB HBM3"


def _floor_doc(
    floors: list[tuple[str, int, str, float]],
    *,
    classes: int | None = CLASSES,
    gpu: str = H100,
    created: str = "2026-12-07T10:00:00+00:00",
) -> dict[str, Any]:
    return {
        "kind": "one-graph-floor",
        "created": created,
        "environment": {"gpu": gpu},
        "git_commit": "a" * 40,
        "results": {
            "config": {"classes": classes},
            "floors": [
                {
                    "model": model,
                    "batch": batch,
                    "layout": layout,
                    "dtype": "float16",
                    "compiled": False,
                    "replay": {"median_ms": ms},
                }
                for model, batch, layout, ms in floors
            ],
        },
    }


def _train_doc(
    rounds: dict[str, list[float]],
    *,
    batch: int = 4,
    model: str = "yolo26n.yaml",
    nbs: int | str = "batch",
    gpu: str = H100,
    channels_last: tuple[str, ...] = (),
) -> dict[str, Any]:
    arms = list(rounds)
    count = len(next(iter(rounds.values())))
    pairs = [
        {"seed": k, "order": arms, **{a: {"iteration_ms": {"median": rounds[a][k]}} for a in arms}}
        for k in range(count)
    ]
    return {
        "kind": "ultralytics-train",
        "environment": {"gpu": gpu},
        "git_commit": "b" * 40,
        "results": {
            "task": "detect",
            "model": model,
            "nbs": nbs,
            "arms": {a: {"options": {"channels_last": a in channels_last}} for a in arms},
            "variants": {
                "default": {
                    "kwargs": {"amp": True},
                    "batches": {str(batch): {"arms": arms, "pairs": pairs}},
                }
            },
        },
    }


def test_an_arm_run_from_another_commits_source_is_named_by_that_commit(tmp_path: Path) -> None:
    train = _train_doc({"ours": [11.0], "ours@base": [12.0]})
    train["results"]["arms"]["ours@base"]["musgd_commit"] = "c" * 40
    rows = _rows(tmp_path, _floor_doc([("yolo26n.yaml", 4, "nchw", 10.0)]), train)
    assert {r["arm"]: r["commit"] for r in rows} == {"ours": "b" * 40, "ours@base": "c" * 40}


def _write(tmp_path: Path, name: str, document: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def _rows(tmp_path: Path, *documents: dict[str, Any]) -> list[dict[str, Any]]:
    paths = [_write(tmp_path, f"e{i}.json", d) for i, d in enumerate(documents)]
    floors, trained = read_inputs(paths)
    return compare(floors, trained)


def test_each_round_is_divided_by_the_floor_of_its_own_configuration(tmp_path: Path) -> None:
    rows = _rows(
        tmp_path,
        _floor_doc([("yolo26n.yaml", 4, "nchw", 10.0), ("yolo26n.yaml", 16, "nchw", 20.0)]),
        _train_doc({"stock": [100.0, 90.0, 80.0], "ours": [12.0, 11.0, 13.0]}),
    )
    ours = next(r for r in rows if r["arm"] == "ours")
    assert ours["compared"]
    assert ours["floor_ms"] == 10.0
    assert ours["ratios"] == pytest.approx([1.2, 1.1, 1.3])
    assert ours["ratio"]["median"] == pytest.approx(1.2)
    assert ours["met"]
    assert not ours["every_round"]


def test_a_median_over_the_target_misses_it(tmp_path: Path) -> None:
    rows = _rows(
        tmp_path,
        _floor_doc([("yolo26n.yaml", 4, "nchw", 10.0)]),
        _train_doc({"ours": [12.6, 13.0, 12.0]}),
    )
    assert rows[0]["ratio"]["median"] == pytest.approx(1.26)
    assert not rows[0]["met"]


def test_an_accumulating_run_is_not_compared_with_a_floor_that_steps_every_iteration(
    tmp_path: Path,
) -> None:
    rows = _rows(
        tmp_path,
        _floor_doc([("yolo26n.yaml", 4, "nchw", 10.0)]),
        _train_doc({"ours": [10.5]}, nbs=64),
    )
    assert not rows[0]["compared"]
    assert "nbs 64" in rows[0]["reason"]
    assert "accumulate" in rows[0]["reason"]
    # nbs equal to the batch steps every iteration, as the floor does.
    rows = _rows(
        tmp_path,
        _floor_doc([("yolo26n.yaml", 4, "nchw", 10.0)]),
        _train_doc({"ours": [10.5]}, nbs=4),
    )
    assert rows[0]["compared"]


def test_a_floor_of_the_configurations_own_classes_is_refused_with_the_fix(
    tmp_path: Path,
) -> None:
    rows = _rows(
        tmp_path,
        _floor_doc([("yolo26n.yaml", 4, "nchw", 10.0)], classes=None),
        _train_doc({"ours": [12.0]}),
    )
    assert not rows[0]["compared"]
    assert f"--classes {CLASSES}" in rows[0]["reason"]


def test_floors_pair_only_on_the_same_gpu_layout_model_and_batch(tmp_path: Path) -> None:
    floors = _floor_doc(
        [
            ("yolo26n.yaml", 4, "channels_last", 8.0),
            ("yolo26s.yaml", 4, "nchw", 12.0),
            ("yolo26n.yaml", 16, "nchw", 20.0),
        ]
    )
    other_gpu = _floor_doc([("yolo26n.yaml", 4, "nchw", 5.0)], gpu="NVIDIA H200")
    rows = _rows(tmp_path, floors, other_gpu, _train_doc({"ours": [12.0]}))
    assert not rows[0]["compared"]
    assert "nchw" in rows[0]["reason"]
    assert H100 in rows[0]["reason"]
    rows = _rows(tmp_path, floors, _train_doc({"ours": [12.0]}, channels_last=("ours",)))
    assert rows[0]["compared"]
    assert rows[0]["floor_ms"] == 8.0


def test_the_newest_floor_of_a_configuration_is_used(tmp_path: Path) -> None:
    old = _floor_doc([("yolo26n.yaml", 4, "nchw", 10.0)], created="2026-12-01T00:00:00+00:00")
    new = _floor_doc([("yolo26n.yaml", 4, "nchw", 8.0)], created="2026-12-07T00:00:00+00:00")
    rows = _rows(tmp_path, new, old, _train_doc({"ours": [12.0]}))
    assert rows[0]["floor_ms"] == 8.0


def test_cli_exit_codes_and_the_default_arms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    floor = _write(tmp_path, "floor.json", _floor_doc([("yolo26n.yaml", 4, "nchw", 10.0)]))
    good = _write(tmp_path, "good.json", _train_doc({"stock": [100.0], "ours": [11.0]}))
    slow = _write(tmp_path, "slow.json", _train_doc({"stock": [100.0], "ours": [14.0]}))
    out = tmp_path / "rows.json"
    assert main(["floor-ratio", str(floor), str(good), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "yolo26n b4 ours at bbbbbbb: 1.100x the floor" in printed
    assert "stock" not in printed  # the stock arms are not held to our floor by default
    written = json.loads(out.read_text(encoding="utf-8"))
    assert [r["arm"] for r in written["results"]["rows"]] == ["ours"]
    text = out.read_text(encoding="utf-8")
    assert not parse_evidence(text, "rows.json", rule_id=EVIDENCE_FILE_VALID).findings
    assert written["kind"] == "floor-ratio"
    assert written["command"][-4:] == [str(floor), str(good), "--out", str(out)]
    assert written["git_commit"] == "b" * 40  # the trained runs' code, not the floor tool's
    assert written["environment"] == {"gpu": H100}
    assert written["results"]["inputs"] == {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in (floor, good)
    }
    assert main(["floor-ratio", str(floor), str(slow)]) == 1
    assert main(["floor-ratio", str(floor), str(slow), "--target", "1.5"]) == 0
    assert main(["floor-ratio", str(floor), str(good), "--arms", "stock"]) == 1  # 10x its floor


@pytest.mark.parametrize(
    ("files", "arms", "message"),
    [
        (["missing.json"], None, "cannot read"),
        (["notjson.json"], None, "is not JSON"),
        (["syncs.json"], None, "'ultralytics-syncs' evidence"),
        (["good.json"], None, "no floor among the files"),
        (["floor.json"], None, "no trained arm among the files"),
        (["floor.json", "good.json"], "ourz", "no such arm in the files (ourz)"),
        (["nobatch.json", "good.json"], None, "not a well-formed one-graph-floor evidence"),
        (["floor.json", "noms.json"], None, "not a well-formed ultralytics-train evidence"),
    ],
)
def test_bad_input_exits_2_with_what_is_wrong(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    files: list[str],
    arms: str | None,
    message: str,
) -> None:
    _write(tmp_path, "floor.json", _floor_doc([("yolo26n.yaml", 4, "nchw", 10.0)]))
    _write(tmp_path, "good.json", _train_doc({"ours": [11.0]}))
    _write(tmp_path, "syncs.json", {"kind": "ultralytics-syncs", "results": {}})
    (tmp_path / "notjson.json").write_text("{", encoding="utf-8")
    broken = _floor_doc([("yolo26n.yaml", 4, "nchw", 10.0)])
    del broken["results"]["floors"][0]["batch"]
    _write(tmp_path, "nobatch.json", broken)
    edited = _train_doc({"ours": [11.0]})
    del edited["results"]["variants"]["default"]["batches"]["4"]["pairs"][0]["ours"]["iteration_ms"]
    _write(tmp_path, "noms.json", edited)
    argv = ["floor-ratio", *(str(tmp_path / f) for f in files)]
    if arms is not None:
        argv += ["--arms", arms]
    assert main(argv) == EXIT_USAGE
    captured = capsys.readouterr()
    assert message in captured.out
    assert "Traceback" not in captured.out + captured.err


def test_trained_runs_of_different_commits_leave_the_evidence_without_a_commit(
    tmp_path: Path,
) -> None:
    floor = _write(tmp_path, "floor.json", _floor_doc([("yolo26n.yaml", 4, "nchw", 10.0)]))
    first = _write(tmp_path, "one.json", _train_doc({"ours": [11.0]}))
    other = _train_doc({"ours": [12.0]}, model="yolo26n.yaml")
    other["git_commit"] = "c" * 40
    second = _write(tmp_path, "two.json", other)
    out = tmp_path / "ratio.json"
    assert main(["floor-ratio", str(floor), str(first), str(second), "--out", str(out)]) == 0
    written = json.loads(out.read_text(encoding="utf-8"))
    assert written["git_commit"] is None
    assert written["sources"] == {}
    assert len(written["results"]["rows"]) == 2


def test_each_input_is_read_once_and_its_hash_is_of_those_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verdict and the evidence's ``inputs`` hashes come from one read of each file: a file
    rewritten in between cannot give rows of one content and the hash of another."""
    floor = _write(tmp_path, "floor.json", _floor_doc([("yolo26n.yaml", 4, "nchw", 10.0)]))
    good = _write(tmp_path, "good.json", _train_doc({"stock": [100.0], "ours": [11.0]}))
    reads: list[str] = []
    read_bytes, read_text = Path.read_bytes, Path.read_text

    def counted_bytes(self: Path) -> bytes:
        reads.append(self.name)
        return read_bytes(self)

    def counted_text(self: Path, *args: Any, **kwargs: Any) -> str:
        reads.append(self.name)
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_bytes", counted_bytes)
    monkeypatch.setattr(Path, "read_text", counted_text)
    out = tmp_path / "rows.json"
    assert main(["floor-ratio", str(floor), str(good), "--out", str(out)]) == 0
    assert sorted(r for r in reads if r != "rows.json") == ["floor.json", "good.json"]
