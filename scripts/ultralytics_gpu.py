"""YOLO26n with the Ultralytics trainer: stock MuSGD against ours, and replay bit-identity.

Four parts on a synthetic YOLO-format dataset generated offline, one evidence file each:

* ``identity``: our trainer (both replay flags on) trains YOLO26n for at least
  ``--identity-steps`` optimizer steps with the trainer's lr/momentum warm-up active; after every
  step a shadow eager ``UltralyticsMuSGD`` over copies of the parameters, given the same gradients
  and the group values the trainer wrote, must hold bit-identical parameters and buffers.
* ``network``: our trainer three times, deterministic, for ``--network-iters`` iterations: the
  network eager twice (is the run reproducible at all?) and captured once
  (``capture_network=True``). The captured run must give the eager run's losses (float hex) and
  final state (sha256), with every iteration replayed but the first.
* ``phases``: per batch size, one stock and one of our runs with the device synchronised at every
  phase boundary of the iteration (data wait, batch to device, forward and backward, unscale,
  clip, the optimizer's step, scaler update, zero_grad, EMA update, the rest): where the time goes.
* ``train``: per batch size, ``--pairs`` pairs of runs, stock and ours with the same seed (seed k
  for pair k; the order within a pair alternates), timed without synchronising inside the
  iteration: iteration, compute (iteration minus data wait) and epoch times, the host-side phase
  split, losses, and per-pair ratios stock/ours. Where the data loader's wait is a large share of
  the iteration (``--lowdata auto``), the same pairs again with more loader workers and the
  augmentations off (``lowdata``), so that the optimizer's share shows.

Every training run of ``phases`` and ``train`` runs in a fresh Python process (``--isolation
process``, the default), as a user's training does: a run then inherits nothing from the runs
before it (their models, optimizers, recordings, loader threads, allocator and collector state).
``--isolation none`` runs them all in this process, as the evidence before 2026-12-01's seventh
session did. ``--settle-s S`` waits S seconds before each run, so that whatever the run before
left the machine doing (a process exiting, its workers, the device) has ended. ``--design abba``
makes a round stock, ours, ours, stock (reversed in odd rounds): the run second in its pair was
measured slower than the first, whichever arm it was, and in such a round each arm takes both
places, so its pair ratio (each arm's two runs merged) is free of that effect.

``nbs`` equals the batch, so the optimizer steps every iteration. ``--budget-s`` (the GPU script
passes what is left of ``LIMIT_S``) makes every run wait for an estimate of its duration (the
longest run of its kind so far, else a default) to fit in what is left, else skip it, saying so.

Usage (GPU, under 9 minutes on an H200): ``python scripts/ultralytics_gpu.py --device cuda
--out $OUT --budget-s 500``; on CPU: ``--device cpu --quick``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from musgd import GradClipReplay
from musgd.bench import (
    PhaseClock,
    build_evidence,
    data_wait_share,
    hash_tensors,
    paired_ratios,
    phase_trace,
    same_bits,
    summarize,
    summarize_phases,
    write_evidence,
    write_synthetic_dataset,
)
from musgd.ultralytics import (
    CLIP_MAX_NORM,
    UltralyticsMuSGD,
    musgd_trainer,
    require_ultralytics,
)

SKIP_FIRST = 10  # iterations left out of the timing medians: recording, cuDNN autotuning
# The loader's wait at which the low-data variant runs (--lowdata auto): a fifth of the iteration.
DATA_BOUND_SHARE = 0.2
# Steps the gradient scaler may skip (inf/nan gradients under AMP) on top of the identity target.
SKIP_ALLOWANCE = 0.1
ARMS = ("stock", "ours")
# Per-run medians compared pair by pair (stock/ours): the iteration, the iteration less its data
# wait, the first epoch (with the run's start) and the epochs after it.
PAIR_METRICS = ("iteration_ms", "compute_ms", "first_epoch_s", "steady_epoch_s")
# Each one's name in a batch's pair summary: the metric without its unit.
PAIR_SUMMARIES = {metric: metric.rsplit("_", 1)[0] for metric in PAIR_METRICS}
# The low-data variant: every loader worker the machine allows, the augmentations off (documented
# train arguments), so a batch is a cached image letterboxed and little else.
LOWDATA_AUGMENT_OFF = {
    "mosaic": 0.0,
    "hsv_h": 0.0,
    "hsv_s": 0.0,
    "hsv_v": 0.0,
    "translate": 0.0,
    "scale": 0.0,
    "fliplr": 0.0,
}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


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


def warmup_span(trace: Sequence[float]) -> int:
    """Leading steps before ``trace`` settles on its last value (0: constant throughout)."""
    for i in range(len(trace)):
        if all(v == trace[-1] for v in trace[i:]):
            return i
    return 0


def summary_dict(values: Sequence[float], *, skip: int = SKIP_FIRST) -> dict[str, float] | None:
    """Median, min, max and count of ``values`` after the first ``skip`` (all of them when few)."""
    kept = list(values[skip:]) if len(values) > skip + 2 else list(values)
    if not kept:
        return None
    s = summarize(kept)
    return {"median": s.median, "min": s.min, "max": s.max, "count": s.count}


def epoch_summaries(epoch_s: Sequence[float]) -> dict[str, dict[str, float] | None]:
    """A run's first epoch (with the run's one-time start: loader workers, autotuning,
    recordings) and its later epochs (median and range; None with one epoch), apart."""
    first = summary_dict(epoch_s[:1], skip=0)
    steady = summary_dict(epoch_s[1:], skip=0)
    return {"first_epoch_s": first, "steady_epoch_s": steady}


def pair_summary(pairs: Sequence[dict[str, Any]], metric: str) -> dict[str, Any] | None:
    """Per pair, stock/ours of the runs' ``metric`` medians: ratios (above 1: ours faster) and
    savings (1 - ours/stock), each with median and range; None where a pair lacks the metric."""
    stock, ours = [], []
    for pair in pairs:
        a, b = pair["stock"].get(metric), pair["ours"].get(metric)
        if not a or not b:
            return None
        stock.append(a["median"])
        ours.append(b["median"])
    if not stock:
        return None
    ratio = paired_ratios(stock, ours)
    savings = [1.0 - 1.0 / r for r in ratio["per_round"]]
    return {
        "stock_over_ours": ratio,
        "saving": {
            "median": float(statistics.median(savings)),
            "min": min(savings),
            "max": max(savings),
            "per_pair": savings,
        },
    }


def lowdata_wanted(mode: str, shares: Sequence[float | None]) -> bool:
    """Whether to run the low-data variant: ``on``, ``off``, or ``auto`` where any stock data
    wait share reaches :data:`DATA_BOUND_SHARE` (or none was measured)."""
    if mode != "auto":
        return mode == "on"
    measured = [s for s in shares if s is not None]
    return not measured or max(measured) >= DATA_BOUND_SHARE


def _loss_value(items: Any) -> float:
    """The sum of an iteration's loss components (a tensor, or a dict of them)."""
    if items is None:
        return math.nan
    if isinstance(items, dict):
        return float(sum(float(torch.as_tensor(v).sum()) for v in items.values()))
    return float(torch.as_tensor(items).sum())


