"""Starting a training job: :func:`launch` spawns (or joins) the ranks and trains in each.

:func:`launch` is what ``qg train`` calls when ``parallel.world_size > 1``, and what a notebook
calls: it checks the run directory and builds the dataset cache once, then runs
:func:`train_worker` on every rank through :func:`~QuantumGravPy.parallel.run_distributed`
(which spawns the processes, or joins torchrun's or srun's job) and returns rank 0's results.
"""

from __future__ import annotations

from typing import Any

from ...config import Config, per_process
from ...data import SHARED_BUILD_MIN, check_file_targets, dataset_from_config
from ...logs import append_to_log
from ...parallel import WorkerError, distributed, run_distributed
from ...parallel.strategies import strategy_class
from ...runs import check_resumable
from ...runs.layout import LOG, check_flags, check_run_dir
from ...runs.lock import check_free
from .fit import fit


def train_worker(
    rank: int,
    world_size: int,
    config: Config,
    overwrite: bool,
    resume: bool = False,
    force: bool = False,
) -> dict[str, Any]:
    """What every rank of a training job runs (:func:`~.fit.fit`); returns the (identical)
    history and test metrics.

    A job restarted by its launcher resumes on every rank, even on a host that was replaced
    and so starts counting restarts anew (torchrun's agent on a new machine): whether any
    rank's launcher restarted it is asked of all."""
    if any(distributed.all_gather_object(distributed.restart_count() > 0)):
        overwrite, resume = False, True
    return fit(config, overwrite=overwrite, resume=resume, force=force)


def launch(
    config: Config,
    world_size: int | None = None,
    *,
    overwrite: bool = False,
    resume: bool = False,
    force: bool = False,
) -> dict[str, Any]:
    """Train ``config`` with ``world_size`` processes (default ``parallel.world_size``).

    Returns ``{"history": [...], "test": {...}, "world_size": W}`` (rank 0's, which every rank
    shares). In a process started by torchrun or srun it joins that job instead of spawning.
    ``resume=True`` continues the run in ``training.path`` (see :class:`~QuantumGravPy.Trainer`).
    A job that torchrun restarted after a failure (``--max-restarts``) always resumes.
    """
    env = distributed.process_env()
    if distributed.restart_count() > 0:
        overwrite, resume = False, True  # a restart must continue, never wipe, the run
    if env is None:
        prepare_run(
            config,
            overwrite=overwrite,
            resume=resume,
            force=force,
            world_size=world_size or config.parallel.world_size,
        )
    try:
        return run_distributed(
            train_worker,
            config,
            config,
            overwrite,
            resume,
            force,
            world_size=world_size,
            log=config.run_dir / LOG,  # where c10d's stack dumps go, not the terminal
        )
    except WorkerError as e:
        if env is None and e.rank != 0:  # rank 0 was stopped from outside: say why in its log
            append_to_log(config.run_dir / LOG, f"the job stopped: {e}")
        raise


def prepare_run(
    config: Config,
    *,
    overwrite: bool,
    resume: bool = False,
    force: bool = False,
    world_size: int = 1,
) -> None:
    """What the launching process does once, before any rank starts: :func:`preflight`, then
    the causal-set cache built, so that the ranks only read it."""
    preflight(config, overwrite=overwrite, resume=resume, force=force, world_size=world_size)
    build_cache(config, world_size)


def preflight(
    config: Config,
    *,
    overwrite: bool,
    resume: bool = False,
    force: bool = False,
    world_size: int = 1,
) -> None:
    """Refuse, before minutes are spent, what cannot run: flags that exclude each other, what
    the strategy refuses, a batch that does not divide over ``world_size`` processes, an
    occupied run directory (or one another run is writing) or (resuming) a checkpoint the
    config does not fit."""
    check_flags(overwrite=overwrite, resume=resume)
    check_free(config.run_dir)  # another run writing there: told now, not after the data
    strategy_class(config, world_size)
    per_process(config, world_size)
    if resume:
        check_resumable(config, world_size=world_size, force=force)
    else:
        check_run_dir(config.run_dir, overwrite=overwrite)


def build_cache(config: Config, world_size: int = 1) -> None:
    """Build the processed cache of ``config``'s data once, before the ranks start, so that
    they only read it (with up to ``world_size`` processes when that pays)."""
    if config.data.dataset is None:
        check_file_targets(config.data, config.tasks)
        dataset_from_config(
            config.data,
            world_size=world_size,
            processes=world_size,
            min_per_process=SHARED_BUILD_MIN,
        )
