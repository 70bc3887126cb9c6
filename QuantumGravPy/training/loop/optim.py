"""The optimizer (``training.optimizer``) and learning-rate schedule (``training.lr_scheduler``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from ...config import GradientClipConfig, OptimizerConfig, SchedulerConfig, check_kwargs, resolve
from ...errors import ConfigError, in_user_code


def build_optimizer(
    section: OptimizerConfig,
    parameters: Iterable[torch.nn.Parameter],
    make: Callable[[type, Iterable[torch.nn.Parameter], dict], torch.optim.Optimizer] | None = None,
) -> torch.optim.Optimizer:
    """``training.optimizer`` over ``parameters``, made by ``make(cls, parameters, kwargs)``
    (a strategy's: ZeRO shards it) or as ``cls(parameters, **kwargs)``."""
    cls = resolve(section.type, key="training.optimizer.type")
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        raise ConfigError(f"training.optimizer.type: {section.type!r} is not a torch optimizer")
    kwargs = dict(section.kwargs)
    check_kwargs(cls, kwargs, "training.optimizer.kwargs", given=1, name=section.type)
    try:  # the values, on a parameter of its own: what the optimizer refuses is the config's
        cls([torch.zeros(1, requires_grad=True)], **kwargs)
    except ValueError as e:  # a negative rate, ...
        doing = f"building training.optimizer {section.type}"
        raise in_user_code(e, doing) or ConfigError(
            f"training.optimizer.kwargs: {section.type} rejected them: {e}"
        ) from e
    return make(cls, parameters, kwargs) if make is not None else cls(parameters, **kwargs)


# Schedules whose length is the run's, and the keyword that sets it: left out of the kwargs,
# it is training.num_epochs (or, stepped per optimizer step, the run's optimizer steps).
RUN_LENGTH = {"CosineAnnealingLR": "T_max", "OneCycleLR": "total_steps"}


def length_key(cls: Any) -> str | None:
    """The keyword of a scheduler class that sets how many epochs its schedule lasts."""
    for base in getattr(cls, "__mro__", ()):
        if base.__name__ in RUN_LENGTH and base.__module__.startswith("torch."):
            return RUN_LENGTH[base.__name__]
    return None


def schedule_notice(section: SchedulerConfig | None, num_epochs: int) -> str | None:
    """A word when a schedule's length, given in its kwargs, is not the run's (in epochs:
    a schedule stepped per optimizer step counts steps)."""
    if section is None or section.interval == "step":
        return None
    key = length_key(resolve(section.type, key="training.lr_scheduler.type"))
    length = section.kwargs.get(key) if key else None
    if not isinstance(length, int) or length == num_epochs:
        return None
    what = (
        f"the run ends after {num_epochs / length:.0%} of the schedule"
        if length > num_epochs
        else f"the schedule ends after epoch {length} and the rate moves on as it goes on"
    )
    return (
        f"training.lr_scheduler.kwargs.{key} is {length}, but the run has {num_epochs} epochs "
        f"(training.num_epochs): {what}; leave {key} out for a schedule as long as the run"
    )


def build_scheduler(
    section: SchedulerConfig | None,
    optimizer: torch.optim.Optimizer,
    *,
    metric: str,
    mode: str,
    num_epochs: int,
    length: int | None = None,
) -> Any:
    """The scheduler, stepped once per epoch by the trainer; None for a constant rate.

    A cosine or one-cycle schedule whose length is left out lasts ``num_epochs``.

    A ReduceLROnPlateau is stepped with the first early-stopping ``metric``, so it takes that
    metric's direction ``mode`` (``early_stopping.mode``): left at its own default of ``min``, it
    would cut the rate while an accuracy improves. A ``mode`` of its own that disagrees is refused.
    """
    if section is None:
        return None
    cls = resolve(section.type, key="training.lr_scheduler.type")
    kwargs = dict(section.kwargs)
    if isinstance(cls, type) and issubclass(cls, torch.optim.lr_scheduler.ReduceLROnPlateau):
        given = kwargs.setdefault("mode", mode)
        if given != mode:
            raise ConfigError(
                f"training.lr_scheduler.kwargs.mode: {given!r}, but the scheduler follows "
                f"early_stopping.metric {metric}, which improves towards {mode!r} "
                "(early_stopping.mode); leave mode out, and it follows the metric"
            )
    key = length_key(cls)
    if key is not None and key not in kwargs and "epochs" not in kwargs:
        kwargs[key] = num_epochs if length is None else length  # the run's epochs, or steps
    check_kwargs(cls, kwargs, "training.lr_scheduler.kwargs", given=1, name=section.type)
    try:
        return cls(optimizer, **kwargs)
    except ValueError as e:  # a value the schedule refuses
        doing = f"building training.lr_scheduler {section.type}"
        raise in_user_code(e, doing) or ConfigError(
            f"training.lr_scheduler.kwargs: {section.type} rejected them: {e}"
        ) from e


def step_groups(batches: Iterable, size: int) -> Iterator[list]:
    """The batches of each optimizer step: consecutive lists of ``size`` (the last may be
    shorter), for ``training.accumulate_grad_batches``."""
    group = []
    for batch in batches:
        group.append(batch)
        if len(group) == size:
            yield group
            group = []
    if group:
        yield group


def step_scheduler(scheduler: Any, metric: float) -> None:
    """Step ``scheduler`` after an epoch: a plateau schedule on the monitored ``metric``."""
    if scheduler is None:
        return
    if hasattr(scheduler, "after_epoch"):  # a Schedule: training.lr_scheduler.interval
        scheduler.after_epoch(metric)
        return
    if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        scheduler.step(metric)
    else:
        scheduler.step()


def clip_gradients(
    parameters: Iterable[torch.nn.Parameter], clip: GradientClipConfig | None
) -> None:
    """``training.gradient_clip``, once per optimizer step on the step's whole gradients: their
    norm over all ``parameters`` scaled down to ``max_norm``, or each element to ``value``.
    Sharded gradients (DTensors) are clipped by their norm over every rank's part."""
    if clip is None:
        return
    grads = [p for p in parameters if p.grad is not None]
    if clip.value is not None:
        torch.nn.utils.clip_grad_value_(grads, clip.value)
    else:
        torch.nn.utils.clip_grad_norm_(grads, clip.max_norm, clip.norm_type)


def optimizer_step(
    optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, ok: bool | torch.Tensor
) -> None:
    """One optimizer step, left out where ``ok`` (a flag on the device, from the gradient
    checks) is false: the flag goes to the optimizer's fused kernel as the ``found_inf`` a
    gradient scaler would hand it, so nothing is read on the host. A float16 gradient scaler
    decides itself (it sees the same non-finite gradients)."""
    if scaler.is_enabled():
        scaler.step(optimizer)
        scaler.update()
        return
    if not isinstance(ok, torch.Tensor):
        optimizer.step()
        return
    # exactly 1.0 or 0.0 (the fused CPU kernel skips only on exactly 1), of shape () as the
    # step counters it is subtracted from
    optimizer.found_inf = (~ok).to(torch.float32)  # type: ignore[attr-defined]
    try:
        optimizer.step()
    finally:
        del optimizer.found_inf  # type: ignore[attr-defined]
