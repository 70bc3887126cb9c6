"""Trainer: the epoch loop, validation, early stopping and testing, written once.

Subclasses (TrainerDDP) change behaviour through the small hooks marked "hook" below; the loop in
:meth:`Trainer.run_training` is the only epoch loop in the project. The trainer holds what it is
made of, each built once and handed what it needs: the run's state (:mod:`.run_state`), its
training pass (:mod:`.step`), checkpoints (:mod:`.checkpointing`), records (:mod:`.records`)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

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
from ...parallel.strategies import Strategy, strategy_class
from ...runs import layout as rd
from ...runs import reproducibility as rs
from ...runs.resume import read_resume_state
from ...runs.run_directory import RunDirectory
from ..evaluation.evaluator import Evaluation, Tester, Validator, check_forward
from ..evaluation.tasks import Task, fit_scaling, select_outputs
from ..monitoring.gradients import masks_on_device
from ..monitoring.monitor import Monitor
from ..state.checkpointing import Checkpoints
from ..state.early_stopping import MetricStopping
from ..state.ema import EMA
from ..state.records import RunRecords
from ..state.run_state import RunState
from .compiling import Compiling
from .devices import PRECISIONS, autocast, process_settings, select_device
from .notices import log_start
from .schedule import build_optimization, step_scheduler
from .spec import check_data, initial_model, model_spec, run_tasks, train_reads
from .step import TrainingPass

T = TypeVar("T")


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

    world_size = 1
    rank = 0
    local_processes = 1  # of this job on this machine

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
        # what the strategy refuses, before anything is written
        self.strategy_class = strategy_class(config, self.world_size)
        self.config = config = per_process(config, self.world_size)  # its batch
        self.state = RunState()
        self._resuming = resume  # the run in the directory is continued, not replaced
        self.judge = judge
        self.run_dir = config.run_dir
        self.logger = self.setup_logging()
        if quiet:
            set_terminal_level("WARNING")
        self.device = self.select_device()
        rs.seed_everything(config.training.seed)
        if dataset is None:
            check_file_targets(config)  # before minutes are spent reading files
        self.dataset = dataset if dataset is not None else self.load_dataset()
        self.tasks: list[Task] = run_tasks(config, self.dataset, given=dataset is not None)
        self.model_spec = model_spec(config, self.dataset, self.tasks)  # in every checkpoint
        self.in_channels = self.model_spec["in_channels"]
        self.autocast_dtype, self.float_dtype = PRECISIONS[config.training.precision]
        spec, tasks = self.model_spec, self.tasks  # resumed: last.pt's weights, not init_from's
        self.model, self.init_note = initial_model(config, spec, tasks, resuming=resume)
        self.model = self.model.to(self.device, self.float_dtype)
        t = config.training
        # The average follows the trained weights; it is not wrapped in DDP (fsdp shards it).
        self.ema = EMA(self.model, t.ema_decay) if t.ema_decay is not None else None
        self.strategy = self.make_strategy()
        # Restored by close(): one CPU thread where bits must not depend on the number of
        # processes, and TF32 matrix products on a GPU except where they would change them.
        tf32 = t.tf32 and not self.strategy_class.invariant
        self._pinned = process_settings(self.device, one_thread=self.strategy.one_thread, tf32=tf32)
        environment = rs.environment(self.device, self.world_size)  # with its threads
        held = self.strategy.prepare(self.model, *([self.ema.module] if self.ema else []))
        self.optimizer, self.lr_scheduler, self.scaler = build_optimization(
            config, held, self.strategy
        )
        self.compiling = Compiling(t, self.device, micro_batches=self.strategy.micro_batches)
        es = config.early_stopping
        evaluating = (self.tasks, self.device, self.autocast_dtype, self.float_dtype)
        self.validator = Validator(*evaluating, select=self.select, shard=self.eval_shard)
        self.tester = Tester(*evaluating, select=self.select, shard=self.eval_shard)
        self.evaluation = Evaluation(
            self.validator, self.tester, sharded=self.eval_shard[1] > 1, show=self.is_main,
            on_main=self.on_main, reduce=self.reduce_sums,
        )  # fmt: skip
        self.early_stopping = MetricStopping.from_section(es)
        self.monitor = Monitor(
            config.monitor, self.device, self.rank, self.world_size, self.model,
            replicated=self.strategy.replicated, profiling=profiling,
            masks=masks_on_device(self.optimizer),
        )  # fmt: skip
        self.training_pass = TrainingPass(
            training=t, model=self.model, strategy=self.strategy, optimizer=self.optimizer,
            scaler=self.scaler, ema=self.ema, monitor=self.monitor, state=self.state,
            device=self.device, float_dtype=self.float_dtype, world_size=self.world_size,
            show=self.is_main, autocast=self.autocast, no_sync=self.no_sync,
            reduce=self.reduce_sums, compiling=self.compiling, schedule=self.lr_scheduler,
        )  # fmt: skip
        self._environment = environment  # of this process: in checkpoints and environment.json
        self.checkpoints = Checkpoints(
            config=config, directory=config.run_dir, main=self.is_main, strategy=self.strategy,
            model=self.model, optimizer=self.optimizer, lr_scheduler=self.lr_scheduler,
            scaler=self.scaler, ema=self.ema, early_stopping=self.early_stopping,
            state=self.state, model_spec=self.model_spec, environment=environment,
            world_size=self.world_size,
        )  # fmt: skip
        directory = RunDirectory(
            config.run_dir, config, main=self.is_main, logger=self.logger,
            log_prefix=self.log_prefix, overwrite=overwrite, tags=tags,
        )  # fmt: skip
        self.records = RunRecords(
            config=config, directory=directory, checkpoints=self.checkpoints, trainer=self,
            state=self.state, early_stopping=self.early_stopping, logger=self.logger,
            world_size=self.world_size, judged=judge is not None, share=self.on_main,
        )  # fmt: skip
        if resume:
            self.resume(force=force)

    # --- the run's state as it stands, read from RunState ----------------------------------------

    epoch = _state("epoch", "Completed epochs.")
    global_step = _state("global_step", "Optimizer steps taken.")
    history = _state("history", "One row per epoch, as history.csv holds them.")
    stopped_early = _state("stopped_early", "Whether early stopping ended the run.")
    pruned = _state("pruned", "Whether the judge (a tuning trial's pruner) ended the run.")
    resumed_from = _state("resumed_from", "The checkpoint the run continued from, or None.")

    # --- hooks: what a distributed subclass changes ------------------------------------------

    @property
    def is_main(self) -> bool:
        """Whether this process writes files and shows progress bars (hook)."""
        return True

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

    def on_main(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the main process; DDP hands its result, or its failure, to every rank
        (hook)."""
        return fn()

    log_prefix = ""  # DDP: "[RANK r] " on every line, on the terminal and in train.log
    batch_device: torch.device | None = None  # batches assembled on the GPU (data.device)
    eval_shard = (0, 1)  # (rank, W) of the graphs evaluated here; DDP, sharded: every W-th

    def setup_logging(self) -> logging.Logger:  # hook
        return configure_logging(self.config.log_level, prefix=self.log_prefix)

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
        return dataset_from_config(self.config.data)

    def make_train_loader(self, dataset: Dataset) -> DataLoader:  # hook
        cut = self.strategy.micro_batches if self.strategy.cuts_batches else None
        return make_train_loader(
            dataset, self.config.training, self.config.augmentation, rank=self.rank,
            world_size=self.world_size, device=self.batch_device, micro_batches=cut,
            **train_reads(self.config, self.model, self.tasks), stage=self.device,
        )  # fmt: skip

    def make_eval_loader(self, dataset: Dataset, batch_size: int) -> DataLoader:  # hook
        workers = self.config.training.num_workers
        return make_loader(
            dataset, batch_size=batch_size, num_workers=workers, device=self.batch_device
        )

    def on_train_start(self, train_loader: DataLoader) -> None:  # hook
        log_start(
            self.logger, self.config, self.dataset, self.device,
            train_graphs=len(train_loader.dataset), processes=self.world_size,
            local_processes=self.local_processes, main=self.is_main, init=self.init_note,
        )  # fmt: skip

    def on_epoch_start(self, train_loader: DataLoader) -> None:  # hook
        for part in (epoch_sampler(train_loader), train_loader.dataset):
            if hasattr(part, "set_epoch"):
                part.set_epoch(self.state.epoch)  # new draws each epoch, the same on every rank

    def on_train_end(self) -> None:  # hook
        pass

    def reduce_sums(self, sums: torch.Tensor) -> torch.Tensor:
        """Combine per-process sums; one process has nothing to combine (hook)."""
        return sums

    def validate(self, val_loader: DataLoader) -> dict[str, float]:
        return self.evaluation.validate(self.compiling.evaluate(self.eval_model), val_loader)

    def decide(self, row: dict[str, Any]) -> tuple[bool, str | None]:
        """(improved, why the run stops: "pruned", "early stopping" or None) after an epoch.

        DDP decides on rank 0 and broadcasts (hook); the ``judge``, if any, is asked here.
        """
        improved = self.early_stopping.step(row, row["epoch"])
        if self.early_stopping.broken_tie:
            self.logger.info("%s", self.early_stopping.broken_tie)
        if self.judge is not None and self.judge(row):
            return improved, "pruned"
        if self.config.early_stopping.enabled and self.early_stopping.should_stop:
            return improved, "early stopping"
        return improved, None

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
        train, val, test = split_dataset(dataset, self.config.data.split, self.config.data.seed)
        self.batch_device = batch_device(self.config, self.device, dataset)
        self.fit_scaling(train)
        self.loaders = (
            self.make_train_loader(train),
            self.make_eval_loader(val, self.config.validation.batch_size),
            self.make_eval_loader(test, self.config.testing.batch_size),
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
        self.records.open({**self._environment, "strategy": strategy}, resuming=self._resuming)

    def check_model(self, train: Dataset) -> None:
        """Fit the targets' scaling on ``train`` and run the model once on two of its graphs:
        a model that cannot run on this data fails in one line naming the config key."""
        self.fit_scaling(train)
        check_forward(self.model, train, self.tasks, self.config.model, self.select,
                      self.autocast, device=self.device, float_dtype=self.float_dtype)  # fmt: skip

    def _train_epochs(self, train_loader: DataLoader, val_loader: DataLoader) -> list[dict]:
        num_epochs, state = self.config.training.num_epochs, self.state
        self.on_train_start(train_loader)
        self.training_pass.start(train_loader)  # a step schedule learns an epoch's steps
        state.restore_rng(rank=self.rank, device=self.device, seed=self.config.training.seed)
        while state.epoch < num_epochs and not state.ended:
            self.on_epoch_start(train_loader)
            lr = float(self.optimizer.param_groups[0]["lr"])  # a captured step's: a tensor
            start = time.perf_counter()
            self.monitor.start_epoch()
            train = self.train_epoch(train_loader)
            seconds = time.perf_counter() - start
            with self.monitor.phase("eval"):
                row = {"epoch": state.epoch + 1, **train, **self.validate(val_loader)}
            row.update(lr=lr, epoch_seconds=seconds)
            with self.monitor.phase("wait"):
                improved, stop = self.decide(row)
            columns, timing = self.monitor.end_epoch(epoch=state.epoch + 1)
            row.update(columns)
            state.epoch += 1
            state.history.append(row)
            state.stopped_early, state.pruned = stop == "early stopping", stop == "pruned"
            step_scheduler(self.lr_scheduler, row[self.early_stopping.columns[0]])
            self.end_epoch(row, improved, timing)
        self.monitor.check_replicas(step=None)
        if state.stopped_early:
            self.logger.info("%s", self.early_stopping.stop_message(state.epoch))
        if state.pruned:
            self.logger.info("pruned by the study after epoch %d", state.epoch)
        self.records.write_summary()
        self.on_train_end()
        return state.history

    def train_epoch(self, loader: DataLoader) -> dict[str, float]:
        """One pass over ``loader``: see :meth:`~.step.TrainingPass.run`."""
        return self.training_pass.run(loader, self.train_module, self.tasks, self.select)

    def autocast(self) -> contextlib.AbstractContextManager:
        """``training.precision``: float32, or autocast to bfloat16 / float16."""
        return autocast(self.device, self.autocast_dtype)

    def end_epoch(self, row: dict[str, Any], improved: bool, timing: dict | None = None) -> None:
        state = self.state
        if improved:
            state.best_state = {
                k: v.detach().to("cpu", copy=True) for k, v in self.eval_model.state_dict().items()
            }
        # Each rank's random state, where the next epoch starts from, and its time: one gather.
        records = self.gather_records({"rng": rs.rng_state(self.device), "timing": timing})
        state.rng_states = [r["rng"] for r in records]
        rank_rows = [r["timing"] for r in records if r["timing"] is not None]
        # gathered by every process (zero and fsdp hold shares), written by the main one
        contents = self.checkpoints.contents(self.tasks)
        self.records.write_epoch(row, improved, contents, rank_rows)

    def gather_records(self, record: dict[str, Any]) -> list[dict[str, Any]]:  # hook
        """Every process's ``record`` of the epoch's end, in rank order (DDP gathers them)."""
        return [record]

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
        return metrics

    # --- checkpoints and resuming ---------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything a checkpoint records: plain state dicts, tensors and numbers only."""
        return self.checkpoints.contents(self.tasks)

    def save_checkpoint(self, name: str = rd.LAST) -> Path:
        """Write a checkpoint into the run's ``checkpoints/`` (only the main process writes)."""
        return self.checkpoints.save(name, self.state_dict())

    def load_state_dict(self, state: dict[str, Any], path: str | Path = "checkpoint") -> None:
        """Continue from ``state`` (a checkpoint's contents) in this process."""
        self.set_tasks(self.checkpoints.load(state, path, self.tasks, rank=self.rank))

    def resume(self, *, force: bool = False) -> bool:
        """Restore the run in ``training.path`` from ``checkpoints/last.pt``, on every process.

        Returns False, and leaves the trainer at its start, when the directory holds no run or
        only the start of one (no epoch finished); a directory with results but no last.pt is
        refused. Called by the constructor with ``resume=True``.
        """
        # Read and checked on the main process; every process gets the same state (and any
        # refusal), so the run directory need not be on a filesystem the others see.
        self._resuming = True
        state = self.on_main(
            lambda: read_resume_state(self.config, world_size=self.world_size, force=force)
        )
        if state is None:
            return False
        self.load_state_dict(state, self.run_dir / rd.CHECKPOINTS / rd.LAST)
        self.state.resume_notices = state["notices"]  # logged once train.log is open
        return True
