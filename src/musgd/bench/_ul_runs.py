"""The trainer benchmark's training runs: one run of an arm, in this process or a fresh one.

A run trains the task's YOLO26n in the Ultralytics trainer as its arm says
(:data:`musgd.bench._ul_arms.ARM_TABLE`: ``stock``, the task's trainer class with its own
``MuSGD``; ``ours``, :func:`musgd.ultralytics.musgd_trainer` of that class; and their variants)
and keeps, through the documented callbacks and timing wrappers that change nothing computed, the
iteration's phases, epoch times, losses and the replay counters. Every run of ``phases`` and
``train`` runs in a fresh Python process (``--isolation process``, the default), as a user's
training does: it inherits nothing from the runs before it (models, optimizers, recordings,
loader threads, allocator and collector state). ``--settle-s S`` waits S seconds before each.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import musgd
from musgd._replay import GRAPHS
from musgd.bench._host import host_profiler, summarize_host
from musgd.bench._kernels import KernelWindow, window_bounds
from musgd.bench._syncs import SyncCounter
from musgd.bench._trainer_phases import PhaseClock, phase_trace, summarize_phases
from musgd.bench._ul_arms import (
    ARM_TABLE,
    BASE_SUFFIX,
    ChannelsLastAtStart,
    arm_of,
    channels_last_weights,
    is_base,
)
from musgd.bench._ul_design import (
    SKIP_FIRST,
    epoch_summaries,
    merge_runs,
    round_order,
    summarize_pairs,
)
from musgd.bench._ul_plan import (
    LAYOUT_CHOICES,
    Budget,
    UsageError,
    epochs_for,
    nbs_setting,
    round_estimate,
)
from musgd.bench._ul_report import format_entry as fmt
from musgd.ultralytics import musgd_trainer, task_trainer

__all__ = [
    "LOWDATA_AUGMENT_OFF",
    "RunFailedError",
    "RunLog",
    "arm_options",
    "arm_records",
    "child_argv",
    "child_env",
    "clip_stats",
    "cuda_segments",
    "ema_stats",
    "host_snapshot",
    "loss_stats",
    "network_stats",
    "ours_argv",
    "ours_options",
    "pool_split",
    "replay_stats",
    "run_host",
    "run_one",
    "run_pairs",
    "run_phases",
    "run_syncs",
    "stats_dict",
    "timed_trainer",
    "train_kwargs",
    "train_once",
    "train_run",
]

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


# Iterations at a run's start whose reserved memory each run records (the recordings are made
# in the first two or three).
MEMORY_TRACE_ITERATIONS = 8


def reserved_mib() -> dict[str, float]:
    """The CUDA caching allocator's reserved peak so far and what it reserves now, MiB."""
    mib = 2**20
    return {
        "peak_reserved": round(torch.cuda.max_memory_reserved() / mib, 1),
        "reserved": round(torch.cuda.memory_reserved() / mib, 1),
    }


