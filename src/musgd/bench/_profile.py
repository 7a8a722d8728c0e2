"""Where does an optimizer step's time go? Host work against device work, per replay variant.

For each variant on one parameter set (default: the nano detector's) this measures, after a
warm-up that makes any recordings:

- ``step_ms``: CUDA-event time of ``step()`` (what the optimizer benchmark reports);
- ``host_ms``: wall time of the ``step()`` call itself, without synchronizing (Python + launches);
- ``device_busy_ms``: the summed time of the step's GPU kernels (``torch.profiler``, CUDA only),
  and ``kernel_table``: that time per kernel name (calls and microseconds per step);
- ``kernels_per_step``: how many kernels (and copies) the GPU ran per step;
- ``host_top``: the host functions with the most cumulative time per step (``cProfile``);
- ``phases`` (once per run): the host time of each phase of a bucketed-eager step and of each
  piece of one replayed Newton-Schulz call, every phase timed alone and repeated.

A step whose ``host_ms`` exceeds its ``device_busy_ms`` is host-bound: the GPU idles while
Python prepares the next launch. ``--branches 1,4`` repeats each ``capture_updates`` variant once
per number of parallel graph branches its bucket jobs are recorded on (one: a single chain).

Writes an evidence JSON (``--out``) like the benchmarks do.

    python -m musgd.bench profile --device cuda --out out/
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import pstats
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from musgd import MuSGD
from musgd._functional import (
    EagerOrthogonalizer,
    Hyper,
    Orthogonalizer,
    add_decay_foreach,
    apply_updates,
    build_layout,
    momentum_foreach,
    orthogonalize_bucket,
    run_in_order,
    sgd_terms_foreach,
)
from musgd._optimizer import group_structure
from musgd._replay import ReplayOrthogonalizer, environment_key
from musgd.bench._args import non_negative_int, positive_int
from musgd.bench._evidence import build_evidence, write_evidence
from musgd.bench._kernels import kernel_table
from musgd.bench._models import PARAMETER_SETS, make_parameters
from musgd.bench._optimizer_bench import _operands
from musgd.bench._timing import time_steps
from musgd.bench._variants import Variant, all_variants, select_variants

DEFAULT_VARIANTS = ["bucketed eager", "capture_orthogonalization", "capture_updates", "both"]
UPDATE_REPLAY_VARIANTS = {"capture_updates", "both"}


def _host_ms(step: Any, steps: int, device: torch.device) -> list[float]:
    samples = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        samples.append((time.perf_counter() - start) * 1e3)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return samples


def device_kernels(step: Any, steps: int, device: torch.device) -> dict[str, Any] | None:
    """What the GPU ran per ``step()`` (``torch.profiler``; kernels inside a CUDA-graph replay
    are traced one by one): ``busy_ms``, the summed time of its kernels and copies;
    ``kernels``, how many ran; ``table``, one row per kernel name, longest first (``name``, at
    most 96 characters; ``calls`` and ``us`` per step). None on a device other than CUDA."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize(device)
    # Kernel and memcpy/memset rows; their device time is what the GPU spent busy.
    table = kernel_table(prof.key_averages(), steps)
    return {
        "busy_ms": sum(row["us"] for row in table) / 1e3,
        "kernels": sum(row["calls"] for row in table),
        "table": table,
    }


