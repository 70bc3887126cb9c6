"""How a trainer's parts are built: each from its own section of the config and the parts built
before it, in the order :class:`~.trainer.Trainer`'s constructor lists them."""

from __future__ import annotations

import contextlib
from functools import partial
from typing import Any

import torch
from torch import nn

from ...config import config_to_dict, shown_columns
from ...parallel.devices import process_settings
from ...runs import reproducibility as rs
from ...runs.resume import config_digest
from ..evaluation.evaluator import Evaluation, Tester, Validator
from ..monitoring.gradients import masks_on_device
from ..monitoring.monitor import Monitor
from ..records.checkpointing import Checkpoints
from ..records.records import RunRecords
from ..records.run_directory import RunDirectory
from ..records.stateful import (
    PROGRESS,
    AverageWeights,
    ModelWeights,
    OptimizerState,
    Progress,
    Reading,
    ScalerState,
    ScheduleState,
    TargetScaling,
)
from ..state.callbacks import Callbacks
from ..state.ema import EMA
from ..state.listeners import EpochColumns, Pruning, Stopping
from .compiling import Compiling
from .schedule import Schedule, build_optimization
from .spec import initial_model
from .step import TrainingPass

Trainer = Any  # the trainer being built, with the parts listed before this one


def model(t: Trainer, resuming: bool) -> tuple[nn.Module, EMA | None, str | None]:
    """The model (resuming: last.pt's weights come later, not init_from's) on the device, its
    moving average (not wrapped in DDP; fsdp shards it), and the log's line on its start."""
    model, note = initial_model(t.config.model, t.model_spec, t.tasks, resuming=resuming)
    model = model.to(t.placement.device, t.placement.float_dtype)
    decay = t.config.training.ema_decay
    return model, EMA(model, decay) if decay is not None else None, note


def settings(t: Trainer) -> tuple[contextlib.AbstractContextManager, dict[str, Any]]:
    """This process's threads and matmul precision (restored by close()): one CPU thread
    where bits must not depend on the number of processes, and TF32 on a GPU except where
    it would change them; and the environment they make (checkpoints, environment.json)."""
    tf32 = t.config.training.tf32 and not t.strategy_class.invariant
    one_thread = t.strategy.one_thread
    pinned = process_settings(t.device, one_thread=one_thread, tf32=tf32)
    return pinned, rs.environment(t.device, t.world_size)


def optimization(t: Trainer) -> tuple[torch.optim.Optimizer, Schedule | None, Any]:
    """The optimizer over what the strategy holds (the model and its average), its schedule
    and the gradient scaler."""
    held = t.strategy.prepare(t.model, *([t.ema.module] if t.ema else []))
    return build_optimization(t.config.training, t.config.early_stopping, held, t.strategy)


def compiling(t: Trainer) -> Compiling:
    return Compiling(t.config.training, t.device, micro_batches=t.strategy.micro_batches)


def monitor(t: Trainer, profiling: bool) -> Monitor:
    """The monitor; from now on, what the processes wait for each other is its "wait" time."""
    built = Monitor(
        t.config.monitor,
        t.device,
        t.rank,
        t.world_size,
        t.model,
        replicated=t.strategy.replicated,
        profiling=profiling,
        masks=masks_on_device(t.optimizer),
    )
    t.processes.wait = partial(built.phase, "wait")
    return built


def evaluation(t: Trainer) -> tuple[Validator, Tester, Evaluation]:
    p = t.placement
    evaluating = (t.tasks, p.device, p.autocast_dtype, p.float_dtype)
    validator = Validator(*evaluating, select=t.select, shard=t.eval_shard)
    tester = Tester(*evaluating, select=t.select, shard=t.eval_shard)
    sharded = t.eval_shard[1] > 1
    evaluation = Evaluation(
        validator,
        tester,
        sharded=sharded,
        show=t.is_main,
        on_main=t.processes.on_main,
        reduce=t.processes.reduce_sums,
    )
    return validator, tester, evaluation


def training_pass(t: Trainer) -> TrainingPass:
    return TrainingPass(
        training=t.config.training,
        model=t.model,
        strategy=t.strategy,
        optimizer=t.optimizer,
        scaler=t.scaler,
        ema=t.ema,
        monitor=t.monitor,
        state=t.state,
        placement=t.placement,
        processes=t.processes,
        no_sync=t.no_sync,
        compiling=t.compiling,
        schedule=t.lr_scheduler,
    )


def checkpoints(t: Trainer) -> Checkpoints:
    """The checkpoints, over the run's stateful parts by name (saved and loaded in this order).
    A part that keeps state is added here, and nowhere else; its name is its key in the file."""
    reading, s = Reading(config_to_dict(t.config)), t.strategy
    settings = t.config.training.optimizer.kwargs
    stopping, enabled = t.early_stopping, t.config.early_stopping.enabled
    stateful = {
        "model": ModelWeights(s, t.model, reading),
        "optimizer": OptimizerState(s, t.model, t.optimizer, reading, settings),
        "ema": AverageWeights(s, t.ema, reading),
        "lr_scheduler": ScheduleState(t.lr_scheduler, reading),
        "scaler": ScalerState(t.scaler, reading),
        "early_stopping": stopping,
        PROGRESS: Progress(t.state, stopping, enabled=enabled, rank=t.rank, reading=reading),
        "target_scaling": TargetScaling(lambda: t.tasks, t.set_tasks),
    }
    about = {
        "model_spec": t.model_spec,  # what the model is built from
        "config": reading.configured,
        "config_digest": config_digest(t.config),
        "world_size": t.world_size,
        "environment": t.environment,
    }
    return Checkpoints(
        stateful,
        reading=reading,
        about=about,
        directory=t.run_dir,
        main=t.is_main,
        strategy=s,
        model=t.model,
        state=t.state,
    )


def records(t: Trainer, *, overwrite: bool, tags: dict[str, str] | None) -> RunRecords:
    directory = RunDirectory(
        t.run_dir,
        t.config,
        main=t.is_main,
        logger=t.logger,
        log_prefix=t.log_prefix,
        overwrite=overwrite,
        tags=tags,
    )
    return RunRecords(
        training=t.config.training,
        data=t.config.data,
        shown=shown_columns(t.config),
        straggler_ratio=t.config.monitor.straggler_ratio,
        directory=directory,
        checkpoints=t.checkpoints,
        state=t.state,
        early_stopping=t.early_stopping,
        logger=t.logger,
        world_size=t.world_size,
        judged=t.judge is not None,
        share=t.processes.on_main,
    )


def listeners(t: Trainer) -> list[Any]:
    """The library's listeners, in the order they are told (:mod:`.listeners`), then the
    user's ``training.callbacks``."""
    told = dict(decide=t.processes.on_main, monitor=t.monitor, logger=t.logger)
    enabled = t.config.early_stopping.enabled
    # Under DDP only rank 0 holds a study's judge: every process learns once whether there is
    # one, so all of them listen for its answer each epoch, or none does.
    judged = t.processes.on_main(lambda: t.judge is not None)
    callbacks = Callbacks(
        t.config.training.callbacks,
        main=t.is_main,
        share=t.processes.on_main,
        timeout_s=t.config.parallel.timeout_s,
    )
    return [
        Stopping(t.early_stopping, enabled=enabled, **told),
        *([Pruning(t.judge, **told)] if judged else []),
        EpochColumns(t.monitor),
        t.state,
        *([t.lr_scheduler] if t.lr_scheduler is not None else []),
        t.records,
        callbacks,
    ]