def _snapshot(items: Any) -> Any:
    """A copy of the loss items that does not wait for the device (read after the run)."""
    if isinstance(items, torch.Tensor):
        return items.detach().clone()
    if isinstance(items, dict):
        return {k: _snapshot(v) for k, v in items.items()}
    return items


class RunLog:
    """Ultralytics callbacks: phase marks at batch start and end, epoch times, the losses.

    Epoch boundaries synchronise (epoch times are the device's); batch boundaries only when the
    clock does (the ``phases`` measurement).
    """

    def __init__(self, device: str, clock: PhaseClock) -> None:
        self.device = device
        self.clock = clock
        self.epoch_s: list[float] = []
        self._loss_items: list[Any] = []
        self._epoch_start = 0.0

    def attach(self, model: Any) -> None:
        model.add_callback("on_train_start", self.train_start)
        model.add_callback("on_train_epoch_start", self.epoch_start)
        model.add_callback("on_train_epoch_end", self.epoch_end)
        model.add_callback("on_train_batch_start", self.batch_start)
        model.add_callback("on_train_batch_end", self.batch_end)

    def train_start(self, trainer: Any) -> None:
        instrument_trainer_objects(trainer, self.clock)

    def epoch_start(self, trainer: Any) -> None:
        _sync(self.device)
        self._epoch_start = time.perf_counter()
        self.clock.break_chain()

    def epoch_end(self, trainer: Any) -> None:
        _sync(self.device)
        self.epoch_s.append(time.perf_counter() - self._epoch_start)

    def batch_start(self, trainer: Any) -> None:
        self.clock.start_iteration()

    def batch_end(self, trainer: Any) -> None:
        self.clock.end_iteration()
        self._loss_items.append(_snapshot(getattr(trainer, "loss_items", None)))

    @property
    def losses(self) -> list[float]:
        """Each iteration's summed loss (reads the device: call after the run)."""
        return [_loss_value(items) for items in self._loss_items]


def _wrap(obj: Any, method: str, clock: PhaseClock, start: str, end: str) -> None:
    """Replace ``obj.method`` (on the instance) by one that marks ``start`` and ``end``."""
    inner = getattr(obj, method, None)
    if inner is None or getattr(inner, "_musgd_timed", False):
        return

    def timed(*args: Any, **kwargs: Any) -> Any:
        clock.mark(start)
        try:
            return inner(*args, **kwargs)
        finally:
            clock.mark(end)

    timed._musgd_timed = True  # type: ignore[attr-defined]
    setattr(obj, method, timed)


def instrument_trainer_objects(trainer: Any, clock: PhaseClock) -> None:
    """Marks around the trainer's EMA update and its gradient scaler's calls (public objects)."""
    ema = getattr(trainer, "ema", None)
    if ema is not None:
        _wrap(ema, "update", clock, "ema_start", "ema_end")
    scaler = getattr(trainer, "scaler", None)
    if scaler is not None:
        _wrap(scaler, "unscale_", clock, "unscale_start", "unscale_end")
        _wrap(scaler, "step", clock, "scaler_step_start", "scaler_step_end")
        _wrap(scaler, "update", clock, "update_start", "update_end")


def timed_trainer(base: type[Any], clock: PhaseClock) -> type[Any]:
    """``base`` with marks around ``preprocess_batch``, ``optimizer_step``, the optimizer's
    ``step`` (its step hooks) and ``zero_grad``; it computes exactly what ``base`` computes."""

    class Timed(base):  # type: ignore[misc,valid-type]
        def preprocess_batch(self, batch: Any) -> Any:
            out = super().preprocess_batch(batch)
            clock.mark("preprocessed")
            return out

        def optimizer_step(self) -> None:
            clock.mark("optimizer_enter")
            super().optimizer_step()
            clock.mark("optimizer_exit")

        def build_optimizer(self, *args: Any, **kwargs: Any) -> Any:
            opt = super().build_optimizer(*args, **kwargs)
            opt.register_step_pre_hook(lambda *_: clock.mark("step_start"))
            opt.register_step_post_hook(lambda *_: clock.mark("step_end"))
            _wrap(opt, "zero_grad", clock, "zero_grad_start", "zero_grad_end")
            return opt

    Timed.__name__ = Timed.__qualname__ = f"Timed{base.__name__}"
    return Timed


