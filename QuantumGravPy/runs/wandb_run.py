"""Weights & Biases tracking from rank 0 (``tracking.wandb``), each epoch sent once.

The W&B run's id is kept in ``RUN_DIR/wandb.json``; a resumed run reopens that W&B run. Which
epochs it already holds is asked of W&B itself, not of our own record: online, the server's
next step (``starting_step``); offline, the history records in the run's files under
``RUN_DIR/wandb/`` (W&B writes them from a helper process in blocks, so a killed job's last
epochs may never have reached its file). The resumed run then sends, from the checkpoint's
history, the epochs W&B lacks, and skips those it has when it trains them again (a resumed run
repeats them exactly): every epoch once, whatever the kill left behind.
"""

from __future__ import annotations

import json
import numbers
import os
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..compat.wandb import offline_history
from ..errors import ConfigError, OutageError, require, unreachable
from ..logs import get_logger
from .layout import WANDB, WANDB_FILES, write_atomic
from .tracking import log_safely


class WandbTracker:
    """Logs a run to the Weights & Biases ``project`` (call it on rank 0 only).

    ``mode``: online or offline (``WANDB_MODE`` takes precedence). The run is named after the
    run directory; a tuning trial (``tags``: its study and number) is named after its study and
    number and grouped by its study. ``history``: the rows a resumed run starts with, sent where
    W&B lacks them. A failure to start the W&B run is a ConfigError; later, a failed upload
    costs a warning, never the run.
    """

    def __init__(
        self,
        project: str,
        run_dir: Path,
        *,
        mode: str,
        params: dict[str, Any],
        tags: dict[str, str],
        history: Sequence[dict[str, Any]] = (),
    ):
        wandb = require("wandb", needed_for="tracking.wandb", extra="wandb")
        self.wandb, self.run_dir, self.done = wandb, run_dir, False
        record = run_dir / WANDB
        self.run_id = (
            json.loads(record.read_text())["run_id"]
            if record.exists()
            else secrets.token_hex(4)  # W&B's ids: 8 letters or digits
        )
        self.mode = os.environ.get("WANDB_MODE") or mode
        study = tags.get("study")
        try:
            self.run = wandb.init(
                project=project,
                id=self.run_id,
                resume="allow",  # a resumed run continues its W&B run
                mode=self.mode,
                dir=str(run_dir),
                name=f"{study} trial {tags['trial']}" if study else run_dir.absolute().name,
                group=study,
                job_type="trial" if study else "train",
                config=params,
                reinit="create_new",  # several runs in one process (a notebook, trials)
                # no banner, and our terminal left alone (W&B would capture it)
                settings=wandb.Settings(silent=True, console="off"),
            )
        except Exception as e:
            text = " ".join(str(e).split()) or type(e).__name__
            if self.mode == "online" and unreachable(e):  # W&B's servers, not the config
                raise OutageError(
                    "tracking.wandb: W&B's server cannot be reached or failed, so the run did "
                    f"not start: {text}"
                ) from e
            raise ConfigError(
                f"tracking.wandb: cannot start a W&B run ({self.mode}): {text}"
            ) from e
        write_atomic(record, json.dumps({"run_id": self.run_id}))
        self.last_step = self._sent()
        for row in history:
            self.log_epoch(row)  # the epochs W&B lacks (a killed job's last ones)
        get_logger().info("W&B run %s in project %s (%s)", self.run_id, project, self.mode)

    def _sent(self) -> int:
        """The last epoch this W&B run holds (0: none)."""
        if self.mode == "offline":
            rows = offline_history(self.run_dir / WANDB_FILES, self.run_id)
            return int(max((row["epoch"] for row in rows if "epoch" in row), default=0))
        return max(int(getattr(self.run, "starting_step", 0) or 0) - 1, 0)

    def _safely(self, what: str, fn, *args, **kwargs) -> None:
        log_safely("W&B", what, fn, *args, **kwargs)

    def log_epoch(self, row: dict[str, Any]) -> None:
        step = int(row["epoch"])
        if step <= self.last_step:
            return  # W&B has it; a resumed run repeats the epoch exactly
        values = {k: v for k, v in row.items() if isinstance(v, numbers.Real)}
        self._safely(f"epoch {step}", self.run.log, values, step=step, commit=True)
        self.last_step = step

    def log_results(self, config: dict[str, Any], metrics: dict[str, Any], step: int) -> None:
        scalars = {k: v for k, v in metrics.items() if isinstance(v, numbers.Real)}
        self._safely("the test metrics", self.run.summary.update, scalars)
        pictures = {
            f"plots/{path.stem}": self.wandb.Image(str(path))
            for path in sorted(self.run_dir.glob("*.png"))
        }
        if pictures:
            self._safely("the plots", self.run.log, pictures)  # a row of their own, no epoch
        self.close()

    def close(self, complete: bool = True) -> None:
        """End the W&B run: finished if the run trained to its end, else failed."""
        if not self.done:
            self._safely("the run's end", self.run.finish, exit_code=0 if complete else 1)
            self.done = True
