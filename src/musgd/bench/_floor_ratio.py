"""``python -m musgd.bench floor-ratio``: the trainer's iterations against the one-graph floor.

WP-024's target is an iteration of the real trainer within 1.25x of its configuration's
one-graph floor (forward, backward and step replayed from one CUDA graph, ``floor``). This reads
``one-graph-floor`` and ``ultralytics-train`` evidence files and pairs each arm of each trained
model and batch size with the floor of the same configuration, measured on the same GPU:

- the same model configuration and batch size, and the model the trainer trained: the floor
  built for the benchmark data's classes (``floor --classes 4``), not the configuration's 80;
- the same memory layout (``channels_last``) and kernels (``compile_network``) as the arm, and
  the trainer's AMP dtype (float16);
- a step every iteration, as the floor takes one: a run whose ``nbs`` exceeds its batch
  accumulates, and most of its iterations have no step, so it is not compared.

Each round's iteration median over the floor's replay median is one ratio; a pair meets the
target where the median over rounds does (``every_round`` says whether each round did). What
cannot be paired is said, with the reason, never guessed. Exit codes: 0 every compared pair
meets the target, 1 one misses it or nothing could be compared, 2 bad input.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from musgd.bench._evidence import read_document
from musgd.bench._yolo_data import CLASSES
from wpgate import evidence
from wpgate.evidence import GitState

FLOOR_KIND = "one-graph-floor"
TRAIN_KIND = "ultralytics-train"
KIND = "floor-ratio"
#: WP-024's target: the iteration within this factor of its configuration's floor.
TARGET = 1.25
#: The trainer's AMP dtype on CUDA, the dtype its floor must be measured in.
AMP_DTYPE = "float16"


_Row = TypeVar("_Row")


class FloorRatioError(ValueError):
    """An input that is not what the comparison needs; the message says how to fix it."""


@dataclass(frozen=True)
class Floor:
    """One floor measurement and where it came from."""

    gpu: str
    model: str
    batch: int
    layout: str
    dtype: str
    compiled: bool
    classes: int | None
    replay_ms: float
    created: str
    path: str


@dataclass(frozen=True)
class Trained:
    """One arm of one trained model and batch size, its round medians and its settings."""

    gpu: str
    model: str
    batch: int
    arm: str
    layout: str
    compiled: bool
    amp: bool
    nbs: int | str
    task: str
    rounds_ms: tuple[float, ...]
    commit: str
    path: str


@dataclass(frozen=True)
class InputFile:
    """An input file as it was read, once: its document and the sha256 of those bytes."""

    path: Path
    sha256: str
    document: dict[str, Any]


def read_files(paths: Sequence[Path]) -> list[InputFile]:
    """Each file read once (the verdict and the evidence's ``inputs`` hashes are of the same
    bytes); a FloorRatioError saying what is wrong with one that is no evidence file."""
    files = []
    for path in paths:
        try:
            data = path.read_bytes()
            document = read_document(path, data)
        except OSError as exc:
            raise FloorRatioError(f"cannot read {path}: {exc.strerror or exc}{_PASS}") from exc
        except ValueError as exc:
            raise FloorRatioError(f"{exc}{_PASS}") from exc
        files.append(InputFile(path, hashlib.sha256(data).hexdigest(), document))
    return files


_PASS = (
    "; pass the JSON files that `python -m musgd.bench floor` and `... ultralytics --parts "
    "train` wrote"
)


def _gpu(document: Mapping[str, Any], path: Path) -> str:
    gpu = (document.get("environment") or {}).get("gpu")
    if not isinstance(gpu, str) or not gpu:
        raise FloorRatioError(f"{path} was not measured on a GPU (environment.gpu is empty)")
    return gpu


def floors_of(document: Mapping[str, Any], path: Path) -> list[Floor]:
    """The floors of one ``one-graph-floor`` evidence document."""
    gpu = _gpu(document, path)
    results = document["results"]
    classes = (results.get("config") or {}).get("classes")
    found = []
    for entry in results.get("floors") or []:
        replay = entry.get("replay") or {}
        if "median_ms" not in replay:
            continue  # a configuration that failed to record has no floor
        found.append(
            Floor(
                gpu=gpu,
                model=str(entry["model"]),
                batch=int(entry["batch"]),
                layout=str(entry["layout"]),
                dtype=str(entry["dtype"]),
                compiled=bool(entry.get("compiled", False)),
                classes=classes if isinstance(classes, int) else None,
                replay_ms=float(replay["median_ms"]),
                created=str(document.get("created", "")),
                path=str(path),
            )
        )
    return found


def trained_of(document: Mapping[str, Any], path: Path) -> list[Trained]:
    """Every arm of every batch size of one ``ultralytics-train`` evidence document (the
    default variant: the low-data pairs are another configuration)."""
    gpu = _gpu(document, path)
    results = document["results"]
    variant = (results.get("variants") or {}).get("default")
    if not isinstance(variant, dict):
        return []
    amp = bool((variant.get("kwargs") or {}).get("amp", True))
    arms = results.get("arms") or {}
    found = []
    for batch, entry in (variant.get("batches") or {}).items():
        names = entry.get("arms") or []
        for arm in names:
            rounds = tuple(
                float(pair[arm]["iteration_ms"]["median"])
                for pair in entry.get("pairs") or []
                if arm in pair
            )
            spec = arms.get(arm) or {}
            options = spec.get("options") or {}
            # An `@base` arm ran another commit's musgd (--base-src): that commit.
            commit = spec.get("musgd_commit") or document.get("git_commit") or "unknown"
            found.append(
                Trained(
                    gpu=gpu,
                    model=str(results.get("model")),
                    batch=int(batch),
                    arm=str(arm),
                    layout="channels_last" if options.get("channels_last") else "nchw",
                    compiled=bool(options.get("compile_network")),
                    amp=amp,
                    nbs=results.get("nbs", "batch"),
                    task=str(results.get("task", "detect")),
                    rounds_ms=rounds,
                    commit=str(commit),
                    path=str(path),
                )
            )
    return found


def _well_formed(
    reader: Callable[[Mapping[str, Any], Path], list[_Row]],
    document: Mapping[str, Any],
    path: Path,
) -> list[_Row]:
    """``reader``'s rows of ``document``, or a FloorRatioError where its fields are not the
    benchmark's (a missing key, a value of another type)."""
    try:
        return reader(document, path)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise FloorRatioError(
            f"{path} is not a well-formed {document.get('kind')} evidence file "
            f"({type(exc).__name__}: {exc}); pass a file the benchmark wrote, unedited"
        ) from exc