class RunLog:
    """Ultralytics callbacks: phase marks at batch start and end, epoch times, the losses.

    Epoch boundaries synchronise (epoch times are the device's); batch boundaries only when the
    clock does (the ``phases`` measurement).
    """

    def __init__(
        self,
        device: str,
        clock: PhaseClock,
        syncs: SyncCounter | None = None,
        kernels: KernelWindow | None = None,
    ) -> None:
        self.device = device
        self.clock = clock
        self.syncs = syncs
        self.kernels = kernels
        self.epoch_s: list[float] = []
        # Per epoch on CUDA: the reserved peak so far and what is reserved at its end (MiB),
        # which says whether the run's peak came with the recordings or in steady state.
        self.epoch_memory_mib: list[dict[str, float]] = []
        # The same for each of the first MEMORY_TRACE_ITERATIONS iterations (the allocator's
        # counters, no synchronization): which iteration, recording or eager, set the peak.
        self.memory_trace_mib: list[dict[str, float]] = []
        self.train_started: float | None = None
        self._loss_items: list[Any] = []
        self._epoch_start = 0.0

    def attach(self, model: Any) -> None:
        model.add_callback("on_train_start", self.train_start)
        model.add_callback("on_train_epoch_start", self.epoch_start)
        model.add_callback("on_train_epoch_end", self.epoch_end)
        model.add_callback("on_train_batch_start", self.batch_start)
        model.add_callback("on_train_batch_end", self.batch_end)

    def train_start(self, trainer: Any) -> None:
        self.train_started = time.perf_counter()
        instrument_trainer_objects(trainer, self.clock)

    def epoch_start(self, trainer: Any) -> None:
        _sync(self.device)
        self._epoch_start = time.perf_counter()
        self.clock.break_chain()

    def epoch_end(self, trainer: Any) -> None:
        _sync(self.device)
        self.epoch_s.append(time.perf_counter() - self._epoch_start)
        if torch.device(self.device).type == "cuda":
            self.epoch_memory_mib.append(reserved_mib())

    def batch_start(self, trainer: Any) -> None:
        instrument_network(trainer, self.clock)
        if self.syncs is not None:
            self.syncs.start_iteration()
        if self.kernels is not None:
            self.kernels.start_iteration()
        self.clock.start_iteration()

    def batch_end(self, trainer: Any) -> None:
        self.clock.end_iteration()
        trace = self.memory_trace_mib
        if len(trace) < MEMORY_TRACE_ITERATIONS and torch.device(self.device).type == "cuda":
            trace.append(reserved_mib())
        if self.syncs is not None:
            self.syncs.end_iteration()
        if self.kernels is not None:
            self.kernels.end_iteration()
        loss = trainer.__dict__.get("musgd_loss")  # the device loss: this iteration's items
        items = getattr(loss, "device_items", None) if loss is not None else None
        if items is None:
            items = getattr(trainer, "loss_items", None)
        self._loss_items.append(_snapshot(items))

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


def _wrap_scale(scaler: Any, clock: PhaseClock) -> None:
    """Mark ``backward_start`` at the scaler's ``scale`` (the trainer scales its loss for the
    backward, observed on 8.4: ``scaler.scale(loss).backward()``) and ``backward_end`` when that
    scaled loss's ``backward`` returns: an instance attribute on the returned tensor, which the
    trainer's call finds before the class's method; nothing computed changes."""
    inner = getattr(scaler, "scale", None)
    if inner is None or getattr(inner, "_musgd_timed", False):
        return

    def scale(*args: Any, **kwargs: Any) -> Any:
        clock.mark("backward_start")
        out = inner(*args, **kwargs)
        if isinstance(out, torch.Tensor):
            backward: Callable[..., Any] = out.backward

            def timed_backward(*b_args: Any, **b_kwargs: Any) -> Any:
                try:
                    return backward(*b_args, **b_kwargs)
                finally:
                    clock.mark("backward_end")

            out.backward = timed_backward  # type: ignore[method-assign]
        return out

    scale._musgd_timed = True  # type: ignore[attr-defined]
    scaler.scale = scale


def instrument_trainer_objects(trainer: Any, clock: PhaseClock) -> None:
    """Marks around the trainer's EMA update and its gradient scaler's calls (public objects)."""
    ema = getattr(trainer, "ema", None)
    if ema is not None:
        _wrap(ema, "update", clock, "ema_start", "ema_end")
    if callable(getattr(trainer, "musgd_update_ema", None)):  # skip_nonfinite's fused EMA
        _wrap(trainer, "musgd_update_ema", clock, "ema_start", "ema_end")
    scaler = getattr(trainer, "scaler", None)
    if callable(getattr(trainer, "musgd_unscale", None)):  # the scaler's unscale_, eagerly
        _wrap(trainer, "musgd_unscale", clock, "unscale_start", "unscale_end")
    elif scaler is not None:
        _wrap(scaler, "unscale_", clock, "unscale_start", "unscale_end")
    if scaler is not None:
        _wrap(scaler, "step", clock, "scaler_step_start", "scaler_step_end")
        _wrap(scaler, "update", clock, "update_start", "update_end")
        _wrap_scale(scaler, clock)


def instrument_network(trainer: Any, clock: PhaseClock) -> None:
    """Marks around the network's forward: the model's ``predict``, which the loss call reaches
    (observed on 8.4; with ``capture_network`` the capture's own ``predict``, installed at the
    first batch, so this runs at every batch start and wraps whichever is there)."""
    model = getattr(trainer, "model", None)
    if model is not None and callable(getattr(model, "predict", None)):
        _wrap(model, "predict", clock, "forward_start", "forward_end")


