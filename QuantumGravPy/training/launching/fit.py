"""The one sequence every entry point runs: build this process's trainer, split the data into
loaders, train, test the best epoch, close.

The command line and :func:`~.launch.launch` (in every rank), a tuning trial and ``qg profile``
call :func:`fit` or :func:`opened`; :func:`make_trainer` is the one place that chooses between
:class:`~.trainer.Trainer` and :class:`~.trainer_ddp.TrainerDDP`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, Dataset

from ...config import Config
from ...logs import get_logger
from ...parallel import distributed
from ..loop.trainer import Trainer
from ..loop.trainer_ddp import TrainerDDP

Loaders = tuple[DataLoader, DataLoader, DataLoader]


def make_trainer(config: Config, dataset: Dataset | list | None = None, **options: Any) -> Trainer:
    """This process's trainer: a :class:`TrainerDDP` in a process group of more than one
    process, else a :class:`Trainer`. ``options``: the trainer's keyword options."""
    if distributed.get_world_size() > 1:
        return TrainerDDP(distributed.get_rank(), config, dataset, **options)
    return Trainer(config, dataset, **options)


@contextlib.contextmanager
def opened(
    config: Config, dataset: Dataset | list | None = None, **options: Any
) -> Iterator[tuple[Trainer, Loaders]]:
    """This process's trainer and its (train, validation, test) loaders; closed at the end of
    the block, whatever happens in it."""
    trainer = make_trainer(config, dataset, **options)
    try:
        yield trainer, trainer.prepare_dataloaders()
    except BaseException:
        try:
            trainer.close()
        except Exception:  # the error that stopped the run is the one to report, not this
            get_logger().warning("closing the trainer after the failure failed", exc_info=True)
        raise
    trainer.close()


def fit(config: Config, dataset: Dataset | list | None = None, **options: Any) -> dict[str, Any]:
    """Train ``config`` in this process and test its best epoch (unless the judge pruned it).

    Returns ``{"history": [...], "test": {...} or None, "pruned": bool, "world_size": W}``, the
    same on every rank of a distributed run.
    """
    with opened(config, dataset, **options) as (trainer, (train, val, test)):
        history = trainer.run_training(train, val)
        metrics = None if trainer.pruned else trainer.run_test(test)
    return {
        "history": history,
        "test": metrics,
        "pruned": trainer.pruned,
        "world_size": trainer.world_size,
    }
