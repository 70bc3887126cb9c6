"""torchmetrics' internals: which states a metric sums across processes (written for
torchmetrics 1.3-1.9). A metric's states and their reductions are registered with
``add_state`` and kept in ``_defaults`` and ``_reductions``, with no public reader."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import moved

DISTRIBUTION = "torchmetrics"


def states(metric: Any) -> dict[str, Callable | None]:
    """``{state name: its reduction across processes}`` of ``metric`` (``dim_zero_sum`` for
    a count, ``dim_zero_cat`` for gathered values, None for a custom one)."""
    return {name: metric._reductions[name] for name in metric._defaults}


def check() -> None:
    from torchmetrics.classification import MulticlassAccuracy
    from torchmetrics.utilities.data import dim_zero_sum

    metric = MulticlassAccuracy(num_classes=3, average="micro")
    try:
        found = states(metric)
    except (AttributeError, KeyError) as e:
        raise moved(DISTRIBUTION, f"a metric's states are kept elsewhere ({e})") from None
    if not found or dim_zero_sum not in found.values():
        raise moved(DISTRIBUTION, "a metric's summed states are not reduced by dim_zero_sum")
