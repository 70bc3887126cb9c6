"""The state of a run, apart from its model and optimizer: its counters and records, the random
states it continues from, and where it was resumed from. One object with ``state_dict`` and
``load_state_dict``, as torchtnt keeps a unit's progress apart from its loop; the trainer holds
it, and a checkpoint records its ``state_dict`` beside the model's and the optimizer's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...runs import reproducibility as rs
from ...runs.reproducibility import seed_everything


@dataclass
class RunState:
    """Where a run stands: what it has done, and what it needs to go on exactly."""

    epoch: int = 0  # completed epochs
    global_step: int = 0  # optimizer steps taken
    history: list[dict[str, Any]] = field(default_factory=list)  # one row per epoch
    stopped_early: bool = False
    pruned: bool = False  # stopped by the judge (a tuning trial's pruner); never resumed
    best_state: dict[str, torch.Tensor] | None = None  # the best epoch's weights, on the CPU
    rng_states: list[dict[str, Any]] = field(default_factory=list)  # every rank's, at the
    # last epoch's end: where the next epoch's random numbers come from
    resumed_from: Path | None = None  # the checkpoint this run continued from
    resume_notices: list[tuple[int, str]] = field(default_factory=list)  # (level, line)
    improved: bool = False  # the last epoch was the best so far (early stopping's decision)
    timing: dict[str, Any] | None = None  # this process's timing row of the last epoch
    _rng_to_restore: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def ended(self) -> bool:
        """Whether the run stopped before its epochs were done (early stopping, pruning)."""
        return self.stopped_early or self.pruned

    def on_epoch_end(self, trainer: Any, row: dict[str, Any]) -> None:
        """An epoch is done (a listener's point: after the decisions, before the records)."""
        self.epoch += 1
        self.history.append(row)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint records of the run's state: numbers, rows and tensors only."""
        return {
            "best_model": self.best_state,  # what run_test evaluates
            "epoch": self.epoch,
            "global_step": self.global_step,
            "sampler_epoch": self.epoch,  # the next epoch's set_epoch
            "stopped_early": self.stopped_early,
            "history": [dict(row) for row in self.history],
            "rng": self.rng_states,  # one entry per rank
        }

    def load_state_dict(
        self, state: dict[str, Any], *, rank: int, path: str | Path, stopped_early: bool
    ) -> None:
        """Continue from a checkpoint's ``state`` (read from ``path``) as process ``rank``;
        ``stopped_early``: whether early stopping, as configured now, ends the run there."""
        self.epoch = int(state["epoch"])
        self.global_step = int(state["global_step"])
        self.history = [dict(row) for row in state["history"]]
        self.stopped_early = stopped_early
        self.best_state = state["best_model"]
        self.rng_states = list(state["rng"])
        self._rng_to_restore = self.rng_states[rank] if rank < len(self.rng_states) else None
        self.resumed_from = Path(path)

    def restore_rng(self, *, rank: int, device: torch.device, seed: int) -> None:
        """Put back this rank's random states from the checkpoint, just before the loop; a
        rank the checkpoint has none for (the job grew) starts a stream of its own."""
        if self.resumed_from is None:
            return
        if self._rng_to_restore is not None:
            rs.set_rng_state(self._rng_to_restore, device)
        else:
            seed_everything(seed + 1_000_003 * self.epoch + rank)
        self._rng_to_restore = None
