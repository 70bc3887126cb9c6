"""What a checkpoint of a run holds, and how a run continues from one.

A checkpoint is a plain dict: each of the run's stateful parts' ``state_dict()`` under its name
(:mod:`.stateful`; the run's progress at the top level), and what the run was trained from (its
config, the model's spec, the environment). The parts are named in one place
(``parts.checkpoints``): a part that keeps state is added there and nowhere else. The parallel
strategy gathers them to rank 0 as plain, whole state dicts, so any strategy and any number of
processes resumes any other's. The checks on the file itself (format, config, world size) are
the runs layer's (:func:`~QuantumGravPy.runs.read_resume_state`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...errors import DiskFullError, flag
from ...parallel.strategies import Strategy
from ...runs import layout as rd
from ...runs.checkpoint import checkpoint_epoch, save_checkpoint
from ..evaluation.evaluator import checkpoint_model
from ..state.run_state import RunState
from ..tasks.task import Task
from .stateful import PROGRESS, Reading


class Checkpoints:
    """The checkpoints of one run, in ``directory``'s ``checkpoints/`` folder, over its stateful
    ``parts`` by name (saved and loaded in that order); ``about``: what the run was trained from,
    written beside them; ``reading``: filled in with the checkpoint being loaded, for the parts
    that need it. ``main``: whether this process writes them (every process gathers and loads).
    """

    def __init__(
        self,
        parts: dict[str, Any],
        *,
        reading: Reading,
        about: dict[str, Any],
        directory: Path,
        main: bool,
        strategy: Strategy,
        model: nn.Module,
        state: RunState,
    ):
        self.parts, self.reading, self.about = parts, reading, about
        self.folder, self.main = Path(directory) / rd.CHECKPOINTS, main
        self.strategy, self.model, self.state = strategy, model, state

    def contents(self) -> dict[str, Any]:
        """Everything a checkpoint records (every process calls it: the strategy gathers the
        model's and the optimizer's shares; rank 0's is written)."""
        contents: dict[str, Any] = {}
        for name, part in self.parts.items():
            state = part.state_dict()
            if name == PROGRESS:
                contents.update(state)
            else:
                contents[name] = state
        return {**contents, **self.about}

    def save(self, name: str, contents: dict[str, Any]) -> Path:
        """Write ``contents`` as ``checkpoints/<name>`` (the main process only)."""
        path = self.folder / name
        if self.main:
            try:
                save_checkpoint(contents, path)
            except DiskFullError as e:
                at = f"{e} (epoch {contents['epoch']})"
                raise DiskFullError(at, kept=self.kept()) from e.__cause__
        return path

    def kept(self) -> str:
        """What a run that stopped here can continue from, and how."""
        last = self.folder / rd.LAST
        epoch = checkpoint_epoch(last)
        if epoch is None:
            return f"no epoch was saved yet: free space and start again with {flag('overwrite')}"
        return (
            f"{last} holds epoch {epoch}, whole: free space on that device and continue with "
            f"{flag('resume')}"
        )

    def load(self, contents: dict[str, Any], path: str | Path) -> None:
        """Continue from a checkpoint's ``contents`` (read from ``path``): each part loads its
        own, in order."""
        self.reading.path, self.reading.contents, self.reading.ratio = path, contents, 1.0
        for name, part in self.parts.items():
            part.load_state_dict(contents if name == PROGRESS else contents.get(name))

    def tested(
        self, tasks: list[Task], checkpoint: str | Path | None, device: torch.device
    ) -> tuple[nn.Module, list[Task]]:
        """The model a test evaluates, and ``tasks`` with its target scaling: the weights of
        ``checkpoint`` (a file), else of the best epoch if the run trained, else the model as
        it is. A checkpoint's or the best weights go into a plain copy; the model is left as
        it is."""
        if checkpoint is not None:
            plain = self.strategy.plain_copy(self.model)
            return checkpoint_model(plain, tasks, checkpoint, device, self.reading.configured)
        if self.state.best_state is None:
            return self.model, tasks
        model = self.strategy.plain_copy(self.model)
        model.load_state_dict(self.state.best_state)
        return model, tasks
