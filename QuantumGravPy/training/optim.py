"""The optimizer (``training.optimizer``) and learning-rate schedule (``training.lr_scheduler``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

from ..config import OptimizerConfig, SchedulerConfig, resolve
from ..errors import ConfigError


def build_optimizer(
    section: OptimizerConfig, parameters: Iterable[torch.nn.Parameter]
) -> torch.optim.Optimizer:
    cls = resolve(section.type, key="training.optimizer.type")
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        raise ConfigError(f"training.optimizer.type: {section.type!r} is not a torch optimizer")
    try:
        return cls(parameters, **section.kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"training.optimizer.kwargs: {section.type} rejected them: {e}") from None


def build_scheduler(section: SchedulerConfig | None, optimizer: torch.optim.Optimizer) -> Any:
    """The scheduler, stepped once per epoch by the trainer; None for a constant rate."""
    if section is None:
        return None
    cls = resolve(section.type, key="training.lr_scheduler.type")
    try:
        return cls(optimizer, **section.kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(
            f"training.lr_scheduler.kwargs: {section.type} rejected them: {e}"
        ) from None


def step_groups(batches: Iterable, size: int) -> Iterator[list]:
    """The batches of each optimizer step: consecutive lists of ``size`` (the last may be
    shorter), for ``training.accumulate_grad_batches``."""
    group = []
    for batch in batches:
        group.append(batch)
        if len(group) == size:
            yield group
            group = []
    if group:
        yield group
