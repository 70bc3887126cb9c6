"""What a run is about to do, said once when training starts: what it trains, and what its
user may not expect.

Each of these trains without error and gives results that look plausible, so it gets a
warning rather than a refusal: a classification whose labels never take the value 0 (Julia's
1-based labels), a learning-rate schedule of another length than the run, more processes than
cores on one machine, processes that get less than one batch of graphs each.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

import torch

from ...config import Config, ModelConfig, TrainingConfig, resolve, task_list
from ...data import label_notice, num_edge_features
from ...parallel.strategies import STRATEGIES
from ...runs import reproducibility as rs
from .optim import schedule_notice


def describe_run(name: str, t: TrainingConfig, device: torch.device, train_graphs: int) -> str:
    """The line that opens the log of run ``name``, trained as ``t`` (its ``training:``
    section) says: what is trained, for how long, where and how."""
    batches = (
        f"batch size {t.batch_size}"
        if t.batch_nodes is None
        else f"batches of at most {t.batch_nodes} nodes"
    )
    return (
        f"training {name} for up to {t.num_epochs} epochs on {device}: {train_graphs} "
        f"training graphs, {batches}"
        + (
            f", {t.accumulate_grad_batches} batches per step"
            if t.accumulate_grad_batches > 1
            else ""
        )
        + (f", precision {t.precision}" if t.precision != "32" else "")
        + (f", EMA of the weights (decay {t.ema_decay})" if t.ema_decay is not None else "")
    )


def start_notices(
    config: Config,
    dataset: Any,
    *,
    train_graphs: int,
    processes: int = 1,
    local_processes: int = 1,
    device: torch.device | None = None,
) -> list[str]:
    """The warnings for a run of ``config`` on ``dataset`` with ``processes`` in all
    (``local_processes`` on this machine) and ``train_graphs`` training graphs."""
    notices = [
        label_notice(dataset, task, f"tasks[{i}]" if config.tasks else None)
        for i, task in enumerate(task_list(config))
    ]
    notices.append(schedule_notice(config.training.lr_scheduler, config.training.num_epochs))
    notices.append(_edge_notice(config.model, dataset))
    cores = _cores()
    if (device is None or device.type == "cpu") and local_processes > cores:
        notices.append(
            f"parallel.world_size: {local_processes} processes share {cores} CPU cores on this "
            f"machine, so they take turns and the run is slower than with {cores}"
        )
    notices += STRATEGIES.get(config.parallel.strategy).notices(config, processes)
    workers = config.training.num_workers
    if workers > 0 and (device is None or device.type == "cpu"):
        notices.append(
            f"training.num_workers: {workers} worker process(es) compete for the CPU cores with "
            f"the model, whose computation already uses {torch.get_num_threads()} thread(s), "
            "while a batch of graphs in memory or on disk is assembled in under a millisecond; "
            "0 is usually quicker (docs: Data, the data path)"
        )
    batch = config.training.batch_size
    per_process = math.ceil(train_graphs / processes)
    if processes > 1 and per_process < batch and config.training.batch_nodes is None:
        notices.append(
            f"parallel.world_size: each of the {processes} processes gets {per_process} of the "
            f"{train_graphs} training graphs, less than one batch of {batch} "
            f"(training.batch_size): every step averages the whole training split at once, "
            f"{math.ceil(train_graphs / (batch * processes))} step per epoch; use fewer "
            "processes or a smaller batch"
        )
    return [n for n in notices if n]


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def invariance_note(config: Config, processes: int) -> str | None:
    """What the number of processes does to the results of ``config``: the same bits with
    the invariant strategy; else why they would depend on it, where several processes run (on
    one, nothing is changed by the number and nothing said)."""
    note = STRATEGIES.get(config.parallel.strategy).note(config)
    if note is not None:
        return note
    breaks = rs.invariance_breaks(config)
    if not breaks or processes == 1:
        return None
    return f"note: results depend on the number of processes because {'; '.join(breaks)}"


def log_start(
    logger: logging.Logger,
    config: Config,
    dataset: Any,
    device: torch.device,
    *,
    train_graphs: int,
    processes: int,
    local_processes: int,
    main: bool,
    init: str | None = None,
) -> None:
    """The run's first line (every process), then the main process's warnings and what the
    number of processes does to the results."""
    logger.info("%s", describe_run(config.name, config.training, device, train_graphs))
    if not main:
        return
    for notice in start_notices(
        config,
        dataset,
        train_graphs=train_graphs,
        processes=processes,
        local_processes=local_processes,
        device=device,
    ):
        logger.warning("%s", notice)
    if note := invariance_note(config, processes):
        logger.info("%s", note)
    if init:  # what model.init_from loaded
        logger.info("%s", init)


def _edge_notice(model: ModelConfig, dataset: Any) -> str | None:
    """A word when the graphs' edges carry features the built-in model's conv does not read."""
    from ...models.blocks import reads_edges

    edges = num_edge_features(dataset) if model.type is None else 0
    if not edges or reads_edges(resolve(model.conv, key="model.conv")):
        return None
    return (
        f"the data's edges carry {edges} feature(s) (edge_attr), which model.conv "
        f"{model.conv} does not read; an edge-aware conv does (torch_geometric.nn."
        "GINEConv, GATConv, TransformerConv: given edge_dim by the model)"
    )