def timed_trainer(base: type[Any], clock: PhaseClock) -> type[Any]:
    """``base`` with marks around ``preprocess_batch``, ``optimizer_step``, the optimizer's
    ``step`` (its step hooks) and ``zero_grad``; it computes exactly what ``base`` computes."""

    class Timed(base):  # type: ignore[misc]
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


def train_kwargs(
    args: argparse.Namespace, data: Path, batch: int, epochs: int, variant: str = "default"
) -> dict[str, Any]:
    """The ``model.train`` arguments of a run at ``batch`` for ``epochs`` (``variant``
    ``lowdata``: more loader workers, the augmentations off)."""
    kw: dict[str, Any] = {
        "data": str(data),
        "epochs": epochs,
        "imgsz": args.imgsz,
        "batch": batch,
        # By default the optimizer steps every iteration; --nbs makes the trainer accumulate.
        "nbs": batch if args.nbs is None else args.nbs,
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


def ours_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``musgd_trainer`` options of our arm, as the command line sets them (``--ours-*``)."""
    return {
        "capture_network": args.ours_network,
        "skip_nonfinite": args.ours_guard,
        "channels_last": LAYOUT_CHOICES[args.ours_channels_last],
        "compile_network": args.ours_compile,
        "device_loss": args.ours_device_loss,
    }


def ours_argv(args: argparse.Namespace) -> list[str]:
    """The ``--ours-*`` arguments that give a child process :func:`ours_options`."""
    argv = ["--ours-channels-last", args.ours_channels_last]
    flags = (
        ("--ours-network", args.ours_network),
        ("--ours-guard", args.ours_guard),
        ("--ours-compile", args.ours_compile),
        ("--ours-device-loss", args.ours_device_loss),
    )
    return argv + [flag for flag, on in flags if on]


def arm_options(arm: str, args: argparse.Namespace) -> dict[str, Any]:
    """The ``musgd_trainer`` options of one of our arms: the ``--ours-*`` flags for ``ours``,
    the table's for the others."""
    options = arm_of(arm).options
    return ours_options(args) if options is None else dict(options)


def arm_records(args: argparse.Namespace) -> dict[str, Any]:
    """What each arm of ``--arms`` trains (:meth:`Arm.record`), in their order."""
    base = {"musgd_source": str(args.base_src), "musgd_commit": args.base_commit}
    return {
        arm: {**arm_of(arm).record(ours_options(args)), **(base if is_base(arm) else {})}
        for arm in args.arms
    }


def _base_trainer(arm: str, args: argparse.Namespace) -> type[Any]:
    base = task_trainer(args.task)
    if arm_of(arm).ours:
        return musgd_trainer(base, **arm_options(arm, args))
    return base  # with optimizer="MuSGD": the stock optimizer


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
    count_syncs: bool = False,
    profile_kernels: bool = False,
    profile_host: bool = False,
) -> dict[str, Any]:
    """One training run of ``arm`` (a name of :data:`ARM_TABLE`): iteration, compute and epoch
    times, phases, losses, the model's layout at the end (and, with ``count_syncs``, the host
    synchronizations of each iteration: :class:`SyncCounter`; with ``profile_kernels``, the
    device's work over a window of steady iterations: :class:`KernelWindow`; with
    ``profile_host``, the host's functions over such a window: ``musgd.bench._host``)."""
    if arm not in ARM_TABLE:  # a child told an arm by name: refused before any import
        raise UsageError(f"unknown arm {arm!r}: the arms are {', '.join(ARM_TABLE)}")
    spec = ARM_TABLE[arm]
    from ultralytics import YOLO

    iterations_per_epoch = math.ceil(args.n_train / batch)
    epochs = epochs_for(args.iters, iterations_per_epoch)
    clock = PhaseClock(
        (lambda: _sync(args.device)) if synchronize else None,
        trace_iterations=args.trace_iterations,
        probe=memory_probe if args.device == "cuda" else None,
    )
    syncs = SyncCounter() if count_syncs else None
    if profile_kernels and profile_host:
        raise UsageError("a run profiles the device's kernels or the host's functions, not both")
    kernels = None
    if profile_kernels or profile_host:
        first, count = window_bounds(epochs * iterations_per_epoch, SKIP_FIRST)
        kernels = (
            KernelWindow(
                args.device,
                start=first,
                count=count,
                profiler=host_profiler,
                summarize=summarize_host,
            )
            if profile_host
            else KernelWindow(args.device, start=first, count=count)
        )
    log = RunLog(args.device, clock, syncs, kernels)
    model = YOLO(args.model)
    log.attach(model)
    layout_callback = ChannelsLastAtStart() if spec.channels_last_callback else None
    if layout_callback is not None:
        model.add_callback("on_train_start", layout_callback)
    kw = train_kwargs(args, data, batch, epochs, variant)
    sync_tag = "sync" if synchronize else "nosync"
    kw.update(seed=seed, name=f"b{batch}-{variant}-{arm}-s{seed}-{sync_tag}")
    base = _base_trainer(arm, args)
    kw["trainer"] = timed_trainer(base, clock)
    if not spec.ours:
        kw["optimizer"] = "MuSGD"
    kw.update(spec.train_args)
    host_before = host_snapshot()
    cuda = torch.device(args.device).type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    if syncs is not None:
        with syncs.counting():
            model.train(**kw)
    else:
        model.train(**kw)
    total = time.perf_counter() - start
    if kernels is not None:
        kernels.finish()
    host_after = host_snapshot()
    opt = model.trainer.optimizer
    iterations = clock.iterations
    skip = SKIP_FIRST if len(iterations) > SKIP_FIRST + 2 else 0
    phases = summarize_phases(iterations, skip=skip)
    return {
        "arm": arm,
        "musgd": str(Path(musgd.__file__).resolve().parent),  # the package this run trained with
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
        # model.train() to the trainer's on_train_start: dataset, model, optimizer, AMP check.
        "setup_s": None if log.train_started is None else log.train_started - start,
        "epoch_memory_mib": log.epoch_memory_mib,
        "memory_trace_mib": log.memory_trace_mib,
        "process_s": None,  # the run's own process's wall time, where it has one (train_run)
        "trace_ms": phase_trace(iterations),
        "host": {"before": host_before, "after": host_after},
        "losses": log.losses,
        "replay": replay_stats(opt),
        "clip_replay": clip_stats(model.trainer),
        "ema_replay": ema_stats(model.trainer),
        "network": network_stats(model.trainer),
        "loss": loss_stats(model.trainer),
        "loss_reason": model.trainer.__dict__.get("musgd_loss_reason"),
        "skipped_steps": getattr(model.trainer, "musgd_skipped", None),
        "channels_last": getattr(model.trainer, "musgd_channels_last", None),
        "compiled": getattr(model.trainer, "musgd_compiled", None),
        "layout": channels_last_weights(getattr(model.trainer, "model", None)),
        "layout_callback": None if layout_callback is None else layout_callback.converted,
        "memory_mib": peak_memory_mib() if cuda else None,
        # Where the memory reserved at the run's end lies: eager work's pool, the recordings'.
        "pools_at_end_mib": pool_split(cuda_segments()) if cuda else None,
        "host_syncs": None if syncs is None else syncs.summary(skip),
        "kernels": None if kernels is None or profile_host else kernels.summary,
        "host_profile": kernels.summary if kernels is not None and profile_host else None,
    }