def read_inputs(paths: Sequence[Path]) -> tuple[list[Floor], list[Trained]]:
    """The floors and trained arms of the files, each file either kind."""
    return inputs_of(read_files(paths))


def inputs_of(files: Sequence[InputFile]) -> tuple[list[Floor], list[Trained]]:
    """The floors and trained arms of files read by :func:`read_files`."""
    floors: list[Floor] = []
    trained: list[Trained] = []
    for file in files:
        path, document = file.path, file.document
        kind = document.get("kind")
        if kind == FLOOR_KIND:
            floors.extend(_well_formed(floors_of, document, path))
        elif kind == TRAIN_KIND:
            trained.extend(_well_formed(trained_of, document, path))
        else:
            raise FloorRatioError(
                f"{path} is {kind!r} evidence; floor-ratio reads {FLOOR_KIND!r} files (`python "
                f"-m musgd.bench floor`) and {TRAIN_KIND!r} files (`... ultralytics --parts train`)"
            )
    if not floors:
        raise FloorRatioError(
            "no floor among the files: add a one-graph-floor evidence file (`python -m "
            f"musgd.bench floor --classes {CLASSES}`)"
        )
    if not trained:
        raise FloorRatioError(
            "no trained arm among the files: add an ultralytics-train evidence file "
            "(`python -m musgd.bench ultralytics --parts train`)"
        )
    return floors, trained


def _accumulates(run: Trained) -> bool:
    return isinstance(run.nbs, int) and run.nbs > run.batch


