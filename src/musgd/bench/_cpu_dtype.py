"""``python -m musgd.bench cpu-dtype``: one MuSGD step per Newton–Schulz dtype on the CPU.

Where ``ns_dtype="auto"`` should switch from float32 to bf16 on a CPU with native bf16
(``CPU_BF16_MIN_WORK`` in ``musgd._newton_schulz``): a sweep of square matrices (one per size,
16 to 1024 columns) and three real parameter sets (a digits CNN, the digits MLP of
``tests/musgd/test_digits.py`` and the YOLO26n shapes), each stepped with float32 and with bf16
Newton–Schulz, the two dtypes taking turns round by round. It records the CPU's flags, torch's
own bf16 probes and its thread count, what ``"auto"`` picks for each set, and the smallest swept
size from which bf16 stays faster (the crossover), as an evidence JSON.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from musgd import _newton_schulz
from musgd._functional import matrix_shape
from musgd._optimizer import MuSGD
from musgd.bench._args import non_negative_int, positive_int
from musgd.bench._evidence import build_evidence, write_evidence
from musgd.bench._models import ParamSpec, make_parameters, yolo26_parameters
from musgd.bench._timing import Summary, summarize, time_steps

KIND = "cpu-dtype"
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# Square matrices of these column counts. --quick stops at 256: on a 2-core CPU without native
# bf16 an emulated bf16 step takes 0.74 s at 256 x 256, 9.1 s at 512 x 512 and 12.6 s on the
# YOLO26n shapes (one thread; WP-022).
SIZES = (16, 32, 64, 128, 256, 512, 1024)
QUICK_SIZES = (16, 32, 64, 128, 256)
# The /proc/cpuinfo flags that say how this CPU multiplies matrices.
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def digits_cnn_parameters() -> list[ParamSpec]:
    """A small CNN for 8x8 digit images: three 3x3 convs (16, 32, 64 channels), batch norms,
    a 10-way head over the 2x2 map."""
    specs = []
    for i, (c_out, c_in) in enumerate(((16, 1), (32, 16), (64, 32))):
        specs += [
            ParamSpec(f"conv{i}.weight", (c_out, c_in, 3, 3)),
            ParamSpec(f"bn{i}.weight", (c_out,)),
            ParamSpec(f"bn{i}.bias", (c_out,)),
        ]
    return [*specs, ParamSpec("head.weight", (10, 256)), ParamSpec("head.bias", (10,))]


def digits_mlp_parameters() -> list[ParamSpec]:
    """The network of ``tests/musgd/test_digits.py``: 64 -> 128 -> 128 -> 10 with biases."""
    specs = []
    for i, (c_out, c_in) in enumerate(((128, 64), (128, 128), (10, 128))):
        specs += [ParamSpec(f"fc{i}.weight", (c_out, c_in)), ParamSpec(f"fc{i}.bias", (c_out,))]
    return specs


REAL_SETS: dict[str, Callable[[], list[ParamSpec]]] = {
    "digits-cnn": digits_cnn_parameters,
    "digits-mlp": digits_mlp_parameters,
    "yolo26n": functools.partial(yolo26_parameters, "yolo26n"),
}


@dataclass(frozen=True)
class Workload:
    """One parameter set to step: its name and shapes."""

    name: str
    specs: tuple[ParamSpec, ...]

    @property
    def matrices(self) -> tuple[tuple[int, int], ...]:
        """The ``(rows, cols)`` views of its Newton–Schulz matrices."""
        return tuple(rc for s in self.specs if (rc := matrix_shape(s.shape)) is not None)


@dataclass(frozen=True)
class DtypeResult:
    """One workload's step times per Newton–Schulz dtype, and what ``"auto"`` picks."""

    workload: Workload
    steps: dict[str, Summary]
    auto: str

    @property
    def faster(self) -> str:
        """The dtype with the lower median step time."""
        return min(self.steps, key=lambda name: self.steps[name].median)

    @property
    def bf16_speedup(self) -> float:
        """float32 median over bf16 median: above 1 when bf16 is faster."""
        return self.steps["float32"].median / self.steps["bfloat16"].median

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the shapes' work, each dtype's times in ms, the verdicts."""
        works = [_newton_schulz.ns_work(r, c) for r, c in self.workload.matrices]
        return {
            "name": self.workload.name,
            "matrices": len(works),
            "largest_work": max(works, default=0),
            "total_work": sum(works),
            **{name: s.as_ms() for name, s in self.steps.items()},
            "bf16_speedup": self.bf16_speedup,
            "faster": self.faster,
            "auto": self.auto,
        }


def square_workloads(sizes: Sequence[int]) -> list[Workload]:
    """One ``n x n`` matrix per size."""
    return [Workload(f"{n}x{n}", (ParamSpec("weight", (n, n)),)) for n in sizes]


def measure(workload: Workload, *, steps: int, warmup: int, rounds: int, seed: int) -> DtypeResult:
    """Step ``workload`` with each dtype; the dtypes take turns ``rounds`` times."""
    cpu = torch.device("cpu")
    samples: dict[str, list[float]] = {name: [] for name in DTYPES}
    optimizers = {}
    for name, dtype in DTYPES.items():
        params, grads = make_parameters(list(workload.specs), device=cpu, seed=seed)
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        optimizers[name] = MuSGD(params, lr=0.01, ns_dtype=dtype)
    for _ in range(rounds):
        for name, opt in optimizers.items():
            timing = time_steps(opt.step, steps=steps, warmup=warmup, device=cpu)
            samples[name].extend(timing.samples_ms)
    auto = _newton_schulz.resolve_ns_dtype("auto", cpu, workload.matrices)
    return DtypeResult(
        workload=workload,
        steps={name: summarize(values) for name, values in samples.items()},
        auto=next(name for name, dtype in DTYPES.items() if dtype is auto),
    )


def crossover(sweep: Sequence[DtypeResult]) -> DtypeResult | None:
    """The smallest swept workload from which bf16 is faster at every larger size, or None."""
    found = None
    for result in sorted(sweep, key=lambda r: _newton_schulz.ns_work(*r.workload.matrices[0])):
        # A float32 win resets the search: the crossover must hold for every larger size.
        found = (found or result) if result.faster == "bfloat16" else None
    return found


def cpu_flags(cpuinfo: str) -> dict[str, bool]:
    """Which of :data:`CPU_FLAGS` the first ``flags`` line of ``/proc/cpuinfo`` text lists."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            present = set(line.split(":", 1)[1].split())
            return {flag: flag in present for flag in CPU_FLAGS}
    return {}


