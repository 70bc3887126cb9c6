"""The config's sections that watch a run: ``monitor`` (inside every run: where each rank's time
goes, the gradient and replica checks) and ``tracking`` (outside it: TensorBoard, MLflow, W&B)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .checks import NON_NEGATIVE as _NON_NEGATIVE
from .checks import value_check as _check


@dataclass(frozen=True)
class MonitorConfig:
    # where each rank's time goes every epoch (data, forward, backward, gradient exchange,
    # optimizer, evaluation, waits), its memory and the bytes it exchanges: RUN_DIR/ranks.csv
    # and ranks.png, and the log names a straggling rank
    timing: bool = True
    # a rank whose own work (its epoch without waiting for the others) took more than this
    # times the median rank's is named in the log, with what its extra time went to
    straggler_ratio: float = field(default=1.25, metadata=_check(lambda v: v > 1, "a number > 1"))
    # gradients that are NaN or infinite: error (stop, naming the rank and the parameter) or
    # skip (every rank skips that step; counted in history.csv's skipped_steps)
    nonfinite: Literal["error", "skip"] = "error"
    # every N optimizer steps and at the end, the ranks compare checksums of their weights; a
    # difference stops the job naming the rank and the parameter. 0: never
    check_replicas_every: int = field(default=200, metadata=_NON_NEGATIVE)
    # the checks stay on the device; read every N steps and at each epoch's end (0: only there)
    read_every: int = field(default=200, metadata=_NON_NEGATIVE)


@dataclass(frozen=True)
class TrackingConfig:
    # write every history column, the learning rate, the hyperparameters and the test
    # metrics as TensorBoard events under RUN_DIR/tensorboard/ (rank 0; the tracking extra)
    tensorboard: bool = False
    # an MLflow tracking URI (http://host:5000, sqlite:///mlflow.db, ...): the same, plus the
    # run's plots, summary and best checkpoint, in the experiment named by name (the mlflow
    # extra); null: none
    mlflow: str | None = None
    # a Weights & Biases project: the same, plus per-rank times and the run's pictures; a
    # resumed run continues its W&B run, each epoch once; trials grouped by study (the wandb
    # extra); null: none
    wandb: str | None = None
    # online, or offline (files under RUN_DIR/wandb/, for wandb sync); WANDB_MODE, when set,
    # takes precedence
    wandb_mode: Literal["online", "offline"] = "online"
