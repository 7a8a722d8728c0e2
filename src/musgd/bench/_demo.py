"""``make demo``: a short nano-detector training run per MuSGD variant, loss and step times.

It says up front what it will run, prints a line as each variant finishes, then the table; its
results hold the loss curves in the shape of the site's line charts (``curves.loss``) and it can
draw them, with the step times, to a PNG (:func:`write_demo_png`, matplotlib's Agg canvas).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from musgd.bench._timing import Summary, summarize
from musgd.bench._train_bench import TrainConfig, deterministic_kernels, make_batches, train_run
from musgd.bench._variants import Variant

# The variant that runs MuSGD as constructed with no execution flags.
DEFAULT_VARIANT = "bucketed eager"


@dataclass(frozen=True)
class DemoRow:
    """One variant's demo run: step and optimizer times, and the first and last loss."""

    variant: str
    step: Summary
    optimizer: Summary
    loss_first: float
    loss_last: float
    losses: tuple[float, ...] = ()  # every step's loss, warm-up included

    @property
    def improved(self) -> bool:
        """Whether the loss went down over the run."""
        return self.loss_last < self.loss_first


def run_demo(
    variants: Sequence[Variant],
    config: TrainConfig,
    device: torch.device,
    on_row: Callable[[DemoRow], None] | None = None,
) -> list[DemoRow]:
    """Train the nano detector once per variant on the same seeded data; one row each, handed
    to ``on_row`` as soon as its variant has finished."""
    batches = make_batches(config, device)
    rows = []
    with deterministic_kernels():
        for variant in variants:
            result = train_run(variant, batches, config, device)
            row = DemoRow(
                variant=variant.name,
                step=summarize(result.step_ms),
                optimizer=summarize(result.optimizer_ms),
                loss_first=result.losses[0],
                loss_last=result.losses[-1],
                losses=tuple(result.losses),
            )
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return rows


def format_intro(variants: Sequence[Variant], config: TrainConfig, device: torch.device) -> str:
    """What the demo will run, said before it starts, with a rough duration."""
    steps = config.warmup + config.steps
    names = ", ".join(v.name for v in variants)
    # At the CPU defaults (batch 4, 128 px, 14 steps): the train-step medians of
    # docs/evidence/musgd-demo-cpu-d651fe7.json, 1.8 s per-matrix and 0.27 s bucketed, make about
    # 35 s for the three variants on an idle 2-core CPU; a GPU takes seconds.
    rough = (
        "under a minute on an idle 2-core CPU, longer on a busy one"
        if device.type == "cpu"
        else "seconds on a GPU"
    )
    return (
        f"MuSGD demo: trains the nano detector for {steps} steps (batch {config.batch_size}, "
        f"{config.image_size} px, synthetic boxes) once per variant on {device}: {names}\n"
        f"{rough}; a line as each variant finishes:"
    )


def format_row(row: DemoRow) -> str:
    """One finished variant: its step and optimizer times and its final loss."""
    return (
        f"  {row.variant}: train step {row.step.format(1)} ms, optimizer "
        f"{row.optimizer.format(1)} ms (median (range)), final loss {row.loss_last:.4f}"
    )


def format_demo(rows: Sequence[DemoRow], config: TrainConfig, device: torch.device) -> str:
    """The demo's table and a one-line verdict on the loss."""
    steps = config.warmup + config.steps
    lines = [
        f"MuSGD demo: NanoDetector on {device}, batch {config.batch_size}, "
        f"{config.image_size} px, {steps} steps, synthetic boxes",
        f"{'variant':<26} {'train step ms, median (range)':<32} "
        f"{'optimizer ms, median (range)':<30} {'loss first':>10} {'loss last':>10}",
    ]
    lines.extend(
        f"{row.variant:<26} {row.step.format(1):<32} {row.optimizer.format(1):<30} "
        f"{row.loss_first:>10.4f} {row.loss_last:>10.4f}"
        for row in rows
    )
    default = next((r for r in rows if r.variant == DEFAULT_VARIANT), None)
    if default is not None:
        lines.append(
            f"optimizer step with MuSGD's defaults ({DEFAULT_VARIANT}): "
            f"{default.optimizer.median:.1f} ms median"
        )
    verdict = "yes" if all(r.improved for r in rows) else "NO"
    lines.append(f"loss went down for every variant: {verdict}")
    return "\n".join(lines)


def demo_results(rows: Sequence[DemoRow], config: TrainConfig) -> dict[str, Any]:
    """The results of the demo's evidence file.

    ``rows`` as before; ``steps`` (per variant, median and range in ms) for the site's tables;
    ``curves.loss``, the loss per step of each variant, in the site's line-chart shape
    (``x_label``, ``y_label``, ``series``).
    """
    return {
        "benchmark": "demo",
        "config": {**config.__dict__},
        "rows": [
            {
                "variant": r.variant,
                "step_median_ms": r.step.median,
                "step_min_ms": r.step.min,
                "step_max_ms": r.step.max,
                "optimizer_median_ms": r.optimizer.median,
                "loss_first": r.loss_first,
                "loss_last": r.loss_last,
            }
            for r in rows
        ],
        "steps": {
            r.variant: {"median_ms": r.step.median, "min_ms": r.step.min, "max_ms": r.step.max}
            for r in rows
        },
        "curves": {
            "loss": {
                "x_label": "step (warm-up included)",
                "y_label": "training loss",
                "series": {r.variant: list(r.losses) for r in rows},
            }
        },
    }


def write_demo_png(rows: Sequence[DemoRow], path: Path, *, title: str = "") -> Path:
    """Draw the loss curves and the step times (median, min–max whiskers) to a PNG at ``path``.

    Uses matplotlib's ``Figure`` on its Agg canvas (no display, no pyplot state). Raises
    ImportError saying how to install matplotlib where it is missing, OSError where ``path``
    cannot be written.
    """
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:
        raise ImportError(
            'the demo chart needs matplotlib; install it with: pip install "wpgate[docs]"'
        ) from exc
    figure = Figure(figsize=(10.0, 4.0), layout="constrained")
    loss, times = figure.subplots(1, 2, width_ratios=(3, 2))
    for row in rows:
        loss.plot(range(1, len(row.losses) + 1), row.losses, marker="o", label=row.variant)
    loss.xaxis.set_major_locator(MaxNLocator(integer=True))
    loss.set(xlabel="step (warm-up included)", ylabel="training loss", title="Loss")
    loss.legend()
    positions = range(len(rows))
    medians = [r.step.median for r in rows]
    whiskers = [
        [r.step.median - r.step.min for r in rows],
        [r.step.max - r.step.median for r in rows],
    ]
    times.barh(positions, medians, xerr=whiskers, capsize=3, color="tab:blue")
    times.set_yticks(list(positions), [r.variant for r in rows])
    times.invert_yaxis()
    times.set(xlabel="ms, median (min–max)", title="Train step time")
    if title:
        figure.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    return path
