"""Trainer: the epoch loop, validation, early stopping and the run directory, written once.

Subclasses (TrainerDDP) change behaviour through the small hooks marked "hook" below; the loop in
:meth:`Trainer.run_training` is the only epoch loop in the project. What a checkpoint records
and how a run resumes from one is :class:`~.run_state.RunStateMixin`'s.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import logging
import math
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset
from torch_geometric.loader import DataLoader
from tqdm.auto import tqdm

from ..config import Config, improves_towards
from ..data import (
    dataset_dimensions,
    dataset_from_config,
    graph_feature_width,
    make_loader,
    make_train_loader,
    split_dataset,
)
from ..errors import ConfigError, DataError, QGError
from ..logs import configure_logging
from ..models import build_model, task_output
from ..runs import reproducibility as rs
from ..runs.checkpoint import evaluation_weights, load_checkpoint, load_model_state
from ..runs.reproducibility import seed_everything
from .devices import PRECISIONS, select_device
from .early_stopping import MetricStopping
from .ema import EMA
from .evaluation import MetricSums, Tester, Validator, make_criterion, to_device
from .optim import build_optimizer, build_scheduler
from .run_state import RunStateMixin


class TrainingDivergedError(QGError):
    """The training loss became NaN or infinite."""


# The one task of a config: the classification of each graph's ``y``.
TASK = "y"


class Trainer(RunStateMixin):
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

    def __init__(
        self,
        config: Config,
        dataset: Dataset | list | None = None,
        *,
        overwrite: bool = False,
        resume: bool = False,
        force: bool = False,
    ):
        if overwrite and resume:
            raise ConfigError("--overwrite and --resume exclude each other: replace or continue")
        self.config = config
        self.init_run_state()
        self.overwrite = overwrite
        self.resuming = resume
        self.run_dir = config.run_dir
        self.logger = self.setup_logging()
        self.device = self.select_device()
        self._environment = rs.environment(self.device, self.world_size)
        seed_everything(config.training.seed)
        self.dataset = dataset if dataset is not None else self.load_dataset()
        self.in_channels, self.num_classes = dataset_dimensions(self.dataset)
        declared = config.model.in_channels
        if declared is not None and declared != self.in_channels:
            raise ConfigError(
                f"model.in_channels: the data has {self.in_channels} node features, "
                f"found {declared}"
            )
        # Built on the CPU from the seeded generator, so the initial weights do not depend on the
        # device, then moved.
        self.autocast_dtype, self.float_dtype = PRECISIONS[config.training.precision]
        self.num_outputs = config.model.num_classes or self.num_classes
        self.model: nn.Module = build_model(
            config.model,
            self.in_channels,
            {TASK: (self.num_outputs, "graph")},
            graph_feature_channels=graph_feature_width(self.dataset, config.model.graph_features),
        ).to(self.device, self.float_dtype)
        t = config.training
        self.optimizer = build_optimizer(t.optimizer, self.model.parameters())
        self.lr_scheduler = build_scheduler(t.lr_scheduler, self.optimizer)
        # Gradients of float16 losses underflow without scaling; bfloat16 has float32's range.
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=t.precision == "16")
        # The average follows the trained weights; it is not wrapped in DDP.
        self.ema = EMA(self.model, t.ema_decay) if t.ema_decay is not None else None
        self.criterion = make_criterion(config.criterion)
        self.validator = Validator(
            self.criterion,
            self.device,
            self.autocast_dtype,
            self.float_dtype,
            select=self.select_output,
        )
        self.tester = Tester(
            self.criterion,
            self.device,
            self.autocast_dtype,
            self.float_dtype,
            self.num_classes,
            select=self.select_output,
        )
        es = config.early_stopping
        self.early_stopping = MetricStopping(
            es.metrics,
            [es.mode, *map(improves_towards, es.metrics[1:])],
            combine=es.combine,
            patience=es.patience,
            delta=es.delta,
            grace_period=es.grace_period,
        )
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

    def setup_logging(self) -> logging.Logger:  # hook
        return configure_logging(self.config.log_level, prefix=self.log_prefix)

    def select_device(self) -> torch.device:  # hook
        return select_device(self.config.training.device)

    def load_dataset(self) -> Dataset | list:  # hook
        return dataset_from_config(self.config.data)

    def make_train_loader(self, dataset: Dataset) -> DataLoader:  # hook
        return make_train_loader(
            dataset,
            self.config.training,
            self.config.augmentation,
            rank=self.rank,
            world_size=self.world_size,
        )

    def make_eval_loader(self, dataset: Dataset, batch_size: int) -> DataLoader:  # hook
        return make_loader(
            dataset, batch_size=batch_size, num_workers=self.config.training.num_workers
        )

    def on_train_start(self, train_loader: DataLoader) -> None:  # hook
        t = self.config.training
        self.logger.info(
            "training %s for up to %d epochs on %s: %d training graphs, batch size %d%s%s%s",
            self.config.name,
            t.num_epochs,
            self.device,
            len(train_loader.dataset),
            t.batch_size,
            f", {t.accumulate_grad_batches} batches per step"
            if t.accumulate_grad_batches > 1
            else "",
            f", precision {t.precision}" if t.precision != "32" else "",
            f", EMA of the weights (decay {t.ema_decay})" if self.ema is not None else "",
        )
        breaks = rs.invariance_breaks(self.config)
        if breaks:
            self.logger.info(
                "note: results depend on the number of processes because %s", "; ".join(breaks)
            )

    def on_epoch_start(self, train_loader: DataLoader) -> None:  # hook
        for part in (train_loader.sampler, train_loader.dataset):
            if hasattr(part, "set_epoch"):
                part.set_epoch(self.epoch)  # new draws each epoch, the same on every rank

    def on_train_end(self) -> None:  # hook
        pass

    def reduce_sums(self, sums: MetricSums) -> MetricSums:
        """Combine per-process sums; one process has nothing to combine (hook)."""
        return sums

    def validate(self, val_loader: DataLoader) -> dict[str, float]:  # hook
        return self.validator.evaluate(self.eval_model, val_loader)

    def decide(self, row: dict[str, Any]) -> tuple[bool, bool]:
        """(improved, stop) after an epoch; DDP decides on rank 0 and broadcasts (hook)."""
        improved = self.early_stopping.step(row, row["epoch"])
        return improved, self.config.early_stopping.enabled and self.early_stopping.should_stop

    def select_output(self, outputs: Any, batch: Any) -> torch.Tensor:
        """The task's output of a forward pass, checked: [graphs, outputs] (hook)."""
        return task_output(
            outputs,
            TASK,
            batch.num_graphs,
            self.num_outputs,
            model=self.config.model.type or "GNNModel",
        )

    # --- data ----------------------------------------------------------------------------------

    def prepare_dataloaders(
        self, dataset: Dataset | list | None = None
    ) -> tuple[DataLoader, DataLoader, DataLoader]:
        """Split ``dataset`` (default: the trainer's) with ``data.seed`` into three loaders."""
        if dataset is None:
            dataset = self.dataset
        elif dataset_dimensions(dataset) != (self.in_channels, self.num_classes):
            raise DataError(
                f"the dataset has (features, classes) = {dataset_dimensions(dataset)} but the "
                f"model was built for {(self.in_channels, self.num_classes)}"
            )
        train, val, test = split_dataset(dataset, self.config.data.split, self.config.data.seed)
        return (
            self.make_train_loader(train),
            self.make_eval_loader(val, self.config.validation.batch_size),
            self.make_eval_loader(test, self.config.testing.batch_size),
        )

    # --- the loop ------------------------------------------------------------------------------

    def run_training(
        self, train_loader: DataLoader, val_loader: DataLoader
    ) -> list[dict[str, Any]]:
        """Train until ``training.num_epochs`` or early stopping; returns one dict per epoch."""
        self.open_run()
        num_epochs = self.config.training.num_epochs
        self.on_train_start(train_loader)
        self.restore_rng()
        while self.epoch < num_epochs and not self.stopped_early:
            self.on_epoch_start(train_loader)
            lr = self.optimizer.param_groups[0]["lr"]
            start = time.perf_counter()
            train = self.train_epoch(train_loader)
            seconds = time.perf_counter() - start
            row = {"epoch": self.epoch + 1, **train, **self.validate(val_loader)}
            row.update(lr=lr, epoch_seconds=seconds)
            self.epoch += 1
            self.history.append(row)
            improved, self.stopped_early = self.decide(row)
            self.step_scheduler(row)
            self.end_epoch(row, improved)
        if self.stopped_early:
            self.logger.info(
                "early stopping after epoch %d: no improvement of %s for %d epochs "
                "(best %.4f at %d)",
                self.epoch,
                self.early_stopping.describe(),
                self.early_stopping.patience,
                self.early_stopping.best,
                self.early_stopping.best_epoch,
            )
        self.write_summary()
        self.on_train_end()
        return self.history

    def train_epoch(self, loader: DataLoader) -> dict[str, float]:
        """One pass over ``loader``; returns ``train_loss`` and ``train_accuracy`` over graphs.

        Both are those of the weights as they were when each batch was seen.

        With ``training.accumulate_grad_batches`` k, the optimizer steps once per k batches.
        Each batch's loss is weighted by its share of the step's graphs, so k batches of b
        graphs make the same step as one batch of k*b graphs (the loss must be a mean over the
        graphs of a batch, as PyTorch's losses are by default).
        """
        model = self.train_module
        model.train()
        total = torch.zeros(3, dtype=torch.float64, device=self.device)
        t = self.config.training
        k = t.accumulate_grad_batches
        # With drop_last, a step short of k batches is dropped too, as a short batch would be.
        batches = len(loader) - len(loader) % k if t.drop_last else len(loader)
        bar = tqdm(
            itertools.islice(loader, batches),
            total=batches,
            desc=f"epoch {self.epoch + 1}",
            unit="batch",
            leave=False,
            disable=None if self.is_main else True,  # None: only on a terminal
        )
        for group in _groups(bar, k):
            graphs = sum(batch.num_graphs for batch in group)
            self.optimizer.zero_grad(set_to_none=True)
            for i, batch in enumerate(group):
                batch = to_device(batch, self.device, self.float_dtype)
                last = i == len(group) - 1
                # Gradients are exchanged once per step, on its last batch.
                with contextlib.nullcontext() if last else self.no_sync():
                    with self.autocast():
                        outputs = self.select_output(model(batch), batch)
                        loss = self.criterion(outputs, batch)
                    self.scaler.scale(loss * (batch.num_graphs / graphs)).backward()
                total[0] += loss.detach().double() * batch.num_graphs
                total[1] += (outputs.detach().argmax(dim=-1) == batch.y).sum()
            total[2] += graphs
            self.scaler.step(self.optimizer)
            self.scaler.update()
            if self.ema is not None:
                self.ema.update(self.model)
            self.global_step += 1
        metrics = self.reduce_sums(MetricSums(total)).compute("train")
        if not math.isfinite(metrics["train_loss"]):
            raise TrainingDivergedError(
                f"the training loss is {metrics['train_loss']} after epoch {self.epoch + 1}; "
                "lower training.optimizer.kwargs.lr or check the data for NaN features"
            )
        return metrics

    def autocast(self) -> contextlib.AbstractContextManager:
        """``training.precision``: float32, or autocast to bfloat16 / float16."""
        return torch.autocast(
            self.device.type,
            dtype=self.autocast_dtype,
            enabled=self.autocast_dtype is not None,
        )

    def step_scheduler(self, row: dict[str, Any]) -> None:
        if self.lr_scheduler is None:
            return
        if isinstance(self.lr_scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            self.lr_scheduler.step(row[self.early_stopping.columns[0]])
        else:
            self.lr_scheduler.step()

    def end_epoch(self, row: dict[str, Any], improved: bool) -> None:
        if improved:
            self.best_state = {
                k: v.detach().to("cpu", copy=True) for k, v in self.eval_model.state_dict().items()
            }
        # Every rank's random state as it is now, where the next epoch starts from.
        self._rng_states = self.gather_rng_states()
        self.write_epoch_files(row, improved)

    # --- testing -------------------------------------------------------------------------------

    def run_test(
        self, test_loader: DataLoader, checkpoint: str | Path | None = None
    ) -> dict[str, float]:
        """Test metrics of ``checkpoint``; by default of the best epoch, if this trainer trained.

        The trainer's own model is left as it is; the weights are loaded into a copy. The best
        weights are kept in memory as well as in ``best.pt``, so every process of a distributed
        run has them without reading a file another process wrote.
        """
        model = self.model
        if checkpoint is not None:
            model = copy.deepcopy(self.model)
            weights = evaluation_weights(load_checkpoint(checkpoint, self.device))
            load_model_state(model, weights, checkpoint)
        elif self.best_state is not None:
            model = copy.deepcopy(self.model)
            model.load_state_dict(self.best_state)
        metrics = self.evaluate_test(model, test_loader)
        self.logger.info(
            "test_loss %.4f  test_accuracy %.4f", metrics["test_loss"], metrics["test_accuracy"]
        )
        if self._run_open:
            self.write_summary(metrics)
        return metrics

    def evaluate_test(self, model: nn.Module, test_loader: DataLoader) -> dict[str, float]:  # hook
        return self.tester.evaluate(model, test_loader)


def _groups(batches: Iterable, size: int) -> Iterator[list]:
    """Consecutive lists of ``size`` items (the last may be shorter)."""
    group = []
    for batch in batches:
        group.append(batch)
        if len(group) == size:
            yield group
            group = []
    if group:
        yield group
