"""``training.callbacks``: objects of the user's that the trainer calls at points of a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .dotted import DottedPath


@dataclass(frozen=True)
class CallbackConfig:
    type: DottedPath  # a class with any of on_train_start, on_epoch_end, ... (docs: Training)
    kwargs: dict[str, Any] = field(default_factory=dict)  # its arguments
