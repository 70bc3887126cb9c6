"""The run's stateful parts, as a checkpoint holds them: each with ``state_dict()`` and
``load_state_dict(state)``, stored under its name.

The trainer names its parts once (``parts.checkpoints``); :class:`~.checkpointing.Checkpoints`
writes ``{name: part.state_dict()}`` and loads each part back in that order. A part that needs
to know which checkpoint it is reading (its path, the config it was trained with) is given the
:class:`Reading` the checkpoints fill in before loading. The names are the checkpoint format's
keys, so a checkpoint of any earlier version loads.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...errors import CheckpointError, cause
from ...parallel.strategies import Strategy
from ...runs.checkpoint import load_model_state
from ..state.early_stopping import MetricStopping
from ..state.ema import EMA
from ..state.run_state import RunState
from ..tasks.task import Task, scalings

PROGRESS = "progress"  # the run's progress: kept at the top level of a checkpoint (epoch, ...)


@dataclass
class Reading:
    """The checkpoint being loaded: where it is, all it holds, and the config (as a dict) of
    the run that wrote it and of this run."""

    configured: dict[str, Any]
    path: Path | str = "checkpoint"
    contents: dict[str, Any] = field(default_factory=dict)
    ratio: float = 1.0  # the loaded learning rate over the one its run was configured with

    @property
    def trained(self) -> dict[str, Any]:
        return self.contents.get("config") or {}

    def training(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The training section then (as written) and now."""
        return self.trained.get("training") or {}, self.configured["training"]

    @property
    def retuned(self) -> bool:
        """``--resume --force`` with other optimizer settings: they are applied."""
        then, now = self.training()
        return then.get("optimizer") != now.get("optimizer")


class ModelWeights:
    """The model's weights, whole, as the parallel strategy gathers and scatters them."""

    def __init__(self, strategy: Strategy, model: nn.Module, reading: Reading):
        self.strategy, self.model, self.reading = strategy, model, reading

    def state_dict(self) -> dict[str, Any]:
        return self.strategy.model_state(self.model)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        r = self.reading
        load_model_state(
            self.model,
            state,
            r.path,
            trained=r.contents.get("config"),
            configured=r.configured,
            load=self.strategy.load_model_state,
        )


class OptimizerState:
    """The optimizer's state, whole and with plain groups, so that any strategy and number of
    processes loads it; a run resumed with other settings (``--force``) takes its own."""

    def __init__(
        self,
        strategy: Strategy,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        reading: Reading,
        settings: dict[str, Any],
    ):
        self.strategy, self.model, self.optimizer = strategy, model, optimizer
        self.reading, self.settings = reading, settings  # training.optimizer.kwargs

    def state_dict(self) -> dict[str, Any] | None:
        state = self.strategy.optimizer_state(self.model, self.optimizer)
        return plain_state(state, self.optimizer)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with fits(self.reading, "optimizer"):
            self.strategy.load_optimizer_state(self.model, self.optimizer, state)
            plain_groups(self.optimizer)
        then, _ = self.reading.training()
        rate = configured_rate(then, self.optimizer)  # what a plateau schedule cut it from
        self.reading.ratio = self.optimizer.param_groups[0]["lr"] / rate if rate else 1.0
        if self.reading.retuned:
            apply_settings(self.optimizer, self.settings)


class ScheduleState:
    """The learning-rate schedule (``training.lr_scheduler``), or None without one. A schedule
    of other settings, or one that follows a changed ``num_epochs``, is built anew and stepped
    as far as the checkpoint's had gone (``resettle``)."""

    def __init__(self, schedule: Any, reading: Reading):
        self.schedule, self.reading = schedule, reading

    def state_dict(self) -> dict[str, Any] | None:
        return self.schedule.state_dict() if self.schedule else None

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if self.schedule is None or state is None:
            return
        then, now = self.reading.training()
        stretched = (
            getattr(self.schedule, "follows_num_epochs", False)
            and then.get("num_epochs", now["num_epochs"]) != now["num_epochs"]
        )
        changed = then.get("lr_scheduler") != now.get("lr_scheduler")
        with fits(self.reading, "optimizer"):
            if self.reading.retuned or stretched or changed:
                self.schedule.resettle(state, self.reading.ratio)
            else:
                self.schedule.load_state_dict(state)


