"""The state of a run: its counters and records, its directory, its checkpoints, and resuming.

:class:`RunStateMixin` is the half of :class:`~QuantumGravPy.training.trainer.Trainer` that is
not the loop (as torchtnt keeps a unit's checkpointable state apart from its loop): what an
epoch leaves behind (history, best weights, every rank's random states), the files it is
written to (config.yaml, train.log, history.csv, summary.json, plots, checkpoints), and
resuming, which puts all of it back, random states included, before the loop starts again. The
checks on the checkpoint itself (format, config, world size) are the runs layer's
(:func:`~QuantumGravPy.runs.read_resume_state`). The methods marked "hook" are the ones
TrainerDDP guards or replaces.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import Config, config_to_dict, dump_config, shown_columns
from ..data import release_workers
from ..data.provenance import provenance
from ..errors import CheckpointError, QGError, cause
from ..logs import add_file_handler
from ..runs import directory as rd
from ..runs import plots
from ..runs import reproducibility as rs
from ..runs.checkpoint import load_model_state, save_checkpoint
from ..runs.reproducibility import seed_everything
from ..runs.resume import config_digest, read_resume_state
from ..runs.tracking import MLflowTracker, TensorBoardTracker
from ..runs.wandb_run import WandbTracker
from .early_stopping import MetricStopping
from .ema import EMA
from .tasks import Task, scalings
from .timing import stragglers


class RunStateMixin:
    """Counters, records and checkpoints of a run; mixed into the trainers.

    The trainer provides the objects the state is made of (``config``, ``model``,
    ``optimizer``, ``lr_scheduler``, ``scaler``, ``ema``, ``early_stopping``, ``device``,
    ``rank``, ``world_size``, ``run_dir``, ``is_main``, ``logger``) and calls
    :meth:`init_run_state` before using any of it.
    """

    config: Config
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    strategy: Any  # parallel.strategies.Strategy
    lr_scheduler: Any
    scaler: torch.amp.GradScaler
    ema: EMA | None
    early_stopping: MetricStopping
    tasks: list[Task]
    model_spec: dict[str, Any]
    device: torch.device
    rank: int
    world_size: int
    run_dir: Path
    overwrite: bool
    logger: logging.Logger
    log_prefix: str
    judge: Any

    def init_run_state(self) -> None:
        """A run at its start: no epoch done, nothing recorded."""
        self.epoch = 0  # completed epochs
        self.trackers: list[Any] = []  # rank 0's TensorBoard and MLflow writers (tracking:)
        self.run_tags: dict[str, str] = {}  # MLflow, W&B: a tuning trial's study and number
        self.global_step = 0  # optimizer steps
        self.history: list[dict[str, Any]] = []
        self.rank_rows: list[dict[str, Any]] = []  # ranks.csv's rows of the last epoch, rank 0's
        self.rank_history: list[dict[str, Any]] = []  # and of every epoch (rank 0)
        self.stopped_early = False
        self.pruned = False  # stopped by the judge (a tuning trial's pruner)
        self.best_state: dict[str, torch.Tensor] | None = None  # weights of the best epoch, on CPU
        self.resuming = False
        self.resumed_from: Path | None = None  # the checkpoint this run continued from
        self._rng_states: list[dict[str, Any]] = []  # every rank's, at the last epoch's end
        self._rng_to_restore: dict[str, Any] | None = None
        self._resume_notices: list[tuple[int, str]] = []
        self._environment: dict[str, Any] | None = None  # of this process, for the checkpoints
        self.test_predictions: dict[str, dict[str, torch.Tensor]] | None = None  # rank 0's
        self.test_graphs: Any = None  # the test set those predictions' positions index
        self._run_open = False
        self._log_handler: logging.Handler | None = None
        self._gathered: dict[str, Any] | None = None  # by every rank, for rank 0's checkpoint

    # --- an epoch's records ---------------------------------------------------------------------

    def gather_records(self, record: dict[str, Any]) -> list[dict[str, Any]]:  # hook
        """Every process's ``record`` of the epoch's end, in rank order (DDP gathers them)."""
        return [record]

    def write_epoch_files(self, row: dict[str, Any], improved: bool) -> None:  # hook
        """Checkpoints, history.csv and the epoch's log line (hook: DDP guards it on rank 0).

        ``last.pt`` is written last: it is what a resumed run continues from, so everything
        else of this epoch is on disk before it.
        """
        every = self.config.training.checkpoint_every
        if every and self.epoch % every == 0:
            self.save_checkpoint(f"epoch_{self.epoch:04d}.pt")
        if improved:
            self.save_checkpoint("best.pt")
        per_rank = {
            f"ranks/{r['rank']}/{k}": v
            for r in self.rank_rows
            for k, v in r.items()
            if k.endswith("_s")
        }
        for tracker in self.trackers:
            tracker.log_epoch({**row, **per_rank})
        self.save_checkpoint("last.pt")
        if self.is_main:
            rd.write_history(self.run_dir, self.history)
            if self.rank_rows:
                self.rank_history += self.rank_rows
                rd.write_rows(self.run_dir / rd.RANKS, self.rank_history)
            for line in stragglers(self.rank_rows, self.config.monitor.straggler_ratio):
                self.logger.warning("straggler: %s", line)
        columns = ("train_loss", "val_loss", *shown_columns(self.config))  # what decides *best
        self.logger.info(
            "epoch %d/%d  %s  lr %.2e  %.1fs%s",
            row["epoch"],
            self.config.training.num_epochs,
            "  ".join(f"{c} {row[c]:.4f}" for c in columns),
            row["lr"],
            row["epoch_seconds"],
            "  *best" if improved else "",
        )

    # --- the run directory -------------------------------------------------------------------

    def open_run(self) -> None:
        """Create the run directory on first use: config.yaml and train.log.

        A resumed run keeps its directory: the log is appended to, history.csv is rewritten
        from the checkpoint (rows of epochs after it are dropped), and temporary files of a
        checkpoint write that was killed are removed.
        """
        if self._run_open:
            return
        if self.is_main:
            if self.resuming:
                (self.run_dir / rd.CHECKPOINTS).mkdir(parents=True, exist_ok=True)
                rd.remove_partial_writes(self.run_dir)
            else:
                rd.prepare_run_dir(self.run_dir, overwrite=self.overwrite)
            try:
                self.open_trackers()
            except Exception:
                if not self.resuming:  # a run that could not start leaves no run behind
                    rd.remove_run_files(self.run_dir)
                raise
            (self.run_dir / rd.CONFIG).write_text(dump_config(self.config), encoding="utf-8")
            rd.record_environment(
                self.run_dir,
                {
                    "resumed_after_epoch": self.epoch if self.resumed_from else None,
                    **rs.environment(self.device, self.world_size),
                    "strategy": self.strategy.name if self.world_size > 1 else None,
                },
            )
            self._log_handler = add_file_handler(self.run_dir / rd.LOG, prefix=self.log_prefix)
            if self.resumed_from is not None:
                rd.write_history(self.run_dir, self.history)
                self.rank_history = rd.read_ranks(self.run_dir, up_to=self.epoch)
                rd.write_rows(self.run_dir / rd.RANKS, self.rank_history)
                self.logger.info(
                    "resumed from %s after epoch %d (step %d)",
                    self.resumed_from,
                    self.epoch,
                    self.global_step,
                )
                for level, notice in self._resume_notices:
                    self.logger.log(level, "%s", notice)
        self._run_open = True

    def record_failure(self, error: BaseException) -> None:
        """Write why the run stopped into train.log (only there: the terminal gets the
        command's own one-line error); the traceback too, for what is not a user's mistake."""
        handler = self._log_handler
        if handler is None:
            return
        if isinstance(error, KeyboardInterrupt):
            message, exc_info = f"interrupted during epoch {self.epoch + 1}", None
        else:
            message = f"stopped by an error during epoch {self.epoch + 1}: {cause(error)}"
            exc_info = (
                None if isinstance(error, QGError) else (type(error), error, error.__traceback__)
            )
        record = self.logger.makeRecord(
            self.logger.name, logging.ERROR, __file__, 0, "%s", (message,), exc_info
        )
        handler.handle(record)

    def open_trackers(self) -> None:
        """``tracking:``'s writers, on the main process (from open_run)."""
        tracking = self.config.tracking
        if tracking.tensorboard:
            self.trackers.append(TensorBoardTracker(self.run_dir, first_epoch=self.epoch + 1))
        if tracking.mlflow is not None:
            self.trackers.append(
                MLflowTracker(
                    tracking.mlflow,
                    self.run_dir,
                    experiment=self.config.name,
                    params=config_to_dict(self.config),
                    tags=self.run_tags,
                )
            )
        if tracking.wandb is not None:
            self.trackers.append(
                WandbTracker(
                    tracking.wandb,
                    self.run_dir,
                    mode=tracking.wandb_mode,
                    params=config_to_dict(self.config),
                    tags=self.run_tags,
                    history=self.history,  # a resumed run's: what W&B lacks is sent
                )
            )

    def close(self) -> None:
        """Detach this run's log file and stop the worker processes of the loaders
        ``prepare_dataloaders`` made (the trainer stays usable for evaluation)."""
        for loader in getattr(self, "loaders", ()):
            release_workers(loader)
        complete = (
            self.stopped_early or self.pruned or self.epoch >= self.config.training.num_epochs
        )
        for tracker in self.trackers:
            tracker.close(complete)
        self.trackers = []
        handler = self._log_handler
        if handler is not None:
            self.logger.removeHandler(handler)
            handler.close()
            self._log_handler = None

    def write_summary(self, test_metrics: dict[str, float] | None = None) -> None:  # hook
        """summary.json (test metrics once there are some) and the run's plots."""
        if not self.is_main:
            return
        summary = {
            "test_loss": None,  # until the run is tested
            "best_epoch": self.early_stopping.best_epoch,
            "epochs_run": self.epoch,
            "stopped_early": self.stopped_early,
            "world_size": self.world_size,
        }
        if self.judge is not None:
            summary["pruned"] = self.pruned
        summary.update(test_metrics or {})
        rd.write_summary(self.run_dir, summary)
        if test_metrics is not None and self.test_predictions is not None:
            # each row also names where its graph came from (here, on rank 0 alone under DDP:
            # a failure reading the files reaches every rank)
            sources = provenance(self.config, self.test_graphs)
            rd.write_predictions(self.run_dir, _with_sources(self.test_predictions, sources))
        self.write_plots(training=test_metrics is None)  # a test adds its own pictures only
        if test_metrics is not None:
            for tracker in self.trackers:
                tracker.log_results(config_to_dict(self.config), test_metrics, self.epoch)

    def write_plots(self, *, training: bool = True) -> None:
        """curves.png and ranks.png (``training``) or each task's pictures of the test set; a
        failure here costs a warning, never the run."""
        if not self.config.training.plots:
            return
        try:
            plots.write_run_plots(self.run_dir, self.config, training=training)
        except Exception as e:  # the results are on disk already; pictures are a convenience
            self.logger.warning("could not write the plots of %s: %s", self.run_dir, e)

    # --- checkpoints ---------------------------------------------------------------------------

    def gather_state(self) -> dict[str, Any]:
        """The model's, the optimizer's and the average's plain, whole state dicts, as the
        strategy gathers them (DDP: every rank calls it, rank 0's is written)."""
        s, ema = self.strategy, self.ema
        return {
            "model": s.model_state(self.model),
            "optimizer": s.optimizer_state(self.model, self.optimizer),
            "ema": ema.state_dict(s.model_state(ema.module)) if ema is not None else None,
        }

    def state_dict(self) -> dict[str, Any]:
        """Everything a checkpoint records: plain state dicts, tensors and numbers only."""
        gathered = self._gathered if self._gathered is not None else self.gather_state()
        return {
            **gathered,
            "lr_scheduler": self.lr_scheduler.state_dict() if self.lr_scheduler else None,
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
            "best_model": self.best_state,  # what run_test evaluates
            "epoch": self.epoch,
            "global_step": self.global_step,
            "sampler_epoch": self.epoch,  # the next epoch's set_epoch
            "early_stopping": self.early_stopping.state_dict(),
            "target_scaling": scalings(self.tasks),  # of regression targets: the model's units
            "model_spec": self.model_spec,  # what the model is built from
            "stopped_early": self.stopped_early,
            "history": [dict(row) for row in self.history],
            "rng": self._rng_states,  # one entry per rank
            "config": config_to_dict(self.config),
            "config_digest": config_digest(self.config),
            "world_size": self.world_size,
            "environment": self._environment,
        }

    def save_checkpoint(self, name: str = "last.pt") -> Path:
        """Write a checkpoint into the run's ``checkpoints/`` (only the main process writes)."""
        path = self.run_dir / rd.CHECKPOINTS / name
        if self.is_main:
            save_checkpoint(self.state_dict(), path)
        return path

    # --- resuming ------------------------------------------------------------------------------

    def resume(self, *, force: bool = False) -> bool:
        """Restore the run in ``training.path`` from ``checkpoints/last.pt``, on every process.

        Returns False, and leaves the trainer at its start, when the directory holds no run or
        only the start of one (no epoch finished); a directory with results but no last.pt is
        refused. Called by the constructor with ``resume=True``.
        """
        self.resuming = True
        state = self.read_resume_state(force)
        if state is None:
            return False
        self.load_state_dict(state, self.run_dir / rd.CHECKPOINTS / rd.LAST)
        self._resume_notices = state["notices"]  # logged once train.log is open
        return True

    def read_resume_state(self, force: bool) -> dict[str, Any] | None:
        """Load and check ``last.pt`` (hook: DDP reads it on rank 0 and broadcasts it)."""
        return read_resume_state(self.config, world_size=self.world_size, force=force)

    def load_state_dict(self, state: dict[str, Any], path: str | Path = "checkpoint") -> None:
        """Continue from ``state`` (a checkpoint's contents) in this process."""
        load_model_state(
            self.model,
            state["model"],
            path,
            trained=state.get("config"),
            configured=config_to_dict(self.config),
            load=self.strategy.load_model_state,
        )
        try:
            self.strategy.load_optimizer_state(self.model, self.optimizer, state["optimizer"])
            if self.lr_scheduler is not None and state["lr_scheduler"] is not None:
                self.lr_scheduler.load_state_dict(state["lr_scheduler"])
            if self.scaler.is_enabled() and state["scaler"] is not None:
                self.scaler.load_state_dict(state["scaler"])
        except (KeyError, ValueError, RuntimeError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise CheckpointError(f"{path}: its optimizer state does not fit ({first})") from None
        if self.ema is not None:
            if state["ema"] is not None:
                self.ema.load_state_dict(state["ema"], self.strategy.load_model_state)
            else:  # EMA switched on for the rest of the run (--force): it starts from the model
                self.strategy.load_model_state(self.ema.module, state["model"])
        scaling = state.get("target_scaling") or {}
        self.set_tasks([t.with_scaling(scaling.get(t.name)) for t in self.tasks])
        self.epoch = int(state["epoch"])
        self.global_step = int(state["global_step"])
        self.history = [dict(row) for row in state["history"]]
        self.early_stopping.load_state_dict(state["early_stopping"])
        self.stopped_early = self.config.early_stopping.enabled and self.early_stopping.should_stop
        self.best_state = state["best_model"]
        rngs = state["rng"]
        self._rng_states = list(rngs)
        self._rng_to_restore = rngs[self.rank] if self.rank < len(rngs) else None
        self.resumed_from = Path(path)

    def restore_rng(self) -> None:
        """Put back this rank's random states from the checkpoint, just before the loop.

        A rank the checkpoint has no state for (the job grew) starts a stream of its own.
        """
        if self.resumed_from is None:
            return
        if self._rng_to_restore is not None:
            rs.set_rng_state(self._rng_to_restore, self.device)
        else:
            seed_everything(self.config.training.seed + 1_000_003 * self.epoch + self.rank)
        self._rng_to_restore = None


def _with_sources(
    predictions: dict[str, dict[str, Any]], sources: dict[str, np.ndarray]
) -> dict[str, dict[str, Any]]:
    """Each task's rows with ``source``, ``index`` (and ``group``) of the row's graph: the file
    and sample it was read from (as ``qg predict``'s table names them), or its position among
    the generated graphs."""
    out = {}
    for task, parts in predictions.items():
        graph = np.asarray(parts["graph"]).astype(np.int64)
        out[task] = {**parts, **{key: values[graph] for key, values in sources.items()}}
    return out
