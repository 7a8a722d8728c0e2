"""Device helpers every part of the optimizer reads: whether a CUDA graph is being captured, and
the longest-processing-time-first (LPT) planner that spreads costed work over lanes or ranks.

This module imports no other ``musgd`` module, so the math (``_functional``), the Triton backend
(``_triton_ns``), the replay (``_replay``) and the distributed step (``_distributed``) can all
read it without importing each other (WP-016: the last import circle was ``_functional`` <->
``_triton_ns``, held by :func:`capturing`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def capturing(device: torch.device | None = None) -> bool:
    """Whether the current CUDA stream is capturing a graph: for work on ``device`` (never
    where it is not a CUDA device), or, without one, wherever CUDA is available."""
    cuda = torch.cuda.is_available() if device is None else device.type == "cuda"
    return cuda and torch.cuda.is_current_stream_capturing()


def lpt_assign(costs: Sequence[float], bins: int) -> list[int]:
    """The bin of each job: jobs taken costliest first (ties: lower index) onto the least-loaded
    bin (ties: lower bin). The greedy rule keeps the costliest bin within 4/3 of the best
    possible (Graham's bound for longest-processing-time-first scheduling).

    One planner for the replay's parallel lanes (:func:`musgd._replay.plan_lanes`) and the
    distributed plan's ranks (:func:`musgd._distributed.plan_buckets`). Integer costs are summed
    as integers, so a FLOP plan does not depend on float rounding.
    """
    loads: list[float] = [0] * max(1, bins)
    owners = [0] * len(costs)
    for job in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        owner = min(range(len(loads)), key=lambda k: (loads[k], k))
        loads[owner] += costs[job]
        owners[job] = owner
    return owners