def _same_configuration(run: Trained, floors: Sequence[Floor]) -> list[Floor]:
    """The floors measured on ``run``'s GPU for its model, batch, layout and kernels, in the
    trainer's AMP dtype (of any class count)."""
    key = (run.gpu, run.model, run.batch, run.layout, run.compiled, AMP_DTYPE)
    return [f for f in floors if (f.gpu, f.model, f.batch, f.layout, f.compiled, f.dtype) == key]


def _why_unpaired(run: Trained, floors: Sequence[Floor]) -> str | None:
    """Why ``run`` has no floor to be compared with, or None (the first reason that applies)."""
    same = _same_configuration(run, floors)
    kernels = "compiled" if run.compiled else "eager kernels"
    checks = (
        (run.task != "detect", f"task {run.task}: the floor is measured for detection only"),
        (
            _accumulates(run),
            f"nbs {run.nbs} above the batch: most iterations accumulate with no step, and the "
            "floor steps every iteration (train with --nbs equal to the batch, the default)",
        ),
        (not run.amp, f"trained without AMP; the floors are of the {AMP_DTYPE} autocast"),
        (not run.rounds_ms, "no round of this arm in the file"),
        (
            not same,
            f"no floor of {run.model} b{run.batch} {run.layout} {AMP_DTYPE} ({kernels}) "
            f"measured on {run.gpu} among the files",
        ),
        (
            not any(f.classes == CLASSES for f in same),
            f"the floors of {run.model} b{run.batch} on {run.gpu} are of the configuration's "
            f"own classes, the trainer's model has {CLASSES}: measure it with `floor "
            f"--classes {CLASSES}`",
        ),
    )
    return next((why for failed, why in checks if failed), None)


def _floor_for(run: Trained, floors: Sequence[Floor]) -> Floor:
    """The newest floor of ``run``'s configuration and classes (``_why_unpaired`` found one)."""
    same = [f for f in _same_configuration(run, floors) if f.classes == CLASSES]
    return max(same, key=lambda f: f.created)


def compare(
    floors: Sequence[Floor], trained: Sequence[Trained], *, target: float = TARGET
) -> list[dict[str, Any]]:
    """One row per trained arm: its ratios to its floor and the verdict, or why it has none."""
    rows: list[dict[str, Any]] = []
    for run in sorted(trained, key=lambda r: (r.gpu, r.model, r.batch, r.arm, r.commit)):
        row: dict[str, Any] = {
            "gpu": run.gpu,
            "model": run.model,
            "batch": run.batch,
            "arm": run.arm,
            "layout": run.layout,
            "compiled": run.compiled,
            "nbs": run.nbs,
            "rounds_ms": list(run.rounds_ms),
            "commit": run.commit,
            "train_file": run.path,
        }
        reason = _why_unpaired(run, floors)
        if reason is not None:
            rows.append({**row, "compared": False, "reason": reason})
            continue
        floor = _floor_for(run, floors)
        ratios = [ms / floor.replay_ms for ms in run.rounds_ms]
        median = statistics.median(ratios)
        rows.append(
            {
                **row,
                "compared": True,
                "floor_ms": floor.replay_ms,
                "floor_file": floor.path,
                "ratio": {"median": median, "min": min(ratios), "max": max(ratios)},
                "ratios": ratios,
                "target": target,
                "met": median <= target,
                "every_round": max(ratios) <= target,
            }
        )
    return rows


