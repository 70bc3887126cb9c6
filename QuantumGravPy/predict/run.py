"""``qg predict``: a trained model over new causal sets (or its own data), in input order.

The inputs are cached as graphs once (by up to ``world_size`` processes, each a contiguous
range, as training builds its cache), then cut into batches of ``testing.batch_size`` in input
order; rank r of W evaluates batches r, r + W, ... and rank 0 puts the predictions back in
order. Every batch holds the same graphs for any W, and each process computes on one CPU thread
(the thread count would otherwise change with W, and with it a product's last bits), so the
output is the same for any W.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Subset

from .. import logs
from ..config import Config, load_config, task_list
from ..data import SHARED_BUILD_MIN, dataset_from_config, make_loader
from ..data.sources.checks import check_user_graphs, checks_for, user_graphs_source
from ..data.sources.provenance import dataset_positions, provenance
from ..errors import ConfigError
from ..parallel import distributed, run_distributed
from ..training.evaluation.evaluator import Accumulated, Tester
from .inputs import (
    elements,
    given_graphs,
    input_overrides,
    labelled,
    pair_elements,
    select_split,
    with_available_targets,
)
from .model import model_from_checkpoint, run_files
from .outputs import Predictions, check_output, task_columns, write
from .seeding import Seeded, check_seed, drew_notice

DEFAULT_OUTPUT = "predictions.npz"


@dataclasses.dataclass(frozen=True)
class _Job:
    config: Config
    checkpoint: Path
    split: str
    provenance: bool
    graphs: list | None = None  # the caller's own graphs, in place of the config's data
    seed: int | None = None  # of the draws of a model that samples in evaluation


def _dataset(job: _Job, *, progress: bool, world_size: int = 1) -> Any:
    if job.graphs is not None:
        return job.graphs
    return dataset_from_config(
        job.config.data,
        progress=progress,
        world_size=world_size,
        processes=world_size,
        min_per_process=SHARED_BUILD_MIN,
        provenance=job.provenance,
    )


def _device(spec: str, world_size: int) -> torch.device | None:
    """A rank's GPU (cuda:LOCAL_RANK) when several processes predict on GPUs; else the
    config's device, ``training.device`` (``spec``): None."""
    if world_size > 1 and spec in ("auto", "cuda") and torch.cuda.is_available():
        return torch.device(f"cuda:{distributed.get_local_rank()}")
    if world_size > 1 and spec.startswith("cuda:"):
        raise ConfigError(
            f"training.device: {spec!r} would put every process on one GPU; use 'cuda' or 'auto'"
        )
    return None


def predict_worker(rank: int, world_size: int, job: _Job) -> dict[str, Any] | None:
    """Predict this rank's batches; rank 0 returns every rank's predictions, in order, and
    the metrics of the labelled tasks."""
    if world_size > 1:  # a process of its own: rank 0 reports progress, the others problems
        level = job.config.log_level if rank == 0 else "WARNING"
        logs.configure_logging(level, prefix=f"[RANK {rank}] ")
    if distributed.process_env() is not None and world_size > 1:
        # under torchrun or srun: the first process on each machine builds a missing cache
        if distributed.get_local_rank() == 0:
            _dataset(job, progress=rank == 0)
        distributed.barrier()
    loaded = model_from_checkpoint(
        job.config, job.checkpoint, _device(job.config.training.device, world_size)
    )
    dataset = select_split(_dataset(job, progress=False), job.config.data, job.split)
    size = job.config.testing.batch_size
    batches = [range(i, min(i + size, len(dataset))) for i in range(0, len(dataset), size)]
    mine = torch.tensor([p for b in batches[rank::world_size] for p in b], dtype=torch.long)
    loader = make_loader(
        Subset(dataset, mine.tolist()),
        batch_size=size,
        num_workers=job.config.training.num_workers,
    )
    tasks = loaded.tasks
    scored = labelled(dataset, [t.config.target_name for t in tasks])
    # a model_loss task scores itself: its terms are computed from any data
    scored_tasks = [t for t in tasks if t.config.target_name in scored or not t.kind.needs_target]
    tester = Tester(
        tasks, loaded.device, loaded.autocast_dtype, loaded.float_dtype, select=loaded.select
    )
    # each batch's draws seeded by its first graph's position: the same for any W
    model = Seeded(
        loaded.model, [b.start for b in batches[rank::world_size]], job.seed, loaded.device
    )
    bar = logs.progress(loader, desc="predicting", unit="batch", enabled=rank == 0)
    with distributed.one_thread(loaded.device):  # the same bits for any number of processes
        found = tester.accumulate(model, bar, scored={t.name for t in scored_tasks})
    drew = distributed.all_reduce_sum(torch.tensor([float(model.drew)], device=loaded.device))
    for parts in (found.predictions or {}).values():
        parts["graph"] = [mine[g] for g in parts["graph"]]  # positions in the whole input
    across = world_size > 1
    predictions = found.gathered_predictions(across_ranks=across)
    metrics: dict[str, Any] = {}
    if scored_tasks:
        keep = [i for i, t in enumerate(tasks) if t in scored_tasks]
        sums = distributed.all_reduce_sum(found.sums[keep].clone())
        picked = Accumulated(scored_tasks, sums, [found.metrics[i] for i in keep])
        # columns named as training names them for a split (test_...), predict_... for all
        prefix = "predict" if job.split == "all" else job.split
        metrics = picked.compute(prefix, across_ranks=across)
    if rank != 0:
        return None
    return {"predictions": predictions, "metrics": metrics, "drew": bool(drew.item())}


