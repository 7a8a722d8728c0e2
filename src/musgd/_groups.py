"""``param_groups``: ready-made MuSGD groups for a model.

Matrices go through Newton–Schulz with weight decay; embeddings, the output head and whatever
``exclude`` names take the SGD route with weight decay; vectors take it without.
"""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Callable
from typing import Any

from torch import nn

from musgd._functional import matrix_shape

LOGGER = logging.getLogger("musgd")

# Muon is for hidden layers: the Muon write-up (R1) keeps the input embedding and the output
# layer on a standard optimizer. Embedding tables are lookups, not linear maps.
EMBEDDING_TYPES: tuple[type[nn.Module], ...] = (nn.Embedding, nn.EmbeddingBag)

ExcludeFn = Callable[[str, nn.Parameter], bool]


def output_head(model: nn.Module) -> nn.Linear | None:
    """The model's output head: its last module with parameters, when that is an ``nn.Linear``.

    A classifier's or language model's final projection (``fc``, ``head``, ``lm_head``) is
    found; a model ending in a norm, a convolution or anything else has none.
    """
    last: nn.Module | None = None
    for module in model.modules():
        if any(True for _ in module.parameters(recurse=False)):
            last = module
    return last if isinstance(last, nn.Linear) else None


def _excluded(exclude: ExcludeFn, name: str, p: nn.Parameter) -> bool:
    """``exclude(name, p)``, which must say True or False (a truthy ``"no"`` would exclude)."""
    verdict = exclude(name, p)
    if not isinstance(verdict, bool):
        raise TypeError(
            f"param_groups: exclude({name!r}, param) returned {verdict!r}; it must return True "
            "(the SGD route) or False (Newton-Schulz)"
        )
    return verdict


def param_groups(
    model: nn.Module,
    *,
    weight_decay: float,
    exclude: ExcludeFn | None = None,
    exclude_head: bool = True,
    **overrides: Any,
) -> list[dict[str, Any]]:
    """Split a model's trainable parameters into MuSGD groups and log what went where.

    - Matrices (conv kernels, linear weights: see :class:`musgd.MuSGD` for the rule) go through
      Newton–Schulz with ``weight_decay``.
    - Embedding tables (``nn.Embedding``, ``nn.EmbeddingBag``), the output head's weight unless
      ``exclude_head=False`` (see :func:`output_head`: the last module with parameters, when it
      is an ``nn.Linear``), and every matrix for which ``exclude(name, param)`` is true take the SGD
      route (``use_muon=False``) with ``weight_decay``.
    - Vectors (biases, norm weights, ``(C, 1, 1)`` gains) take the SGD route without decay.

    ``name`` is the parameter's qualified name from ``model.named_parameters()``. Extra keyword
    arguments (``lr``, ``momentum``, ...) are copied into every group, but for ``use_muon``,
    which the SGD-route groups keep False. Empty groups are left out.
    One line on the ``musgd`` logger (level INFO) says how many parameters went where.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"param_groups takes the model (an nn.Module), got {type(model).__name__}; for a "
            "list of tensors, pass it to MuSGD directly (MuSGD(params, lr=...))"
        )
    if exclude is not None and not callable(exclude):
        raise TypeError(
            "param_groups: exclude must be a callable (name, param) -> bool, "
            f"got {type(exclude).__name__}; e.g. exclude=lambda name, p: name.startswith('head.')"
        )
    if (
        isinstance(weight_decay, bool)
        or not isinstance(weight_decay, numbers.Real)
        or not math.isfinite(weight_decay)
        or weight_decay < 0
    ):
        # Checked here, before the count of where the parameters went is logged with it.
        raise ValueError(
            f"param_groups: weight_decay must be a finite number >= 0, got {weight_decay!r}"
        )
    embeddings = {
        id(p) for m in model.modules() if isinstance(m, EMBEDDING_TYPES) for p in m.parameters()
    }
    head_module = output_head(model) if exclude_head else None
    head_weight = None if head_module is None else id(head_module.weight)
    muon: list[nn.Parameter] = []
    sgd: list[nn.Parameter] = []
    vectors: list[nn.Parameter] = []
    counts = {"embedding": 0, "head": 0, "exclude": 0}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if matrix_shape(p.shape) is None:
            vectors.append(p)
            continue
        reason = (
            "embedding"
            if id(p) in embeddings
            else "head"
            if id(p) == head_weight
            else "exclude"
            if exclude is not None and _excluded(exclude, name, p)
            else None
        )
        if reason is None:
            muon.append(p)
        else:
            counts[reason] += 1
            sgd.append(p)
    groups: list[dict[str, Any]] = []
    if muon:
        groups.append({"params": muon, "weight_decay": weight_decay, **overrides})
    if sgd:
        groups.append({"params": sgd, "weight_decay": weight_decay, **overrides, "use_muon": False})
    if vectors:
        group = {"params": vectors, "weight_decay": 0.0, **overrides}
        if "use_muon" in overrides:  # vectors take the SGD route whatever the matrices take
            group["use_muon"] = False
        groups.append(group)
    LOGGER.info(format_summary(len(muon), counts, len(vectors), weight_decay))
    return groups


def format_summary(muon: int, sgd: dict[str, int], vectors: int, weight_decay: float) -> str:
    """The one-line summary ``param_groups`` logs."""
    reasons = ", ".join(f"{k} {v}" for k, v in sgd.items() if v) or "none"
    return (
        f"musgd.param_groups: {muon} matrices Newton-Schulz (weight_decay={weight_decay}), "
        f"{sum(sgd.values())} matrices SGD route ({reasons}; weight_decay={weight_decay}), "
        f"{vectors} vectors SGD route (weight_decay=0.0)"
    )
