"""Host synchronizations of each training iteration, counted with CUDA's sync debug mode.

``torch.cuda.set_sync_debug_mode("warn")`` makes every CUDA call that blocks the host until the
device catches up (a ``.item()``, a device-to-host copy, ``torch.cuda.synchronize``) issue a
warning naming the Python line that made it (R303). :class:`SyncCounter` catches those warnings
(and only those: every other warning is shown as before) during a training run, counts them per
iteration between the trainer's batch callbacks, and keeps where they came from, so that a
steady-state iteration's synchronizations are a number in the evidence and their sources a list.
"""

from __future__ import annotations

import re
import statistics
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import torch

__all__ = ["PROTOTYPE_WARNING", "SYNC_WARNING", "SyncCounter"]

# The warning CUDA's sync debug mode issues for a synchronizing operation.
SYNC_WARNING = re.compile(r"called a synchronizing CUDA operation")
# What setting the mode warns (torch 2.11), once: the feature is a prototype.
PROTOTYPE_WARNING = r"Synchronization debug mode is a prototype"
# Sources kept in the summary, most frequent first.
TOP_SITES = 12


class SyncCounter:
    """Synchronizations per iteration (``start_iteration`` / ``end_iteration`` at the trainer's
    batch start and end; those outside an iteration are counted apart) and their sources."""

    def __init__(self) -> None:
        self.iterations: list[Counter[str]] = []
        self.outside = 0
        self._open: Counter[str] | None = None

    def start_iteration(self) -> None:
        self._open = Counter()

    def end_iteration(self) -> None:
        if self._open is not None:
            self.iterations.append(self._open)
        self._open = None

    def note(self, filename: str, lineno: int) -> None:
        """One synchronization made at ``filename:lineno``."""
        if self._open is None:
            self.outside += 1
        else:
            self._open[f"{_short(filename)}:{lineno}"] += 1

    @contextmanager
    def counting(self) -> Iterator[None]:
        """Count synchronizations inside the block: CUDA's sync debug mode set to warn (where
        CUDA is available), its warnings noted instead of shown, every other warning shown."""
        cuda = torch.cuda.is_available()
        previous = torch.cuda.get_sync_debug_mode() if cuda else 0
        with warnings.catch_warnings():
            shown = warnings.showwarning
            warnings.filterwarnings("always", message=SYNC_WARNING.pattern)

            def show(
                message: Warning | str,
                category: type[Warning],
                filename: str,
                lineno: int,
                file: TextIO | None = None,
                line: str | None = None,
            ) -> None:
                if SYNC_WARNING.search(str(message)):
                    self.note(filename, lineno)
                else:
                    shown(message, category, filename, lineno, file, line)

            warnings.showwarning = show
            try:
                if cuda:
                    with warnings.catch_warnings():
                        warnings.filterwarnings("ignore", message=PROTOTYPE_WARNING)
                        torch.cuda.set_sync_debug_mode("warn")
                yield
            finally:
                if cuda:
                    torch.cuda.set_sync_debug_mode(previous)

    def summary(self, skip: int = 0) -> dict[str, Any]:
        """Per iteration after the first ``skip``: median, min and max synchronizations, the
        iterations counted, and the most frequent sources with their counts per iteration."""
        steady = self.iterations[skip:]
        counts = [sum(c.values()) for c in steady]
        sites: Counter[str] = Counter()
        for c in steady:
            sites.update(c)
        n = len(steady)
        return {
            "per_iteration": {
                "median": statistics.median(counts) if counts else None,
                "min": min(counts) if counts else None,
                "max": max(counts) if counts else None,
            },
            "iterations": n,
            "skipped_iterations": skip,
            "outside_iterations": self.outside,
            "sites_per_iteration": {
                site: round(count / n, 3) for site, count in sites.most_common(TOP_SITES)
            },
        }


def _short(filename: str) -> str:
    """A source path from its package down (``ultralytics/engine/trainer.py``), not the
    machine's install prefix."""
    parts = Path(filename).parts
    for anchor in ("site-packages", "dist-packages", "src"):
        if anchor in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(anchor) :])
    return "/".join(parts[-3:])
