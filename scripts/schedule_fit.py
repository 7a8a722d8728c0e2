"""A short real fit per Newton-Schulz schedule (issue #35, WP-023).

YOLO26n in the real Ultralytics trainer with ``musgd_trainer(ns=NSConfig(coefficients=S))``,
on the benchmark's synthetic YOLO-format data, once per schedule and seed; the runs of one seed
go in a rotated order (so no schedule always runs first). Each run's loss per epoch (the
trainer's running mean of its loss items, summed) is kept; a schedule's final losses are
compared with the seed spread of the default (quintic): "within the default's seed spread"
where its median lies inside the default's range, else "lower" or "higher". Writes a
``wpgate-evidence/1`` file.

    PYTHONPATH=src .venv-ul/bin/python scripts/schedule_fit.py --out docs/evidence/x.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from musgd import NSConfig  # noqa: E402
from musgd.bench import write_synthetic_dataset  # noqa: E402
from musgd.ultralytics import musgd_trainer, require_ultralytics  # noqa: E402
from wpgate.evidence import (  # noqa: E402
    evidence_document,
    git_state,
    host_environment,
    source_hashes,
    write_evidence,
)

SOURCES = (
    "scripts/schedule_fit.py",
    "src/musgd/_newton_schulz.py",
    "src/musgd/_ns_schedules.py",
    "src/musgd/_nsconfig.py",
    "src/musgd/ultralytics.py",
)
DEFAULT = "quintic"


def fit(schedule: str, seed: int, data: Path, work: Path, args: argparse.Namespace) -> list[float]:
    """One training run; the summed mean loss of each epoch."""
    from ultralytics import YOLO

    epoch_losses: list[float] = []

    def epoch_end(trainer: Any) -> None:
        epoch_losses.append(total(trainer.tloss))

    model = YOLO("yolo26n.yaml")
    model.add_callback("on_train_epoch_end", epoch_end)
    ns = NSConfig(coefficients=schedule, dtype=args.ns_dtype)
    model.train(
        trainer=musgd_trainer(ns=ns),
        data=str(data),
        epochs=args.epochs,
        imgsz=args.imgsz,
        batch=args.batch,
        nbs=args.batch,
        device=args.device,
        workers=0,
        cache="ram",
        plots=False,
        val=False,
        save=False,
        amp=False,
        warmup_epochs=args.warmup_epochs,
        seed=seed,
        deterministic=True,
        project=str(work / "runs"),
        name=f"{schedule}-s{seed}",
        exist_ok=True,
        verbose=False,
    )
    return epoch_losses


def total(loss: Any) -> float:
    """The sum of the trainer's running mean loss items (a tensor, or a dict of them by name)."""
    items = loss.values() if isinstance(loss, dict) else [loss]
    return float(sum(float(item.sum()) for item in items))


def verdict(finals: list[float], default: list[float]) -> str:
    """Where a schedule's median final loss lies against the default's seed range."""
    median = statistics.median(finals)
    if min(default) <= median <= max(default):
        return "within the default's seed spread"
    return "lower than the default's seed spread" if median < min(default) else "higher than it"


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", default="quintic,polar_express,aol4")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--images", type=int, default=32, help="training images")
    parser.add_argument("--imgsz", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--warmup-epochs",
        type=float,
        default=0.0,
        help="the trainer's warm-up (0: a short fit trains at lr0 from its first step)",
    )
    parser.add_argument("--ns-dtype", default="auto", help="NSConfig dtype (auto: bf16 if native)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    schedules = args.schedules.split(",")
    for name in schedules:
        try:
            NSConfig(coefficients=name)
        except ValueError as exc:
            parser.error(f"--schedules: {exc}")
    if DEFAULT not in schedules:
        parser.error(
            f"--schedules must include the default, {DEFAULT}: the others are placed on it"
        )
    seeds = [int(s) for s in args.seeds.split(",")]
    require_ultralytics()
    runs: dict[str, dict[str, list[float]]] = {s: {} for s in schedules}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="schedule-fit-") as tmp:
        work = Path(tmp)
        dataset = write_synthetic_dataset(
            work / "data", train_images=args.images, val_images=4, size=args.imgsz
        )
        for k, seed in enumerate(seeds):
            order = schedules[k % len(schedules) :] + schedules[: k % len(schedules)]
            for schedule in order:
                losses = fit(schedule, seed, dataset.data, work, args)
                runs[schedule][str(seed)] = [round(x, 5) for x in losses]
                print(f"{schedule} seed {seed}: final loss {losses[-1]:.4f}", flush=True)
    finals = {s: [r[-1] for r in runs[s].values()] for s in schedules}
    results = {
        "model": "yolo26n.yaml",
        "epochs": args.epochs,
        "train_images": args.images,
        "imgsz": args.imgsz,
        "batch": args.batch,
        "device": args.device,
        "ns_dtype": args.ns_dtype,
        "warmup_epochs": args.warmup_epochs,
        "seeds": seeds,
        "wall_s": round(time.perf_counter() - start, 1),
        "runs": runs,
        "final_loss": {s: summary(v) for s, v in finals.items()},
        "verdict": {s: verdict(finals[s], finals[DEFAULT]) for s in schedules if s != DEFAULT},
    }
    document = evidence_document(
        "ns-schedule-fit",
        results,
        command=["python", "scripts/schedule_fit.py", *(argv or sys.argv[1:])],
        environment=host_environment(),
        git=git_state(REPO, SOURCES),
        sources=source_hashes(REPO, [REPO / s for s in SOURCES]),
    )
    write_evidence(document, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
