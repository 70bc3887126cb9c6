"""Experiment tracking from rank 0: TensorBoard event files, MLflow and Weights & Biases runs.

All get every history column per epoch (the learning rate included) and, at the end, the
hyperparameters (the config's scalar keys) and the test metrics; MLflow also the run's files
(plots, summary, history, config, best checkpoint), W&B the run's pictures. A resumed run
continues the same curves with every epoch once: TensorBoard hides what the killed run wrote
after its checkpoint (``purge_step``); MLflow's run is reopened by the id kept in
``RUN_DIR/mlflow.json``, and epochs it already has are not sent again (a resumed run repeats
them exactly); W&B's likewise (:mod:`.wandb_run`). TensorBoard is the ``tracking`` extra,
MLflow the ``mlflow`` extra, W&B the ``wandb`` extra.
"""

from __future__ import annotations

import json
import logging
import numbers
import time
from pathlib import Path
from typing import Any

from ..errors import ConfigError, OutageError, require, unreachable
from ..logs import get_logger
from .layout import (
    CHECKPOINTS,
    CONFIG,
    HISTORY,
    MLFLOW,
    SUMMARY,
    TENSORBOARD,
    write_atomic,
)


def flat_scalars(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"training.batch_size": 32, ...}``: the scalar leaves of a nested config dict (lists
    and null as text, as TensorBoard's hyperparameter table takes them)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_scalars(value, f"{name}."))
        elif isinstance(value, (bool, str, numbers.Real)):
            out[name] = value
        else:
            out[name] = str(value)
    return out


def log_safely(service: str, what: str, fn, *args, **kwargs) -> None:
    """``fn(*args, **kwargs)``; a failure (a server gone, a full disk) is a warning naming
    ``service`` and ``what`` was being logged, never the end of the run."""
    try:
        fn(*args, **kwargs)
    except Exception as e:
        get_logger().warning("%s: could not log %s: %s", service, what, e)


class TensorBoardTracker:
    """Writes a run's epochs and results as TensorBoard events (call it on rank 0 only)."""

    def __init__(self, run_dir: Path, *, first_epoch: int):
        tensorboard = require(
            "torch.utils.tensorboard",
            needed_for="tracking.tensorboard",
            extra="tracking",
            names=("tensorboard",),
        )
        SummaryWriter = tensorboard.SummaryWriter
        # purge_step: a resumed run's first epoch; events of that step and later, written by
        # the run that was killed, are hidden, so no epoch is counted twice.
        self.writer = SummaryWriter(
            str(run_dir / TENSORBOARD), purge_step=first_epoch if first_epoch > 1 else None
        )

    def log_epoch(self, row: dict[str, Any]) -> None:
        step = int(row["epoch"])
        for key, value in row.items():
            if key != "epoch" and isinstance(value, numbers.Real):
                self.writer.add_scalar(key, value, step)
        self.writer.flush()  # on disk before the epoch's checkpoint

    def log_results(self, config: dict[str, Any], metrics: dict[str, Any], step: int) -> None:
        scalars = {k: v for k, v in metrics.items() if isinstance(v, numbers.Real)}
        # also each metric as a scalar at ``step`` (in this folder: run_name ".")
        self.writer.add_hparams(flat_scalars(config), scalars, run_name=".", global_step=step)
        self.writer.flush()

    def close(self, complete: bool = True) -> None:
        self.writer.close()


class MLflowTracker:
    """Logs a run to the MLflow tracking server or store at ``uri`` (call it on rank 0 only).

    The experiment is the config's name, the run is named after the run directory and tagged
    with ``tags`` (a tuning trial: its study and number). When the run opens, a server that
    cannot be reached or fails is an OutageError, one that refuses what it is asked (a URI or
    an experiment it does not take) a ConfigError; later, a failed upload costs a warning,
    never the run.
    """

    def __init__(
        self,
        uri: str,
        run_dir: Path,
        *,
        experiment: str,
        params: dict[str, Any],
        tags: dict[str, str],
    ):
        MlflowClient = require(
            "mlflow.tracking", needed_for="tracking.mlflow", extra="mlflow", names=("mlflow",)
        ).MlflowClient
        logging.getLogger("mlflow").setLevel(logging.WARNING)  # its database set-up notices
        self.uri, self.run_dir, self.done = uri, run_dir, False
        record = run_dir / MLFLOW
        try:
            self.client = MlflowClient(tracking_uri=uri)
            if record.exists():  # a resumed run: the same MLflow run, its curves go on
                self.run_id = json.loads(record.read_text())["run_id"]
                self.client.update_run(self.run_id, status="RUNNING")
                history = self.client.get_metric_history(self.run_id, "train_loss")
                self.last_step = max((m.step for m in history), default=0)
                return
            found = self.client.get_experiment_by_name(experiment)
            if found is not None:
                experiment_id = found.experiment_id
            else:
                experiment_id = self.client.create_experiment(
                    experiment, artifact_location=_artifact_location(uri)
                )
            tags = {"run_dir": str(run_dir.absolute()), **tags}
            self.run_id = self.client.create_run(
                experiment_id, run_name=run_dir.absolute().name, tags=tags
            ).info.run_id
            self.last_step = 0
            from mlflow.entities import Param

            items = [Param(k, str(v)[:6000]) for k, v in flat_scalars(params).items()]
            for start in range(0, len(items), 100):  # MLflow takes 100 parameters a request
                self.client.log_batch(self.run_id, params=items[start : start + 100])
        except Exception as e:
            # MLflow's messages run to paragraphs: the first two sentences say what is wrong
            text = " ".join(str(e).split()) or type(e).__name__
            detail = ". ".join(text.split(". ")[:2]).rstrip(".")
            if unreachable(e):  # the server, not the config: the run waits for nothing
                raise OutageError(
                    f"tracking.mlflow: the tracking server at {uri} cannot be reached or failed, "
                    f"so the run did not start: {detail}"
                ) from e
            raise ConfigError(f"tracking.mlflow: cannot log to {uri}: {detail}") from e
        write_atomic(record, json.dumps({"tracking_uri": uri, "run_id": self.run_id}))

    def _safely(self, what: str, fn, *args, **kwargs) -> None:
        log_safely(f"MLflow ({self.uri})", what, fn, *args, **kwargs)

    def log_epoch(self, row: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        step = int(row["epoch"])
        if step <= self.last_step:
            return  # logged before the job was killed; the resumed epoch is the same
        stamp = _now_ms()
        metrics = [
            Metric(k, float(v), stamp, step)
            for k, v in row.items()
            if k != "epoch" and isinstance(v, numbers.Real)
        ]
        self._safely(f"epoch {step}", self.client.log_batch, self.run_id, metrics=metrics)
        self.last_step = step

    def log_results(self, config: dict[str, Any], metrics: dict[str, Any], step: int) -> None:
        from mlflow.entities import Metric

        stamp = _now_ms()
        scalars = [
            Metric(k, float(v), stamp, step)
            for k, v in metrics.items()
            if isinstance(v, numbers.Real)
        ]
        self._safely("the test metrics", self.client.log_batch, self.run_id, metrics=scalars)
        self._finish("FINISHED")

    def _finish(self, status: str) -> None:
        if self.done:
            return
        files = [
            *sorted(self.run_dir.glob("*.png")),
            *(self.run_dir / name for name in (SUMMARY, HISTORY, CONFIG)),
            self.run_dir / CHECKPOINTS / "best.pt",
        ]
        for path in files:
            if path.exists():
                self._safely(path.name, self.client.log_artifact, self.run_id, str(path))
        self._safely("the run's end", self.client.set_terminated, self.run_id, status)
        self.done = True

    def close(self, complete: bool = True) -> None:
        """End the MLflow run: finished (with its files) if the run trained to its end (or
        was stopped or pruned), else failed."""
        if not self.done:
            self._finish("FINISHED" if complete else "FAILED")


def _artifact_location(uri: str) -> str | None:
    """Beside a local SQLite store (MLflow's default would be ./mlruns of wherever the run
    started); a server decides for itself."""
    if not uri.startswith("sqlite:///"):
        return None
    database = Path(uri[len("sqlite:///") :].split("?", 1)[0])
    return (database.absolute().parent / "mlartifacts").as_uri()


def _now_ms() -> int:
    return int(time.time() * 1000)