def _train_kwargs(
    args: argparse.Namespace, data: Path, batch: int, epochs: int, variant: str = "default"
) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "data": str(data),
        "epochs": epochs,
        "imgsz": args.imgsz,
        "batch": batch,
        "nbs": batch,  # the optimizer steps every iteration
        "device": 0 if args.device == "cuda" else "cpu",
        "workers": args.workers,
        "cache": "ram",
        "plots": False,
        "val": False,
        "save": False,  # no checkpoint writes inside the timed epochs
        "project": str(args.work / "runs"),
        "exist_ok": True,
        "verbose": False,
        "deterministic": False,
        "amp": args.amp,
    }
    if variant == "lowdata":
        kw.update(LOWDATA_AUGMENT_OFF, workers=args.lowdata_workers)
    return kw


def _base_trainer(arm: str, *, network: bool = False) -> type[Any]:
    if arm == "ours":
        return musgd_trainer(capture_network=network)
    from ultralytics.models.yolo.detect import DetectionTrainer

    return DetectionTrainer  # with optimizer="MuSGD": the stock optimizer


def host_snapshot() -> dict[str, Any]:
    """What else the host is doing around a run: the 1-minute load average and the mean CPU
    clock (MHz, from ``/proc/cpuinfo``; None where the system does not say)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    mhz: float | None = None
    try:
        lines = Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
        clocks = [float(line.split(":")[1]) for line in lines if line.startswith("cpu MHz")]
        mhz = round(statistics.fmean(clocks), 1) if clocks else None
    except (OSError, ValueError, IndexError):
        mhz = None
    return {"loadavg_1m": load, "cpu_mhz": mhz}


def train_once(
    args: argparse.Namespace,
    data: Path,
    *,
    arm: str,
    batch: int,
    seed: int,
    synchronize: bool,
    variant: str = "default",
) -> dict[str, Any]:
    """One training run of ``arm``: iteration, compute and epoch times, phases, losses."""
    from ultralytics import YOLO

    iterations_per_epoch = math.ceil(args.n_train / batch)
    epochs = epochs_for(args.iters, iterations_per_epoch)
    clock = PhaseClock((lambda: _sync(args.device)) if synchronize else None)
    log = RunLog(args.device, clock)
    model = YOLO("yolo26n.yaml")
    log.attach(model)
    kw = _train_kwargs(args, data, batch, epochs, variant)
    sync_tag = "sync" if synchronize else "nosync"
    kw.update(seed=seed, name=f"b{batch}-{variant}-{arm}-s{seed}-{sync_tag}")
    kw["trainer"] = timed_trainer(_base_trainer(arm, network=args.ours_network), clock)
    if arm == "stock":
        kw["optimizer"] = "MuSGD"
    host_before = host_snapshot()
    start = time.perf_counter()
    model.train(**kw)
    total = time.perf_counter() - start
    host_after = host_snapshot()
    opt = model.trainer.optimizer
    iterations = clock.iterations
    skip = SKIP_FIRST if len(iterations) > SKIP_FIRST + 2 else 0
    phases = summarize_phases(iterations, skip=skip)
    return {
        "arm": arm,
        "seed": seed,
        "variant": variant,
        "synchronized": synchronize,
        "optimizer": type(opt).__name__,
        "amp": bool(getattr(model.trainer, "amp", False)),
        "workers": kw["workers"],
        "epochs": epochs,
        "iterations": len(iterations),
        "skipped_iterations": skip,
        "iteration_ms": phases.get("iteration"),
        "compute_ms": phases.get("compute"),
        "data_wait_ms": phases.get("data_wait"),
        "phases": phases,
        "epoch_s": log.epoch_s,
        **epoch_summaries(log.epoch_s),
        "run_s": total,
        "trace_ms": phase_trace(iterations),
        "host": {"before": host_before, "after": host_after},
        "losses": log.losses,
        "replay": _replay_stats(opt),
        "clip_replay": _clip_stats(model.trainer),
        "network": _network_stats(model.trainer),
    }


def child_argv(args: argparse.Namespace, data: Path, run: dict[str, Any], out: Path) -> list[str]:
    """The command that runs one :func:`train_once` (``run``: its keyword arguments) in a fresh
    Python process with this process's configuration, writing its result to ``out``."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--device", args.device]
    argv += ["--amp", "true" if args.amp else "false", "--iters", str(args.iters)]
    argv += ["--workers", str(args.workers), "--work", str(args.work)]
    argv += ["--quick"] if args.quick else []
    argv += ["--ours-network"] if args.ours_network else []
    argv += ["--one-run", json.dumps(run, sort_keys=True), "--one-run-data", str(data)]
    return [*argv, "--one-run-out", str(out)]


class UsageError(ValueError):
    """Bad input (an option's value, a file to read): the command exits 2 with this message."""


class RunFailedError(RuntimeError):
    """A training run in its own process exited with an error (its output is in the log)."""


def train_run(args: argparse.Namespace, data: Path, **run: Any) -> dict[str, Any]:
    """:func:`train_once` with the keyword arguments ``run``, in a fresh Python process unless
    ``--isolation none``."""
    time.sleep(args.settle_s)
    if args.isolation == "none":
        return train_once(args, data, **run)
    with tempfile.TemporaryDirectory(prefix="musgd-run-") as tmp:
        out = Path(tmp) / "run.json"
        sys.stdout.flush()
        code = subprocess.run(child_argv(args, data, run, out), check=False).returncode
        if code != 0 or not out.is_file():
            raise RunFailedError(
                f"the training run {run} failed in its own process (exit {code}); its output "
                "is above in this log, and the evidence holds the runs before it"
            )
        result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return result