def predict(
    run_dir: str | Path,
    files: Sequence[str] | Any = None,
    *,
    checkpoint: str | Path | None = None,
    overrides: Sequence[str] = (),
    output: str | Path | None = None,
    overwrite: bool = False,
    world_size: int = 1,
    split: str = "all",
    seed: int | None = None,
) -> Predictions:
    """Predict with the run in ``run_dir`` (its ``config.yaml``; weights of ``checkpoint``,
    default ``checkpoints/best.pt``) on ``files`` (paths or glob patterns of Zarr stores and
    HDF5 files, read as the run's ``data.*`` says; or graphs: one torch_geometric ``Data`` or a
    list of them, rows keyed by their position), or without them on the run's data source as
    ``overrides`` change it; ``split`` picks a split of it (``train``, ``val``, ``test``: as
    training drew them) instead of ``all``.

    ``world_size`` processes share the work (the result is the same for any number). A model
    that draws random numbers in evaluation (a VAE sampling its latent) gives the same rows for
    the same ``seed`` on any number of processes; without one, the log says that it drew them.
    Returns the tables; with ``output`` (.npz or .csv) they are also written there, never over
    an existing file unless ``overwrite``.
    """
    if world_size < 1:
        raise ConfigError(f"--world-size: expected a positive number, found {world_size}")
    seed = check_seed(seed)
    config_path, checkpoint = run_files(run_dir, checkpoint)
    target = None if output is None else Path(output)
    if target is not None:
        check_output(target, overwrite=overwrite)
    graphs = given_graphs(files)
    if graphs is not None:
        files = None
    config = load_config(config_path, input_overrides(files, overrides))
    logs.configure_logging(config.log_level)  # the preparation's and the batches' progress
    if graphs is None:  # the files' labels; graphs given hold theirs or not
        config = with_available_targets(config)
    # the model is loaded once here: a checkpoint that does not fit fails before data is read
    tasks = model_from_checkpoint(config, checkpoint, "cpu").tasks
    pairs = list(dict.fromkeys(t.config.pairs for t in tasks if t.level == "edge"))
    if target is not None and pairs:
        check_output(target, overwrite=overwrite, pairs=pairs)
    # each node's element as its file numbers it: only node- and edge-level tasks need it (and
    # a cache of their own); graphs record their file and sample in the training run's cache
    nodes = any(t.level != "graph" for t in tasks)
    from_files = bool(config.data.files) and graphs is None
    job = _Job(config, checkpoint, split, provenance=from_files and nodes, graphs=graphs, seed=seed)
    env = distributed.process_env()
    if env is None:
        _dataset(job, progress=True, world_size=world_size)
    if graphs is not None or config.data.dataset is not None:  # before a rank starts on them
        source = "qg.predict's graphs" if graphs is not None else user_graphs_source(config.data)
        checks = checks_for(task_list(config), config.model)
        check_user_graphs(_dataset(job, progress=False), checks, config.data, source=source)
    if world_size == 1 and env is None:
        result = predict_worker(0, 1, job)
    else:
        result = run_distributed(predict_worker, config, job, world_size=world_size)
    if result is None:  # a rank other than 0 under torchrun or srun
        return Predictions({"index": np.zeros(0, dtype=np.int64)})
    if result["drew"] and seed is None:
        logs.get_logger().warning("%s", drew_notice())
    dataset = select_split(_dataset(job, progress=False), config.data, split)
    if job.graphs is None:
        graphs = provenance(config.data, dataset)
    else:  # the caller's own: keyed by their position in what was given
        index = dataset_positions(dataset)
        graphs = {"source": np.full(len(index), "graphs"), "index": index}
    nodes: dict[str, np.ndarray] = {}
    edges: dict[str, dict[str, np.ndarray]] = {}
    for task in tasks:
        found = result["predictions"].get(task.name)
        if found is None:
            continue
        columns = task_columns(task, found["predicted"], found.get("true"))
        if task.level == "graph":
            graphs.update(columns)
        elif task.level == "edge":
            table = edges.setdefault(task.config.pairs, {})
            if not table:
                graph, pair = found["graph"].numpy(), found["pair"].numpy()
                table["graph"] = graph
                table["element_from"], table["element_to"] = pair_elements(dataset, graph, pair)
            table.update(columns)
        else:
            if "graph" not in nodes:
                graph = found["graph"].numpy()
                nodes["graph"] = graph
                nodes["element"] = elements(dataset, graph)
            nodes.update(columns)
    if target is not None:
        write(target, graphs, nodes, edges)
    return Predictions(graphs, nodes, edges, result["metrics"], target)
