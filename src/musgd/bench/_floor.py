"""``python -m musgd.bench floor``: the one-graph floor of a YOLO26 training iteration.

What no trainer beats without doing less arithmetic (ultralytics-compat spec, "The one-graph
floor"): the model of ``YOLO(cfg)`` (the configuration's own classes, 80 for the shipped
YOLO26 files, as the spec defines it; ``--classes N`` builds it for N classes instead, e.g.
:data:`musgd.bench._yolo_data.CLASSES`, the trainer bench's synthetic data, for which the trainer
builds the model it trains: the head's width follows the class count) in train mode, a fixed
random batch, autocast with ``cache_enabled=False``, a stand-in loss (the mean of every output
tensor), ``backward`` and our ``UltralyticsMuSGD`` step, captured together in one
``torch.cuda.CUDAGraph`` after warm-up iterations on a side stream (PyTorch's whole-network
recipe, R62), each replay timed by CUDA events. Beside it the same iteration run eagerly, the
host launching every kernel.

A configuration is a model, a batch size, a layout (``nchw`` or ``channels_last``), an autocast
dtype (``float16``, the trainer's AMP, or ``bfloat16``, the spec's recipe) and whether the
network runs as Inductor's kernels (``musgd._network_capture.compiled_predict``, no CUDA graphs
of its own). Compilation happens in the warm-up, outside the capture, and is reported.

On a CPU there are no CUDA graphs: only the eager iteration is timed (a check that it runs).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from musgd._network_capture import compiled_predict
from musgd._ultralytics_optim import UltralyticsMuSGD
from musgd.bench._args import non_negative_int, positive_int
from musgd.bench._evidence import build_evidence, write_evidence
from musgd.bench._timing import time_steps
from musgd.bench._yolo_data import CLASSES

KIND = "one-graph-floor"
LAYOUTS = ("nchw", "channels_last")
DTYPES: dict[str, torch.dtype] = {"float16": torch.float16, "bfloat16": torch.bfloat16}


class FloorUsageError(ValueError):
    """A bad option of ``floor``; the message says what is wrong and how to fix it."""


@dataclass(frozen=True)
class FloorConfig:
    """One configuration of the floor: what is built, in which layout, dtype and kernels."""

    model: str
    batch: int
    layout: str
    dtype: str
    compiled: bool

    @property
    def label(self) -> str:
        """``yolo26n b16 nchw float16`` (and ``compiled`` where it is)."""
        name = Path(self.model).stem
        tail = " compiled" if self.compiled else ""
        return f"{name} b{self.batch} {self.layout} {self.dtype}{tail}"


def tensors_of(outputs: object) -> Iterable[Tensor]:
    """Every floating-point tensor in ``outputs`` (a tensor, or lists, tuples and dicts of them)."""
    if isinstance(outputs, Tensor):
        if outputs.is_floating_point():
            yield outputs
    elif isinstance(outputs, dict):
        for value in outputs.values():
            yield from tensors_of(value)
    elif isinstance(outputs, (list, tuple)):
        for value in outputs:
            yield from tensors_of(value)


def stand_in_loss(outputs: object) -> Tensor:
    """The sum of the float32 means of every floating-point output tensor: a loss that touches
    every output at almost no cost of its own."""
    means = [t.float().mean() for t in tensors_of(outputs) if t.requires_grad]
    if not means:
        raise TypeError(
            "the network's outputs hold no floating-point tensor that needs a gradient: "
            "is the model in train mode with its parameters requiring grad?"
        )
    return torch.stack(means).sum()


def floor_groups(model: nn.Module) -> list[dict[str, Any]]:
    """The trainer's split of the parameters: matrices and kernels (2-D and more) orthogonalized
    with weight decay, the vectors (BatchNorm weights, biases) by SGD without it."""
    params = [p for p in model.parameters() if p.requires_grad]
    matrices = [p for p in params if p.ndim >= 2]
    vectors = [p for p in params if p.ndim < 2]
    return [
        {"params": matrices, "use_muon": True, "weight_decay": 5e-4},
        {"params": vectors, "use_muon": False, "weight_decay": 0.0},
    ]


def measure(
    model: nn.Module,
    images: Tensor,
    config: FloorConfig,
    *,
    warmup: int,
    replays: int,
    eager_steps: int,
) -> dict[str, Any]:
    """Time ``config``'s iteration eagerly and, on CUDA, replayed from one CUDA graph.

    ``model`` is trained in place (its parameters change); ``images`` is the fixed batch.
    """
    device = images.device
    if config.layout == "channels_last":
        model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        images = images.contiguous(memory_format=torch.channels_last)
    model.train()
    for p in model.parameters():
        p.requires_grad_(True)
    forward: Callable[[Tensor], object] = compiled_predict(model) if config.compiled else model
    opt = UltralyticsMuSGD(
        floor_groups(model), lr=0.01, momentum=0.9, nesterov=True, muon=0.2, sgd=1.0
    )
    dtype = DTYPES[config.dtype]

    def iteration() -> None:
        with torch.autocast(device.type, dtype=dtype, cache_enabled=False):
            loss = stand_in_loss(forward(images))
        loss.backward()  # type: ignore[no-untyped-call,unused-ignore]
        opt.step()

    def eager() -> None:
        opt.zero_grad(set_to_none=True)
        iteration()

    start = time.perf_counter()
    side = (
        torch.cuda.Stream(device)  # type: ignore[no-untyped-call,unused-ignore]
        if device.type == "cuda"
        else None
    )
    if side is not None:
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(max(warmup, 1)):
                eager()
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
    else:
        for _ in range(max(warmup, 1)):
            eager()
    warmup_s = time.perf_counter() - start
    result: dict[str, Any] = {**asdict(config), "label": config.label, "warmup_s": warmup_s}
    result["eager"] = time_steps(eager, steps=eager_steps, warmup=0, device=device).summary.as_ms()
    if side is None:
        result["replay"] = None
        result["replay_reason"] = "CUDA graphs need a CUDA device"
        return result
    torch.cuda.reset_peak_memory_stats(device)
    opt.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    start = time.perf_counter()
    with torch.cuda.graph(graph):
        iteration()
    result["capture_s"] = time.perf_counter() - start
    timing = time_steps(graph.replay, steps=replays, warmup=2, device=device)
    result["replay"] = timing.summary.as_ms()
    result["replay_samples_ms"] = list(timing.samples_ms)
    result["peak_allocated_mib"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    result["peak_reserved_mib"] = round(torch.cuda.max_memory_reserved(device) / 2**20, 1)
    del graph
    return result


def build_yolo(cfg: str, device: torch.device, classes: int | None = None) -> nn.Module:
    """The model of ``YOLO(cfg)`` on ``device`` (Ultralytics, used as a black box), built again
    for ``classes`` classes where its configuration names another count (the documented
    ``nc`` argument of its model class), as the trainer builds it for its data."""
    try:
        from ultralytics import YOLO
    except ImportError as exc:
        raise FloorUsageError(
            f"the floor builds Ultralytics' {cfg}: install it (pip install 'wpgate[ultralytics]')"
        ) from exc
    try:
        model: nn.Module = YOLO(cfg).model
    except (FileNotFoundError, OSError) as exc:
        raise FloorUsageError(
            f"no model configuration {cfg!r}: name one Ultralytics ships (yolo26n.yaml, "
            f"yolo26s.yaml, yolo26m.yaml) or a YAML file's path ({exc})"
        ) from exc
    spec = getattr(model, "yaml", None)
    if classes is not None and isinstance(spec, dict) and spec.get("nc") != classes:
        model = type(model)(copy.deepcopy(spec), nc=classes, verbose=False)
    return model.to(device)


def configurations(
    models: Sequence[str],
    batches: Sequence[int],
    layouts: Sequence[str],
    dtypes: Sequence[str],
    compiled: Sequence[bool],
) -> list[FloorConfig]:
    """Every combination, the model and batch outermost."""
    return [
        FloorConfig(m, b, layout, d, c)
        for m, b, layout, d, c in itertools.product(models, batches, layouts, dtypes, compiled)
    ]


def run_floor(
    configs: Sequence[FloorConfig],
    *,
    device: torch.device,
    imgsz: int,
    warmup: int,
    replays: int,
    eager_steps: int,
    seed: int,
    classes: int | None = None,
    build: Callable[[str, torch.device, int | None], nn.Module] = build_yolo,
) -> dict[str, Any]:
    """Measure each configuration on a freshly built model (``classes`` classes; None: the
    configuration's own count); one that fails is recorded with its error (a capture the
    network refuses, memory), the rest still run."""
    rows: list[dict[str, Any]] = []
    for config in configs:
        torch.manual_seed(seed)
        model = build(config.model, device, classes)
        gen = torch.Generator(device=device).manual_seed(seed)
        images = torch.rand(config.batch, 3, imgsz, imgsz, generator=gen, device=device)
        try:
            row = measure(
                model,
                images,
                config,
                warmup=warmup,
                replays=replays,
                eager_steps=eager_steps,
            )
        except (RuntimeError, TypeError) as exc:
            row = {**asdict(config), "label": config.label, "error": f"{type(exc).__name__}: {exc}"}
        rows.append(row)
        print(format_row(row), flush=True)
        del model, images
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return {
        "config": {
            "imgsz": imgsz,
            "warmup": warmup,
            "replays": replays,
            "eager_steps": eager_steps,
            "seed": seed,
            "classes": "the configuration's own" if classes is None else classes,
            "loss": "stand-in: the sum of every output tensor's mean",
            "optimizer": "UltralyticsMuSGD, lr 0.01, momentum 0.9, nesterov, muon 0.2, sgd 1.0",
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        },
        "floors": rows,
    }


def format_row(row: dict[str, Any]) -> str:
    """One line per configuration: the replayed floor, the eager iteration."""
    if "error" in row:
        return f"floor {row['label']}: failed: {row['error']}"
    replay = row["replay"]
    graph = f"{replay['median_ms']:.2f} ms replayed" if replay else str(row["replay_reason"])
    eager = row["eager"]["median_ms"]
    return f"floor {row['label']}: {graph}, {eager:.2f} ms eager, warm-up {row['warmup_s']:.1f} s"


def _choices(allowed: Sequence[str], what: str) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [n for n in names if n not in allowed]
        if not names or unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {unknown or text!r}: use one or more of {', '.join(allowed)}"
            )
        return names

    return parse


def _ints(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected whole numbers, comma-separated (4,16), got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected batch sizes of 1 or more, got {text!r}")
    return values


def _models(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names or any(not n.endswith((".yaml", ".yml")) for n in names):
        raise argparse.ArgumentTypeError(
            f"expected model configurations such as yolo26n.yaml, comma-separated, got {text!r}"
        )
    return names


def _compiled(text: str) -> list[bool]:
    table = {"false": [False], "true": [True], "both": [False, True]}
    if text not in table:
        raise argparse.ArgumentTypeError(f"--compile takes false, true or both, got {text!r}")
    return table[text]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m musgd.bench floor``."""
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--models", type=_models, default=["yolo26n.yaml"], help="comma-separated (yolo26n.yaml)"
    )
    parser.add_argument("--batch-sizes", type=_ints, default=[4, 16], help="default 4,16")
    parser.add_argument(
        "--layouts", type=_choices(LAYOUTS, "layout"), default=["nchw"], help="nchw,channels_last"
    )
    parser.add_argument(
        "--dtypes",
        type=_choices(tuple(DTYPES), "dtype"),
        default=["float16"],
        help="autocast dtypes: float16 (the trainer's AMP), bfloat16 (the spec's recipe)",
    )
    parser.add_argument(
        "--compile", type=_compiled, default=[False], help="Inductor kernels: false, true, both"
    )
    parser.add_argument("--imgsz", type=positive_int, default=640)
    parser.add_argument("--warmup", type=positive_int, default=3, help="side-stream iterations")
    parser.add_argument("--replays", type=positive_int, default=20, help="timed replays")
    parser.add_argument("--eager-steps", type=positive_int, default=5, help="timed eager steps")
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument(
        "--classes",
        type=positive_int,
        default=None,
        help="the classes the model is built for (default: the configuration's own, 80 for "
        f"the shipped YOLO26 files, the spec's floor; {CLASSES}: the trainer bench's synthetic "
        "data, the model its trainer builds)",
    )
    parser.add_argument("--out", type=Path, help="evidence JSON path or directory")
    parser.add_argument("--commit", default=None, help="the commit a copied tree came from")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Measure every configuration, print a line each and write the evidence JSON."""
    device = torch.device(args.device)  # the CLI has refused cuda where there is none
    if args.imgsz % 32:
        print(f"floor: --imgsz must be a multiple of 32 (the detector's stride), got {args.imgsz}")
        return 2
    configs = configurations(args.models, args.batch_sizes, args.layouts, args.dtypes, args.compile)
    try:
        results = run_floor(
            configs,
            device=device,
            imgsz=args.imgsz,
            warmup=args.warmup,
            replays=args.replays,
            eager_steps=args.eager_steps,
            seed=args.seed,
            classes=args.classes,
        )
    except FloorUsageError as exc:
        print(f"floor: {exc}")
        return 2
    evidence = build_evidence(KIND, results, device=device, argv=argv, commit=args.commit)
    print(f"evidence: {write_evidence(evidence, args.out)}")
    return 0