def run_one(args: argparse.Namespace) -> int:
    """The child side of :func:`train_run`: one run, its result written as JSON."""
    if args.one_run_data is None or args.one_run_out is None or args.work is None:
        raise UsageError("--one-run needs --one-run-data, --one-run-out and --work")
    try:
        run = json.loads(args.one_run)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--one-run must be a JSON object of train_once arguments: {exc}") from exc
    if not isinstance(run, dict):
        raise UsageError(f"--one-run must be a JSON object, got {type(run).__name__}")
    result = train_once(args, args.one_run_data, **run)
    args.one_run_out.write_text(json.dumps(result), encoding="utf-8")
    return 0


def _smooth(values: list[float], width: int = 10) -> list[float]:
    out: list[float] = []
    for i in range(len(values)):
        window = values[max(0, i - width + 1) : i + 1]
        out.append(statistics.fmean(window))
    return out


def _mean_abs_gap(a: list[float], b: list[float]) -> float | None:
    n = min(len(a), len(b))
    if n == 0:
        return None
    sa, sb = _smooth(a[:n]), _smooth(b[:n])
    return statistics.fmean(abs(x - y) for x, y in zip(sa, sb, strict=True))


def _fmt(entry: dict[str, float] | None) -> str:
    if not entry:
        return "n/a"
    return f"{entry['median']:.1f} ({entry['min']:.1f}-{entry['max']:.1f})"


def _run_estimate(args: argparse.Namespace, batch: int, *, per_iteration_s: float) -> float:
    ipe = math.ceil(args.n_train / batch)
    epochs = epochs_for(args.iters, ipe)
    return default_run_s(epochs * ipe, epochs, per_iteration_s=per_iteration_s)


def run_phases(args: argparse.Namespace, data: Path, budget: Budget) -> dict[str, Any]:
    """Per batch size, stock then ours, synchronised at every phase boundary."""
    batches: dict[str, Any] = {}
    for batch in args.batch_sizes:
        arms: dict[str, Any] = {}
        for arm in ARMS:
            key = f"phases-b{batch}"
            default = _run_estimate(args, batch, per_iteration_s=args.per_iteration_s * 1.3)
            if not budget.admit(f"phases batch {batch} {arm}", key, default):
                continue
            start = time.perf_counter()
            run = train_run(args, data, arm=arm, batch=batch, seed=0, synchronize=True)
            budget.record(key, time.perf_counter() - start)
            run.pop("losses")
            arms[arm] = run
            p = run["phases"]
            print(
                f"phases batch {batch} {arm}: iteration {_fmt(p.get('iteration'))} ms, data "
                f"{_fmt(p.get('data_wait'))}, fwd+bwd {_fmt(p.get('forward_backward'))}, "
                f"optimizer.step {_fmt(p.get('optimizer_step'))}, around it "
                f"{_fmt(p.get('around_optimizer'))}, EMA {_fmt(p.get('ema_update'))}"
            )
        batches[str(batch)] = {"arms": arms}
    return {
        "imgsz": args.imgsz,
        "train_images": args.n_train,
        "synchronized": True,
        "isolation": args.isolation,
        "settle_s": args.settle_s,
        "batches": batches,
    }


def round_order(k: int, design: str) -> tuple[str, ...]:
    """The arms of round ``k`` in the order they run: ``ab`` alternates stock-ours and
    ours-stock from round to round; ``abba`` runs that order and then its reverse."""
    order = ARMS if k % 2 == 0 else ARMS[::-1]
    return (*order, *order[::-1]) if design == "abba" else order


# Per-run entries a merged arm (--design abba) combines; the rest comes from its first run.
MERGED_METRICS = (*PAIR_METRICS, "data_wait_ms")


def _merge_entries(entries: Sequence[dict[str, float] | None]) -> dict[str, float] | None:
    """One summary of several runs' summaries of a metric: the mean of their medians (the runs
    have equal weight), the extremes of their ranges, their counts added; None if any lacks it."""
    if not entries or any(e is None for e in entries):
        return None
    kept = [e for e in entries if e is not None]
    return {
        "median": statistics.fmean(e["median"] for e in kept),
        "min": min(e["min"] for e in kept),
        "max": max(e["max"] for e in kept),
        "count": sum(e["count"] for e in kept),
    }


