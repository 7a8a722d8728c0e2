"""Complete training steps on the nano detector: forward, backward and the optimizer.

Each arm (an optimizer variant) trains the same seeded model on the same synthetic batches;
arms alternate order from pair to pair, and in lockstep mode take turns step by step, so slow
drift of the machine does not favour one. Each
run records its step times and a sha256 of the model state, the momentum buffers and the loss
sequence, so a faster arm can be checked to compute the very same thing.
"""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from musgd._functional import MOMENTUM_BUFFER, matrix_shape
from musgd._groups import param_groups
from musgd.bench._models import DetectionBatch, NanoDetector, detection_loss, synthetic_batch
from musgd.bench._timing import StepClock, summarize
from musgd.bench._variants import Variant

WEIGHT_DECAY = 5e-4
MAX_DISTINCT_BATCHES = 8  # batches are drawn up front and cycled, so drawing is never timed


@dataclass(frozen=True)
class TrainConfig:
    """One training run's shape: batch, image size, timed and warm-up steps, seed, precision."""

    batch_size: int
    image_size: int
    steps: int
    warmup: int
    seed: int = 0
    autocast: bool = False  # bf16 autocast of the forward pass (CUDA)
    distinct_batches: int = MAX_DISTINCT_BATCHES

    def __post_init__(self) -> None:
        if self.image_size < 32 or self.image_size % 32:
            raise ValueError(f"image size must be a multiple of 32, got {self.image_size}")
        # BatchNorm in training mode needs two values per channel at the stride-32 level.
        if self.batch_size * (self.image_size // 32) ** 2 < 2:
            raise ValueError(
                f"batch {self.batch_size} at {self.image_size} px leaves one value per channel "
                "at stride 32, which BatchNorm cannot train on; use batch >= 2 or image >= 64"
            )
        if self.steps < 1 or self.warmup < 0:
            raise ValueError(f"need steps >= 1 and warmup >= 0, got {self.steps}, {self.warmup}")


@dataclass(frozen=True)
class RunResult:
    """What one training run measured and computed."""

    step_ms: tuple[float, ...]  # whole step, timed steps only
    optimizer_ms: tuple[float, ...]  # optimizer.step() alone, timed steps only
    losses: tuple[float, ...]  # every step, warm-up included
    model_sha256: str
    momentum_sha256: str
    loss_sha256: str

    @property
    def sha256(self) -> str:
        """One hash over the model, momentum and loss hashes."""
        joined = f"{self.model_sha256}{self.momentum_sha256}{self.loss_sha256}"
        return hashlib.sha256(joined.encode()).hexdigest()


def hash_tensors(tensors: Iterable[Tensor | None]) -> str:
    """sha256 over each tensor's dtype, shape and raw bytes, in order (None hashes as a marker)."""
    digest = hashlib.sha256()
    for t in tensors:
        if t is None:
            digest.update(b"<none>")
            continue
        digest.update(f"{t.dtype}{tuple(t.shape)}".encode())
        flat = t.detach().cpu().contiguous()
        # A direct read of the host buffer: bytes(storage) would copy element by element.
        digest.update(ctypes.string_at(flat.data_ptr(), flat.nbytes))
    return digest.hexdigest()


def make_batches(config: TrainConfig, device: torch.device) -> list[DetectionBatch]:
    """The run's synthetic batches, drawn from ``config.seed`` (the same for every arm)."""
    generator = torch.Generator().manual_seed(config.seed)
    count = max(1, min(config.distinct_batches, config.steps + config.warmup))
    return [
        synthetic_batch(config.batch_size, config.image_size, generator=generator, device=device)
        for _ in range(count)
    ]


def _momentum(optimizer: Optimizer, params: Sequence[Tensor]) -> list[Tensor | None]:
    """Each parameter's momentum buffer (None where it has none), in model order."""
    out: list[Tensor | None] = []
    for p in params:
        buf = optimizer.state.get(p, {}).get(MOMENTUM_BUFFER)
        out.append(buf if isinstance(buf, Tensor) else None)
    return out


class TrainingArm:
    """One arm's seeded model, optimizer and step clock, trained one step at a time."""

    def __init__(self, variant: Variant, config: TrainConfig, device: torch.device) -> None:
        torch.manual_seed(config.seed)  # every arm starts from the same weights
        self.model = NanoDetector().to(device).train()
        self.optimizer = variant.build(param_groups(self.model, weight_decay=WEIGHT_DECAY))
        self.stepper = variant.stepper(self.optimizer, training=True)
        self.config = config
        self.clock = StepClock(device)
        self.losses: list[Tensor] = []

    def step(self, batch: DetectionBatch) -> None:
        """One complete training step, marked at its start, after backward and at its end."""
        clock, model, optimizer = self.clock, self.model, self.optimizer
        clock.begin_step()
        clock.mark("start")
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(
            batch.images.device.type, dtype=torch.bfloat16, enabled=self.config.autocast
        ):
            predictions = model(batch.images)
        loss = detection_loss(predictions, batch.boxes)
        loss.backward()  # type: ignore[no-untyped-call]
        clock.mark("backward")
        self.stepper.step()
        clock.mark("end")
        self.losses.append(loss.detach())

    def result(self) -> RunResult:
        """The timed steps' durations and the hashes of where training ended."""
        warmup = self.config.warmup
        loss_values = torch.stack(self.losses).float().cpu()
        return RunResult(
            step_ms=self.clock.intervals("start", "end", skip=warmup),
            optimizer_ms=self.clock.intervals("backward", "end", skip=warmup),
            losses=tuple(float(v) for v in loss_values),
            model_sha256=hash_tensors(self.model.state_dict().values()),
            momentum_sha256=hash_tensors(_momentum(self.optimizer, list(self.model.parameters()))),
            loss_sha256=hash_tensors([loss_values]),
        )


def train_run(
    variant: Variant, batches: Sequence[DetectionBatch], config: TrainConfig, device: torch.device
) -> RunResult:
    """Train a fresh seeded :class:`NanoDetector` with ``variant`` for warm-up + timed steps."""
    arm = TrainingArm(variant, config, device)
    for i in range(config.warmup + config.steps):
        arm.step(batches[i % len(batches)])
    return arm.result()


def train_in_lockstep(
    variants: Sequence[Variant],
    batches: Sequence[DetectionBatch],
    config: TrainConfig,
    device: torch.device,
) -> list[RunResult]:
    """Train one fresh model per variant, the arms taking turns step by step.

    Every arm's step ``i`` runs next to the other arms' step ``i``, the order reversing from one
    step to the next, so that a slow spell of a shared host lands on all arms alike rather than
    on whichever arm trained through it. Each arm touches only its own model and optimizer, so
    it computes exactly what it computes alone.
    """
    arms = [TrainingArm(v, config, device) for v in variants]
    for i in range(config.warmup + config.steps):
        batch = batches[i % len(batches)]
        for arm in arms if i % 2 == 0 else reversed(arms):
            arm.step(batch)
    return [arm.result() for arm in arms]


@contextmanager
def deterministic_kernels() -> Iterator[None]:
    """Deterministic cuDNN convolutions (no autotuning) for the duration, then restore."""
    saved = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        yield
    finally:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved


def _summary_dict(values: Sequence[float]) -> dict[str, float]:
    s = summarize(values)
    return {"median_ms": s.median, "min_ms": s.min, "max_ms": s.max}


def summarize_arms(
    variants: Sequence[Variant], runs: dict[str, list[RunResult]]
) -> list[dict[str, Any]]:
    """Per arm: median (min-max) over runs of each run's median step, hashes, time saved."""
    arms: list[dict[str, Any]] = []
    for variant in variants:
        results = runs[variant.name]
        step_medians = [summarize(r.step_ms).median for r in results]
        opt_medians = [summarize(r.optimizer_ms).median for r in results]
        arms.append(
            {
                "arm": variant.name,
                "step": _summary_dict(step_medians),
                "optimizer_step": _summary_dict(opt_medians),
                "repeatable": len({r.sha256 for r in results}) == 1,
                "runs": [
                    {
                        "step_median_ms": sm,
                        "optimizer_median_ms": om,
                        "loss_first": r.losses[0],
                        "loss_last": r.losses[-1],
                        "model_sha256": r.model_sha256,
                        "momentum_sha256": r.momentum_sha256,
                        "loss_sha256": r.loss_sha256,
                        "sha256": r.sha256,
                    }
                    for r, sm, om in zip(results, step_medians, opt_medians, strict=True)
                ],
            }
        )
    base = arms[0]["step"]["median_ms"]
    for arm in arms:
        arm["time_saved_vs_first"] = (base - arm["step"]["median_ms"]) / base
    return arms


def hash_groups(arms: Sequence[dict[str, Any]]) -> list[list[str]]:
    """Arms grouped by the exact set of run hashes they produced (equal bytes, same group)."""
    groups: dict[frozenset[str], list[str]] = {}
    for arm in arms:
        key = frozenset(run["sha256"] for run in arm["runs"])
        groups.setdefault(key, []).append(arm["arm"])
    return list(groups.values())


def run_training_benchmark(
    variants: Sequence[Variant],
    *,
    device: torch.device,
    batch_sizes: Sequence[int],
    image_size: int,
    pairs: int,
    steps: int,
    warmup: int,
    seed: int = 0,
    lockstep: bool = False,
) -> dict[str, Any]:
    """Paired complete-training-step runs per arm and batch size; JSON-ready results.

    With ``lockstep`` each pair trains all arms together, taking turns step by step
    (:func:`train_in_lockstep`); otherwise each arm trains alone, in an order that reverses from
    pair to pair. bf16 autocast on CUDA, float32 elsewhere. ``time_saved_vs_first`` compares
    each arm's median with the first arm's; ``hashes_match_across_arms`` says whether every run
    of every arm ended in the same model, momentum and loss bytes.
    """
    if not variants:
        raise ValueError("need at least one arm to benchmark")
    if pairs < 1:
        raise ValueError(f"pairs must be >= 1, got {pairs}")
    autocast = device.type == "cuda"
    model = NanoDetector()
    out: dict[str, Any] = {
        "benchmark": "training-step",
        "model": {
            "name": "NanoDetector",
            "parameters": sum(p.numel() for p in model.parameters()),
            "matrices": sum(matrix_shape(p.shape) is not None for p in model.parameters()),
        },
        "config": {
            "image_size": image_size,
            "pairs": pairs,
            "steps": steps,
            "warmup": warmup,
            "seed": seed,
            "precision": "bf16 autocast" if autocast else "float32",
            "weight_decay": WEIGHT_DECAY,
            "cudnn_deterministic": True,
            "lockstep": lockstep,
        },
        "batch_sizes": {},
    }
    configs = [TrainConfig(b, image_size, steps, warmup, seed, autocast) for b in batch_sizes]
    with deterministic_kernels():
        for batch_size, config in zip(batch_sizes, configs, strict=True):
            batches = make_batches(config, device)
            runs: dict[str, list[RunResult]] = {v.name: [] for v in variants}
            for pair in range(pairs):
                order = variants if pair % 2 == 0 else list(reversed(variants))
                if lockstep:
                    results = train_in_lockstep(order, batches, config, device)
                else:
                    results = [train_run(v, batches, config, device) for v in order]
                for variant, result in zip(order, results, strict=True):
                    runs[variant.name].append(result)
            arms = summarize_arms(variants, runs)
            every = {run["sha256"] for arm in arms for run in arm["runs"]}
            out["batch_sizes"][str(batch_size)] = {
                "arms": arms,
                "hashes_match_across_arms": len(every) == 1,
                "hash_groups": hash_groups(arms),
            }
            del batches
    return out


def format_training_table(results: dict[str, Any]) -> str:
    """A plain-text table per batch size: arm, step and optimizer ms, time saved, hashes."""
    header = (
        f"{'batch':>5} {'arm':<26} {'step ms, median (range)':<28} "
        f"{'optimizer ms':<26} {'saved':>7}  repeatable"
    )
    lines = [header]
    for batch_size, entry in results["batch_sizes"].items():
        for arm in entry["arms"]:
            s, o = arm["step"], arm["optimizer_step"]
            step = f"{s['median_ms']:.2f} ({s['min_ms']:.2f}\u2013{s['max_ms']:.2f})"
            opt = f"{o['median_ms']:.2f} ({o['min_ms']:.2f}\u2013{o['max_ms']:.2f})"
            saved = f"{100 * arm['time_saved_vs_first']:.1f}%"
            lines.append(
                f"{batch_size:>5} {arm['arm']:<26} {step:<28} {opt:<26} {saved:>7}  "
                f"{'yes' if arm['repeatable'] else 'no'}"
            )
        match = "yes" if entry["hashes_match_across_arms"] else "no"
        groups = " | ".join(" = ".join(g) for g in entry["hash_groups"])
        lines.append(f"{'':>5} hashes match across arms: {match}; identical bytes: {groups}")
    return "\n".join(lines)
