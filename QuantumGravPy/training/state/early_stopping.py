"""Early stopping: pure bookkeeping of the best values of metrics, no I/O and no processes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ...config import EarlyStoppingConfig
from ...config.tasks import improves_towards


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


class MetricStopping:
    """Early stopping on one or several history columns, as ``early_stopping:`` describes it.

    One :class:`EarlyStopping` per column, each following the direction its column improves in,
    with the section's patience, delta and grace period. ``combine="any"`` stops once any
    column has gone ``patience`` epochs without improving; ``"all"`` once every one has. The
    first column decides which epoch is the best (best.pt, the summary's best_epoch); an epoch
    that ties its best (within ``delta``) and is better on ``tie_breaker`` (going ``tie_mode``)
    than the best epoch was becomes the best, and counts as an improvement. A metric on a
    small validation set often repeats its best value, and one at its best possible value
    (accuracy, F1, AUROC at 1) cannot improve at all: the first epoch to reach it is rarely
    the best model.
    """

    def __init__(
        self,
        columns: Sequence[str],
        modes: Sequence[str],
        *,
        combine: str = "any",
        patience: int = 5,
        delta: float = 0.0,
        grace_period: int = 0,
        tie_breaker: str | None = None,
        tie_mode: str = "min",
    ):
        if combine not in ("any", "all"):
            raise ValueError(f"combine must be 'any' or 'all', got {combine!r}")
        if not columns or len(columns) != len(modes):
            raise ValueError(f"expected one mode per column, got {list(columns)}, {list(modes)}")
        self.combine = combine
        self.trackers = {
            column: EarlyStopping(
                mode=mode, patience=patience, delta=delta, grace_period=grace_period
            )
            for column, mode in zip(columns, modes, strict=True)
        }
        self.columns = tuple(self.trackers)
        self.first = self.trackers[self.columns[0]]
        self.tie_breaker, self.tie_mode = tie_breaker, tie_mode
        self.tie_value: float | None = None  # the tie-breaker's value at the best epoch
        self.broken_tie: str | None = None  # the last step's tie broken, for the log

    @classmethod
    def from_section(cls, es: EarlyStoppingConfig) -> MetricStopping:
        """As the ``early_stopping:`` section ``es`` describes it: ties of the first metric
        broken by the second listed, else by the validation loss."""
        tie = es.metrics[1] if len(es.metrics) > 1 else "val_loss"
        tie = None if tie == es.metrics[0] else tie
        return cls(
            es.metrics,
            [es.mode, *map(improves_towards, es.metrics[1:])],
            combine=es.combine,
            patience=es.patience,
            delta=es.delta,
            grace_period=es.grace_period,
            tie_breaker=tie,
            tie_mode=improves_towards(tie) if tie else "min",
        )

    def step(self, row: dict[str, Any], epoch: int | None = None) -> bool:
        """Record an epoch's row; True when it is the best so far: the first column improved,
        or tied its best and the tie-breaker is better than at the best epoch."""
        first, column, before = self.first, self.columns[0], self.first.best
        previous_epoch, self.broken_tie = first.best_epoch, None
        improved = {c: tracker.step(row[c], epoch) for c, tracker in self.trackers.items()}
        tie = row.get(self.tie_breaker) if self.tie_breaker else None
        tie = None if tie is None or math.isnan(tie) else float(tie)
        if improved[column]:
            self.tie_value = tie
            return True
        value = row[column]
        if tie is None or before is None or math.isnan(value) or abs(value - before) > first.delta:
            return False
        if self.tie_value is not None and not (
            tie < self.tie_value if self.tie_mode == "min" else tie > self.tie_value
        ):
            return False
        first.best_epoch = first.epochs_seen if epoch is None else epoch
        first.epochs_without_improvement = 0
        was = "" if self.tie_value is None else f" ({self.tie_value:.4g})"
        self.broken_tie = (
            f"{column} {value:.4g} ties its best; {self.tie_breaker} {tie:.4g} is better than at "
            f"epoch {previous_epoch}{was}: epoch {first.best_epoch} is the best so far"
        )
        self.tie_value = tie
        return True

    @property
    def should_stop(self) -> bool:
        stopped = [tracker.should_stop for tracker in self.trackers.values()]
        return any(stopped) if self.combine == "any" else all(stopped)

    # the first column's, for the log and the summary
    patience = property(lambda self: self.first.patience)
    best = property(lambda self: self.first.best)
    best_epoch = property(lambda self: self.first.best_epoch)

    def describe(self) -> str:
        """What stopped improving, for the log: ``val_loss`` or ``any of val_loss, ...``."""
        if len(self.columns) == 1:
            return self.columns[0]
        return f"{self.combine} of {', '.join(self.columns)}"

    def stop_message(self, epoch: int) -> str:
        """The log's line when the run stops early after ``epoch``."""
        return (
            f"early stopping after epoch {epoch}: no improvement of {self.describe()} for "
            f"{self.patience} epochs (best {self.best:.4f} at {self.best_epoch})"
        )

    def state_dict(self) -> dict[str, Any]:
        """The first column's state, as a single-metric checkpoint has it, and the others'."""
        others = {c: t.state_dict() for c, t in self.trackers.items() if t is not self.first}
        tie = {"tie_breaker": self.tie_breaker, "tie_value": self.tie_value}
        return {**self.first.state_dict(), "column": self.columns[0], "others": others, **tie}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Accepts checkpoints of a single metric too; a column they lack starts afresh."""
        saved = {state.get("column", self.columns[0]): state, **state.get("others", {})}
        for column, tracker_state in saved.items():
            if column in self.trackers:
                self.trackers[column].load_state_dict(tracker_state)
        if state.get("tie_breaker") == self.tie_breaker:  # older checkpoints: none kept
            self.tie_value = state.get("tie_value")