def merge_runs(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """An arm's runs within one round (same arm, seed and batch) as one entry for the pair
    ratios: each metric and phase merged by :func:`_merge_entries`, losses and replay counts
    from the first run (same seed: the same training), ``merged_runs`` saying how many."""
    if len({(r["arm"], r["seed"]) for r in runs}) != 1:
        raise ValueError("merge_runs: the runs must share their arm and seed")
    merged = dict(runs[0])
    for metric in MERGED_METRICS:
        merged[metric] = _merge_entries([r.get(metric) for r in runs])
    phases: dict[str, Any] = {}
    for name in runs[0]["phases"]:
        entry = _merge_entries([r["phases"].get(name) for r in runs])
        if entry is not None:
            phases[name] = entry
    iteration = phases.get("iteration", {}).get("median")
    if iteration:
        for entry in phases.values():
            entry["share"] = entry["median"] / iteration
    merged["phases"] = phases
    merged["merged_runs"] = len(runs)
    return merged


def _summarize_pairs(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"pairs": pairs, "count": len(pairs)}
    for metric, name in PAIR_SUMMARIES.items():
        out[name] = pair_summary(pairs, metric)
    if pairs:
        first = pairs[0]
        out["loss_gap_ours_vs_stock"] = _mean_abs_gap(
            first["ours"]["losses"], first["stock"]["losses"]
        )
    if len(pairs) > 1:
        out["loss_gap_stock_seed1_vs_stock"] = _mean_abs_gap(
            pairs[1]["stock"]["losses"], pairs[0]["stock"]["losses"]
        )
    return out


def run_pairs(
    args: argparse.Namespace,
    data: Path,
    budget: Budget,
    *,
    variant: str,
    pairs: int,
    result: dict[str, Any],
    save: Callable[[], None],
) -> None:
    """``pairs`` rounds over the batch sizes: stock and ours, seed k in round k, the order
    alternating from round to round; with ``--design abba`` each round runs the order and then
    its reverse (stock, ours, ours, stock), so each arm takes both places in every round."""
    collected: dict[int, list[dict[str, Any]]] = {b: [] for b in args.batch_sizes}
    section = result["variants"].setdefault(variant, {"batches": {}})
    section["kwargs"] = {
        k: v for k, v in _train_kwargs(args, Path("-"), 0, 0, variant).items() if k != "data"
    }
    for k in range(pairs):
        order = round_order(k, args.design)
        for batch in args.batch_sizes:
            key = f"train-{variant}-b{batch}"
            run_s = _run_estimate(args, batch, per_iteration_s=args.per_iteration_s)
            if not budget.admit(f"{variant} pair {k} batch {batch}", key, len(order) * run_s):
                continue
            start = time.perf_counter()
            runs = [
                train_run(
                    args, data, arm=arm, batch=batch, seed=k, synchronize=False, variant=variant
                )
                for arm in order
            ]
            pair: dict[str, Any] = {"seed": k, "order": list(order)}
            if len(runs) == len(ARMS):
                pair.update(zip(order, runs, strict=True))
            else:  # abba: each arm's two runs merged; the runs themselves kept in order
                pair.update({arm: merge_runs([r for r in runs if r["arm"] == arm]) for arm in ARMS})
                pair["runs"] = runs
            budget.record(key, time.perf_counter() - start)
            collected[batch].append(pair)
            print(
                f"pair {variant} batch {batch} seed {k}: iteration stock "
                f"{_fmt(pair['stock']['iteration_ms'])} ms, ours "
                f"{_fmt(pair['ours']['iteration_ms'])} ms; data wait stock "
                f"{_fmt(pair['stock']['data_wait_ms'])}, ours {_fmt(pair['ours']['data_wait_ms'])}"
            )
            section["batches"][str(batch)] = _summarize_pairs(collected[batch])
            save()
    for batch in args.batch_sizes:
        entry = section["batches"].get(str(batch))
        if entry is None:
            continue
        for metric in PAIR_SUMMARIES.values():
            summary = entry.get(metric)
            if summary:
                r, sv = summary["stock_over_ours"], summary["saving"]
                print(
                    f"batch {batch} {variant} {metric}: stock/ours {r['median']:.3f} "
                    f"({r['min']:.3f}-{r['max']:.3f}), saving {100 * sv['median']:.1f}% "
                    f"({100 * sv['min']:.1f}-{100 * sv['max']:.1f}%) over {entry['count']} pairs"
                )


def _replay_stats(opt: Any) -> dict[str, Any] | None:
    replay = getattr(opt, "_replay", None)
    return None if replay is None else _stats_dict(replay.stats)


def _clip_stats(trainer: Any) -> dict[str, Any] | None:
    """The trainer's replayed gradient clipping (``musgd_clip``), where it has one."""
    clip = getattr(trainer, "__dict__", {}).get("musgd_clip")
    clip = getattr(clip, "clip", clip)  # under the identity part's ClipCheck
    return None if clip is None else _stats_dict(clip.stats)


def _network_stats(trainer: Any) -> dict[str, Any] | None:
    """The trainer's network capture (``musgd_network``), where it has one."""
    capture = trainer.__dict__.get("musgd_network")
    return None if capture is None else _stats_dict(capture.stats)


def _stats_dict(stats: Any) -> dict[str, Any]:
    return {
        "recordings": stats.recordings,
        "replays": stats.replays,
        "failures": stats.failures,
        "fallbacks": dict(stats.fallbacks),
    }


class ShadowCheck:
    """After each step of ``opt``, an eager twin given the same inputs must match bit for bit."""

    def __init__(self, opt: UltralyticsMuSGD) -> None:
        self.opt = opt
        self.real = [p for g in opt.param_groups for p in g["params"]]
        self.shadow = [torch.nn.Parameter(p.detach().clone()) for p in self.real]
        groups, k = [], 0
        for g in opt.param_groups:
            n = len(g["params"])
            settings = {key: v for key, v in g.items() if key != "params"}
            settings.update(capture_updates=False, capture_orthogonalization=False)
            groups.append({**settings, "params": self.shadow[k : k + n]})
            k += n
        self.eager = UltralyticsMuSGD(groups, muon=opt.muon, sgd=opt.sgd)
        self.steps = 0
        self.mismatched: list[int] = []
        self.lr_trace: list[float] = []
        self.momentum_trace: list[float] = []
        # (shape, strides) of every non-contiguous gradient seen: what the replay must take.
        self.noncontiguous: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
        opt.register_step_pre_hook(self.before)
        opt.register_step_post_hook(self.after)

    @torch.no_grad()
    def before(self, opt: Any, args: Any, kwargs: Any) -> None:
        if self.steps == 0:  # the trainer may touch parameters between build and first step
            for s, p in zip(self.shadow, self.real, strict=True):
                s.copy_(p)
        for g_real, g_eager in zip(opt.param_groups, self.eager.param_groups, strict=True):
            for key in ("lr", "momentum", "weight_decay", "nesterov"):
                g_eager[key] = g_real[key]
        self.lr_trace.append(float(opt.param_groups[0]["lr"]))
        self.momentum_trace.append(float(opt.param_groups[0]["momentum"]))
        for s, p in zip(self.shadow, self.real, strict=True):
            s.grad = None if p.grad is None else p.grad.clone()
            if p.grad is not None and not p.grad.is_contiguous():
                self.noncontiguous.add((tuple(p.grad.shape), tuple(p.grad.stride())))

    @torch.no_grad()
    def after(self, opt: Any, args: Any, kwargs: Any) -> None:
        self.eager.step()
        same = True
        for s, p in zip(self.shadow, self.real, strict=True):
            if not torch.equal(s, p):
                same = False
                break
            st_e, st_r = self.eager.state.get(s, {}), opt.state.get(p, {})
            if st_e.keys() != st_r.keys() or not all(torch.equal(st_e[k], st_r[k]) for k in st_e):
                same = False
                break
        if not same:
            self.mismatched.append(self.steps)
        self.steps += 1


class ClipCheck:
    """Each call of the trainer's replayed clip must give the eager ``clip_grad_norm_``'s bits."""

    def __init__(self, clip: GradClipReplay) -> None:
        self.clip = clip
        self.calls = 0
        self.mismatched: list[int] = []

    @torch.no_grad()
    def __call__(self, parameters: Any) -> torch.Tensor:
        params = list(parameters)
        holders = []
        for p in params:
            if p.grad is not None:
                holder = torch.empty_like(p)
                holder.grad = p.grad.clone(memory_format=torch.preserve_format)
                holders.append(holder)
        expected = torch.nn.utils.clip_grad_norm_(holders, self.clip.max_norm, self.clip.norm_type)
        total = self.clip(params)
        grads = [p.grad for p in params if p.grad is not None]
        same = same_bits(total, expected) and all(
            h.grad is not None and same_bits(g, h.grad) for g, h in zip(grads, holders, strict=True)
        )
        if not same:
            self.mismatched.append(self.calls)
        self.calls += 1
        return total


def run_identity(args: argparse.Namespace, data: Path, budget: Budget) -> dict[str, Any]:
    from ultralytics import YOLO

    base = musgd_trainer()
    checks: list[ShadowCheck] = []
    clip_checks: list[ClipCheck] = []
    scales: list[float] = []

    class IdentityTrainer(base):  # type: ignore[misc,valid-type]
        def build_optimizer(self, *a: Any, **k: Any) -> Any:
            opt = super().build_optimizer(*a, **k)
            checks.append(ShadowCheck(opt))
            clip_checks.append(ClipCheck(GradClipReplay(CLIP_MAX_NORM)))
            self.musgd_clip = clip_checks[-1]
            return opt

    def batch_end(trainer: Any) -> None:
        scaler = getattr(trainer, "scaler", None)
        scales.append(float(scaler.get_scale()) if scaler is not None else math.nan)

    batch = args.identity_batch
    ipe = math.ceil(args.n_train / batch)
    epochs = identity_epochs(args.identity_steps, ipe)
    model = YOLO("yolo26n.yaml")
    model.add_callback("on_train_batch_end", batch_end)
    kw = _train_kwargs(args, data, batch, epochs)
    kw.update(seed=0, name="identity", trainer=IdentityTrainer)
    start = time.perf_counter()
    model.train(**kw)
    budget.record("identity", time.perf_counter() - start)
    check, clip_check = checks[-1], clip_checks[-1]
    lr, mom = check.lr_trace, check.momentum_trace
    steps = check.steps
    return {
        "batch": batch,
        "imgsz": args.imgsz,
        "epochs": epochs,
        "iterations": len(scales),
        "steps": steps,
        "steps_target": args.identity_steps,
        "target_met": steps >= args.identity_steps,
        # Iterations whose optimizer step the gradient scaler skipped (inf/nan under AMP).
        "skipped_steps": len(scales) - steps,
        "scale_first_last": [scales[0], scales[-1]] if scales else None,
        "mismatched_steps": check.mismatched,
        "bit_identical": steps > 0 and not check.mismatched and not clip_check.mismatched,
        # The replayed gradient clipping against the eager call, at every optimizer step.
        "clip_calls": clip_check.calls,
        "clip_mismatched_calls": clip_check.mismatched,
        "clip_replay": _stats_dict(clip_check.clip.stats),
        "amp": bool(getattr(model.trainer, "amp", False)),
        "warmup_active": warmup_span(mom) > 0,
        "warmup_steps": warmup_span(mom),
        "lr_first_last": [lr[0], lr[-1]] if lr else None,
        "momentum_first_last": [mom[0], mom[-1]] if mom else None,
        "replay": _replay_stats(check.opt),
        "noncontiguous_gradients": [list(map(list, t)) for t in sorted(check.noncontiguous)],
    }


def network_run(
    args: argparse.Namespace, data: Path, *, capture: bool, name: str
) -> dict[str, Any]:
    """One deterministic training run of ours, the network eager or captured: each iteration's
    loss (as float hex: exact) and the digest of the final model state."""
    from ultralytics import YOLO

    losses: list[list[str]] = []

    def batch_end(trainer: Any) -> None:
        losses.append([float(x).hex() for x in trainer.loss.detach().reshape(-1).tolist()])

    batch = args.identity_batch
    ipe = math.ceil(args.n_train / batch)
    model = YOLO("yolo26n.yaml")
    model.add_callback("on_train_batch_end", batch_end)
    kw = _train_kwargs(args, data, batch, epochs_for(args.network_iters, ipe))
    kw.update(seed=0, deterministic=True, name=name, trainer=musgd_trainer(capture_network=capture))
    model.train(**kw)
    return {
        "losses": losses,
        # Equal digests, equal bits (dtypes, shapes and bytes of the state, in order).
        "state_sha256": hash_tensors(model.trainer.model.state_dict().values()),
        "network": _network_stats(model.trainer),
        "network_reason": model.trainer.__dict__.get("musgd_network_reason"),
    }


def run_network_identity(args: argparse.Namespace, data: Path, budget: Budget) -> dict[str, Any]:
    """Ours twice with the eager network (is the run reproducible at all?) and once with the
    network captured: the captured run must give the eager run's losses and final state, bit
    for bit, with the network replayed at every iteration but each layout's first two."""
    ipe = math.ceil(args.n_train / args.identity_batch)
    epochs = epochs_for(args.network_iters, ipe)
    default = default_run_s(epochs * ipe, epochs, per_iteration_s=args.per_iteration_s)
    runs: dict[str, dict[str, Any]] = {}
    for name, capture in (("eager", False), ("eager_again", False), ("captured", True)):
        if not budget.admit(f"network {name}", "network", default):
            return {"skipped": budget.skipped[-1], "target_met": False}
        start = time.perf_counter()
        runs[name] = network_run(args, data, capture=capture, name=f"network-{name}")
        budget.record("network", time.perf_counter() - start)
    eager, again, captured = runs["eager"], runs["eager_again"], runs["captured"]

    def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
        return a["losses"] == b["losses"] and a["state_sha256"] == b["state_sha256"]

    first_differing = next(
        (
            i
            for i, (a, b) in enumerate(zip(eager["losses"], captured["losses"], strict=False))
            if a != b
        ),
        None,
    )
    stats = captured["network"] or {}
    fallbacks = stats.get("fallbacks", {})
    # Every iteration replayed but each layout's first (eager by design), and nothing else eager.
    replayed_all = bool(stats) and set(fallbacks) <= {"first-call"}
    replayed_all = replayed_all and stats["replays"] + fallbacks.get("first-call", 0) == len(
        captured["losses"]
    )
    return {
        "batch": args.identity_batch,
        "imgsz": args.imgsz,
        "iterations": len(captured["losses"]),
        "eager_reproducible": same(eager, again),
        "bit_identical": same(eager, captured),
        "first_differing_iteration": first_differing,
        "replayed_all": replayed_all,
        "target_met": replayed_all and same(eager, captured) and same(eager, again),
        "recordings": stats.get("recordings"),
        "replays": stats.get("replays"),
        "network": captured["network"],
        "network_reason": captured["network_reason"],
        "state_sha256": {name: run["state_sha256"] for name, run in runs.items()},
    }


def write_loss_chart(train: dict[str, Any], path: Path) -> Path:
    """Loss curves (10-iteration running mean): stock and ours of the first pair (seed 0) and
    stock of the second (seed 1, the run-to-run noise), per batch size, overlaid."""
    import matplotlib as mpl

    mpl.use("Agg")
    from matplotlib.figure import Figure

    batches = train["variants"]["default"]["batches"]
    figure = Figure(figsize=(5.0 * max(1, len(batches)), 3.6), layout="constrained")
    axes = figure.subplots(1, max(1, len(batches)), squeeze=False)[0]
    for ax, (batch, result) in zip(axes, batches.items(), strict=False):
        pairs = result["pairs"]
        curves = [("stock MuSGD, seed 0", pairs[0]["stock"]), ("ours, seed 0", pairs[0]["ours"])]
        if len(pairs) > 1:
            curves.append(("stock, seed 1", pairs[1]["stock"]))
        for label, run in curves:
            ax.plot(_smooth(run["losses"]), label=label, linewidth=1.2)
        ax.set_title(f"YOLO26n, batch {batch}, {train['imgsz']} px")
        ax.set_xlabel("iteration")
        ax.set_ylabel("training loss (running mean of 10)")
        ax.legend(fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    return path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a CPU check")
    parser.add_argument("--parts", default="identity,phases,train", help="comma-separated")
    parser.add_argument("--batch-sizes", default="4,16")
    parser.add_argument("--pairs", type=int, default=3, help="stock/ours pairs per batch size")
    parser.add_argument(
        "--lowdata",
        choices=("auto", "on", "off"),
        default="auto",
        help=f"pairs with the loader's work cut (auto: where data wait >= {DATA_BOUND_SHARE})",
    )
    parser.add_argument("--lowdata-pairs", type=int, default=2)
    parser.add_argument("--iters", type=int, default=None, help="iterations per training run")
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
        "--network-iters",
        type=int,
        default=None,
        help="iterations of each run of the network part (default 120; 8 with --quick)",
    )
    parser.add_argument(
        "--design",
        choices=("ab", "abba"),
        default="ab",
        help="a round is stock and ours (ab, the order alternating by round) or the order and "
        "its reverse (abba: each arm first and last once per round)",
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
        "--chart-from", type=Path, default=None, help="only draw the loss chart of this evidence"
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="dataset and runs (default: a temporary folder)"
    )
    return parser


def configure(args: argparse.Namespace) -> argparse.Namespace:
    """Sizes for the device: 640 px on the GPU, 64 px and a few iterations with ``--quick``."""
    args.batch_sizes = [int(b) for b in str(args.batch_sizes).split(",")]
    args.parts = [p for p in str(args.parts).split(",") if p]
    unknown = set(args.parts) - {"identity", "network", "phases", "train"}
    if unknown:
        raise UsageError(f"unknown parts {sorted(unknown)}: use identity, network, phases, train")
    args.amp = args.amp == "true"
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
    args.identity_steps = steps if args.identity_steps is None else args.identity_steps
    if args.network_iters is None:
        args.network_iters = 8 if args.quick else 120
    if args.network_iters < 1:
        raise UsageError(f"--network-iters must be 1 or more, got {args.network_iters}")
    return args


def plan_lines(args: argparse.Namespace, budget: Budget) -> list[str]:
    """The parts' estimated durations (defaults; each run later uses what was observed)."""
    lines, total = [], 0.0
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
    runs = {
        b: _run_estimate(args, b, per_iteration_s=args.per_iteration_s) for b in args.batch_sizes
    }
    if "phases" in args.parts:
        est = 2 * 1.3 * sum(runs.values())
        lines.append(f"plan: phases 2 runs x {len(runs)} batch sizes, about {est:.0f} s")
        total += est
    if "train" in args.parts:
        est = len(round_order(0, args.design)) * args.pairs * sum(runs.values())
        lines.append(f"plan: train {args.pairs} pairs x {len(runs)} batch sizes, about {est:.0f} s")
        total += est
        if args.lowdata != "off":
            est = len(round_order(0, args.design)) * args.lowdata_pairs * sum(runs.values())
            lines.append(
                f"plan: lowdata ({args.lowdata}) {args.lowdata_pairs} pairs, about {est:.0f} s"
            )
            total += est
    limit = "none" if budget.limit_s is None else f"{budget.limit_s:.0f} s"
    lines.append(f"plan: estimated total {total:.0f} s, budget {limit}")
    return lines


def read_train_results(path: Path) -> dict[str, Any]:
    """The ``results`` of an ``ultralytics-train`` evidence file, or a UsageError saying why
    the file cannot be one."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--chart-from: cannot read {path}: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"--chart-from: {path} is not JSON: {exc}") from exc
    results = document.get("results") if isinstance(document, dict) else None
    if not isinstance(results, dict) or not isinstance(results.get("variants"), dict):
        raise UsageError(
            f"--chart-from: {path} is not an ultralytics-train evidence file (no results.variants)"
        )
    return results


def main(argv: list[str] | None = None) -> int:
    """The command: bad input exits 2 with the parser's usage and a message saying what is
    wrong, like argparse's own errors."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return _run(args, argv)
    except UsageError as exc:
        parser.error(str(exc))


def _run(args: argparse.Namespace, argv: list[str] | None) -> int:
    if args.chart_from is not None:
        train = read_train_results(args.chart_from)
        print("wrote", write_loss_chart(train, args.out / "ultralytics-loss.png"))
        return 0
    budget = Budget(args.budget_s)  # before importing ultralytics: that is spent time too
    configure(args)  # bad options are refused first, with or without ultralytics
    try:
        require_ultralytics()
    except ImportError as exc:  # its message says how to install it
        raise UsageError(str(exc)) from exc
    if args.one_run is not None:
        return run_one(args)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: use --device cpu --quick", file=sys.stderr)
        return 2
    for line in plan_lines(args, budget):
        print(line)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.work is None:
        args.work = Path(tempfile.mkdtemp(prefix="musgd-ultralytics-"))
    data = write_synthetic_dataset(
        args.work / "data", train_images=args.n_train, val_images=4, size=args.imgsz, seed=0
    ).yaml
    device = torch.device("cuda" if args.device == "cuda" else "cpu")
    argv_used = sys.argv[1:] if argv is None else argv

    def save(kind: str, result: dict[str, Any]) -> None:
        evidence = build_evidence(
            kind,
            result,
            device=device,
            argv=argv_used,
            commit=args.commit,
            program=("scripts/ultralytics_gpu.py",),
        )
        write_evidence(evidence, args.out / f"{kind}.json")

    rc = 0
    if "identity" in args.parts:
        identity = run_identity(args, data, budget)
        print("identity:", {k: v for k, v in identity.items() if k != "replay"})
        print("identity replay:", identity["replay"])
        save("ultralytics-identity", identity)
        print("wrote", args.out / "ultralytics-identity.json")
        rc |= 0 if identity["bit_identical"] and identity["target_met"] else 1
    if "network" in args.parts:
        network = run_network_identity(args, data, budget)
        print("network:", {k: v for k, v in network.items() if k != "state_sha256"})
        save("ultralytics-network", network)
        print("wrote", args.out / "ultralytics-network.json")
        rc |= 0 if network["target_met"] else 1
    shares: list[float | None] = []
    if "phases" in args.parts:
        phases = run_phases(args, data, budget)
        phases["budget"] = budget.as_dict()
        save("ultralytics-phases", phases)
        print("wrote", args.out / "ultralytics-phases.json")
        shares.extend(
            data_wait_share(entry["arms"]["stock"]["phases"])
            for entry in phases["batches"].values()
            if "stock" in entry["arms"]
        )
    if "train" in args.parts:
        train: dict[str, Any] = {
            "imgsz": args.imgsz,
            "train_images": args.n_train,
            "iterations_per_run": args.iters,
            "skip_first": SKIP_FIRST,
            "isolation": args.isolation,
            "settle_s": args.settle_s,
            "design": args.design,
            "ours_network": args.ours_network,
            "variants": {},
        }

        def save_train() -> None:
            train["budget"] = budget.as_dict()
            save("ultralytics-train", train)

        run_pairs(
            args, data, budget, variant="default", pairs=args.pairs, result=train, save=save_train
        )
        if not shares:  # no phases part: the unsynchronised stock data wait of the pairs
            for entry in train["variants"]["default"]["batches"].values():
                shares.extend(data_wait_share(p["stock"]["phases"]) for p in entry["pairs"])
        wanted = lowdata_wanted(args.lowdata, shares)
        train["lowdata_decision"] = {
            "mode": args.lowdata,
            "stock_data_wait_shares": shares,
            "threshold": DATA_BOUND_SHARE,
            "ran": wanted,
        }
        print(f"lowdata: {train['lowdata_decision']}")
        if wanted:
            run_pairs(
                args,
                data,
                budget,
                variant="lowdata",
                pairs=args.lowdata_pairs,
                result=train,
                save=save_train,
            )
        save_train()
        print("wrote", args.out / "ultralytics-train.json")
        if train["variants"]["default"]["batches"]:
            print("wrote", write_loss_chart(train, args.out / "ultralytics-loss.png"))
    print(f"budget: used {budget.used():.0f} s, skipped {len(budget.skipped)} runs")
    return rc


def cli() -> int:
    """:func:`main` for the command line: a training run that failed in its own process ends the
    script with a message (what ran before it is already written), not a traceback."""
    try:
        return main()
    except RunFailedError as exc:
        print(f"ultralytics_gpu: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(cli())