def _read_cpu_flags() -> dict[str, bool]:
    try:
        return cpu_flags(Path("/proc/cpuinfo").read_text(encoding="utf-8"))
    except OSError:  # not Linux: torch's probes below still say
        return {}


def _torch_probes() -> dict[str, bool | None]:
    out: dict[str, bool | None] = {}
    for name in _newton_schulz._CPU_BF16_PROBES:
        probe = getattr(torch.cpu, name, None)
        try:
            out[name] = bool(probe()) if callable(probe) else None
        except RuntimeError:
            out[name] = None
    return out


def run_benchmark(
    *, sizes: Sequence[int], sets: Sequence[str], steps: int, warmup: int, rounds: int, seed: int
) -> dict[str, Any]:
    """Both dtypes over the sweep and the real sets; the results of the evidence file."""
    common = {"steps": steps, "warmup": warmup, "rounds": rounds, "seed": seed}
    sweep = [measure(w, **common) for w in square_workloads(sizes)]
    real = [measure(Workload(name, tuple(REAL_SETS[name]())), **common) for name in sets]
    cross = crossover(sweep)
    return {
        "benchmark": KIND,
        "config": {**common, "sizes": list(sizes), "sets": list(sets)},
        "cpu": {
            "flags": _read_cpu_flags(),
            "torch_probes": _torch_probes(),
            "native_bf16": _newton_schulz.cpu_has_native_bf16(),
            "torch_threads": torch.get_num_threads(),
        },
        "rule": {
            "CPU_BF16_MIN_WORK": _newton_schulz.CPU_BF16_MIN_WORK,
            "decides": "the group's largest matrix (ns_work: multiply-adds per iteration)",
        },
        "sweep": {r.workload.name: r.as_dict() for r in sweep},
        "sets": {r.workload.name: r.as_dict() for r in real},
        "crossover": None if cross is None else cross.as_dict(),
    }


