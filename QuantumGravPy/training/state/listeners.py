"""Listeners: what is told of a run's points, the library's own epoch work and the user's alike.

The loop (:meth:`~QuantumGravPy.Trainer.run_training`) says what happens and when; the
listeners, in their order, do the work of each point::

    on_train_start(trainer)          the run directory is open, the first epoch is next
    on_epoch_start(trainer)          the epoch's samples are drawn
    on_epoch_end(trainer, row)       trained and validated: row is the epoch's history row
    on_checkpoint(trainer, path)     a checkpoint was written
    on_train_end(trainer, history)   the last epoch is done
    on_test_end(trainer, metrics)    ``run_test`` measured a checkpoint

At the end of an epoch the library's listeners go first, in this order: early stopping (the
best epoch and the stop, decided on the first process and handed to every process), pruning by
a study's judge, the monitor's columns, the run's progress (epoch, history), the learning-rate
schedule, the records and checkpoints. ``training.callbacks`` come last, so a user's listener
sees the finished row and the files of that epoch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from ..monitoring.monitor import Monitor
from .early_stopping import MetricStopping

POINTS = (
    "on_train_start",
    "on_epoch_start",
    "on_epoch_end",
    "on_checkpoint",
    "on_train_end",
    "on_test_end",
)


class Listener:
    """Something told of a run's points; each method does nothing until a subclass gives it.

    Name a subclass in ``training.callbacks`` (``{type: mymodule.Notify, kwargs: {...}}``) and
    it is built once per process and told each point after the library's own listeners: at an
    epoch's end the row is finished and the epoch's checkpoints are written. It runs on the
    first process only, unless it sets ``every_rank = True``. ``trainer`` is the run's trainer;
    ``trainer.state.improved`` says whether the epoch just ended is the best so far.
    """

    def on_train_start(self, trainer: Any) -> None:
        pass

    def on_epoch_start(self, trainer: Any) -> None:
        pass

    def on_epoch_end(self, trainer: Any, row: dict[str, Any]) -> None:
        pass

    def on_checkpoint(self, trainer: Any, path: Any) -> None:
        pass

    def on_train_end(self, trainer: Any, history: list[dict[str, Any]]) -> None:
        pass

    def on_test_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        pass


class Listeners:
    """The listeners of a run, in the order they are told."""

    def __init__(self, listeners: Iterable[Any]):
        self.items = list(listeners)

    def tell(self, point: str, trainer: Any, *args: Any) -> None:
        """``point`` with ``trainer`` and ``args``, to every listener that has it, in order."""
        for listener in self.items:
            method = getattr(listener, point, None)
            if method is not None:
                method(trainer, *args)


class Stopping(Listener):
    """Early stopping: whether an epoch is the best so far, and whether the run stops there.

    The first process decides (``decide``: the trainer's ``on_main``, after a barrier under
    DDP) and every process takes its row and its stopper's state, so that all stop together
    and keep the same history.
    """

    def __init__(
        self,
        stopping: MetricStopping,
        *,
        enabled: bool,
        decide: Callable[[Callable[[], Any]], Any],
        monitor: Monitor,
        logger: logging.Logger,
    ):
        self.stopping, self.enabled, self.decide = stopping, enabled, decide
        self.monitor, self.logger = monitor, logger

    def on_epoch_end(self, trainer: Any, row: dict[str, Any]) -> None:
        def decided() -> tuple[dict[str, Any], bool, dict[str, Any]]:
            improved = self.stopping.step(row, row["epoch"])
            if self.stopping.broken_tie:
                self.logger.info("%s", self.stopping.broken_tie)
            return dict(row), improved, self.stopping.state_dict()

        with self.monitor.phase("wait"):
            shared, improved, stopper = self.decide(decided)
        row.update(shared)  # the first process's epoch_seconds: one history on every process
        self.stopping.load_state_dict(stopper)
        trainer.state.improved = improved
        trainer.state.stopped_early = self.enabled and self.stopping.should_stop

    def on_train_end(self, trainer: Any, history: list[dict[str, Any]]) -> None:
        if trainer.state.stopped_early and not trainer.state.pruned:
            self.logger.info("%s", self.stopping.stop_message(trainer.state.epoch))


class Pruning(Listener):
    """A tuning trial's pruner: ``judge(row)`` on the first process; True ends the run as
    pruned, on every process. Under DDP only rank 0 holds the judge (None elsewhere): the others
    take its answer."""

    def __init__(
        self,
        judge: Callable[[dict[str, Any]], bool] | None,
        *,
        decide: Callable[[Callable[[], Any]], Any],
        monitor: Monitor,
        logger: logging.Logger,
    ):
        self.judge, self.decide, self.monitor, self.logger = judge, decide, monitor, logger

    def on_epoch_end(self, trainer: Any, row: dict[str, Any]) -> None:
        with self.monitor.phase("wait"):
            pruned = bool(self.decide(lambda: self.judge is not None and bool(self.judge(row))))
        if pruned:
            trainer.state.pruned, trainer.state.stopped_early = True, False

    def on_train_end(self, trainer: Any, history: list[dict[str, Any]]) -> None:
        if trainer.state.pruned:
            self.logger.info("pruned by the study after epoch %d", trainer.state.epoch)


class EpochColumns(Listener):
    """The monitor's part of each epoch: its clocks started, its history columns added to the
    row (this process's timing row kept for ranks.csv), the replicas compared at the end."""

    def __init__(self, monitor: Monitor):
        self.monitor = monitor

    def on_epoch_start(self, trainer: Any) -> None:
        self.monitor.start_epoch()

    def on_epoch_end(self, trainer: Any, row: dict[str, Any]) -> None:
        columns, trainer.state.timing = self.monitor.end_epoch(epoch=row["epoch"])
        row.update(columns)

    def on_train_end(self, trainer: Any, history: list[dict[str, Any]]) -> None:
        self.monitor.check_replicas(step=None)
