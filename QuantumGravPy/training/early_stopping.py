"""Early stopping: pure bookkeeping of the best value of one metric, no I/O and no processes."""

from __future__ import annotations

import math
from typing import Any


class EarlyStopping:
    """Tracks the best value of a metric and says when to stop.

    ``step(value)`` is called once per epoch and returns True when the value improved on the
    best by more than ``delta``. ``should_stop`` becomes True after ``patience`` epochs in a row
    without improvement, but never during the first ``grace_period`` epochs.
    """

    def __init__(
        self, *, mode: str = "min", patience: int = 5, delta: float = 0.0, grace_period: int = 0
    ):
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        if patience < 1:
            raise ValueError(f"patience must be at least 1, got {patience}")
        self.mode = mode
        self.patience = patience
        self.delta = delta
        self.grace_period = grace_period
        self.best: float | None = None
        self.best_epoch = 0
        self.epochs_without_improvement = 0
        self.epochs_seen = 0

    def improves(self, value: float) -> bool:
        if math.isnan(value):
            return False
        if self.best is None:
            return True
        if self.mode == "min":
            return value < self.best - self.delta
        return value > self.best + self.delta

    def step(self, value: float, epoch: int | None = None) -> bool:
        self.epochs_seen += 1
        improved = self.improves(value)
        if improved:
            self.best = value
            self.best_epoch = self.epochs_seen if epoch is None else epoch
            self.epochs_without_improvement = 0
        else:
            self.epochs_without_improvement += 1
        return improved

    @property
    def should_stop(self) -> bool:
        return (
            self.epochs_seen > self.grace_period
            and self.epochs_without_improvement >= self.patience
        )

    def state_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "patience": self.patience,
            "delta": self.delta,
            "grace_period": self.grace_period,
            "best": self.best,
            "best_epoch": self.best_epoch,
            "epochs_without_improvement": self.epochs_without_improvement,
            "epochs_seen": self.epochs_seen,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("best", "best_epoch", "epochs_without_improvement", "epochs_seen"):
            setattr(self, key, state[key])