class ScalerState:
    """The float16 gradient scaler's state, or None where it is off."""

    def __init__(self, scaler: torch.amp.GradScaler, reading: Reading):
        self.scaler, self.reading = scaler, reading

    def state_dict(self) -> dict[str, Any] | None:
        return self.scaler.state_dict() if self.scaler.is_enabled() else None

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if self.scaler.is_enabled() and state is not None:
            with fits(self.reading, "optimizer"):
                self.scaler.load_state_dict(state)


class AverageWeights:
    """The moving average of the weights (``training.ema_decay``), or None without one. An
    average switched on for the rest of a run (``--force``) starts from the model's weights."""

    def __init__(self, strategy: Strategy, ema: EMA | None, reading: Reading):
        self.strategy, self.ema, self.reading = strategy, ema, reading

    def state_dict(self) -> dict[str, Any] | None:
        if self.ema is None:
            return None
        return self.ema.state_dict(self.strategy.model_state(self.ema.module))

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if self.ema is None:
            return
        if state is not None:
            self.ema.load_state_dict(state, self.strategy.load_model_state)
        else:
            self.strategy.load_model_state(self.ema.module, self.reading.contents["model"])


class Progress:
    """The run's progress (:class:`RunState`): epoch, steps, history, random states, the best
    weights. Whether the run has stopped early follows early stopping as configured now, so it
    is loaded after it."""

    def __init__(
        self,
        state: RunState,
        stopping: MetricStopping,
        *,
        enabled: bool,
        rank: int,
        reading: Reading,
    ):
        self.state, self.stopping, self.enabled = state, stopping, enabled
        self.rank, self.reading = rank, reading

    def state_dict(self) -> dict[str, Any]:
        return self.state.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        stops = self.enabled and self.stopping.should_stop
        self.state.load_state_dict(
            state, rank=self.rank, path=self.reading.path, stopped_early=stops
        )


class TargetScaling:
    """Each regression task's target mean and deviation, in the model's units."""

    def __init__(self, tasks: Callable[[], list[Task]], set_tasks: Callable[[list[Task]], None]):
        self.tasks, self.set_tasks = tasks, set_tasks

    def state_dict(self) -> dict[str, Any]:
        return scalings(self.tasks())

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        scaling = state or {}
        self.set_tasks([t.with_scaling(scaling.get(t.name)) for t in self.tasks()])


@contextlib.contextmanager
def fits(reading: Reading, what: str) -> Iterator[None]:
    """Loading ``what`` of a checkpoint: a state that does not fit is one clear error."""
    try:
        yield
    except CheckpointError:
        raise
    except (KeyError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{reading.path}: its {what} state does not fit ({cause(e)})") from e


def configured_rate(trained: dict[str, Any], optimizer: torch.optim.Optimizer) -> float:
    """The learning rate a checkpoint's run was configured with: its config's, else the
    optimizer class's default (else the rate it has: no cut to carry over)."""
    given = ((trained.get("optimizer") or {}).get("kwargs") or {}).get("lr")
    if given is None:
        default = inspect.signature(type(optimizer)).parameters.get("lr")
        given = default.default if default is not None else None
    if not isinstance(given, (int, float)) or not given:
        given = optimizer.param_groups[0]["lr"]
    return float(given)


def apply_settings(optimizer: torch.optim.Optimizer, kwargs: dict[str, Any]) -> None:
    """``training.optimizer.kwargs`` set on every group of ``optimizer`` (over the values a
    checkpoint's state gave them); the rate also as the one a schedule starts from."""
    for group in optimizer.param_groups:
        for key, value in kwargs.items():
            if key in group:
                group[key] = tuple(value) if isinstance(group[key], tuple) else value
        if "lr" in kwargs:
            group["lr"] = group["initial_lr"] = kwargs["lr"]


def plain_state(
    state: dict[str, Any] | None, optimizer: torch.optim.Optimizer
) -> dict[str, Any] | None:
    """An optimizer's state dict as any run can load it (see :func:`plain_groups`); None:
    this process holds none."""
    plain_groups(optimizer, (state or {}).get("param_groups", ()))
    return state


def plain_groups(optimizer: torch.optim.Optimizer, groups: Any = None) -> None:
    """``groups`` (by default the optimizer's own) with their learning rates as numbers (a
    captured step keeps them as tensors on its GPU, and makes them its own again) and
    ``capturable`` as the optimizer was built."""
    for group in optimizer.param_groups if groups is None else groups:
        if isinstance(group.get("lr"), torch.Tensor):
            group["lr"] = float(group["lr"])
        if "capturable" in group:
            group["capturable"] = optimizer.defaults.get("capturable", False)
