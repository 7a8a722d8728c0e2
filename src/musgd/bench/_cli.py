"""``python -m musgd.bench``: the demo, the optimizer-step and training benchmarks, and the
maintainers' measurements (replay profile, Triton backend and tiles, distributed step, the
Ultralytics trainer benchmark).

``main(argv) -> int`` is a thin shell over the benchmark functions: it parses, picks defaults by
device (``--quick`` for CI-sized runs), prints a table and writes the evidence JSON. Exit codes:
0 done, 1 the demo's loss did not go down, 2 bad usage (the message says how to fix it).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from musgd.bench import (
    _cpu_dtype,
    _distributed_bench,
    _floor,
    _floor_ratio,
    _ns_quality,
    _profile,
    _triton_bench,
    _ul_plan,
)
from musgd.bench._args import non_negative_int, positive_int
from musgd.bench._demo import (
    demo_results,
    format_demo,
    format_intro,
    format_row,
    run_demo,
    write_demo_png,
)
from musgd.bench._evidence import build_evidence, check_commit, write_evidence
from musgd.bench._models import PARAMETER_SETS, ParamSpec
from musgd.bench._optimizer_bench import format_optimizer_table, run_optimizer_benchmark
from musgd.bench._train_bench import TrainConfig, format_training_table, run_training_benchmark
from musgd.bench._variants import PeerImportError, all_variants, select_variants

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
# The sets a CUDA run times by default; the YOLO26 sets run when named (--sets yolo26n,...).
DEFAULT_CUDA_SETS = ("nano", "transformer", "large")


def _ultralytics(args: argparse.Namespace, argv: list[str]) -> int:
    """The ``ultralytics`` subcommand, imported when it runs (its options need none of it)."""
    from musgd.bench import _ul_bench

    return _ul_bench.run(args, argv)


# Subcommands with options of their own: (help, add_arguments, run(args, argv) -> exit code).
MEASUREMENTS: dict[
    str,
    tuple[
        str,
        Callable[[argparse.ArgumentParser], None],
        Callable[[argparse.Namespace, list[str]], int],
    ],
] = {
    "profile": (
        "host against device time of a step, per replay variant (torch.profiler, cProfile)",
        _profile.add_arguments,
        _profile.run,
    ),
    "triton": (
        "Triton Newton-Schulz backend on YOLO26 sets and NS throughput (CUDA)",
        _triton_bench.add_arguments,
        _triton_bench.run,
    ),
    "triton-tiles": (
        "tile configurations of the Triton NS kernels: capture, bit-identity, speed (CUDA)",
        _triton_bench.add_tiles_arguments,
        _triton_bench.run_tiles,
    ),
    "distributed": (
        "sharded step (DDP, FSDP2) against replicated, over gloo or torchrun; --predict W",
        _distributed_bench.add_arguments,
        _distributed_bench.run,
    ),
    "ultralytics": (
        "YOLO26 in the Ultralytics trainer, any task: stock MuSGD against ours, bit-identity",
        _ul_plan.add_arguments,
        _ultralytics,
    ),
    "floor": (
        "the one-graph floor of a YOLO26 training iteration: forward, backward, step replayed",
        _floor.add_arguments,
        _floor.run,
    ),
    "floor-ratio": (
        "the trainer's iterations against their configurations' one-graph floors (evidence)",
        _floor_ratio.add_arguments,
        _floor_ratio.run,
    ),
    "cpu-dtype": (
        "MuSGD step per Newton-Schulz dtype (bf16, float32) on the CPU, by matrix size",
        _cpu_dtype.add_arguments,
        _cpu_dtype.run,
    ),
    "ns-quality": (
        "orthogonality of each Newton-Schulz schedule on YOLO26n shapes and recorded momenta",
        _ns_quality.add_arguments,
        _ns_quality.run,
    ),
}


class UsageError(Exception):
    """Bad command-line input; the message says what is wrong and how to fix it."""


_positive_int = positive_int
_non_negative_int = non_negative_int


def _image_size(text: str) -> int:
    value = _positive_int(text)
    if value < 32 or value % 32:
        raise argparse.ArgumentTypeError(
            f"image size must be a multiple of 32 (the detector's largest stride), got {value}"
        )
    return value


_int_list = _profile.positive_int_list


def _name_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        # An empty list ran nothing and wrote an empty evidence file (exit 0).
        raise argparse.ArgumentTypeError("names none: give one name or more, comma-separated")
    return names


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m musgd.bench``."""
    variants = ", ".join(v.name for v in all_variants())
    parser = argparse.ArgumentParser(
        prog="python -m musgd.bench",
        description="MuSGD benchmarks: a demo, optimizer-step and training-step timings, and the "
        "maintainers' measurements (replay profile, Triton backend, distributed step).",
    )
    sub = parser.add_subparsers(
        dest="command", metavar="{" + ",".join(["demo", "optimizer", "train", *MEASUREMENTS]) + "}"
    )

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--device",
            choices=("auto", "cuda", "cpu"),
            default="auto",
            help="where to run (default: cuda when available, else cpu)",
        )
        p.add_argument("--seed", type=_non_negative_int, default=0, help="seed (default 0)")
        p.add_argument(
            "--quick", action="store_true", help="tiny sizes and few steps (CI smoke runs)"
        )
        p.add_argument("--steps", type=_positive_int, help="timed steps per run")
        p.add_argument("--warmup", type=_non_negative_int, help="untimed warm-up steps per run")
        p.add_argument(
            "--commit",
            help="the commit this tree came from, recorded when git cannot read it (a copy "
            "without .git history); refused if it disagrees with a readable HEAD",
        )

    demo = sub.add_parser("demo", help="short nano-detector training per MuSGD variant")
    common(demo)
    demo.add_argument("--batch-size", type=_positive_int, help="images per batch")
    demo.add_argument("--image-size", type=_image_size, help="image side in pixels")
    demo.add_argument("--out", type=Path, help="also write an evidence JSON here (file or dir)")
    demo.add_argument(
        "--png", type=Path, help="also draw the loss curves and step times to this PNG file"
    )

    opt = sub.add_parser("optimizer", help="optimizer-step variants side by side")
    common(opt)
    opt.add_argument(
        "--sets",
        type=_name_list,
        help=f"parameter sets, comma-separated, of {', '.join(PARAMETER_SETS)} "
        f"(default: nano on cpu, {','.join(DEFAULT_CUDA_SETS)} on cuda)",
    )
    opt.add_argument("--variants", type=_name_list, help=f"comma-separated, of: {variants}")
    opt.add_argument(
        "--rounds",
        type=_positive_int,
        help="variants take turns this many times, sharing the timed steps "
        "(default: 5 on cuda, 1 otherwise)",
    )
    opt.add_argument("--out", type=Path, help="evidence JSON path or directory")
    opt.add_argument("--no-evidence", action="store_true", help="do not write evidence JSON")

    train = sub.add_parser("train", help="complete training steps, paired arms, byte hashes")
    common(train)
    train.add_argument("--arms", type=_name_list, help=f"comma-separated, of: {variants}")
    train.add_argument("--batch-sizes", type=_int_list, help="comma-separated (default 4,16)")
    train.add_argument("--image-size", type=_image_size, help="image side (default 640 on cuda)")
    train.add_argument("--pairs", type=_positive_int, help="paired runs per arm")
    train.add_argument(
        "--lockstep",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="train the arms of a pair together, taking turns step by step, so a noisy host "
        "slows them alike (default); --no-lockstep trains each arm alone",
    )
    train.add_argument("--out", type=Path, help="evidence JSON path or directory")
    train.add_argument("--no-evidence", action="store_true", help="do not write evidence JSON")

    for name, (text, add_arguments, _) in MEASUREMENTS.items():
        add_arguments(sub.add_parser(name, help=text, description=text))
    return parser


