"""The optimizer's and its learning-rate schedule's sections of ``training``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .dotted import DottedPath


@dataclass(frozen=True)
class OptimizerConfig:
    type: DottedPath = "torch.optim.AdamW"  # any torch.optim.Optimizer class
    kwargs: dict[str, Any] = field(default_factory=lambda: {"lr": 0.003})  # its arguments


@dataclass(frozen=True)
class SchedulerConfig:
    type: DottedPath  # e.g. torch.optim.lr_scheduler.CosineAnnealingLR
    kwargs: dict[str, Any] = field(default_factory=dict)  # its arguments besides the optimizer
    # epoch: stepped after each epoch (its length, left out, is num_epochs); step: after each
    # optimizer step, for per-step schedules such as OneCycleLR (its length, left out, is
    # num_epochs times the steps an epoch takes)
    interval: Literal["epoch", "step"] = "epoch"
