"""The trainer benchmark's options, sizes, plan and time budget (``python -m musgd.bench
ultralytics``); nothing here imports Ultralytics, so ``--help`` and bad options need none.

``--budget-s`` (the GPU script passes what is left of ``LIMIT_S``) makes every run wait for an
estimate of its duration (the longest run of its kind so far, else a default) to fit in what is
left, else skip it, saying so.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from musgd.bench._evidence import is_full_commit
from musgd.bench._ul_arms import (
    ARM_TABLE,
    BASE_SUFFIX,
    DEFAULT_ARMS,
    STOCK,
    arm_of,
    is_base,
    unknown_arms,
)
from musgd.bench._ul_design import DATA_BOUND_SHARE, round_order
from musgd.ultralytics import TASK_TRAINERS, TASKS

# --ours-channels-last: its values and the musgd_trainer(channels_last=...) each gives.
LAYOUT_CHOICES: dict[str, bool] = {"false": False, "true": True}

__all__ = [
    "LAYOUT_CHOICES",
    "PARTS",
    "VAL_IMAGES",
    "Budget",
    "UsageError",
    "add_arguments",
    "configure",
    "dataset_fits",
    "default_run_s",
    "epochs_for",
    "identity_epochs",
    "model_builds",
    "parse_arms",
    "plan_lines",
    "round_estimate",
    "run_estimate",
]

PARTS = ("identity", "network", "phases", "syncs", "kernels", "host", "train")
# Steps the gradient scaler may skip (inf/nan gradients under AMP) on top of the identity target.
SKIP_ALLOWANCE = 0.1
# Bytes a synthetic image may take on disk, as a share of its raw RGB bytes: the writer's JPEGs
# of 640 px images were 0.09 to 0.15 of raw (measured, detect / segment / classify).
DISK_SHARE_OF_RAW = 0.25
# The synthetic dataset's validation images (the trainer validates; the benchmark times training).
VAL_IMAGES = 4


class UsageError(ValueError):
    """Bad input (an option's value, a file to read): the command exits 2 with this message."""


@dataclass
class Budget:
    """Seconds left of ``limit_s`` (None: no limit); runs are admitted when their estimate fits.

    The estimate of a run is the longest run of its key so far, else the caller's default.
    """

    limit_s: float | None
    clock: Callable[[], float] = time.perf_counter
    observed: dict[str, float] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    start: float = field(init=False)

    def __post_init__(self) -> None:
        self.start = self.clock()

    def used(self) -> float:
        """Seconds since the budget started."""
        return self.clock() - self.start

    def left(self) -> float:
        """Seconds left (infinite without a limit)."""
        return math.inf if self.limit_s is None else self.limit_s - self.used()

    def estimate(self, key: str, default_s: float) -> float:
        """The longest observed run of ``key``, else ``default_s``."""
        return self.observed.get(key, default_s)

    def admit(self, job: str, key: str, default_s: float) -> bool:
        """Whether ``job`` fits in what is left; a refusal is kept in ``skipped``."""
        need, left = self.estimate(key, default_s), self.left()
        if need <= left:
            return True
        self.skipped.append(f"{job}: needs about {need:.0f} s, {max(left, 0.0):.0f} s left")
        print(f"budget: skipped {self.skipped[-1]}")
        return False

    def record(self, key: str, seconds: float) -> None:
        """Keep the longest duration seen for ``key``."""
        self.observed[key] = max(self.observed.get(key, 0.0), seconds)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the limit, the time used, the observed durations and what was skipped."""
        return {
            "limit_s": self.limit_s,
            "used_s": self.used(),
            "observed_s": dict(self.observed),
            "skipped": list(self.skipped),
        }


def default_run_s(iterations: int, epochs: int, *, per_iteration_s: float) -> float:
    """A first guess at one training run (before any was seen): setup, epochs and iterations."""
    return 12.0 + 1.5 * epochs + per_iteration_s * iterations


def epochs_for(iterations: int, iterations_per_epoch: int) -> int:
    """Epochs that give at least ``iterations`` iterations (at least one)."""
    return max(1, math.ceil(iterations / iterations_per_epoch))


def identity_epochs(steps: int, iterations_per_epoch: int) -> int:
    """Epochs for ``steps`` optimizer steps with room for the steps the scaler may skip."""
    allowance = max(4, math.ceil(SKIP_ALLOWANCE * steps))
    return epochs_for(steps + allowance, iterations_per_epoch)


def run_estimate(args: argparse.Namespace, batch: int, *, per_iteration_s: float) -> float:
    """The default estimate of one training run of ``--iters`` iterations at ``batch``."""
    ipe = math.ceil(args.n_train / batch)
    epochs = epochs_for(args.iters, ipe)
    return default_run_s(epochs * ipe, epochs, per_iteration_s=per_iteration_s)


def round_estimate(
    args: argparse.Namespace, batch: int, arms: Sequence[str], *, per_iteration_s: float
) -> float:
    """The default estimate of one run of each of ``arms`` in order (an arm may come twice) at
    ``batch``: :func:`run_estimate` each, plus each arm's guessed one-time start
    (``startup_s``: compilation)."""
    one = run_estimate(args, batch, per_iteration_s=per_iteration_s)
    return sum(one + arm_of(arm).startup_s for arm in arms)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m musgd.bench ultralytics``."""
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a CPU check")
    parser.add_argument(
        "--task",
        choices=TASKS,
        default="detect",
        help="the Ultralytics task: its trainer class, model and synthetic data (default detect)",
    )
    parser.add_argument(
        "--model", default=None, help="the model configuration (default: the task's YOLO26n)"
    )
    parser.add_argument("--parts", default="identity,phases,train", help="comma-separated")
    parser.add_argument("--batch-sizes", default="4,16")
    parser.add_argument(
        "--arms",
        default=",".join(DEFAULT_ARMS),
        help=f"the arms of the phases, syncs, kernels, host and train parts, comma-separated, "
        f"stock among them (default {','.join(DEFAULT_ARMS)}); arms: {', '.join(ARM_TABLE)}; an "
        f"arm ending in {BASE_SUFFIX} trains with the musgd of --base-src",
    )
    parser.add_argument(
        "--base-src",
        type=Path,
        default=None,
        help=f"a source folder holding another musgd (e.g. `git archive <commit> src | tar -x "
        f"-C <dir>`, then <dir>/src), which the {BASE_SUFFIX} arms train with, each run a "
        "fresh process",
    )
    parser.add_argument(
        "--base-commit",
        default=None,
        help="the full commit name (40 hex digits) that --base-src came from, for the evidence",
    )
    parser.add_argument(
        "--rounds",
        "--pairs",
        dest="pairs",
        type=int,
        default=3,
        help="rounds per batch size, each a run of every arm (--pairs: the same)",
    )
    parser.add_argument(
        "--lowdata",
        choices=("auto", "on", "off"),
        default="auto",
        help=f"pairs with the loader's work cut (auto: where data wait >= {DATA_BOUND_SHARE})",
    )
    parser.add_argument(
        "--lowdata-rounds", "--lowdata-pairs", dest="lowdata_pairs", type=int, default=2
    )
    parser.add_argument("--iters", type=int, default=None, help="iterations per training run")
    parser.add_argument(
        "--nbs",
        type=int,
        default=None,
        help="the trainer's nominal batch size in every run: above the batch, the trainer "
        "accumulates gradients over iterations between optimizer steps, as with its own "
        "default of 64 (default: each run's batch, a step every iteration; the network "
        "part's identity runs: 64, the trainer's own)",
    )
    parser.add_argument(
        "--trace-iterations",
        type=int,
        default=0,
        help="write every phase mark of each run's first N iterations to standard error as it "
        "is reached (to locate a run that dies without a Python error); default 0, none",
    )
    parser.add_argument(
        "--train-images",
        type=int,
        default=None,
        help="synthetic training images (default 320; 16 with --quick): with --iters, an "
        "epoch's length, e.g. a 10-epoch fit at batch 16 of 2400 images is --iters 1500",
    )
    parser.add_argument("--identity-steps", type=int, default=None)
    parser.add_argument(
        "--workers",
        dest="workers_given",
        type=int,
        default=None,
        help="data-loader workers of every run but the low-data ones (default 8; 0 with --quick)",
    )
    parser.add_argument(
        "--isolation",
        choices=("process", "none"),
        default="process",
        help="each training run in a fresh Python process (process) or all in this one (none)",
    )
    parser.add_argument(
        "--ours-network",
        action="store_true",
        help="our arm captures the network's forward and backward (capture_network=True)",
    )
    parser.add_argument(
        "--ours-guard",
        action="store_true",
        help="our arm trains with skip_nonfinite=True (the non-finite step skipped on the device)",
    )
    parser.add_argument(
        "--ours-channels-last",
        choices=tuple(LAYOUT_CHOICES),
        default="false",
        help="our arm's channels_last (the model, EMA and batches in channels-last memory)",
    )
    parser.add_argument(
        "--ours-compile",
        action="store_true",
        help="our arm compiles its network with Inductor (compile_network=True)",
    )
    parser.add_argument(
        "--ours-device-loss",
        action="store_true",
        help="our arm computes YOLO26 detection's loss on the device (device_loss=True); with "
        "--ours-network the loss is recorded too",
    )
    parser.add_argument(
        "--network-iters",
        type=int,
        default=None,
        help="iterations of each run of the network part (default 120; 8 with --quick)",
    )
    parser.add_argument(
        "--design",
        choices=("ab", "abba"),
        default="ab",
        help="a round runs every arm once (ab, the order rotating by round: round k starts at "
        "arm k mod N) or that order and its reverse (abba: each arm twice per round)",
    )
    parser.add_argument(
        "--settle-s",
        type=float,
        default=0.0,
        help="seconds to wait before each timed training run (default 0)",
    )
    parser.add_argument("--one-run", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--one-run-data", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--one-run-out", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="seconds for all parts (runs that would not fit are skipped)",
    )
    parser.add_argument(
        "--amp",
        choices=("true", "false"),
        default="true",
        help="the trainer's mixed precision (false skips its AMP check, which wants a download)",
    )
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--commit", default=None, help="the full sha the tree came from")
    parser.add_argument(
        "--curves-from",
        type=Path,
        default=None,
        help="only write the loss and iteration curves of this ultralytics-train evidence "
        "(to OUT/ultralytics-curves.json)",
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="dataset and runs (default: a temporary folder)"
    )


def parse_arms(text: str) -> tuple[str, ...]:
    """The arms of ``--arms`` in their order; unknown, repeated or missing ones (stock must be
    among them: every arm is compared with it) raise :class:`UsageError` saying what to pass."""
    names = [name.strip() for name in str(text).split(",") if name.strip()]
    unknown = unknown_arms(names)
    if unknown:
        raise UsageError(
            f"unknown arms {', '.join(unknown)}: --arms takes names from {', '.join(ARM_TABLE)}"
        )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise UsageError(f"--arms names {', '.join(repeated)} more than once: name each once")
    if STOCK not in names:
        raise UsageError(
            f"--arms must include {STOCK}: every arm is compared with it (e.g. {STOCK},"
            f"{names[0] if names else 'ours'})"
        )
    return tuple(names)


def check_base(args: argparse.Namespace) -> None:
    """``--base-src`` and ``--base-commit`` agree with the ``@base`` arms: the folder holds a
    musgd package, runs are fresh processes (another musgd cannot share this one), and the
    commit is a full name. Bad values raise :class:`UsageError` saying what to pass."""
    base_arms = [arm for arm in args.arms if is_base(arm)]
    src, commit = args.base_src, args.base_commit
    if not base_arms:
        if src is not None or commit is not None:
            raise UsageError(
                f"--base-src and --base-commit are for arms ending in {BASE_SUFFIX} (e.g. "
                f"--arms {STOCK},ours-network-loss,ours-network-loss{BASE_SUFFIX}); --arms "
                "names none"
            )
        return
    if src is None or not (src / "musgd" / "__init__.py").is_file():
        where = "is missing" if src is None else f"{src} holds no musgd/__init__.py"
        raise UsageError(
            f"the arms {', '.join(base_arms)} train with another musgd, but --base-src {where}: "
            "pass the src folder of another tree (git archive <commit> src | tar -x -C DIR, "
            "then --base-src DIR/src)"
        )
    if args.isolation == "none":
        raise UsageError(
            f"the arms {', '.join(base_arms)} need --isolation process: another musgd runs "
            "only in a process of its own"
        )
    if commit is not None and not is_full_commit(commit):
        raise UsageError(
            f"--base-commit must be a full commit name (40 lowercase hex digits, or 64 in a "
            f"SHA-256 repository: git rev-parse <commit>), not {commit!r}"
        )
    args.base_src = src.resolve()


def configure(args: argparse.Namespace) -> argparse.Namespace:
    """Sizes for the device: 640 px on the GPU, 64 px and a few iterations with ``--quick``;
    the task's model unless ``--model``; the arms of ``--arms``. Bad values raise
    :class:`UsageError`."""
    args.arms = parse_arms(args.arms)
    check_base(args)
    try:
        args.batch_sizes = [int(b) for b in str(args.batch_sizes).split(",")]
    except ValueError:
        raise UsageError(
            f"--batch-sizes takes whole numbers, comma-separated (4,16), got {args.batch_sizes!r}"
        ) from None
    args.parts = [p for p in str(args.parts).split(",") if p]
    unknown = set(args.parts) - set(PARTS)
    if unknown:
        raise UsageError(f"unknown parts {sorted(unknown)}: use {', '.join(PARTS)}")
    args.amp = args.amp == "true"
    args.model = args.model or TASK_TRAINERS[args.task][2]
    cpus = os.cpu_count() or 1
    if args.quick:
        args.imgsz, args.n_train, iters, args.workers = 64, 16, 8, 0
        steps, args.identity_batch, args.per_iteration_s = 12, 4, 0.2
    else:
        args.imgsz, args.n_train, iters, args.workers = 640, 320, 60, 8
        steps, args.identity_batch, args.per_iteration_s = 200, 8, 0.15
    if args.settle_s < 0 or not math.isfinite(args.settle_s):
        raise UsageError(f"--settle-s must be 0 or more seconds, got {args.settle_s}")
    if args.workers_given is not None:
        if args.workers_given < 0:
            raise UsageError(f"--workers must be 0 or more, got {args.workers_given}")
        args.workers = args.workers_given
    args.lowdata_workers = min(16, cpus)
    args.iters = iters if args.iters is None else args.iters
    if args.train_images is not None:
        if args.train_images < 1:
            raise UsageError(f"--train-images must be 1 or more, got {args.train_images}")
        args.n_train = args.train_images
    args.identity_steps = steps if args.identity_steps is None else args.identity_steps
    if args.network_iters is None:
        args.network_iters = 8 if args.quick else 120
    if args.trace_iterations < 0:
        raise UsageError(f"--trace-iterations must be 0 or more, got {args.trace_iterations}")
    if args.network_iters < 1:
        raise UsageError(f"--network-iters must be 1 or more, got {args.network_iters}")
    if args.nbs is not None and args.nbs < 1:
        raise UsageError(
            f"--nbs must be 1 or more images (the trainer's default is 64), got {args.nbs}"
        )
    return args


def nbs_setting(args: argparse.Namespace) -> int | str:
    """``--nbs`` as the evidence records it: the number, or "batch" (each run's batch)."""
    return "batch" if args.nbs is None else int(args.nbs)


# The trainer's own default nominal batch size (R155): below it the trainer accumulates.
TRAINER_NBS = 64


def network_nbs(args: argparse.Namespace) -> int:
    """The ``network`` part's nominal batch size: ``--nbs``, or the trainer's own default, so
    that its identity check covers the gradients accumulated between steps, as users train."""
    return TRAINER_NBS if args.nbs is None else int(args.nbs)


def dataset_fits(work: Path | None, images: int, imgsz: int) -> None:
    """Refuse (:class:`UsageError`) a synthetic dataset of ``images`` training images at
    ``imgsz`` that would not fit the free disk under ``work`` (None: the temporary folder),
    before any of it is written."""
    where = Path(tempfile.gettempdir()) if work is None else work.absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    need = math.ceil((images + VAL_IMAGES) * imgsz * imgsz * 3 * DISK_SHARE_OF_RAW)
    free = shutil.disk_usage(where).free
    if need > free:
        raise UsageError(
            f"--train-images {images} at {imgsz} px needs about {need / 2**30:.1f} GiB of disk "
            f"for the synthetic dataset, and {where} has {free / 2**30:.1f} GiB free: "
            "ask for fewer images, or point --work at a larger disk"
        )


def model_builds(name: str) -> None:
    """Refuse (:class:`UsageError`) a ``--model`` that Ultralytics cannot build, before any
    run: otherwise the first run's own process fails with Ultralytics' traceback."""
    from ultralytics import YOLO

    try:
        YOLO(name)
    except Exception as exc:  # whatever Ultralytics raises for a name it cannot resolve
        raise UsageError(
            f"--model {name}: Ultralytics cannot build it ({type(exc).__name__}: {exc}); name a "
            "model config such as yolo26n.yaml (yolo26n-seg.yaml for --task segment), or a "
            "weights file that exists"
        ) from None


def plan_lines(args: argparse.Namespace, budget: Budget) -> list[str]:
    """The parts' estimated durations (defaults; each run later uses what was observed)."""
    lines, total = [f"plan: task {args.task}, model {args.model}"], 0.0
    if "identity" in args.parts:
        ipe = math.ceil(args.n_train / args.identity_batch)
        epochs = identity_epochs(args.identity_steps, ipe)
        est = default_run_s(epochs * ipe, epochs, per_iteration_s=2 * args.per_iteration_s)
        lines.append(f"plan: identity {epochs * ipe} iterations, about {est:.0f} s")
        total += est
    if "network" in args.parts:
        ipe = math.ceil(args.n_train / args.identity_batch)
        epochs = epochs_for(args.network_iters, ipe)
        one = default_run_s(epochs * ipe, epochs, per_iteration_s=args.per_iteration_s)
        lines.append(f"plan: network 3 runs of {epochs * ipe} iterations, about {3 * one:.0f} s")
        total += 3 * one

    def estimate(arms: Sequence[str], slowdown: float) -> float:
        per_iteration_s = slowdown * args.per_iteration_s
        return sum(
            round_estimate(args, b, arms, per_iteration_s=per_iteration_s) for b in args.batch_sizes
        )

    sizes = len(args.batch_sizes)
    for part, slowdown in (("phases", 1.3), ("syncs", 1.2), ("kernels", 1.2), ("host", 1.5)):
        if part in args.parts:
            est = estimate(args.arms, slowdown)
            lines.append(
                f"plan: {part} {len(args.arms)} runs x {sizes} batch sizes, about {est:.0f} s"
            )
            total += est
    if "train" in args.parts:
        est = args.pairs * estimate(round_order(0, args.design, args.arms), 1.0)
        lines.append(
            f"plan: train {args.pairs} rounds of {', '.join(args.arms)} ({args.design}) x "
            f"{sizes} batch sizes, about {est:.0f} s"
        )
        total += est
        if args.lowdata != "off":
            est = args.lowdata_pairs * estimate(round_order(0, args.design, args.arms), 1.0)
            lines.append(
                f"plan: lowdata ({args.lowdata}) {args.lowdata_pairs} rounds, about {est:.0f} s"
            )
            total += est
    limit = "none" if budget.limit_s is None else f"{budget.limit_s:.0f} s"
    lines.append(f"plan: estimated total {total:.0f} s, budget {limit}")
    return lines
