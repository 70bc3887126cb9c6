"""``training.lr_scheduler`` stepped after each epoch or after each optimizer step.

A schedule stepped per optimizer step (``interval: step``, as OneCycleLR is meant to be) whose
length is left out lasts the run: ``num_epochs`` times the optimizer steps of an epoch, which
are known once the training loader is; it is built when training starts, and a checkpoint's
state read before then (resuming) waits for it. A resumed run replays the interrupted epoch
from its start, with the schedule as it stood at the epoch's checkpoint. A run resumed with
other optimizer or schedule settings (``--resume --force``) takes them: the optimizer's groups
are given the new values, and the schedule is built anew and stepped as far as the checkpoint's
had gone (:meth:`Schedule.resettle`), as if the run had had those settings from its start.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import torch

from ...config import EarlyStoppingConfig, SchedulerConfig, TrainingConfig, resolve
from ...errors import ConfigError
from ...parallel.strategies import Strategy
from .optim import build_optimizer, build_scheduler, length_key, step_scheduler


class Schedule:
    """The run's learning-rate schedule, with the scheduler's ``state_dict`` and
    ``load_state_dict`` (for checkpoints); ``after_step()`` and ``after_epoch(metric)`` step it
    at its interval."""

    def __init__(
        self,
        section: SchedulerConfig,
        optimizer: torch.optim.Optimizer,
        *,
        metric: str,
        mode: str,
        num_epochs: int,
    ):
        self.section, self.optimizer, self.num_epochs = section, optimizer, num_epochs
        self.options = {"metric": metric, "mode": mode, "num_epochs": num_epochs}
        self.per_step = section.interval == "step"
        self.scheduler: Any = None
        self._pending: dict | None = None  # a checkpoint's state, until the schedule is built
        self._resettle: float | None = None  # with it: its rate's ratio to the new one's
        cls = resolve(section.type, key="training.lr_scheduler.type")
        plateau = isinstance(cls, type) and issubclass(
            cls, torch.optim.lr_scheduler.ReduceLROnPlateau
        )
        if self.per_step and plateau:
            raise ConfigError(
                "training.lr_scheduler.interval: step, but ReduceLROnPlateau follows a metric "
                "of each epoch; use interval: epoch"
            )
        key = length_key(cls)
        # its length left out: the run's (num_epochs, or its steps), so a longer run stretches it
        self.follows_num_epochs = (
            key is not None and key not in section.kwargs and "epochs" not in section.kwargs
        )
        self.deferred = (
            self.per_step
            and key is not None
            and key not in section.kwargs
            and "epochs" not in section.kwargs
        )
        if not self.deferred:
            self.scheduler = build_scheduler(section, optimizer, **self.options)

    def start(self, steps_per_epoch: int, *, fixed: bool = True) -> None:
        """Training starts with ``steps_per_epoch`` optimizer steps an epoch: a step schedule
        whose length was left out is built to last the run. ``fixed``: whether every epoch
        takes that many (node-budget batches are packed anew each epoch: their number varies,
        and a schedule stepped past its end fails)."""
        if self.scheduler is not None:
            return
        if not fixed:
            key = length_key(resolve(self.section.type, key="training.lr_scheduler.type"))
            raise ConfigError(
                "training.lr_scheduler.interval: step with training.batch_nodes: an epoch's "
                "optimizer steps vary, so the schedule cannot be as long as the run; give its "
                f"length (training.lr_scheduler.kwargs.{key}) with room to spare"
            )
        length = self.num_epochs * max(steps_per_epoch, 1)
        # resuming: the optimizer's groups as the checkpoint left them (rate, momentum), which
        # building the schedule sets to its start and loading its state does not set back
        groups = [
            {k: v for k, v in group.items() if k != "params"}
            for group in self.optimizer.param_groups
        ]
        if self._resettle is not None:  # other settings (--force): built anew, stepped on
            self._rebuild(self._pending, self._resettle, length=length)
            self._pending = self._resettle = None
            return
        self.scheduler = build_scheduler(
            self.section, self.optimizer, **self.options, length=length
        )
        if self._pending is not None:  # where the schedule stood at the checkpoint
            self.scheduler.load_state_dict(self._pending)
            self._pending = None
            for group, saved in zip(self.optimizer.param_groups, groups, strict=True):
                group.update(saved)

    def after_step(self) -> None:
        if self.per_step and self.scheduler is not None:
            self.scheduler.step()

    def after_epoch(self, metric: float) -> None:
        if not self.per_step:
            step_scheduler(self.scheduler, metric)

    def on_epoch_end(self, trainer: Any, row: dict[str, Any]) -> None:
        """A listener of the run: stepped after each epoch on its row's metric (a plateau
        schedule follows it), the same on every process."""
        self.after_epoch(row[self.options["metric"]])

    def state_dict(self) -> dict | None:
        return self._pending if self.scheduler is None else self.scheduler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        if self.scheduler is None:
            self._pending = state
        else:
            self.scheduler.load_state_dict(state)

    def resettle(self, state: dict, ratio: float) -> None:
        """Continue from a checkpoint's ``state`` of a schedule with other settings: this one,
        built anew on the optimizer's new rates and stepped as far as ``state`` had been.
        ``ratio``: the checkpoint's rate over the one it was configured with (what a plateau
        schedule, which has no closed form, had cut it to)."""
        if self.scheduler is None:
            self._pending, self._resettle = state, ratio
        else:
            self._rebuild(state, ratio)

    def _rebuild(self, state: dict, ratio: float, length: int | None = None) -> None:
        for group in self.optimizer.param_groups:  # the schedule starts from the new rate
            group["lr"] = group.get("initial_lr", group["lr"])
        length = {} if length is None else {"length": length}
        self.scheduler = build_scheduler(self.section, self.optimizer, **self.options, **length)
        if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            progress = ("best", "num_bad_epochs", "cooldown_counter", "last_epoch")
            self.scheduler.load_state_dict(
                {**self.scheduler.state_dict(), **{k: state[k] for k in progress if k in state}}
            )
            for group in self.optimizer.param_groups:
                group["lr"] *= ratio
            return
        with warnings.catch_warnings():  # stepped before any optimizer step: torch would warn
            warnings.simplefilter("ignore", UserWarning)
            for _ in range(int(state.get("last_epoch", 0))):
                self.scheduler.step()


def build_optimization(
    t: TrainingConfig,
    es: EarlyStoppingConfig,
    parameters: Iterable[torch.nn.Parameter],
    strategy: Strategy,
) -> tuple[torch.optim.Optimizer, Schedule | None, torch.amp.GradScaler]:
    """The optimizer over ``parameters`` (made by the parallel ``strategy``), its schedule
    (``training.lr_scheduler``, a plateau one on the first early-stopping metric) and the
    gradient scaler."""
    optimizer = build_optimizer(t.optimizer, parameters, strategy.optimizer)
    scheduler = None
    if t.lr_scheduler is not None:
        scheduler = Schedule(
            t.lr_scheduler, optimizer, metric=es.metrics[0], mode=es.mode, num_epochs=t.num_epochs
        )
    # Gradients of float16 losses underflow without scaling; bfloat16 has float32's range.
    return optimizer, scheduler, strategy.grad_scaler(enabled=t.precision == "16")
