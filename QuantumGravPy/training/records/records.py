"""What a run writes as it goes: its directory opened, each epoch's checkpoints, records and log
line, and the summary with the test results.

:class:`RunRecords` is a listener of the run (:mod:`.listeners`), built by the trainer with the
objects it writes through (the run directory, the checkpoints) and what it reports (the run's
state, the early stopping). Writing happens on the main process; ``share(fn)`` runs ``fn`` there
and hands a failure to every process (the trainer's ``on_main``: under DDP, rank 0 writes while
the others wait, and all of them raise if it fails, instead of waiting at the next collective).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, TypeVar

from ...config import DataConfig, TrainingConfig
from ...data.sources.provenance import provenance, with_sources
from ...errors import DiskFullError
from ...runs import layout as rd
from ...runs import reproducibility as rs
from ..monitoring.timing import stragglers
from ..state.early_stopping import MetricStopping
from ..state.listeners import Listener
from ..state.run_state import RunState
from .checkpointing import Checkpoints
from .run_directory import RunDirectory

T = TypeVar("T")
BEST_EPOCH = "best_epoch_"  # training.keep_best's checkpoints: best_epoch_NNNN.pt


def _call(fn: Callable[[], T]) -> T:
    return fn()


class RunRecords(Listener):
    """The records of one run, in its ``directory``, trained as ``training`` (its ``training:``
    section) says on the data ``data`` describes; ``shown``: the columns its log line shows of
    each epoch (after the losses); ``straggler_ratio`` (``monitor.straggler_ratio``): a rank
    whose own work took more than this times the median rank's is named; ``judged``: whether
    a judge may prune it (the summary then says whether it did)."""

    def __init__(
        self,
        *,
        training: TrainingConfig,
        data: DataConfig,
        shown: tuple[str, ...],
        straggler_ratio: float,
        directory: RunDirectory,
        checkpoints: Checkpoints,
        state: RunState,
        early_stopping: MetricStopping,
        logger: logging.Logger,
        world_size: int,
        judged: bool = False,
        share: Callable[[Callable[[], Any]], Any] = _call,
    ):
        self.training, self.data, self.directory = training, data, directory
        self.shown, self.straggler_ratio, self.checkpoints = shown, straggler_ratio, checkpoints
        self.state, self.early_stopping, self.logger = state, early_stopping, logger
        self.world_size, self.judged, self.share = world_size, judged, share
        self.opened = False  # on every process, once open() has run
        self.nan_said = False  # NaN validation is said once: every later epoch would repeat it

    def open(self, environment: dict[str, Any], *, resuming: bool) -> None:
        """Open the run directory (config.yaml, train.log; ``resuming``, the directory's run
        continued, its records cut back to the checkpoint), recording ``environment``; once."""
        if self.opened:
            return
        state = self.state
        resumed = None if state.resumed_from is None else str(state.resumed_from)
        opening = dict(history=state.history, epoch=state.epoch, step=state.global_step)
        opening["resuming"] = resuming
        notices = state.resume_notices
        self.share(
            lambda: self.directory.open(
                environment=environment, resumed=resumed, notices=notices, **opening
            )
        )
        self.opened = True

    def on_epoch_end(self, trainer: Any, row: dict[str, Any]) -> None:
        """The best weights kept (in memory, for testing), every process's random state and
        timing gathered in one collective, the checkpoints gathered and the epoch written."""
        state = self.state
        if state.improved:
            weights = trainer.eval_model.state_dict()
            state.best_state = {k: v.detach().to("cpu", copy=True) for k, v in weights.items()}
        # Each rank's random state, where the next epoch starts from, and its time: one gather.
        records = trainer.processes.gather(
            {"rng": rs.rng_state(trainer.device), "timing": state.timing}
        )
        state.rng_states = [r["rng"] for r in records]
        rank_rows = [r["timing"] for r in records if r["timing"] is not None]
        # gathered by every process (zero and fsdp hold shares), written by the main one
        contents = self.checkpoints.contents()
        told = trainer.listeners.tell
        self.write_epoch(
            row,
            state.improved,
            contents,
            rank_rows,
            saved=lambda path: told("on_checkpoint", trainer, path),
        )

    def on_train_end(self, trainer: Any, history: list[dict[str, Any]]) -> None:
        self.write_summary()

    def write_epoch(
        self,
        row: dict[str, Any],
        improved: bool,
        contents: dict,
        rank_rows: list[dict],
        saved: Callable[[Any], None] = lambda path: None,
    ) -> None:
        """Checkpoints (``contents``, gathered by every process), history.csv, ranks.csv,
        stragglers and the epoch's log line; ``saved(path)`` after each checkpoint is written
        (on the process that wrote it).

        ``last.pt`` comes after the epoch's other checkpoints: it is what a resumed run
        continues from (history.csv and ranks.csv are rewritten from it when resuming).
        """

        def write() -> None:
            epoch, every = self.state.epoch, self.training.checkpoint_every
            paths = []
            if every and epoch % every == 0:
                paths.append(self.checkpoints.save(f"epoch_{epoch:04d}.pt", contents))
            if improved:
                paths.append(self.checkpoints.save("best.pt", contents))
            if self.training.keep_best > 1:
                paths += self.keep_best(contents)
            self.directory.track(row, rank_rows)
            paths.append(self.checkpoints.save(rd.LAST, contents))
            for path in paths:  # on the process that wrote them
                saved(path)
            self.directory.write_records(self.state.history, rank_rows)
            for line in stragglers(rank_rows, self.straggler_ratio):
                self.logger.warning("straggler: %s", line)
            shown = ("train_loss", "val_loss", *self.shown)  # decide *best
            self.logger.info(
                "epoch %d/%d  %s  lr %.2e  %.1fs%s",
                row["epoch"],
                self.training.num_epochs,
                "  ".join(f"{c} {row[c]:.4f}" for c in shown),
                row["lr"],
                row["epoch_seconds"],
                "  *best" if improved else "",
            )
            nan = None if self.nan_said else nan_notice(row, self.early_stopping.columns)
            if nan:
                self.nan_said = True
                self.logger.warning("%s", nan)

        def written() -> None:
            try:
                write()
            except DiskFullError as e:
                if e.kept:
                    raise  # a checkpoint's: it says what is kept already
                raise DiskFullError(str(e), kept=self.checkpoints.kept()) from e.__cause__

        self.share(written)

    def keep_best(self, contents: dict) -> list:
        """training.keep_best k: the k best epochs so far, by the first early-stopping column
        in its direction (ties: the earlier epoch; NaN last), each as best_epoch_NNNN.pt; the
        epoch just ended saved if it is one of them, a file of one that no longer is removed.
        Worked out from the history, so a resumed run keeps the same files."""
        stopping = self.early_stopping
        column, sign = stopping.columns[0], 1 if stopping.first.mode == "min" else -1

        def rank(row: dict) -> tuple:
            value = row.get(column, math.nan)
            return (math.isnan(value), sign * value if not math.isnan(value) else 0, row["epoch"])

        best = sorted(self.state.history, key=rank)[: self.training.keep_best]
        kept = {row["epoch"] for row in best}
        epoch, saved = self.state.epoch, []
        if epoch in kept:
            saved.append(self.checkpoints.save(f"{BEST_EPOCH}{epoch:04d}.pt", contents))
        for path in self.checkpoints.folder.glob(f"{BEST_EPOCH}*.pt"):
            number = path.stem.removeprefix(BEST_EPOCH)
            if number.isdigit() and int(number) not in kept:
                path.unlink(missing_ok=True)
        return saved

    def write_summary(
        self,
        test_metrics: dict[str, float] | None = None,
        predictions: dict[str, dict[str, Any]] | None = None,
        graphs: Any = None,
    ) -> None:
        """summary.json and the pictures; after a test, its metrics and the test
        ``predictions``, each row naming where its graph (a position in ``graphs``) came from
        (read on the main process, so that a file that cannot be read fails every process)."""
        state = self.state
        summary = {
            "test_loss": None,  # until the run is tested
            "best_epoch": self.early_stopping.best_epoch,
            "epochs_run": state.epoch,
            "stopped_early": state.stopped_early,
            "world_size": self.world_size,
            **({"pruned": state.pruned} if self.judged else {}),
        }

        def write() -> None:
            rows = predictions
            if rows is not None:
                rows = with_sources(rows, provenance(self.data, graphs))
            self.directory.write_summary(summary, test_metrics, rows)

        self.share(write)

    def close(self, *, complete: bool) -> None:
        """Close the trackers (``complete``: the run trained to its end), detach the log."""
        self.directory.close(complete=complete)

    def record_failure(self, error: BaseException) -> None:
        """Why the run stopped during its current epoch, in train.log."""
        self.directory.record_failure(error, epoch=self.state.epoch + 1)


def nan_notice(row: dict[str, Any], watched: tuple[str, ...]) -> str | None:
    """What an epoch's validation columns that are NaN mean (None if none is): no epoch is best
    while the first of ``watched`` (early_stopping.metric) is, so no best.pt is written."""
    nan = [k for k, v in row.items() if k.startswith("val_") and _nan(v)]
    if not nan:
        return None
    named = ", ".join(nan) + (" is" if len(nan) == 1 else " are")
    why = (
        f"; while {watched[0]} (early_stopping.metric) is NaN no epoch is best and no best.pt "
        "is written"
        if watched and watched[0] in nan
        else ""
    )
    return (
        f"{named} NaN at epoch {row['epoch']}{why}: a NaN or infinite target or feature in the "
        "validation graphs, or a model that diverged"
    )


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)