def resolve_device(name: str, *, given: bool = True) -> torch.device:
    """``auto`` picks CUDA when available; ``cuda`` without a GPU is a usage error (``given``:
    whether the command line said ``--device``, else ``name`` is the command's default)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        asked = "was requested" if given else "is this command's default"
        raise UsageError(
            f"--device cuda {asked} but this torch sees no CUDA GPU "
            f"(torch {torch.__version__}, CUDA build {torch.version.cuda}); "
            "use --device cpu or install a CUDA build of torch"
        )
    return torch.device(name)


def _pick(
    value: Any, args: argparse.Namespace, device: torch.device, *, quick: Any, cuda: Any, cpu: Any
) -> Any:
    """An explicit option wins; else the ``--quick``, CUDA or CPU default."""
    if value is not None:
        return value
    if args.quick:
        return quick
    return cuda if device.type == "cuda" else cpu


def _check_output(path: Path | None, option: str, *, suffix: str | None = None) -> None:
    """Refuse, before anything runs, an output the run could not write at its end: another
    kind of file than ``suffix``, or a folder where no file can be made (a probe file is made
    and removed)."""
    if path is None:
        return
    if suffix is not None and path.suffix.lower() != suffix:
        raise UsageError(
            f"{option} {path}: the file is written as {suffix[1:].upper()}; name a path ending "
            f"in {suffix}"
        )
    folder = path if path.is_dir() else path.parent
    probe = folder / f".musgd-write-probe-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UsageError(
            f"{option} {path}: cannot write there ({exc.strerror or exc}); pass a writable path"
        ) from None


def _demo(args: argparse.Namespace, device: torch.device, argv: list[str]) -> int:
    _check_output(args.png, "--png", suffix=".png")
    _check_output(args.out, "--out")
    config = TrainConfig(
        batch_size=_pick(args.batch_size, args, device, quick=2, cuda=16, cpu=4),
        image_size=_pick(args.image_size, args, device, quick=64, cuda=640, cpu=128),
        steps=_pick(args.steps, args, device, quick=4, cuda=40, cpu=12),
        warmup=_pick(args.warmup, args, device, quick=1, cuda=5, cpu=2),
        seed=args.seed,
        autocast=device.type == "cuda",
    )
    variants = select_variants(None, device, trainable=True)
    print(format_intro(variants, config, device), flush=True)
    rows = run_demo(variants, config, device, on_row=lambda row: print(format_row(row), flush=True))
    print(format_demo(rows, config, device))
    if args.png is not None:
        try:
            print(f"chart: {write_demo_png(rows, args.png, title=f'MuSGD demo on {device}')}")
        except ImportError as exc:  # the run's numbers still stand; the chart is extra
            print(f"no chart: {exc}")
        except OSError as exc:
            raise UsageError(
                f"cannot write the chart ({exc.strerror or exc}: {args.png}); "
                "pass --png with a writable file path"
            ) from None
    if args.out is not None:
        _write(
            build_evidence(
                "demo", demo_results(rows, config), device=device, argv=argv, commit=args.commit
            ),
            args.out,
        )
    return EXIT_OK if all(r.improved for r in rows) else EXIT_FINDINGS


def _sets(names: list[str] | None, device: torch.device, quick: bool) -> dict[str, list[ParamSpec]]:
    if names is None:
        names = ["nano"] if quick or device.type != "cuda" else list(DEFAULT_CUDA_SETS)
    unknown = [n for n in names if n not in PARAMETER_SETS]
    if unknown or not names:
        raise UsageError(
            f"unknown parameter set {unknown[0] if unknown else '(none)'!r}; "
            f"choose from {', '.join(PARAMETER_SETS)}"
        )
    return {name: PARAMETER_SETS[name]() for name in names}


def _optimizer(args: argparse.Namespace, device: torch.device, argv: list[str]) -> int:
    sets = _sets(args.sets, device, args.quick)
    variants = _variants(args.variants, device, trainable=False)
    results = run_optimizer_benchmark(
        sets,
        variants,
        device=device,
        steps=_pick(args.steps, args, device, quick=2, cuda=100, cpu=10),
        warmup=_pick(args.warmup, args, device, quick=1, cuda=10, cpu=2),
        seed=args.seed,
        rounds=_pick(args.rounds, args, device, quick=1, cuda=5, cpu=1),
    )
    print(format_optimizer_table(results))
    if not args.no_evidence:
        _write(
            build_evidence("optimizer-step", results, device=device, argv=argv, commit=args.commit),
            args.out,
        )
    return EXIT_OK


def _train(args: argparse.Namespace, device: torch.device, argv: list[str]) -> int:
    variants = _variants(args.arms, device, trainable=True)
    results = run_training_benchmark(
        variants,
        device=device,
        batch_sizes=_pick(args.batch_sizes, args, device, quick=[2], cuda=[4, 16], cpu=[2]),
        image_size=_pick(args.image_size, args, device, quick=64, cuda=640, cpu=128),
        pairs=_pick(args.pairs, args, device, quick=1, cuda=3, cpu=2),
        steps=_pick(args.steps, args, device, quick=2, cuda=50, cpu=5),
        warmup=_pick(args.warmup, args, device, quick=1, cuda=10, cpu=2),
        seed=args.seed,
        lockstep=args.lockstep,
    )
    print(format_training_table(results))
    if not args.no_evidence:
        _write(
            build_evidence("training-step", results, device=device, argv=argv, commit=args.commit),
            args.out,
        )
    return EXIT_OK


def _variants(names: list[str] | None, device: torch.device, *, trainable: bool) -> list[Any]:
    try:
        return select_variants(names, device, trainable=trainable)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _write(evidence: dict[str, Any], out: Path | None) -> None:
    try:
        path = write_evidence(evidence, out)
    except OSError as exc:
        raise UsageError(
            f"cannot write the evidence file ({exc.strerror or exc}: {exc.filename}); "
            "pass --out with a writable file or directory"
        ) from None
    print(f"evidence: {path}")


def _check_combinations(args: argparse.Namespace) -> None:
    """Options that do nothing without another are refused, not silently ignored."""
    if args.command == "distributed" and args.calibration is not None and args.predict is None:
        raise UsageError(
            "--calibration calibrates the scaling model that --predict WORLD prints, and "
            "without --predict this run times the arms instead; add --predict WORLD (e.g. "
            "--predict 8) or drop --calibration"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m musgd.bench`` with ``argv`` (default: ``sys.argv[1:]``); the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:  # argparse has printed usage and the error
        return EXIT_OK if exc.code == 0 else EXIT_USAGE
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    commands = {"demo": _demo, "optimizer": _optimizer, "train": _train}
    try:
        _check_combinations(args)
        if getattr(args, "commit", None) is not None:  # floor-ratio measures nothing
            check_commit(args.commit)  # before the run, not after it
        # Every subcommand's --device is checked here, before any work: cuda without a GPU is
        # a usage error, not a traceback from deep inside a measurement.
        given = any(a == "--device" or a.startswith("--device=") for a in args_list)
        device = resolve_device(getattr(args, "device", None) or "auto", given=given)
        if args.command in MEASUREMENTS:
            return MEASUREMENTS[args.command][2](args, args_list)
        return commands[args.command](args, device, args_list)
    except (UsageError, ValueError, PeerImportError) as exc:  # ValueError: values that do not fit
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