def format_row(row: Mapping[str, Any]) -> str:
    """One line of the table: the pair's verdict, or why it has none."""
    name = f"{Path(row['model']).stem} b{row['batch']} {row['arm']} at {row['commit'][:7]}"
    if not row["compared"]:
        return f"{name}: not compared: {row['reason']}"
    ratio = row["ratio"]
    rounds = ", ".join(f"{ms:.2f}" for ms in row["rounds_ms"])
    count = len(row["ratios"])
    verdict = "met" if row["met"] else "missed"
    every = "every round" if row["every_round"] else "not every round"
    plural = "s" if count != 1 else ""
    return (
        f"{name}: {ratio['median']:.3f}x the floor ({ratio['min']:.3f}-{ratio['max']:.3f} over "
        f"{count} round{plural}; {rounds} ms against {row['floor_ms']:.2f} ms): target "
        f"<= {row['target']}x {verdict} on the median, {every}"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m musgd.bench floor-ratio``."""
    parser.add_argument(
        "files",
        nargs="+",
        type=Path,
        help="one-graph-floor and ultralytics-train evidence files, in any order",
    )
    parser.add_argument(
        "--arms",
        default=None,
        help="comma-separated arms to compare (default: every arm but the stock ones)",
    )
    parser.add_argument(
        "--target", type=_ratio, default=TARGET, help=f"the factor to meet (default {TARGET})"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="also write the rows as a wpgate evidence file (the trained runs' commit and "
        "sources, the floor's GPU, each input file's sha256)",
    )


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a factor such as 1.25, got {text!r}") from None
    if not value >= 1.0:
        raise argparse.ArgumentTypeError(f"the target is a factor of 1 or more, got {text!r}")
    return value


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Print a line per trained arm and its verdict; exit 0 when every compared pair meets the
    target, 1 when one misses it or none could be compared, 2 on bad input."""
    try:
        files = read_files(args.files)
        floors, trained = inputs_of(files)
    except FloorRatioError as exc:
        print(f"floor-ratio: {exc}")
        return 2
    if args.arms is None:
        chosen = [t for t in trained if not t.arm.startswith("stock")]
    else:
        wanted = {a.strip() for a in str(args.arms).split(",") if a.strip()}
        known = {t.arm for t in trained}
        unknown = sorted(wanted - known)
        if unknown or not wanted:
            print(
                f"floor-ratio: --arms {args.arms!r}: no such arm in the files "
                f"({', '.join(unknown) or 'none named'}); they hold {', '.join(sorted(known))}"
            )
            return 2
        chosen = [t for t in trained if t.arm in wanted]
    rows = compare(floors, chosen, target=args.target)
    for row in rows:
        print(format_row(row))
    compared = [r for r in rows if r["compared"]]
    met = bool(compared) and all(r["met"] for r in compared)
    print(
        f"floor-ratio: {sum(r['met'] for r in compared)} of {len(compared)} compared pairs "
        f"within {args.target}x on the median, {len(rows) - len(compared)} not compared"
    )
    if args.out is not None:
        document = ratio_evidence(files, rows, args.target, argv)
        try:
            evidence.write_evidence(document, args.out)
        except OSError as exc:
            print(f"floor-ratio: cannot write {args.out}: {exc.strerror or exc}")
            return 2
    return 0 if met else 1


def ratio_evidence(
    files: Sequence[InputFile], rows: list[dict[str, Any]], target: float, argv: Sequence[str]
) -> dict[str, Any]:
    """The rows as a ``wpgate-evidence/1`` document: a derived measurement, so it records the
    code the trained runs measured (their ``git_commit`` and ``sources`` where every train file
    agrees; else null and none), the environment the first floor was measured in, and each
    input file's sha256 under ``results.inputs``."""
    trains = [f.document for f in files if f.document.get("kind") == TRAIN_KIND]
    floor = next(f.document for f in files if f.document.get("kind") == FLOOR_KIND)
    commits = {d.get("git_commit") for d in trains}
    sources = [d.get("sources") or {} for d in trains]
    agreed = len(commits) == 1 and all(x == sources[0] for x in sources)
    commit = next(iter(commits)) if agreed else None
    return evidence.evidence_document(
        KIND,
        {
            "target": target,
            "rows": rows,
            "inputs": {str(f.path): f.sha256 for f in files},
        },
        command=[Path(sys.executable).name, "-m", "musgd.bench", *argv],
        environment=floor.get("environment") or {},
        git=GitState(commit if isinstance(commit, str) else None, None),
        sources=sources[0] if agreed and isinstance(sources[0], dict) else {},
        extra={"git_commit_source": "evidence" if agreed else None},
    )
