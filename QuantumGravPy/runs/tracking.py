"""Experiment tracking from rank 0: TensorBoard event files under ``RUN_DIR/tensorboard/``.

Every history column is a scalar per epoch (the learning rate included); at the end the
hyperparameters (the config's scalar keys) and the test metrics. A resumed run writes on from
the epoch it resumes with and marks that step as a restart, so TensorBoard drops what the
killed run wrote after its checkpoint: every epoch appears once. TensorBoard is the
``tracking`` extra.
"""

from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .directory import TENSORBOARD


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


class TensorBoardTracker:
    """Writes a run's epochs and results as TensorBoard events (call it on rank 0 only)."""

    def __init__(self, run_dir: Path, *, first_epoch: int):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ConfigError(
                "tracking.tensorboard needs the 'tracking' extra: "
                "pip install 'QuantumGravPy[tracking]'"
            ) from None
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

    def close(self) -> None:
        self.writer.close()