def format_results(results: dict[str, Any]) -> str:
    """The table printed after a run: per workload, both medians (ranges) and the verdicts."""
    cpu = results["cpu"]
    flags = ", ".join(f for f, on in cpu["flags"].items() if on) or "unknown"
    lines = [
        f"MuSGD step per Newton-Schulz dtype on the CPU ({cpu['torch_threads']} torch threads; "
        f"flags: {flags}; native bf16: {'yes' if cpu['native_bf16'] else 'no'})",
        f"{'workload':<12} {'largest work':>13} {'float32 ms, median (range)':<30} "
        f"{'bfloat16 ms, median (range)':<30} {'bf16 x':>7} {'auto':>9}",
    ]
    for row in [*results["sweep"].values(), *results["sets"].values()]:
        fp32, bf16 = (
            f"{row[n]['median_ms']:.3f} ({row[n]['min_ms']:.3f}\u2013{row[n]['max_ms']:.3f})"
            for n in ("float32", "bfloat16")
        )
        lines.append(
            f"{row['name']:<12} {row['largest_work']:>13.3g} {fp32:<30} {bf16:<30} "
            f"{row['bf16_speedup']:>7.2f} {row['auto']:>9}"
        )
    cross = results["crossover"]
    lines.append(
        "bf16 faster from: "
        + (
            "no swept size (float32 is the faster one throughout)"
            if cross is None
            else f"{cross['name']} (ns_work {cross['largest_work']:.3g}) upward"
        )
        + f"; CPU_BF16_MIN_WORK = {results['rule']['CPU_BF16_MIN_WORK']:.3g}"
    )
    return "\n".join(lines)


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated sizes, got {text!r}") from None
    if not sizes or any(n < 2 for n in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be whole numbers >= 2, got {text!r}")
    return sizes


def _set_names(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in REAL_SETS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown set {unknown[0]!r}; choose from {', '.join(REAL_SETS)}"
        )
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m musgd.bench cpu-dtype``."""
    parser.add_argument(
        "--quick", action="store_true", help="sizes up to 256, 2 steps, 1 round (CI, slow CPUs)"
    )
    parser.add_argument(
        "--sizes", type=_sizes, help=f"square sizes (default {','.join(map(str, SIZES))})"
    )
    parser.add_argument(
        "--sets", type=_set_names, help=f"real sets (default {','.join(REAL_SETS)})"
    )
    parser.add_argument("--steps", type=positive_int, help="timed steps per round (default 10)")
    parser.add_argument(
        "--warmup", type=non_negative_int, help="untimed steps per round (default 2)"
    )
    parser.add_argument("--rounds", type=positive_int, help="turns of the two dtypes (default 3)")
    parser.add_argument(
        "--threads", type=positive_int, help="torch intra-op threads (default: torch's own choice)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="evidence JSON path or directory")
    parser.add_argument("--no-evidence", action="store_true", help="do not write evidence JSON")
    parser.add_argument("--commit", default=None, help="the commit a copied tree came from")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Time both dtypes, print the table and write the evidence JSON."""
    quick = bool(args.quick)
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    def pick(value: Any, quick_default: Any, default: Any) -> Any:
        return value if value is not None else quick_default if quick else default

    results = run_benchmark(
        sizes=pick(args.sizes, QUICK_SIZES, SIZES),
        sets=pick(args.sets, list(REAL_SETS), list(REAL_SETS)),
        steps=pick(args.steps, 2, 10),
        warmup=pick(args.warmup, 1, 2),
        rounds=pick(args.rounds, 1, 3),
        seed=args.seed,
    )
    results["config"]["quick"] = quick
    print(format_results(results))
    if not args.no_evidence:
        evidence = build_evidence(
            KIND, results, device=torch.device("cpu"), argv=argv, commit=args.commit
        )
        print(f"evidence: {write_evidence(evidence, args.out)}")
    return 0
