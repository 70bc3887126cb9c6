"""A run's directory as one object: the files a run writes as it goes, its log file and its
trackers.

:class:`RunDirectory` opens the directory when training starts (config.yaml, train.log,
environment.json; resuming, the records cut back to the checkpoint), writes each epoch's records
(history.csv, ranks.csv) and the trackers' rows, and at the end summary.json, the test
predictions and the pictures. Only the main process writes; every method may be called on every
rank (the guard is inside, as the design asks of every writer).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ...config import Config, config_to_dict, dump_config
from ...errors import QGError, cause
from ...logs import add_file_handler
from ...runs import layout as rd
from ...runs import lock, plots
from ...runs.tracking import MLflowTracker, TensorBoardTracker
from ...runs.wandb_run import WandbTracker


class RunDirectory:
    """The directory ``path`` of one run, as process ``main`` (the one that writes) sees it.

    ``overwrite``: replace a run found there. ``tags`` label the run in MLflow and W&B (a
    tuning trial's study and number).
    """

    def __init__(
        self,
        path: str | Path,
        config: Config,
        *,
        main: bool,
        logger: logging.Logger,
        log_prefix: str = "",
        overwrite: bool = False,
        tags: dict[str, str] | None = None,
    ):
        self.path = Path(path)
        self.config = config
        self.main, self.logger, self.log_prefix = main, logger, log_prefix
        self.overwrite = overwrite
        self.tags = dict(tags or {})
        self.trackers: list[Any] = []  # the main process's TensorBoard, MLflow, W&B writers
        self.rank_history: list[dict[str, Any]] = []  # ranks.csv's rows (the main process's)
        self._handler: logging.Handler | None = None
        self._holding, self._held = False, None  # the directory's lock (the main process's)

    def open(
        self,
        *,
        environment: dict[str, Any],
        resuming: bool,
        history: list[dict[str, Any]],
        epoch: int,
        step: int = 0,
        resumed: str | None = None,
        notices: list[tuple[int, str]] = (),
    ) -> None:
        """Create the directory (config.yaml, train.log, environment.json), on the main
        process (its records open them once).

        ``resuming``: the run continues what the directory holds, if anything (its files are
        kept); resumed from a checkpoint (``resumed`` names it, after ``epoch`` and optimizer
        step ``step``), the log is appended to,
        history.csv and ranks.csv are rewritten from ``history`` (rows of later epochs are
        dropped), temporary files of a checkpoint write that was killed are removed, and the
        checkpoint's ``notices`` are logged.
        """
        if self.main:
            self._lock()
            if resuming:
                (self.path / rd.CHECKPOINTS).mkdir(parents=True, exist_ok=True)
                rd.remove_partial_writes(self.path)
            else:
                rd.prepare_run_dir(self.path, overwrite=self.overwrite)
            try:
                self._open_trackers(epoch, history)
            except Exception:
                if not resuming:  # a run that could not start leaves no run behind
                    rd.remove_run_files(self.path)
                    self._unlock(remove=True)
                raise
            (self.path / rd.CONFIG).write_text(dump_config(self.config), encoding="utf-8")
            after = epoch if resumed is not None else None
            rd.record_environment(self.path, {"resumed_after_epoch": after, **environment})
            self._handler = add_file_handler(self.path / rd.LOG, prefix=self.log_prefix)
            if resumed is not None:
                rd.write_history(self.path, history)
                self.rank_history = rd.read_ranks(self.path, up_to=epoch)
                rd.write_rows(self.path / rd.RANKS, self.rank_history)
                self.logger.info("resumed from %s after epoch %d (step %d)", resumed, epoch, step)
                for level, notice in notices:
                    self.logger.log(level, "%s", notice)

    def _lock(self) -> None:
        """The directory's lock (:mod:`.lock`), before any file of it is touched: one process
        writes a run. Not where ``training.path`` is a file (the directory's checks say so)."""
        if self._holding or (self.path.exists() and not self.path.is_dir()):
            return
        self._held = lock.hold(self.path)
        self._holding = True

    def _open_trackers(self, epoch: int, history: list[dict[str, Any]]) -> None:
        tracking = self.config.tracking
        if tracking.tensorboard:
            self.trackers.append(TensorBoardTracker(self.path, first_epoch=epoch + 1))
        params = config_to_dict(self.config)
        if tracking.mlflow is not None:
            self.trackers.append(
                MLflowTracker(
                    tracking.mlflow,
                    self.path,
                    experiment=self.config.name,
                    params=params,
                    tags=self.tags,
                )
            )
        if tracking.wandb is not None:
            self.trackers.append(
                WandbTracker(
                    tracking.wandb,
                    self.path,
                    mode=tracking.wandb_mode,
                    params=params,
                    tags=self.tags,
                    history=history,  # a resumed run's: what W&B lacks is sent
                )
            )

    def track(self, row: dict[str, Any], rank_rows: list[dict[str, Any]]) -> None:
        """An epoch's row, and each rank's times, to the trackers."""
        per_rank = {
            f"ranks/{r['rank']}/{k}": v for r in rank_rows for k, v in r.items() if k.endswith("_s")
        }
        for tracker in self.trackers:
            tracker.log_epoch({**row, **per_rank})

    def write_records(self, history: list[dict[str, Any]], rank_rows: list[dict[str, Any]]) -> None:
        """history.csv, and the epoch's rows of ranks.csv."""
        if not self.main:
            return
        rd.write_history(self.path, history)
        if rank_rows:
            self.rank_history += rank_rows
            rd.write_rows(self.path / rd.RANKS, self.rank_history)

    def record_failure(self, error: BaseException, epoch: int) -> None:
        """Write why the run stopped during ``epoch`` into train.log (only there: the terminal
        gets the command's own one-line error); the traceback too, for what is not a user's
        mistake."""
        if self._handler is None:
            return
        if isinstance(error, KeyboardInterrupt):
            message, exc_info = f"interrupted during epoch {epoch}", None
        else:
            message = f"stopped by an error during epoch {epoch}: {cause(error)}"
            exc_info = (
                None if isinstance(error, QGError) else (type(error), error, error.__traceback__)
            )
        record = self.logger.makeRecord(
            self.logger.name, logging.ERROR, __file__, 0, "%s", (message,), exc_info
        )
        self._handler.handle(record)

    def write_summary(
        self,
        summary: dict[str, Any],
        test_metrics: dict[str, Any] | None = None,
        predictions: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        """summary.json (with the test metrics once there are some), the test ``predictions``
        and the run's pictures; the test results go to the trackers too."""
        if not self.main:
            return
        rd.write_summary(self.path, {**summary, **(test_metrics or {})})
        if predictions is not None:
            rd.write_predictions(self.path, predictions)
        self.write_plots(training=test_metrics is None)  # a test adds its own pictures only
        if test_metrics is not None:
            for tracker in self.trackers:
                tracker.log_results(
                    config_to_dict(self.config), test_metrics, summary["epochs_run"]
                )

    def write_plots(self, *, training: bool = True) -> None:
        """curves.png and ranks.png (``training``) or each task's pictures of the test set; a
        failure here costs a warning, never the run."""
        if not self.main or not self.config.training.plots:
            return
        try:
            plots.write_run_plots(self.path, self.config, training=training)
        except Exception as e:  # the results are on disk already; pictures are a convenience
            self.logger.warning("could not write the plots of %s: %s", self.path, e)

    def close(self, *, complete: bool) -> None:
        """Close the trackers (``complete``: the run trained to its end) and detach the log
        file."""
        for tracker in self.trackers:
            tracker.close(complete)
        self.trackers = []
        if self._handler is not None:
            self.logger.removeHandler(self._handler)
            self._handler.close()
            self._handler = None
        self._unlock()

    def _unlock(self, *, remove: bool = False) -> None:
        if self._holding:
            lock.release(self._held, remove=remove)
            self._holding, self._held = False, None
