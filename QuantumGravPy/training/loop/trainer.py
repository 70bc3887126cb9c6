"""Trainer: the epoch loop, written once.

The constructor lists the parts a run is made of, each built once from its own section and the
parts before it (:mod:`.parts`). The loop in :meth:`Trainer.run_training` says what happens and
when; the listeners (:mod:`..state.listeners`) do each point's work: early stopping, pruning,
the monitor's columns, the records and checkpoints, then the user's callbacks. What the
processes do together is the parallel layer's (:mod:`~QuantumGravPy.parallel.processes`).
TrainerDDP changes the few hooks marked "hook" below."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ...config import Config, headline_columns, per_process
from ...data import (
    batch_device,
    check_file_targets,
    dataset_from_config,
    epoch_sampler,
    make_loader,
    make_train_loader,
    release_workers,
    split_dataset,
)
from ...logs import configure_logging, set_terminal_level
from ...parallel.devices import Placement, select_device
from ...parallel.processes import OneProcess
from ...parallel.strategies import Strategy, strategy_class
from ...runs import layout as rd
from ...runs import reproducibility as rs
from ...runs.resume import read_resume_state
from ..evaluation.evaluator import check_forward
from ..state.early_stopping import MetricStopping
from ..state.listeners import Listeners
from ..state.run_state import RunState
from ..tasks.task import Task, fit_scaling, select_outputs
from . import parts
from .notices import log_start
from .spec import check_data, model_spec, run_tasks, train_reads


def _state(name: str, doc: str) -> property:
    return property(lambda self: getattr(self.state, name), doc=doc)


class Trainer:
    """Single-process training from a :class:`~QuantumGravPy.config.Config`.

    ``Trainer(config)`` builds (or loads from cache) the dataset, the model and the optimizer.
    ``prepare_dataloaders()`` splits the data, ``run_training(train, val)`` runs the epoch loop
    and returns the history, ``run_test(test)`` evaluates the best checkpoint. Files go to the
    run directory ``training.path``; one that already holds a run is refused unless
    ``overwrite=True``. With ``resume=True`` the run in that directory continues from its
    ``checkpoints/last.pt`` (or starts, if it has not saved one yet); a config that would train
    something else is refused unless ``force=True``.

    ``judge``: asked after each epoch with its history row (on rank 0 only, under DDP); True
    stops the run as pruned (a tuning trial's pruner). ``tags`` label the run in MLflow and W&B.
    ``quiet``: only warnings on the terminal (train.log keeps ``log_level``). ``profiling``:
    the gradient exchange gets a label of its own in a profiler's trace (``qg profile``).
    """

    processes_class: type[OneProcess] = OneProcess  # what the processes do together

    def __init__(
        self,
        config: Config,
        dataset: Dataset | list | None = None,
        *,
        overwrite: bool = False,
        resume: bool = False,
        force: bool = False,
        judge: Callable[[dict[str, Any]], bool] | None = None,
        tags: dict[str, str] | None = None,
        quiet: bool = False,
        profiling: bool = False,
    ):
        rd.check_flags(overwrite=overwrite, resume=resume)
        self.processes = self.processes_class()
        self.strategy_class = strategy_class(config, self.world_size)  # its refusals, first
        self.config = config = per_process(config, self.world_size)  # its batch
        self.state, self.judge, self._resuming = RunState(), judge, resume
        self.run_dir, self.logger = config.run_dir, self.setup_logging(quiet)
        self.device = self.select_device()
        rs.seed_everything(config.training.seed)
        self.dataset = self.load_dataset() if dataset is None else dataset
        self.tasks: list[Task] = run_tasks(config, self.dataset, given=dataset is not None)
        self.model_spec = model_spec(config.model, config.training, self.dataset, self.tasks)
        self.placement = Placement.of(self.device, config.training.precision)
        self.model, self.ema, self.init_note = parts.model(self, resume)
        self.strategy = self.make_strategy()
        self._pinned, self.environment = parts.settings(self)
        self.optimizer, self.lr_scheduler, self.scaler = parts.optimization(self)
        self.compiling = parts.compiling(self)
        self.early_stopping = MetricStopping.from_section(config.early_stopping)
        self.monitor = parts.monitor(self, profiling)
        self.validator, self.tester, self.evaluation = parts.evaluation(self)
        self.training_pass = parts.training_pass(self)
        self.checkpoints = parts.checkpoints(self)
        self.records = parts.records(self, overwrite=overwrite, tags=tags)
        self.listeners = Listeners(parts.listeners(self))
        if resume:
            self.resume(force=force)

    # --- the run's state as it stands, read from RunState ----------------------------------------

    epoch = _state("epoch", "Completed epochs.")
    global_step = _state("global_step", "Optimizer steps taken.")
    history = _state("history", "One row per epoch, as history.csv holds them.")
    stopped_early = _state("stopped_early", "Whether early stopping ended the run.")
    pruned = _state("pruned", "Whether the judge (a tuning trial's pruner) ended the run.")
    resumed_from = _state("resumed_from", "The checkpoint the run continued from, or None.")

    float_dtype = property(lambda self: self.placement.float_dtype, doc="Weights' and data's.")
    autocast_dtype = property(lambda self: self.placement.autocast_dtype, doc="None: off.")

    @property
    def in_channels(self) -> int:
        """The node features the model reads."""
        return self.model_spec["in_channels"]

    # --- hooks: what a distributed subclass changes ------------------------------------------

    rank = property(lambda self: self.processes.rank, doc="This process's rank.")
    world_size = property(lambda self: self.processes.world_size, doc="The job's processes.")
    local_processes = property(
        lambda self: self.processes.local_processes, doc="The job's processes on this machine."
    )
    is_main = property(
        lambda self: self.processes.is_main,
        doc="Whether this process writes files and shows progress.",
    )

    @property
    def train_module(self) -> nn.Module:
        """The module the training pass calls; DDP returns its wrapper here (hook)."""
        return self.model

    @property
    def eval_model(self) -> nn.Module:
        """What validation, the best checkpoint and testing use: the average, if there is one."""
        return self.ema.module if self.ema is not None else self.model

    def no_sync(self) -> contextlib.AbstractContextManager:
        """Around a micro-batch that does not step; DDP skips its gradient exchange (hook)."""
        return contextlib.nullcontext()

    log_prefix = ""  # DDP: "[RANK r] " on every line, on the terminal and in train.log
    batch_device: torch.device | None = None  # batches assembled on the GPU (data.device)
    eval_shard = (0, 1)  # (rank, W) of the graphs evaluated here; DDP, sharded: every W-th

    def setup_logging(self, quiet: bool) -> logging.Logger:
        """The run's log: warnings only on the terminal when ``quiet``, and on every process
        but the first."""
        level = self.config.log_level if self.is_main else "WARNING"
        logger = configure_logging(level, prefix=self.log_prefix)
        if quiet:
            set_terminal_level("WARNING")
        return logger

    def select_device(self) -> torch.device:  # hook
        return select_device(self.config.training.device)

    def make_strategy(self) -> Strategy:  # hook: DDP's shards fsdp's units
        # one process holds everything whatever the strategy; invariant's cut still applies
        if self.strategy_class.cuts_batches:
            return self.strategy_class.from_config(self.config, self.device)
        return Strategy(self.device)

    def close(self) -> None:
        """Detach this run's log file, close its trackers and stop the worker processes of the
        loaders ``prepare_dataloaders`` made (the trainer stays usable for evaluation)."""
        for loader in getattr(self, "loaders", ()):
            release_workers(loader)
        complete = self.state.ended or self.state.epoch >= self.config.training.num_epochs
        self.records.close(complete=complete)
        self._pinned.close()  # the threads as they were before this run

    def load_dataset(self) -> Dataset | list:  # hook
        check_file_targets(self.config.data, self.config.tasks)  # before the files are read
        return dataset_from_config(self.config.data)

    def make_train_loader(self, dataset: Dataset) -> DataLoader:  # hook
        cut = self.strategy.micro_batches if self.strategy.cuts_batches else None
        return make_train_loader(
            dataset,
            self.config.training,
            self.config.augmentation,
            rank=self.rank,
            world_size=self.world_size,
            device=self.batch_device,
            micro_batches=cut,
            **train_reads(self.config.model, self.model, self.tasks),
            stage=self.device,
        )

    def make_eval_loader(self, dataset: Dataset, batch_size: int) -> DataLoader:  # hook
        workers = self.config.training.num_workers
        return make_loader(
            dataset, batch_size=batch_size, num_workers=workers, device=self.batch_device
        )

    def on_train_start(self, train_loader: DataLoader) -> None:  # hook
        log_start(
            self.logger,
            self.config,
            self.dataset,
            self.device,
            train_graphs=len(train_loader.dataset),
            processes=self.world_size,
            local_processes=self.local_processes,
            main=self.is_main,
            init=self.init_note,
        )

    def on_epoch_start(self, train_loader: DataLoader) -> None:  # hook
        for part in (epoch_sampler(train_loader), train_loader.dataset):
            if hasattr(part, "set_epoch"):
                part.set_epoch(self.state.epoch)  # new draws each epoch, the same on every rank

    def on_train_end(self) -> None:  # hook
        pass

    def validate(self, val_loader: DataLoader) -> dict[str, float]:
        return self.evaluation.validate(self.compiling.evaluate(self.eval_model), val_loader)

    def select(self, outputs: Any, batch: Any) -> dict[str, torch.Tensor]:
        """Each task's output of a forward pass, checked: [graphs or nodes, outputs]."""
        return select_outputs(self.tasks, outputs, batch, model=self.config.model.type)

    def fit_scaling(self, train: Dataset) -> None:
        """Standardise targets by the training split ``train`` (once: see fit_scaling)."""
        self.set_tasks(fit_scaling(self.tasks, train))

    def set_tasks(self, tasks: list[Task]) -> None:
        """The tasks (with their target scaling) that training and evaluation use from now."""
        self.tasks = self.validator.tasks = self.tester.tasks = list(tasks)

    # --- data ----------------------------------------------------------------------------------

    def prepare_dataloaders(
        self, dataset: Dataset | list | None = None
    ) -> tuple[DataLoader, DataLoader, DataLoader]:
        """Split ``dataset`` (default: the trainer's) with ``data.seed`` into three loaders."""
        if dataset is None:
            dataset = self.dataset
        else:
            check_data(self.config, dataset, self.model_spec)
        c = self.config
        train, val, test = split_dataset(dataset, c.data.split, c.data.seed)
        self.batch_device = batch_device(c.data, c.training, c.augmentation, self.device, dataset)
        self.fit_scaling(train)
        self.loaders = (
            self.make_train_loader(train),
            self.make_eval_loader(val, c.validation.batch_size),
            self.make_eval_loader(test, c.testing.batch_size),
        )
        return self.loaders  # close() stops their worker processes

    # --- the loop ------------------------------------------------------------------------------

    def run_training(self, train_loader: DataLoader, val_loader: DataLoader) -> list[dict]:
        """Train until ``training.num_epochs`` or early stopping; returns one dict per epoch."""
        self.check_model(train_loader.dataset)  # before anything is written
        self.open_run()
        try:
            return self._train_epochs(train_loader, val_loader)
        except BaseException as e:
            self.records.record_failure(e)  # in train.log: why the run stopped where it did
            raise

    def open_run(self) -> None:
        """Open the run directory (config.yaml, train.log; resuming, the records cut back)."""
        strategy = self.strategy.name if self.world_size > 1 else None
        self.records.open({**self.environment, "strategy": strategy}, resuming=self._resuming)

    def check_model(self, train: Dataset) -> None:
        """Fit the targets' scaling on ``train`` and run the model once on two of its graphs:
        a model that cannot run on this data fails in one line naming the config key."""
        self.fit_scaling(train)
        check_forward(
            self.model,
            train,
            self.tasks,
            self.config.model,
            self.select,
            self.autocast,
            device=self.device,
            float_dtype=self.float_dtype,
        )

    def _train_epochs(self, train_loader: DataLoader, val_loader: DataLoader) -> list[dict]:
        self.start_training(train_loader)
        self.listeners.tell("on_train_start", self)
        while self.state.epoch < self.config.training.num_epochs and not self.state.ended:
            self.on_epoch_start(train_loader)  # the epoch's draws
            self.listeners.tell("on_epoch_start", self)
            row = self.run_epoch(train_loader, val_loader)
            self.listeners.tell("on_epoch_end", self, row)  # decisions, records, checkpoints
        self.on_train_end()
        self.listeners.tell("on_train_end", self, self.state.history)
        return self.state.history

    def start_training(self, train_loader: DataLoader) -> None:
        """Said in the log; a step schedule learns an epoch's steps; a resumed run's random
        states put back, where its next epoch starts from."""
        self.on_train_start(train_loader)
        self.training_pass.start(train_loader)
        seed = self.config.training.seed
        self.state.restore_rng(rank=self.rank, device=self.device, seed=seed)

    def run_epoch(self, train_loader: DataLoader, val_loader: DataLoader) -> dict[str, Any]:
        """One epoch trained and validated: its history row, before the listeners add to it."""
        lr = float(self.optimizer.param_groups[0]["lr"])  # a captured step's: a tensor
        start = time.perf_counter()
        train = self.train_epoch(train_loader)
        seconds = time.perf_counter() - start
        with self.monitor.phase("eval"):
            row = {"epoch": self.state.epoch + 1, **train, **self.validate(val_loader)}
        return {**row, "lr": lr, "epoch_seconds": seconds}

    def train_epoch(self, loader: DataLoader) -> dict[str, float]:
        """One pass over ``loader``: see :meth:`~.step.TrainingPass.run`."""
        return self.training_pass.run(loader, self.train_module, self.tasks, self.select)

    def autocast(self) -> contextlib.AbstractContextManager:
        """``training.precision``: float32, or autocast to bfloat16 / float16."""
        return self.placement.autocast()

    def run_test(
        self, test_loader: DataLoader, checkpoint: str | Path | None = None
    ) -> dict[str, float]:
        """Test metrics of ``checkpoint``; by default of the best epoch, if this trainer trained.

        The trainer's own model is left as it is; the weights are loaded into a copy. The best
        weights are kept in memory as well as in ``best.pt``, so every process of a distributed
        run has them without reading a file another process wrote.
        """
        model, tasks = self.checkpoints.tested(self.tasks, checkpoint, self.device)
        metrics, predictions = self.evaluation.test(model, test_loader, tasks)
        columns = ("test_loss", *headline_columns(self.config, "test"))
        self.logger.info("%s", "  ".join(f"{c} {metrics[c]:.4f}" for c in columns))
        if self.records.opened:
            graphs = self.evaluation.evaluated_set(test_loader)
            self.records.write_summary(metrics, predictions, graphs)
            self.listeners.tell("on_test_end", self, metrics)
        return metrics

    # --- checkpoints and resuming ---------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything a checkpoint records: plain state dicts, tensors and numbers only."""
        return self.checkpoints.contents()

    def save_checkpoint(self, name: str = rd.LAST) -> Path:
        """Write a checkpoint into the run's ``checkpoints/`` (only the main process writes)."""
        return self.checkpoints.save(name, self.state_dict())

    def load_state_dict(self, state: dict[str, Any], path: str | Path = "checkpoint") -> None:
        """Continue from ``state`` (a checkpoint's contents) in this process."""
        self.checkpoints.load(state, path)

    def resume(self, *, force: bool = False) -> bool:
        """Restore the run in ``training.path`` from ``checkpoints/last.pt``, on every process.

        Returns False, and leaves the trainer at its start, when the directory holds no run or
        only the start of one (no epoch finished); a directory with results but no last.pt is
        refused. Called by the constructor with ``resume=True``.
        """
        # Read and checked on the main process; every process gets the same state (and any
        # refusal), so the run directory need not be on a filesystem the others see.
        self._resuming = True
        state = self.processes.on_main(
            lambda: read_resume_state(self.config, world_size=self.world_size, force=force)
        )
        if state is None:
            return False
        self.load_state_dict(state, self.run_dir / rd.CHECKPOINTS / rd.LAST)
        self.state.resume_notices = state["notices"]  # logged once train.log is open
        return True