def peak_memory_mib() -> dict[str, float]:
    """The CUDA caching allocator's peaks since the last reset: allocated and reserved, MiB."""
    mib = 1024.0 * 1024.0
    return {
        "peak_allocated": round(torch.cuda.max_memory_allocated() / mib, 1),
        "peak_reserved": round(torch.cuda.max_memory_reserved() / mib, 1),
    }


def memory_probe() -> str:
    """The CUDA caching allocator's reserved and allocated memory now, and their peaks so far,
    MiB: what each phase trace line carries (where in an iteration the reserved peak comes)."""
    mib = 1024.0 * 1024.0
    return (
        f"reserved={torch.cuda.memory_reserved() / mib:.1f} "
        f"peak_reserved={torch.cuda.max_memory_reserved() / mib:.1f} "
        f"allocated={torch.cuda.memory_allocated() / mib:.1f} "
        f"peak_allocated={torch.cuda.max_memory_allocated() / mib:.1f}"
    )


def cuda_segments() -> list[dict[str, Any]]:
    """The CUDA caching allocator's reserved segments now (``torch.cuda.memory_snapshot``)."""
    segments: list[dict[str, Any]] = torch.cuda.memory_snapshot()  # type: ignore[no-untyped-call]
    return segments


# The largest private pools listed one by one in :func:`pool_split`; the rest are summed.
LISTED_POOLS = 8


