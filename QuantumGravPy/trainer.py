"""Trainer: the epoch loop, validation, early stopping and the run directory, written once.

Subclasses (TrainerDDP) change behaviour through the small hooks marked "hook" below; the loop in
:meth:`Trainer.run_training` is the only epoch loop in the project.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import logging
import math
import random
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset, Sampler
from torch.utils.data.distributed import DistributedSampler
from torch_geometric.loader import DataLoader
from tqdm.auto import tqdm

from . import distributed, plots
from . import reproducibility as rs
from . import run_dir as rd
from .augment import AugmentedDataset, get_preset
from .checkpoint import FORMAT_VERSION, evaluation_weights, load_checkpoint, save_checkpoint
from .config import Config, config_to_dict, dump_config, resolve
from .datasets import dataset_dimensions, dataset_from_config, make_loader, split_dataset
from .early_stopping import EarlyStopping
from .ema import EMA
from .errors import CheckpointError, ConfigError, DataError, QGError
from .evaluation import MetricSums, Tester, Validator, make_criterion, to_device
from .logs import add_file_handler, configure_logging
from .models import GNNModel
from .samplers import build_sampler

# training.precision: (autocast dtype, dtype of weights and data)
PRECISIONS = {
    "32": (None, torch.float32),
    "bf16": (torch.bfloat16, torch.float32),
    "16": (torch.float16, torch.float32),
    "64": (None, torch.float64),
}


class TrainingDivergedError(QGError):
    """The training loss became NaN or infinite."""


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds every CUDA device too


def select_device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"training.device: {spec!r} requested but CUDA is not available")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(
                f"training.device: {spec!r} requested but only "
                f"{torch.cuda.device_count()} CUDA device(s) are visible"
            )
    return device


class Trainer:
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
        self.epoch = 0  # completed epochs
        self.global_step = 0  # optimizer steps
        self.overwrite = overwrite
        self.resuming = resume
        self.resumed_from: Path | None = None  # the checkpoint this run continued from
        self.run_dir = config.run_dir
        self.history: list[dict[str, Any]] = []
        self.stopped_early = False
        self.best_state: dict[str, torch.Tensor] | None = None  # weights of the best epoch, on CPU
        self._run_open = False
        self._rng_states: list[dict[str, Any]] = []  # every rank's, at the last epoch's end
        self._rng_to_restore: dict[str, Any] | None = None
        self._resume_notices: list[tuple[int, str]] = []
        self._environment: dict[str, Any] | None = None  # of this process, for the checkpoints
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
        self.model: nn.Module = GNNModel.from_config(
            config.model, self.in_channels, self.num_classes
        ).to(self.device, self.float_dtype)
        self.optimizer = self._build_optimizer()
        self.lr_scheduler = self._build_scheduler()
        t = config.training
        # Gradients of float16 losses underflow without scaling; bfloat16 has float32's range.
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=t.precision == "16")
        # The average follows the trained weights; it is not wrapped in DDP.
        self.ema = EMA(self.model, t.ema_decay) if t.ema_decay is not None else None
        self.criterion = make_criterion(config.criterion)
        self.validator = Validator(
            self.criterion, self.device, self.autocast_dtype, self.float_dtype
        )
        self.tester = Tester(
            self.criterion, self.device, self.autocast_dtype, self.float_dtype, self.num_classes
        )
        es = config.early_stopping
        self.early_stopping = EarlyStopping(
            mode=es.mode, patience=es.patience, delta=es.delta, grace_period=es.grace_period
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

    def gather_rng_states(self) -> list[dict[str, Any]]:
        """Every process's random states, in rank order (hook: DDP gathers them)."""
        return [rs.rng_state(self.device)]

    log_prefix = ""  # DDP: "[RANK r] " on every line, on the terminal and in train.log

    def setup_logging(self) -> logging.Logger:  # hook
        return configure_logging(self.config.log_level, prefix=self.log_prefix)

    def select_device(self) -> torch.device:  # hook
        return select_device(self.config.training.device)

    def load_dataset(self) -> Dataset | list:  # hook
        return dataset_from_config(self.config.data)

    def make_train_sampler(self, dataset: Dataset) -> Sampler:
        """``training.sampler``, or by default a shuffle drawn from (training.seed, epoch).

        Both are split between processes so that, for any number of them, global batch k holds
        the same graphs (see :func:`~QuantumGravPy.reproducibility.invariance_breaks`), and both
        depend on the epoch alone, so a resumed run draws what an uninterrupted one would have.
        """
        t = self.config.training
        if t.sampler is None:
            return DistributedSampler(
                dataset,
                num_replicas=self.world_size,
                rank=self.rank,
                shuffle=True,
                seed=t.seed,  # one seed on every rank: together the shards partition each epoch
                drop_last=t.drop_last,
            )
        try:
            return build_sampler(
                t.sampler, dataset, seed=t.seed, kwargs=t.sampler_kwargs, drop_last=t.drop_last
            )
        except (TypeError, ValueError) as e:
            raise ConfigError(f"training.sampler_kwargs: {t.sampler} rejected them: {e}") from None

    def make_train_loader(self, dataset: Dataset) -> DataLoader:
        t = self.config.training
        augmentation = self.config.augmentation
        if augmentation.preset is not None:
            dataset = AugmentedDataset(
                dataset,
                get_preset(augmentation.preset),
                seeding=augmentation.seeding,
                base_seed=t.seed,
                rank=distributed.get_rank(),
                world_size=distributed.get_world_size(),
            )
        return make_loader(
            dataset,
            batch_size=t.batch_size,
            sampler=self.make_train_sampler(dataset),
            drop_last=t.drop_last,
            num_workers=t.num_workers,
            seed=t.seed,
            # workers that outlive an epoch would keep augmenting with the old epoch's draws
            persistent_workers=augmentation.preset is None,
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
        improved = self.early_stopping.step(row[self.config.early_stopping.metric], row["epoch"])
        return improved, self.config.early_stopping.enabled and self.early_stopping.should_stop

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
                "early stopping after epoch %d: no %s improvement for %d epochs (best %.4f at %d)",
                self.epoch,
                self.config.early_stopping.metric,
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
                        outputs = model(batch)
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
            self.lr_scheduler.step(row[self.config.early_stopping.metric])
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

    def write_epoch_files(self, row: dict[str, Any], improved: bool) -> None:
        """Checkpoints, history.csv and the epoch's log line (hook: DDP guards it on rank 0).

        ``last.pt`` is written last: it is what a resumed run continues from, so everything
        else of this epoch is on disk before it.
        """
        every = self.config.training.checkpoint_every
        if every and self.epoch % every == 0:
            self.save_checkpoint(f"epoch_{self.epoch:04d}.pt")
        if improved:
            self.save_checkpoint("best.pt")
        self.save_checkpoint("last.pt")
        if self.is_main:
            rd.write_history(self.run_dir, self.history)
        self.logger.info(
            "epoch %d/%d  train_loss %.4f  val_loss %.4f  val_accuracy %.4f  lr %.2e  %.1fs%s",
            row["epoch"],
            self.config.training.num_epochs,
            row["train_loss"],
            row["val_loss"],
            row["val_accuracy"],
            row["lr"],
            row["epoch_seconds"],
            "  *best" if improved else "",
        )

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

    # --- files ---------------------------------------------------------------------------------

    def open_run(self) -> None:
        """Create the run directory on first use: config.yaml and train.log.

        A resumed run keeps its directory: the log is appended to, history.csv is rewritten
        from the checkpoint (rows of epochs after it are dropped), and temporary files of a
        checkpoint write that was killed are removed.
        """
        if self._run_open:
            return
        if self.is_main:
            if self.resuming:
                (self.run_dir / rd.CHECKPOINTS).mkdir(parents=True, exist_ok=True)
                rd.remove_partial_writes(self.run_dir)
            else:
                rd.prepare_run_dir(self.run_dir, overwrite=self.overwrite)
            (self.run_dir / rd.CONFIG).write_text(dump_config(self.config), encoding="utf-8")
            rd.record_environment(
                self.run_dir,
                {
                    "resumed_after_epoch": self.epoch if self.resumed_from else None,
                    **rs.environment(self.device, self.world_size),
                },
            )
            self._log_handler = add_file_handler(self.run_dir / rd.LOG, prefix=self.log_prefix)
            if self.resumed_from is not None:
                rd.write_history(self.run_dir, self.history)
                self.logger.info(
                    "resumed from %s after epoch %d (step %d)",
                    self.resumed_from,
                    self.epoch,
                    self.global_step,
                )
                for level, notice in self._resume_notices:
                    self.logger.log(level, "%s", notice)
        self._run_open = True

    def close(self) -> None:
        """Detach this run's log file (the trainer stays usable for evaluation)."""
        handler = getattr(self, "_log_handler", None)
        if handler is not None:
            self.logger.removeHandler(handler)
            handler.close()
            self._log_handler = None

    def write_summary(self, test_metrics: dict[str, float] | None = None) -> None:
        if not self.is_main:
            return
        summary = {
            "test_loss": None,
            "test_accuracy": None,
            "best_epoch": self.early_stopping.best_epoch,
            "epochs_run": self.epoch,
            "stopped_early": self.stopped_early,
            "world_size": self.world_size,
        }
        summary.update(test_metrics or {})
        rd.write_summary(self.run_dir, summary)
        self.write_plots()

    def write_plots(self) -> None:
        """curves.png and confusion_matrix.png; a failure here costs a warning, never the run."""
        try:
            plots.write_run_plots(self.run_dir, plots.class_names_of(self.config))
        except Exception as e:  # the results are on disk already; pictures are a convenience
            self.logger.warning("could not write the plots of %s: %s", self.run_dir, e)

    def state_dict(self) -> dict[str, Any]:
        """Everything a checkpoint records: plain state dicts, tensors and numbers only."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "lr_scheduler": self.lr_scheduler.state_dict() if self.lr_scheduler else None,
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "best_model": self.best_state,  # what run_test evaluates
            "epoch": self.epoch,
            "global_step": self.global_step,
            "sampler_epoch": self.epoch,  # the next epoch's set_epoch
            "early_stopping": self.early_stopping.state_dict(),
            "stopped_early": self.stopped_early,
            "history": [dict(row) for row in self.history],
            "rng": self._rng_states,  # one entry per rank
            "config": config_to_dict(self.config),
            "config_digest": rs.config_digest(self.config),
            "world_size": self.world_size,
            "environment": self._environment,
        }

    def save_checkpoint(self, name: str = "last.pt") -> Path:
        """Write a checkpoint into the run's ``checkpoints/`` (only the main process writes)."""
        path = self.run_dir / rd.CHECKPOINTS / name
        if self.is_main:
            save_checkpoint(self.state_dict(), path)
        return path

    # --- resuming ------------------------------------------------------------------------------

    def resume(self, *, force: bool = False) -> bool:
        """Restore the run in ``training.path`` from ``checkpoints/last.pt``, on every process.

        Returns False, and leaves the trainer at its start, when the directory holds no run or
        only the start of one (no epoch finished); a directory with results but no last.pt is
        refused. Called by the constructor with ``resume=True``.
        """
        self.resuming = True
        state = self.read_resume_state(force)
        if state is None:
            return False
        self.load_state_dict(state, self.run_dir / rd.CHECKPOINTS / rd.LAST)
        self._resume_notices = state["notices"]  # logged once train.log is open
        return True

    def read_resume_state(self, force: bool) -> dict[str, Any] | None:
        """Load and check ``last.pt`` (hook: DDP reads it on rank 0 and broadcasts it)."""
        path = self.run_dir / rd.CHECKPOINTS / rd.LAST
        if not path.is_file():
            rd.check_startable(self.run_dir)
            return None
        state = load_checkpoint(path)
        if state.get("format_version") != FORMAT_VERSION or "rng" not in state:
            raise CheckpointError(
                f"{path}: written by an older version of QuantumGravPy without the state needed "
                "to resume (format {}, needs {})".format(
                    state.get("format_version"), FORMAT_VERSION
                )
            )
        state["notices"] = rs.check_resume(
            self.config, state, self.world_size, force=force, path=path
        )
        return state

    def load_state_dict(self, state: dict[str, Any], path: str | Path = "checkpoint") -> None:
        """Continue from ``state`` (a checkpoint's contents) in this process."""
        load_model_state(self.model, state["model"], path)
        try:
            self.optimizer.load_state_dict(state["optimizer"])
            if self.lr_scheduler is not None and state["lr_scheduler"] is not None:
                self.lr_scheduler.load_state_dict(state["lr_scheduler"])
            if self.scaler.is_enabled() and state["scaler"] is not None:
                self.scaler.load_state_dict(state["scaler"])
        except (KeyError, ValueError, RuntimeError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise CheckpointError(f"{path}: its optimizer state does not fit ({first})") from None
        if self.ema is not None:
            if state["ema"] is not None:
                self.ema.load_state_dict(state["ema"])
            else:  # EMA switched on for the rest of the run (--force)
                self.ema = EMA(self.model, self.ema.decay)
        self.epoch = int(state["epoch"])
        self.global_step = int(state["global_step"])
        self.history = [dict(row) for row in state["history"]]
        self.early_stopping.load_state_dict(state["early_stopping"])
        self.stopped_early = self.config.early_stopping.enabled and self.early_stopping.should_stop
        self.best_state = state["best_model"]
        rngs = state["rng"]
        self._rng_states = list(rngs)
        self._rng_to_restore = rngs[self.rank] if self.rank < len(rngs) else None
        self.resumed_from = Path(path)

    def restore_rng(self) -> None:
        """Put back this rank's random states from the checkpoint, just before the loop.

        A rank the checkpoint has no state for (the job grew) starts a stream of its own.
        """
        if self.resumed_from is None:
            return
        if self._rng_to_restore is not None:
            rs.set_rng_state(self._rng_to_restore, self.device)
        else:
            seed_everything(self.config.training.seed + 1_000_003 * self.epoch + self.rank)
        self._rng_to_restore = None

    # --- construction --------------------------------------------------------------------------

    def _build_optimizer(self) -> torch.optim.Optimizer:
        opt = self.config.training.optimizer
        cls = resolve(opt.type, key="training.optimizer.type")
        if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
            raise ConfigError(f"training.optimizer.type: {opt.type!r} is not a torch optimizer")
        try:
            return cls(self.model.parameters(), **opt.kwargs)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"training.optimizer.kwargs: {opt.type} rejected them: {e}") from None

    def _build_scheduler(self) -> Any:
        sched = self.config.training.lr_scheduler
        if sched is None:
            return None
        cls = resolve(sched.type, key="training.lr_scheduler.type")
        try:
            return cls(self.optimizer, **sched.kwargs)
        except (TypeError, ValueError) as e:
            raise ConfigError(
                f"training.lr_scheduler.kwargs: {sched.type} rejected them: {e}"
            ) from None


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


def load_model_state(model: nn.Module, weights: dict[str, Any], path: str | Path) -> None:
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0]
        raise CheckpointError(f"{path}: does not fit the configured model ({first})") from None
