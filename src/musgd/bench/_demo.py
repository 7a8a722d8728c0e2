"""``make demo``: a short nano-detector training run per MuSGD variant, loss and step times."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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

    @property
    def improved(self) -> bool:
        """Whether the loss went down over the run."""
        return self.loss_last < self.loss_first


def run_demo(
    variants: Sequence[Variant], config: TrainConfig, device: torch.device
) -> list[DemoRow]:
    """Train the nano detector once per variant on the same seeded data; one row each."""
    batches = make_batches(config, device)
    rows = []
    with deterministic_kernels():
        for variant in variants:
            result = train_run(variant, batches, config, device)
            rows.append(
                DemoRow(
                    variant=variant.name,
                    step=summarize(result.step_ms),
                    optimizer=summarize(result.optimizer_ms),
                    loss_first=result.losses[0],
                    loss_last=result.losses[-1],
                )
            )
    return rows


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
