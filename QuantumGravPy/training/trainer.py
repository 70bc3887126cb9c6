"""Trainer: the epoch loop, validation, early stopping and the run directory, written once.

Subclasses (TrainerDDP) change behaviour through the small hooks marked "hook" below; the loop in
:meth:`Trainer.run_training` is the only epoch loop in the project. What a checkpoint records
and how a run resumes from one is :class:`~.run_state.RunStateMixin`'s.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from .. import logs
from ..config import Config, balanced_task, per_process
from ..data import (
    batch_device,
    check_file_targets,
    dataset_from_config,
    epoch_sampler,
    graph_feature_width,
    make_loader,
    make_train_loader,
    num_node_features,
    split_dataset,
)
from ..errors import ConfigError, DataError
from ..logs import configure_logging
from ..models import build_model
from ..parallel import distributed
from ..parallel.strategies import Strategy, strategy_class
from ..runs import reproducibility as rs
from ..runs.directory import check_flags
from ..runs.reproducibility import seed_everything
from .devices import PRECISIONS, autocast, select_device
from .early_stopping import MetricStopping
from .ema import EMA
from .evaluation import Tester, Validator, check_forward, to_device
from .monitor import Monitor, check_loss
from .notices import describe_run, invariance_note, start_notices
from .optim import build_optimizer, build_scheduler, clip_gradients, step_groups, step_scheduler
from .run_state import RunStateMixin
from .tasks import (
    Task,
    add_train_sums,
    build_tasks,
    fit_scaling,
    select_outputs,
    total_loss,
    train_columns,
)
from .testing import TestingMixin


class Trainer(TestingMixin, RunStateMixin):
    """Single-process training from a :class:`~QuantumGravPy.config.Config`.

    ``Trainer(config)`` builds (or loads from cache) the dataset, the model and the optimizer.
    ``prepare_dataloaders()`` splits the data, ``run_training(train, val)`` runs the epoch loop
    and returns the history, ``run_test(test)`` evaluates the best checkpoint. Files go to the
    run directory ``training.path``; one that already holds a run is refused unless
    ``overwrite=True``. With ``resume=True`` the run in that directory continues from its
    ``checkpoints/last.pt`` (or starts, if it has not saved one yet); a config that would train
    something else is refused unless ``force=True``.
    """

    world_size = 1
    rank = 0
    local_processes = 1  # of this job on this machine
    # Asked after each epoch with its history row (on rank 0 only, under DDP); True stops the
    # run as pruned. A tuning trial sets it to its pruner (QuantumGravPy.tune).
    judge: Callable[[dict[str, Any]], bool] | None = None

    def __init__(
        self,
        config: Config,
        dataset: Dataset | list | None = None,
        *,
        overwrite: bool = False,
        resume: bool = False,
        force: bool = False,
    ):
        check_flags(overwrite=overwrite, resume=resume)
        # what the strategy refuses, before anything is written
        self.strategy_class = strategy_class(config, self.world_size)
        self.config = config = per_process(config, self.world_size)  # its batch
        self.init_run_state()
        self.overwrite = overwrite
        self.resuming = resume
        self.run_dir = config.run_dir
        self.logger = self.setup_logging()
        self.device = self.select_device()
        seed_everything(config.training.seed)
        if dataset is None:
            check_file_targets(config)  # before minutes are spent reading files
        self.dataset = dataset if dataset is not None else self.load_dataset()
        self.in_channels = num_node_features(self.dataset)
        self.tasks: list[Task] = build_tasks(config, self.dataset)
        self.num_classes = self.tasks[0].num_outputs  # the first task's outputs
        declared = config.model.in_channels
        if declared is not None and declared != self.in_channels:
            raise ConfigError(
                f"model.in_channels: the data has {self.in_channels} node features, "
                f"found {declared}"
            )
        # Built on the CPU from the seeded generator, so the initial weights do not depend on the
        # device, then moved.
        self.autocast_dtype, self.float_dtype = PRECISIONS[config.training.precision]
        # What the model is built from, recorded in checkpoints so that it can be rebuilt for
        # new data without the training set (qg predict).
        width = graph_feature_width(self.dataset, config.model.graph_features)
        self.model_spec = {
            "in_channels": self.in_channels,
            "outputs": {t.name: t.num_outputs for t in self.tasks},
            "graph_feature_channels": width,
        }
        self.model: nn.Module = build_model(
            config.model,
            self.in_channels,
            {t.name: (t.num_outputs, t.level) for t in self.tasks},
            graph_feature_channels=width,
        ).to(self.device, self.float_dtype)
        t = config.training
        # The average follows the trained weights; it is not wrapped in DDP (fsdp shards it).
        self.ema = EMA(self.model, t.ema_decay) if t.ema_decay is not None else None
        self.strategy = self.make_strategy()
        # Restored by close(): a run whose bits must not depend on the number of processes
        # computes on one CPU thread per process (see distributed.one_thread).
        self._pinned = contextlib.ExitStack()
        if self.strategy.one_thread:
            self._pinned.enter_context(distributed.one_thread(self.device))
        self._environment = rs.environment(self.device, self.world_size)  # with its threads
        held = self.strategy.prepare(self.model, *([self.ema.module] if self.ema else []))
        self.optimizer = build_optimizer(t.optimizer, held, self.strategy.optimizer)
        if t.compile:  # in place: the module, its keys and its parameters stay the same
            self.model.compile(dynamic=True)
        es = config.early_stopping
        self.lr_scheduler = build_scheduler(
            t.lr_scheduler,
            self.optimizer,
            metric=es.metrics[0],
            mode=es.mode,
            num_epochs=t.num_epochs,
        )
        # Gradients of float16 losses underflow without scaling; bfloat16 has float32's range.
        self.scaler = self.strategy.grad_scaler(enabled=t.precision == "16")
        self.validator = Validator(
            self.tasks, self.device, self.autocast_dtype, self.float_dtype, select=self.select
        )
        self.tester = Tester(
            self.tasks, self.device, self.autocast_dtype, self.float_dtype, select=self.select
        )
        self.early_stopping = MetricStopping.from_section(es)
        self.monitor = Monitor(config.monitor, self.device, self.rank, self.world_size,
                               self.model, replicated=self.strategy.replicated)  # fmt: skip
        if resume:
            self.resume(force=force)

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

    log_prefix = ""  # DDP: "[RANK r] " on every line, on the terminal and in train.log
    batch_device: torch.device | None = None  # batches assembled on the GPU (data.device)

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
        super().close()
        self._pinned.close()  # the threads as they were before this run

    def load_dataset(self) -> Dataset | list:  # hook
        return dataset_from_config(self.config.data)

    def make_train_loader(self, dataset: Dataset) -> DataLoader:  # hook
        return make_train_loader(
            dataset,
            self.config.training,
            self.config.augmentation,
            rank=self.rank,
            world_size=self.world_size,
            label=getattr(balanced_task(self.config), "target_name", "y"),
            device=self.batch_device,
            micro_batches=self.strategy.micro_batches if self.strategy.cuts_batches else None,
        )

    def make_eval_loader(self, dataset: Dataset, batch_size: int) -> DataLoader:  # hook
        workers = self.config.training.num_workers
        return make_loader(
            dataset, batch_size=batch_size, num_workers=workers, device=self.batch_device
        )

    def on_train_start(self, train_loader: DataLoader) -> None:  # hook
        graphs = len(train_loader.dataset)
        self.logger.info("%s", describe_run(self.config, self.device, graphs))
        if self.is_main:
            for notice in start_notices(
                self.config, self.dataset, train_graphs=graphs, processes=self.world_size,
                local_processes=self.local_processes, device=self.device,
            ):  # fmt: skip
                self.logger.warning("%s", notice)
        if self.is_main and (note := invariance_note(self.config, self.world_size)):
            self.logger.info("%s", note)

    def on_epoch_start(self, train_loader: DataLoader) -> None:  # hook
        for part in (epoch_sampler(train_loader), train_loader.dataset):
            if hasattr(part, "set_epoch"):
                part.set_epoch(self.epoch)  # new draws each epoch, the same on every rank

    def on_train_end(self) -> None:  # hook
        pass

    def reduce_sums(self, sums: torch.Tensor) -> torch.Tensor:
        """Combine per-process sums; one process has nothing to combine (hook)."""
        return sums

    def validate(self, val_loader: DataLoader) -> dict[str, float]:  # hook
        return self.validator.evaluate(self.eval_model, val_loader, progress=self.is_main)

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
        """Standardise regression targets by the training split ``train`` (once: a resumed run
        keeps its checkpoint's scaling)."""
        if any(t.kind.standardizes and t.config.standardize and not t.scaled for t in self.tasks):
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
        elif num_node_features(dataset) != self.in_channels:
            raise DataError(
                f"the dataset has {num_node_features(dataset)} node features but the model was "
                f"built for {self.in_channels}"
            )
        else:
            build_tasks(self.config, dataset)  # its targets are checked
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
            self.record_failure(e)  # in train.log: why the run stopped where it did
            raise

    def check_model(self, train: Dataset) -> None:
        """Fit the targets' scaling on ``train`` and run the model once on two of its graphs:
        a model that cannot run on this data fails in one line naming the config key."""
        self.fit_scaling(train)
        check_forward(self.model, train, self.tasks, self.config.model, self.select,
                      self.autocast, device=self.device, float_dtype=self.float_dtype)  # fmt: skip

    def _train_epochs(self, train_loader: DataLoader, val_loader: DataLoader) -> list[dict]:
        num_epochs = self.config.training.num_epochs
        self.on_train_start(train_loader)
        self.restore_rng()
        while self.epoch < num_epochs and not (self.stopped_early or self.pruned):
            self.on_epoch_start(train_loader)
            lr = self.optimizer.param_groups[0]["lr"]
            start = time.perf_counter()
            self.monitor.start_epoch()
            train = self.train_epoch(train_loader)
            seconds = time.perf_counter() - start
            with self.monitor.phase("eval"):
                row = {"epoch": self.epoch + 1, **train, **self.validate(val_loader)}
            row.update(lr=lr, epoch_seconds=seconds)
            with self.monitor.phase("wait"):
                improved, stop = self.decide(row)
            columns, timing = self.monitor.end_epoch(epoch=self.epoch + 1)
            row.update(columns)
            self.epoch += 1
            self.history.append(row)
            self.stopped_early, self.pruned = stop == "early stopping", stop == "pruned"
            step_scheduler(self.lr_scheduler, row[self.early_stopping.columns[0]])
            self.end_epoch(row, improved, timing)
        self.monitor.check_replicas(step=None)
        if self.stopped_early:
            self.logger.info("%s", self.early_stopping.stop_message(self.epoch))
        if self.pruned:
            self.logger.info("pruned by the study after epoch %d", self.epoch)
        self.write_summary()
        self.on_train_end()
        return self.history

    def train_epoch(self, loader: DataLoader) -> dict[str, float]:
        """One pass over ``loader``; returns ``train_loss`` (each task's loss over its rows,
        weighted as the tasks say), and each task's loss and accuracy as the columns of
        :func:`~QuantumGravPy.config.history_columns` name them, those of the weights as they
        were when each batch was seen; a step the monitor skipped does not count.

        With ``training.accumulate_grad_batches`` k, the optimizer steps once per k batches.
        Each batch's loss is weighted by its share of the step's graphs, so k batches of b
        graphs make the same step as one batch of k*b graphs (for a loss that is a mean over
        the rows of a batch, as PyTorch's losses are by default).
        """
        model = self.train_module
        model.train()
        tasks, strategy = self.tasks, self.strategy
        micro = strategy.micro_batches  # passes per batch (the invariant strategy's cut)
        # per micro-batch of a batch, per task: loss summed over rows, rows right
        # (classification, binary), rows; added up over ranks by the strategy (fold)
        sums = torch.zeros(micro, len(tasks), 3, dtype=torch.float64, device=self.device)
        step_sums = torch.zeros_like(sums)
        k = self.batches_per_step
        # With drop_last, a step short of k batches is dropped too, as a short batch would be.
        batches = len(loader) - len(loader) % k if self.config.training.drop_last else len(loader)
        bar = logs.progress(
            itertools.islice(loader, batches), total=batches, desc=f"epoch {self.epoch + 1}",
            unit="batch", enabled=self.is_main,
        )  # fmt: skip
        monitor = self.monitor  # marks each part of each step
        # training.batch_nodes: the ranks' batches hold different numbers of graphs; each
        # rank's losses are weighted against its share of the step's graphs on all ranks
        planned = getattr(getattr(loader, "batch_sampler", None), "global_graphs", None)
        for step, group in enumerate(step_groups(bar, k)):
            graphs = sum(batch.num_graphs for batch in group)
            monitor.graphs += graphs
            if planned is not None:
                graphs = sum(planned[step * k : (step + 1) * k]) / self.world_size
            else:
                graphs = strategy.step_graphs(graphs)  # what each loss is weighted against
            step_sums.zero_()  # added to the epoch's if the step is taken
            self.optimizer.zero_grad(set_to_none=True)
            for i, batch in enumerate(group):
                batch = to_device(batch, self.device, self.float_dtype)
                monitor.lap("data")
                last = i == len(group) - 1
                strategy.before_forward(self.global_step, i)
                # Gradients are exchanged once per step, on its last batch.
                with contextlib.nullcontext() if last else self.no_sync():
                    with self.autocast():
                        outputs = self.select(model(batch), batch)
                        losses = [task.loss(outputs[task.name], batch) for task in tasks]
                        loss = total_loss(tasks, losses)
                    add_train_sums(step_sums[i % micro], tasks, losses, outputs, batch)
                    monitor.lap("forward")
                    self.scaler.scale(loss * (batch.num_graphs / graphs)).backward()
                strategy.after_backward(self.model)
                monitor.lap("backward")
            strategy.exchange(self.model)
            if scaled := self.scaler.is_enabled():
                self.scaler.unscale_(self.optimizer)  # the gradient norm in its true units
            if monitor.gradients_ok(step_sums, self.global_step, self.epoch + 1, scaled):
                clip_gradients(self.model.parameters(), self.config.training.gradient_clip)
                self.scaler.step(self.optimizer)
                self.scaler.update()
                if self.ema is not None:
                    self.ema.update(self.model)
                sums += step_sums
            self.global_step += 1
            monitor.lap("optimizer")
            monitor.check_replicas(step=self.global_step)
        totals = strategy.fold(sums, self.reduce_sums)
        return check_loss(train_columns(tasks, totals), epoch=self.epoch + 1)

    @property
    def batches_per_step(self) -> int:
        """The loader's batches per optimizer step: accumulated ones, cut into micro-batches."""
        return self.config.training.accumulate_grad_batches * self.strategy.micro_batches

    def autocast(self) -> contextlib.AbstractContextManager:
        """``training.precision``: float32, or autocast to bfloat16 / float16."""
        return autocast(self.device, self.autocast_dtype)

    def end_epoch(self, row: dict[str, Any], improved: bool, timing: dict | None = None) -> None:
        if improved:
            self.best_state = {
                k: v.detach().to("cpu", copy=True) for k, v in self.eval_model.state_dict().items()
            }
        # Each rank's random state, where the next epoch starts from, and its time: one gather.
        records = self.gather_records({"rng": rs.rng_state(self.device), "timing": timing})
        self._rng_states = [r["rng"] for r in records]
        self.rank_rows = [r["timing"] for r in records if r["timing"] is not None]
        self.write_epoch_files(row, improved)