def pool_split(segments: list[dict[str, Any]]) -> dict[str, Any]:
    """The reserved segments of a ``torch.cuda.memory_snapshot()`` split by memory pool, MiB.

    ``caching``: the caching allocator's own segments (pool id ``(0, 0)``), which eager work
    shares and reuses, with the block sizes in use that hold most of it; ``private``: the pools
    of CUDA graph recordings, each held for as long as its graph lives. Per pool: segments,
    reserved and allocated (in use by live tensors); the largest private pools one by one,
    largest first.
    """
    mib = 1024.0 * 1024.0
    pools: dict[tuple[int, ...], list[float]] = {}
    live: dict[int, int] = {}  # the caching allocator's blocks in use: size -> count
    for seg in segments:
        key = tuple(seg.get("segment_pool_id") or (0, 0))
        entry = pools.setdefault(key, [0.0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += seg["total_size"]
        entry[2] += seg["allocated_size"]
        if key == (0, 0):
            for block in seg.get("blocks", ()):
                if block.get("state") == "active_allocated":
                    live[block["size"]] = live.get(block["size"], 0) + 1

    def record(entry: list[float]) -> dict[str, float]:
        return {
            "segments": int(entry[0]),
            "reserved": round(entry[1] / mib, 1),
            "allocated": round(entry[2] / mib, 1),
        }

    caching = pools.pop((0, 0), [0.0, 0.0, 0.0])
    private = sorted(pools.values(), key=lambda e: e[1], reverse=True)
    total = [sum(e[i] for e in private) for i in range(3)]
    by_bytes = sorted(live.items(), key=lambda sc: sc[0] * sc[1], reverse=True)
    return {
        "caching": {
            **record(caching),
            # What holds it: the block sizes in use that hold the most, [MiB, count] each.
            "largest_live": [[round(size / mib, 2), n] for size, n in by_bytes[:LISTED_POOLS]],
        },
        "private": {
            **record(total),
            "pools": len(private),
            "largest": [record(e) for e in private[:LISTED_POOLS]],
        },
    }


def child_argv(args: argparse.Namespace, data: Path, run: dict[str, Any], out: Path) -> list[str]:
    """The command that runs one :func:`train_once` (``run``: its keyword arguments) in a fresh
    Python process with this process's configuration, writing its result to ``out``."""
    argv = [sys.executable, "-m", "musgd.bench", "ultralytics", "--device", args.device]
    argv += ["--task", args.task, "--model", args.model]
    argv += ["--amp", "true" if args.amp else "false", "--iters", str(args.iters)]
    argv += ["--train-images", str(args.n_train)]  # the epoch's length: epochs = iters / epoch
    argv += ["--workers", str(args.workers), "--work", str(args.work)]
    argv += [] if args.nbs is None else ["--nbs", str(args.nbs)]
    argv += ["--quick"] if args.quick else []
    argv += ["--trace-iterations", str(args.trace_iterations)] if args.trace_iterations else []
    argv += ours_argv(args)
    argv += ["--one-run", json.dumps(run, sort_keys=True), "--one-run-data", str(data)]
    return [*argv, "--one-run-out", str(out)]


def child_env(source_dir: Path | None = None) -> dict[str, str]:
    """This environment with the ``musgd`` this process runs (or ``source_dir``'s, for an
    ``@base`` arm) first on ``PYTHONPATH``: the child runs that code (a source tree's, not
    another installed copy); and Python's fault handler on, so that a run that dies of a
    signal (the segmentation fault WP-024 follows) writes every thread's stack into the log."""
    source = str(source_dir or Path(musgd.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return {
        **os.environ,
        "PYTHONPATH": source if not path else f"{source}{os.pathsep}{path}",
        "PYTHONFAULTHANDLER": "1",
    }


class RunFailedError(RuntimeError):
    """A training run in its own process exited with an error (its output is in the log)."""


def train_run(args: argparse.Namespace, data: Path, **run: Any) -> dict[str, Any]:
    """:func:`train_once` with the keyword arguments ``run``, in a fresh Python process unless
    ``--isolation none``; ``process_s`` is that process's wall time as this one saw it (its
    start-up, imports, model build, compilation and recordings count)."""
    time.sleep(args.settle_s)
    if args.isolation == "none":
        return train_once(args, data, **run)
    arm = str(run.get("arm", ""))
    base = is_base(arm)
    if base:  # the other musgd knows the arm by its own name
        run = {**run, "arm": arm.removesuffix(BASE_SUFFIX)}
    with tempfile.TemporaryDirectory(prefix="musgd-run-") as tmp:
        out = Path(tmp) / "run.json"
        sys.stdout.flush()
        argv = child_argv(args, data, run, out)
        env = child_env(args.base_src if base else None)
        start = time.perf_counter()
        code = subprocess.run(argv, check=False, env=env).returncode
        process_s = time.perf_counter() - start
        if code != 0 or not out.is_file():
            raise RunFailedError(
                f"the training run {run} failed in its own process (exit {code}); its output "
                "is above in this log, and the evidence holds the runs before it"
            )
        result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    result["process_s"] = process_s
    if base:
        result["arm"] = arm
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


def _one_run_per_arm(
    args: argparse.Namespace,
    data: Path,
    budget: Budget,
    part: str,
    *,
    slowdown: float,
    describe: Callable[[dict[str, Any]], str],
    **run_options: Any,
) -> dict[str, Any]:
    """Per batch size, one run of each arm of ``--arms`` in order with ``run_options``, each
    admitted by the budget (``slowdown``: its cost over a plain run) and described in a line."""
    batches: dict[str, Any] = {}
    for batch in args.batch_sizes:
        arms: dict[str, Any] = {}
        for arm in args.arms:
            key = f"{part}-b{batch}-{arm}"
            per_iteration_s = args.per_iteration_s * slowdown
            default = round_estimate(args, batch, [arm], per_iteration_s=per_iteration_s)
            if not budget.admit(f"{part} batch {batch} {arm}", key, default):
                continue
            start = time.perf_counter()
            run = train_run(args, data, arm=arm, batch=batch, seed=0, **run_options)
            budget.record(key, time.perf_counter() - start)
            run.pop("losses")
            arms[arm] = run
            print(f"{part} batch {batch} {arm}: {describe(run)}")
        batches[str(batch)] = {"arms": arms}
    return batches


def _describe_phases(run: dict[str, Any]) -> str:
    p = run["phases"]
    return (
        f"iteration {fmt(p.get('iteration'))} ms, data {fmt(p.get('data_wait'))}, fwd+bwd "
        f"{fmt(p.get('forward_backward'))}, optimizer.step {fmt(p.get('optimizer_step'))}, "
        f"around it {fmt(p.get('around_optimizer'))}, EMA {fmt(p.get('ema_update'))}"
    )


def _describe_syncs(run: dict[str, Any]) -> str:
    syncs = run["host_syncs"]["per_iteration"]
    return (
        f"iteration {fmt(run['iteration_ms'])} ms, host synchronizations per iteration median "
        f"{syncs['median']} (min {syncs['min']}, max {syncs['max']})"
    )


def run_phases(args: argparse.Namespace, data: Path, budget: Budget) -> dict[str, Any]:
    """Per batch size, a run of each arm, synchronised at every phase boundary."""
    batches = _one_run_per_arm(
        args, data, budget, "phases", slowdown=1.3, describe=_describe_phases, synchronize=True
    )
    return {
        "imgsz": args.imgsz,
        "train_images": args.n_train,
        "nbs": nbs_setting(args),
        "synchronized": True,
        "isolation": args.isolation,
        "settle_s": args.settle_s,
        "arms": arm_records(args),
        "batches": batches,
    }


def _unsynchronised_part(
    args: argparse.Namespace,
    data: Path,
    budget: Budget,
    part: str,
    describe: Callable[[dict[str, Any]], str],
    **measure: bool,
) -> dict[str, Any]:
    """Per batch size, a run of each arm, unsynchronised, with ``measure`` (``train_once``'s
    ``count_syncs``, ``profile_kernels`` or ``profile_host``) on: a part's evidence."""
    batches = _one_run_per_arm(
        args, data, budget, part, slowdown=1.2, describe=describe, synchronize=False, **measure
    )
    return {
        "imgsz": args.imgsz,
        "train_images": args.n_train,
        "nbs": nbs_setting(args),
        "synchronized": False,
        "ours": ours_options(args),
        "arms": arm_records(args),
        "isolation": args.isolation,
        "batches": batches,
    }


def run_syncs(args: argparse.Namespace, data: Path, budget: Budget) -> dict[str, Any]:
    """Per batch size, a run of each arm, unsynchronised, with every host synchronization of
    every iteration counted (:class:`musgd.bench._syncs.SyncCounter`) and the phase marks."""
    return _unsynchronised_part(args, data, budget, "syncs", _describe_syncs, count_syncs=True)


def _describe_kernels(run: dict[str, Any]) -> str:
    window = run.get("kernels")
    if not window:
        return f"iteration {fmt(run['iteration_ms'])} ms, no profiled window"
    share = window["busy_share"]
    noun = "kernels" if str(window["timed"]).startswith("device") else "operators"
    return (
        f"iteration {fmt(run['iteration_ms'])} ms; over {window['iterations']} profiled "
        f"iterations {window['wall_ms']:.2f} ms each, {window['timed']} busy "
        f"{window['busy_ms']:.2f} ms ({'-' if share is None else f'{share:.0%}'}), "
        f"{window['kernels']:.0f} {noun} per iteration"
    )


def run_kernels(args: argparse.Namespace, data: Path, budget: Budget) -> dict[str, Any]:
    """Per batch size, a run of each arm, unsynchronised but for the two ends of a window of
    steady iterations whose device work is profiled (:class:`musgd.bench._kernels.KernelWindow`):
    how busy the device is, and with which kernels."""
    return _unsynchronised_part(
        args, data, budget, "kernels", _describe_kernels, profile_kernels=True
    )


def _describe_host(run: dict[str, Any]) -> str:
    window = run.get("host_profile")
    if not window:
        return f"iteration {fmt(run['iteration_ms'])} ms, no profiled window"
    top = ", ".join(
        f"{row['name']} {row['cumulative_ms']:.2f}" for row in window["by_cumulative"][:3]
    )
    return (
        f"iteration {fmt(run['iteration_ms'])} ms; over {window['iterations']} profiled "
        f"iterations {window['wall_ms']:.2f} ms each; the most cumulative ms: {top}"
    )


def run_host(args: argparse.Namespace, data: Path, budget: Budget) -> dict[str, Any]:
    """Per batch size, a run of each arm, unsynchronised but for the two ends of a window of
    steady iterations whose host functions are profiled (``musgd.bench._host``): which of the
    trainer's, the loss's, the optimizer's and torch's functions the host's time goes to."""
    return _unsynchronised_part(args, data, budget, "host", _describe_host, profile_host=True)


def _describe_round_run(run: dict[str, Any]) -> str:
    """A run's line in the log: its medians, wall times and CUDA peaks."""
    memory = run.get("memory_mib")
    peaks = (
        f", peak allocated {memory['peak_allocated']:.0f} MiB, reserved "
        f"{memory['peak_reserved']:.0f} MiB"
        if memory
        else ""
    )
    pools = run.get("pools_at_end_mib")
    if pools:
        private = pools["private"]
        peaks += (
            f" (at the end {pools['caching']['reserved']:.0f} MiB eager, "
            f"{private['reserved']:.0f} MiB in {private['pools']} recordings' pools)"
        )
    process = run.get("process_s")
    whole = f", process {process:.1f} s" if process is not None else ""
    return (
        f"iteration {fmt(run['iteration_ms'])} ms, compute {fmt(run['compute_ms'])}, data wait "
        f"{fmt(run['data_wait_ms'])}, first epoch {fmt(run['first_epoch_s'])} s, "
        f"train {run['run_s']:.1f} s{whole}{peaks}"
    )


def _print_against_stock(batch: int, variant: str, entry: dict[str, Any]) -> None:
    """Per arm and ratio metric, stock/arm over the rounds: median, range, saving."""
    for arm, metrics in entry["against_stock"].items():
        for name, summary in metrics.items():
            if summary:
                r, sv = summary["stock_over_arm"], summary["saving"]
                print(
                    f"batch {batch} {variant} {name}: stock/{arm} {r['median']:.3f} "
                    f"({r['min']:.3f}-{r['max']:.3f}), saving {100 * sv['median']:.1f}% "
                    f"({100 * sv['min']:.1f}-{100 * sv['max']:.1f}%) over {entry['count']} rounds"
                )


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
    """``pairs`` rounds over the batch sizes, each a run of every arm of ``--arms`` with seed k
    in round k, in :func:`musgd.bench._ul_design.round_order`: round k starts at arm k mod N,
    so each arm takes each place over N rounds; with ``--design abba`` each round runs that
    order and then its reverse, and an arm's two runs are merged (:func:`merge_runs`). A round
    runs whole or not at all (the budget admits it); the log has a line per arm per round."""
    collected: dict[int, list[dict[str, Any]]] = {b: [] for b in args.batch_sizes}
    section = result["variants"].setdefault(variant, {"batches": {}})
    section["kwargs"] = {
        k: v for k, v in train_kwargs(args, Path("-"), 0, 0, variant).items() if k != "data"
    }
    for k in range(pairs):
        order = round_order(k, args.design, args.arms)
        for batch in args.batch_sizes:
            key = f"train-{variant}-b{batch}"
            default = round_estimate(args, batch, order, per_iteration_s=args.per_iteration_s)
            if not budget.admit(f"{variant} round {k} batch {batch}", key, default):
                continue
            start = time.perf_counter()
            runs = [
                train_run(
                    args, data, arm=arm, batch=batch, seed=k, synchronize=False, variant=variant
                )
                for arm in order
            ]
            pair: dict[str, Any] = {"seed": k, "order": list(order)}
            if len(runs) == len(args.arms):
                pair.update(zip(order, runs, strict=True))
            else:  # abba: each arm's two runs merged; the runs themselves kept in order
                pair.update(
                    {arm: merge_runs([r for r in runs if r["arm"] == arm]) for arm in args.arms}
                )
                pair["runs"] = runs
            budget.record(key, time.perf_counter() - start)
            collected[batch].append(pair)
            for place, arm in enumerate(dict.fromkeys(order), start=1):
                print(
                    f"round {variant} batch {batch} seed {k} {arm} (place {place}): "
                    f"{_describe_round_run(pair[arm])}"
                )
            section["batches"][str(batch)] = summarize_pairs(collected[batch], args.arms)
            save()
    for batch in args.batch_sizes:
        entry = section["batches"].get(str(batch))
        if entry is not None:
            _print_against_stock(batch, variant, entry)


def replay_stats(opt: Any) -> dict[str, Any] | None:
    replay = getattr(opt, "_replay", None)
    return None if replay is None else stats_dict(replay.stats)


def clip_stats(trainer: Any) -> dict[str, Any] | None:
    """The trainer's replayed gradient clipping (``musgd_clip``), where it has one."""
    clip = getattr(trainer, "__dict__", {}).get("musgd_clip")
    clip = getattr(clip, "clip", clip)  # under the identity part's ClipCheck
    return None if clip is None else stats_dict(clip.stats)


def ema_stats(trainer: Any) -> dict[str, Any] | None:
    """The trainer's guarded EMA (``musgd_ema``, with ``skip_nonfinite``): its recordings,
    replays and why it ran eagerly; None without one."""
    fused = getattr(trainer, "__dict__", {}).get("musgd_ema")
    return None if fused is None else stats_dict(fused.stats)


def network_stats(trainer: Any) -> dict[str, Any] | None:
    """The trainer's network capture (``musgd_network``), where it has one; with the shared
    recording pool (``musgd_graph_pool``), how many network recordings kept pools of their own
    (``pool_private``: a short batch's, or one the pool could not take); and how many graphs the
    process keeps past their owners (``graphs_kept_idle``, ``musgd._replay.GRAPHS``: recordings
    dropped or failed while others lived) and how many still have one (``graphs_owned``: after
    training, by this or an earlier run's objects)."""
    capture = trainer.__dict__.get("musgd_network")
    if capture is None:
        return None
    stats = stats_dict(capture.stats)
    stats["graphs_kept_idle"] = GRAPHS.idle
    stats["graphs_owned"] = GRAPHS.owned
    pool = trainer.__dict__.get("musgd_graph_pool")
    if pool is not None:
        stats["pool_private"] = pool.private
    return stats


def loss_stats(trainer: Any) -> dict[str, Any] | None:
    """The trainer's device loss (``musgd_loss``): its calls and, where it is recorded, its
    capture's counts; None without one (the reason is ``musgd_loss_reason``)."""
    loss = trainer.__dict__.get("musgd_loss")
    if loss is None:
        return None
    capture = loss.capture
    return {"calls": loss.calls, "capture": None if capture is None else stats_dict(capture.stats)}


def stats_dict(stats: Any) -> dict[str, Any]:
    return {
        "recordings": stats.recordings,
        "replays": stats.replays,
        "failures": stats.failures,
        "fallbacks": dict(stats.fallbacks),
    }