def _host_top(step: Any, steps: int, top: int) -> list[dict[str, Any]]:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows: list[dict[str, Any]] = []
    for (filename, line, name), (_, calls, _, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append(
            {
                "function": f"{Path(filename).name}:{line}({name})",
                "calls_per_step": calls / steps,
                "cumulative_ms_per_step": cumulative * 1e3 / steps,
            }
        )
    rows.sort(key=lambda r: -r["cumulative_ms_per_step"])
    return rows[:top]


def _host_us(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Median host time of ``fn`` in microseconds, each call started with an idle device."""
    samples = []
    fn()
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e6)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return statistics.median(samples)


def phase_costs(
    params: list[torch.Tensor], grads: list[torch.Tensor], device: torch.device, repeats: int
) -> list[dict[str, Any]]:
    """Host microseconds of the phases of one bucketed-eager step and of one replayed NS call.

    The phases run on copies of ``params``; the step's own order is kept (its momentum and
    update tensors feed the later phases), each phase repeated ``repeats`` times.
    """
    operands = [p.detach().clone() for p in params]
    for p, g in zip(operands, grads, strict=True):
        p.grad = g.detach().clone()
    opt = MuSGD(operands, lr=0.01, capture_orthogonalization=device.type == "cuda")
    group = opt.param_groups[0]
    ps, gs = opt._gather(0, group)
    bufs = opt._buffers(ps)
    layout = build_layout(ps, group["use_muon"])
    structure = group_structure(group, device)
    hyper = Hyper(0.9, 0.01, 0.5, 0.5)
    n = momentum_foreach(bufs, gs, hyper, structure)
    updates = sgd_terms_foreach(n, layout, hyper)
    eager = EagerOrthogonalizer()
    first = layout.buckets[0]
    stack = torch.stack([n[i].reshape(first.rows, first.cols) for i in first.indices])
    replayed = opt._orth_replay

    def bucket_jobs(orth: Orthogonalizer) -> Callable[[], None]:
        jobs = [
            functools.partial(orthogonalize_bucket, n, updates, b, hyper, structure.ns, orth)
            for b in layout.buckets
        ]
        return lambda: run_in_order(jobs, [])

    replayed.batched(stack, structure.ns)  # records (CUDA) or falls back (CPU)
    bucket_jobs(replayed)()  # records every bucket's stack
    members = [n[i] for i in first.indices]
    phases: dict[str, Callable[[], object]] = {
        "gather gradients": lambda: opt._gather(0, group),
        "momentum buffers": lambda: opt._buffers(ps),
        "build layout": lambda: build_layout(ps, group["use_muon"]),
        "momentum (foreach)": lambda: momentum_foreach(bufs, gs, hyper, structure),
        "sgd terms (foreach)": lambda: sgd_terms_foreach(n, layout, hyper),
        "bucket jobs, eager NS": bucket_jobs(eager),
        "weight decay (foreach)": lambda: add_decay_foreach(updates, ps, layout, hyper),
        "write (foreach)": lambda: apply_updates(ps, updates, 0.01),
        "one bucket: stack": lambda: torch.stack(
            [n[i].reshape(first.rows, first.cols) for i in first.indices]
        ),
        "one bucket: eager NS": lambda: eager.batched(stack, structure.ns),
        "one bucket: replayed NS call": lambda: replayed.batched(stack, structure.ns),
    }
    if device.type == "cuda":
        phases["one bucket: environment key"] = lambda: environment_key(
            opt._replay.recorder, device
        )
    # Inside one step scope, as the optimizer runs them: the context is read once for all.
    in_step: dict[str, Callable[[], object]] = {
        "bucket jobs, replayed NS (in a step)": bucket_jobs(replayed),
        "one bucket: replayed stacked NS (in a step)": lambda: replayed.stacked(
            members, first, structure.ns
        ),
    }
    rows = [(name, _host_us(fn, device, repeats)) for name, fn in phases.items()]
    with opt._replay.step_scope():
        entry = (
            replayed._stack_entry(members, first, structure.ns)
            if isinstance(replayed, ReplayOrthogonalizer)
            else None
        )
        if entry is not None:  # recorded (CUDA): the launch alone, without the copies around it
            in_step["one bucket: graph launch (in a step)"] = entry.recording.replay
        rows += [(name, _host_us(fn, device, repeats)) for name, fn in in_step.items()]
    return [{"phase": name, "host_us": us, "buckets": len(layout.buckets)} for name, us in rows]


def profile_variant(
    variant: Variant,
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    args: Any,
    branches: int | None = None,
) -> dict[str, Any]:
    """Time and profile one variant's step on fresh copies of ``params`` and ``grads``."""
    device = torch.device(args.device)
    operands = _operands(variant, params, grads)
    optimizer = variant.build(operands)
    replay = getattr(optimizer, "_replay", None)
    if branches is not None and replay is not None:
        replay.recorder.branches = branches  # before the first step records anything
    # What the variant times: the optimizer, its step captured whole, or its NS part alone.
    stepper = variant.stepper(optimizer)
    timing = time_steps(stepper.step, steps=args.steps, warmup=args.warmup, device=device)
    host = _host_ms(stepper.step, args.steps, device)
    busy = device_kernels(stepper.step, min(args.steps, 20), device)
    stats = getattr(replay, "stats", None)
    name = variant.name if branches is None else f"{variant.name} [branches={branches}]"
    return {
        "variant": name,
        "branches": branches,
        "step_ms": timing.as_dict(),
        "host_ms": {"median": statistics.median(host), "min": min(host), "max": max(host)},
        "device_busy_ms": None if busy is None else busy["busy_ms"],
        "kernels_per_step": None if busy is None else busy["kernels"],
        "kernel_table": None if busy is None else busy["table"],
        "host_bound": busy is not None and statistics.median(host) > busy["busy_ms"],
        "replay": None
        if stats is None
        else {
            "recordings": stats.recordings,
            "replays": stats.replays,
            "failures": stats.failures,
            "fallbacks": dict(stats.fallbacks),
        },
        "host_top": _host_top(stepper.step, min(args.steps, 20), args.top),
    }


def positive_int_list(text: str) -> list[int]:
    """An argparse type: comma-separated positive integers (``1,2,4``)."""
    try:
        values = [positive_int(part.strip()) for part in text.split(",") if part.strip()]
    except argparse.ArgumentTypeError:
        values = []
    if not values:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers, e.g. 1,2,4; got {text!r}"
        )
    return values


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def choose_variants(
    names: Sequence[str] | None, device: torch.device
) -> tuple[list[Variant], list[str]]:
    """The variants to profile on ``device``, and the default ones left out because it has no
    CUDA.

    Without ``names`` the default list runs; on a device other than CUDA its CUDA-graph
    variants are left out (and returned, so the run says so). A variant named on the command
    line that needs CUDA, on such a device, is a ValueError naming it and the variants that run
    there.
    """
    if device.type == "cuda":
        return select_variants(DEFAULT_VARIANTS if names is None else names, device), []
    cuda_only = {v.name for v in all_variants() if v.cuda_only}
    if names is None:
        runnable = [n for n in DEFAULT_VARIANTS if n not in cuda_only]
        return select_variants(runnable, device), [n for n in DEFAULT_VARIANTS if n in cuda_only]
    needing = [n for n in names if n in cuda_only]
    if needing:
        here = ", ".join(repr(v.name) for v in select_variants(None, device))
        verb = "needs" if len(needing) == 1 else "need"
        raise ValueError(
            f"{', '.join(repr(n) for n in needing)} {verb} CUDA (--device cuda on a machine "
            f"with a GPU); on --device {device.type} pass --variants from {here}"
        )
    return select_variants(names, device), []


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m musgd.bench profile``."""
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu"
    )
    parser.add_argument("--set", default="nano", choices=sorted(PARAMETER_SETS))
    parser.add_argument(
        "--variants",
        type=_names,
        default=None,
        help=f"comma-separated (default: {', '.join(DEFAULT_VARIANTS)}; on cpu the ones that "
        "need CUDA are left out)",
    )
    parser.add_argument("--steps", type=positive_int, default=50)
    parser.add_argument("--warmup", type=non_negative_int, default=10)
    parser.add_argument("--top", type=positive_int, default=15)
    parser.add_argument(
        "--branches",
        type=positive_int_list,
        default=None,
        help="e.g. 1,4: parallel branches for the capture_updates and both variants",
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--no-evidence", action="store_true")
    parser.add_argument("--commit", default=None, help="the commit a copied tree came from")
    parser.add_argument("--phase-repeats", type=positive_int, default=30)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Profile the variants; print a summary and write the evidence JSON."""
    device = torch.device(args.device)
    variants, skipped = choose_variants(args.variants, device)
    sweep: list[int] = args.branches or []
    if sweep and not any(v.name in UPDATE_REPLAY_VARIANTS for v in variants):
        where = "" if device.type == "cuda" else " on a GPU (--device cuda)"
        swept = [n for n in DEFAULT_VARIANTS if n in UPDATE_REPLAY_VARIANTS]
        raise ValueError(
            f"--branches sweeps the {' and '.join(swept)} variants, "
            f"which this run does not profile; add one to --variants{where}, or drop --branches"
        )
    if skipped:
        print(
            f"note: on {device.type} the default variants leave out {', '.join(skipped)} "
            "(CUDA-graph replay: run on a GPU with --device cuda to profile them)"
        )
    params, grads = make_parameters(PARAMETER_SETS[args.set](), device=device, seed=0)
    rows: list[dict[str, Any]] = []
    for v in variants:
        options = sweep if sweep and v.name in UPDATE_REPLAY_VARIANTS else [None]
        rows.extend(profile_variant(v, params, grads, args, b) for b in options)
    for row in rows:
        busy, kernels = row["device_busy_ms"], row["kernels_per_step"]
        print(
            f"{row['variant']:<38} step {row['step_ms']['median_ms']:8.3f} ms  "
            f"host {row['host_ms']['median']:8.3f} ms  "
            f"device busy {'-' if busy is None else f'{busy:8.3f}'} ms  "
            f"kernels {'-' if kernels is None else f'{kernels:7.1f}'}"
        )
    phases = phase_costs(params, grads, device, args.phase_repeats)
    for phase in phases:
        print(f"  phase {phase['phase']:<32} host {phase['host_us']:10.1f} us")
    if not args.no_evidence:
        results = {
            "benchmark": "replay-profile",
            "set": args.set,
            "variants": rows,
            "skipped_variants": skipped,
            "phases": phases,
        }
        evidence = build_evidence(
            "replay-profile", results, device=device, argv=argv, commit=args.commit
        )
        print(f"evidence: {write_evidence(evidence, args.out)}")
    return 0
