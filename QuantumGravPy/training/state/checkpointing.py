"""What a checkpoint of a run holds, and how a run continues from one.

:class:`Checkpoints` is given the parts of a trainer a checkpoint records when the trainer
builds it: the model, its optimizer, scheduler, gradient scaler and moving average (as the
parallel strategy turns them into plain, whole state dicts), the early stopping, the run's state
and what the model is built from. A checkpoint is a plain dict of tensors and numbers, gathered
to rank 0, so any strategy and any number of processes resumes any other's. The checks on the
file itself (format, config, world size) are the runs layer's
(:func:`~QuantumGravPy.runs.read_resume_state`).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...config import Config, config_to_dict
from ...errors import CheckpointError, DiskFullError, cause, flag
from ...parallel.strategies import Strategy
from ...runs import layout as rd
from ...runs.checkpoint import checkpoint_epoch, load_model_state, save_checkpoint
from ...runs.resume import config_digest
from ..evaluation.evaluator import checkpoint_model
from ..evaluation.tasks import Task, scalings
from .early_stopping import MetricStopping
from .ema import EMA
from .run_state import RunState


class Checkpoints:
    """The checkpoints of one run, in ``directory``'s ``checkpoints/`` folder; ``main``: whether
    this process writes them (every process gathers and loads)."""

    def __init__(
        self,
        *,
        config: Config,
        directory: Path,
        main: bool,
        strategy: Strategy,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        lr_scheduler: Any,
        scaler: torch.amp.GradScaler,
        ema: EMA | None,
        early_stopping: MetricStopping,
        state: RunState,
        model_spec: dict[str, Any],
        environment: dict[str, Any],
        world_size: int,
    ):
        self.config, self.folder, self.main = config, Path(directory) / rd.CHECKPOINTS, main
        self.strategy, self.model, self.optimizer = strategy, model, optimizer
        self.lr_scheduler, self.scaler, self.ema = lr_scheduler, scaler, ema
        self.early_stopping, self.state = early_stopping, state
        self.model_spec, self.environment = model_spec, environment
        self.world_size = world_size

    def gather(self) -> dict[str, Any]:
        """The model's, the optimizer's and the average's plain, whole state dicts, as the
        strategy gathers them (every process calls it; rank 0's is written)."""
        s, ema = self.strategy, self.ema
        return {
            "model": s.model_state(self.model),
            "optimizer": _plain_state(
                s.optimizer_state(self.model, self.optimizer), self.optimizer
            ),
            "ema": ema.state_dict(s.model_state(ema.module)) if ema is not None else None,
        }

    def contents(self, tasks: list[Task], gathered: dict[str, Any] | None = None) -> dict:
        """Everything a checkpoint records, with ``tasks``' target scaling; ``gathered``: what
        :meth:`gather` gave, if the caller has it already."""
        return {
            **(gathered if gathered is not None else self.gather()),
            "lr_scheduler": self.lr_scheduler.state_dict() if self.lr_scheduler else None,
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
            **self.state.state_dict(),
            "early_stopping": self.early_stopping.state_dict(),
            "target_scaling": scalings(tasks),  # of regression targets: the model's units
            "model_spec": self.model_spec,  # what the model is built from
            "config": config_to_dict(self.config),
            "config_digest": config_digest(self.config),
            "world_size": self.world_size,
            "environment": self.environment,
        }

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

    def load(
        self, contents: dict[str, Any], path: str | Path, tasks: list[Task], *, rank: int
    ) -> list[Task]:
        """Continue from a checkpoint's ``contents`` (read from ``path``) as process ``rank``;
        returns ``tasks`` with the checkpoint's target scaling."""
        s = self.strategy
        load_model_state(
            self.model,
            contents["model"],
            path,
            trained=contents.get("config"),
            configured=config_to_dict(self.config),
            load=s.load_model_state,
        )
        trained = (contents.get("config") or {}).get("training") or {}
        now = config_to_dict(self.config)["training"]
        # --resume --force with other optimizer or schedule settings: they are applied; so is
        # a schedule's length that follows num_epochs, which a resumed run may change
        retuned = trained.get("optimizer") != now.get("optimizer")
        stretched = (
            getattr(self.lr_scheduler, "follows_num_epochs", False)
            and trained.get("num_epochs", now["num_epochs"]) != now["num_epochs"]
        )
        resettled = retuned or stretched or trained.get("lr_scheduler") != now.get("lr_scheduler")
        try:
            s.load_optimizer_state(self.model, self.optimizer, contents["optimizer"])
            _plain_groups(self.optimizer)
            rate = _rate(trained, self.optimizer)  # what a plateau schedule cut it from
            ratio = self.optimizer.param_groups[0]["lr"] / rate if rate else 1.0
            if retuned:
                _apply_settings(self.optimizer, self.config.training.optimizer.kwargs)
            if self.lr_scheduler is not None and contents["lr_scheduler"] is not None:
                if resettled:
                    self.lr_scheduler.resettle(contents["lr_scheduler"], ratio)
                else:
                    self.lr_scheduler.load_state_dict(contents["lr_scheduler"])
            if self.scaler.is_enabled() and contents["scaler"] is not None:
                self.scaler.load_state_dict(contents["scaler"])
        except (KeyError, ValueError, RuntimeError) as e:
            raise CheckpointError(f"{path}: its optimizer state does not fit ({cause(e)})") from e
        if self.ema is not None:
            if contents["ema"] is not None:
                self.ema.load_state_dict(contents["ema"], s.load_model_state)
            else:  # EMA switched on for the rest of the run (--force): it starts from the model
                s.load_model_state(self.ema.module, contents["model"])
        self.early_stopping.load_state_dict(contents["early_stopping"])
        stops = self.config.early_stopping.enabled and self.early_stopping.should_stop
        self.state.load_state_dict(contents, rank=rank, path=path, stopped_early=stops)
        scaling = contents.get("target_scaling") or {}
        return [t.with_scaling(scaling.get(t.name)) for t in tasks]

    def tested(
        self, tasks: list[Task], checkpoint: str | Path | None, device: torch.device
    ) -> tuple[nn.Module, list[Task]]:
        """The model a test evaluates, and ``tasks`` with its target scaling: the weights of
        ``checkpoint`` (a file), else of the best epoch if the run trained, else the model as
        it is. A checkpoint's or the best weights go into a plain copy; the model is left as
        it is."""
        if checkpoint is not None:
            plain, configured = self.strategy.plain_copy(self.model), config_to_dict(self.config)
            return checkpoint_model(plain, tasks, checkpoint, device, configured)
        if self.state.best_state is None:
            return self.model, tasks
        model = self.strategy.plain_copy(self.model)
        model.load_state_dict(self.state.best_state)
        return model, tasks


def _rate(trained: dict[str, Any], optimizer: torch.optim.Optimizer) -> float:
    """The learning rate a checkpoint's run was configured with: its config's, else the
    optimizer class's default (else the rate it has: no cut to carry over)."""
    given = ((trained.get("optimizer") or {}).get("kwargs") or {}).get("lr")
    if given is None:
        default = inspect.signature(type(optimizer)).parameters.get("lr")
        given = default.default if default is not None else None
    if not isinstance(given, (int, float)) or not given:
        given = optimizer.param_groups[0]["lr"]
    return float(given)


def _apply_settings(optimizer: torch.optim.Optimizer, kwargs: dict[str, Any]) -> None:
    """``training.optimizer.kwargs`` set on every group of ``optimizer`` (over the values a
    checkpoint's state gave them); the rate also as the one a schedule starts from."""
    for group in optimizer.param_groups:
        for key, value in kwargs.items():
            if key in group:
                group[key] = tuple(value) if isinstance(group[key], tuple) else value
        if "lr" in kwargs:
            group["lr"] = group["initial_lr"] = kwargs["lr"]


def _plain_state(
    state: dict[str, Any] | None, optimizer: torch.optim.Optimizer
) -> dict[str, Any] | None:
    """An optimizer's state dict as any run can load it (see :func:`_plain_groups`); None:
    this process holds none."""
    _plain_groups(optimizer, (state or {}).get("param_groups", ()))
    return state


def _plain_groups(optimizer: torch.optim.Optimizer, groups: Any = None) -> None:
    """``groups`` (by default the optimizer's own) with their learning rates as numbers (a
    captured step keeps them as tensors on its GPU, and makes them its own again) and
    ``capturable`` as the optimizer was built."""
    for group in optimizer.param_groups if groups is None else groups:
        if isinstance(group.get("lr"), torch.Tensor):
            group["lr"] = float(group["lr"])
        if "capturable" in group:
            group["capturable"] = optimizer.defaults.get("capturable", False)
