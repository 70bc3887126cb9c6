"""Datasets from the config: the embedded causal sets or the user's own, checked, and the
per-graph attributes (labels, weights) that samplers and the model's dimensions are read from.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Subset
from torch_geometric.data import Data, InMemoryDataset

from ...compat import pyg
from ...config import DataConfig, resolve
from ...errors import DataError
from ..storage.cache import GraphSource, cache_name
from ..storage.disk import NUM_EDGES, NUM_NODES, DiskDataset, table_file_names
from .causal_sets import CausalSetDataset, GeneratedSource

log = logging.getLogger(__name__)


# A job's processes share building a missing cache when each gets at least this many samples
# (fewer do not pay for starting a process).
SHARED_BUILD_MIN = 500


def dataset_from_config(
    data_cfg: DataConfig,
    *,
    progress: bool = True,
    world_size: int = 1,
    processes: int = 1,
    min_per_process: int = 0,
    provenance: bool = False,
) -> Dataset | list[Data]:
    """Build (or load from cache) the dataset a ``data:`` config section describes.

    ``world_size``: processes that build a missing cache, each a contiguous range (with
    ``min_per_process``, fewer when some would get fewer samples than that); ``processes``: how
    many processes of this machine will each hold the dataset (what ``data.storage: auto``
    weighs); ``provenance``: graphs of ``data.files`` say where they came from (a cache of
    their own, see :class:`~.files.FileSource`).
    """
    if data_cfg.dataset is not None:
        factory = resolve(data_cfg.dataset, key="data.dataset")
        try:
            dataset = factory(**data_cfg.dataset_kwargs)
        except TypeError as e:
            raise DataError(f"data.dataset: calling {data_cfg.dataset} failed: {e}") from e
        check_dataset(dataset, source=f"data.dataset ({data_cfg.dataset})")
        return dataset
    if data_cfg.files:
        from .files import FileDataset, FileSource

        source = FileSource(data_cfg, provenance=provenance)
    else:
        source = GeneratedSource(**generation_parameters(data_cfg))
    transform = (
        None if data_cfg.transform is None else resolve(data_cfg.transform, key="data.transform")
    )
    storage = choose_storage(data_cfg, source, processes=processes)
    if min_per_process and world_size > 1 and not _cached(data_cfg, source, storage):
        world_size = min(world_size, max(1, source.total // min_per_process))
    if storage == "disk":
        return DiskDataset(
            source, data_cfg.root, transform=transform, progress=progress, world_size=world_size
        )
    if data_cfg.files:
        return FileDataset(
            data_cfg, progress=progress, world_size=world_size, provenance=provenance
        )
    return CausalSetDataset(
        data_cfg.root, **generation_parameters(data_cfg), progress=progress, world_size=world_size
    )


def generation_parameters(data_cfg: DataConfig) -> dict[str, Any]:
    """The keys of ``data:`` that the embedded causal sets are generated from."""
    keys = (
        "num_graphs",
        "num_points",
        "dimensions",
        "seed",
        "kind",
        "h",
        "light_cone_ranks",
        "pairs",
    )
    return {key: getattr(data_cfg, key) for key in keys}


def choose_storage(data_cfg: DataConfig, source: GraphSource, *, processes: int = 1) -> str:
    """``data.storage``, with ``auto`` decided: a cache already built is used as it is;
    otherwise memory when a few graphs' size times their number, for each of ``processes``,
    fits in a quarter of the memory available now, disk when it does not."""
    if data_cfg.storage != "auto":
        return data_cfg.storage
    for storage in ("memory", "disk"):
        if _cached(data_cfg, source, storage):
            return storage
    sample = list(itertools.islice(source.graphs(0, min(source.total, 4), progress=False), 4))
    per_graph = sum(graph_bytes(g) for g in sample) / max(len(sample), 1)
    estimate = per_graph * source.total * processes
    budget = available_memory() / 4
    storage = "memory" if estimate <= budget else "disk"
    log.info(
        "data.storage auto: %s (about %.0f MB processed for %d process(es); a quarter of the "
        "memory available is %.0f MB)",
        storage,
        estimate / 1e6,
        processes,
        budget / 1e6,
    )
    return storage


def _cached(data_cfg: DataConfig, source: GraphSource, storage: str) -> bool:
    name = f"{cache_name(source)}.pt" if storage == "memory" else table_file_names(source)[0]
    return (Path(data_cfg.root) / "processed" / name).exists()


def graph_bytes(graph: Data) -> int:
    """The bytes of a graph's tensors."""
    return sum(v.numel() * v.element_size() for _, v in graph.items() if torch.is_tensor(v))


def available_memory() -> int:
    """Bytes of memory available to new allocations now (Linux: MemAvailable)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def check_dataset(dataset: Any, *, source: str) -> None:
    if not isinstance(dataset, (Dataset, list)):
        raise DataError(
            f"{source}: expected a torch_geometric Dataset or a list of Data, "
            f"got {type(dataset).__name__}"
        )
    if len(dataset) == 0:
        raise DataError(f"{source}: the dataset is empty")
    first = dataset[0]
    if not isinstance(first, Data) or first.x is None:
        raise DataError(f"{source}: items must be torch_geometric Data objects with x")


def graph_feature_width(dataset: Dataset | list[Data], names: Sequence[str]) -> int:
    """How many numbers the graph-level attributes ``names`` add up to, read from one graph."""
    if not names:
        return 0  # nothing to read: a dataset on disk is not touched
    first = dataset[0]
    width = 0
    for name in names:
        value = getattr(first, name, None)
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            if isinstance(value, torch.Tensor):
                found = f"a {value.dtype} tensor"
            else:
                found = "nothing" if value is None else type(value).__name__
            raise DataError(
                f"model.graph_features: {name!r} must be a floating-point tensor attribute of "
                f"every graph (one number or one vector per graph); the first graph has {found}"
            )
        width += value.numel()
    return width


def dataset_labels(dataset: Dataset | list[Data], name: str = "y") -> torch.Tensor:
    """The graph labels (attribute ``name``) of a dataset (or a Subset of one), in order."""
    return graph_attribute(dataset, name).long()


def graph_attribute(dataset: Dataset | list[Data], name: str) -> torch.Tensor:
    """One number per graph, read from each graph's attribute ``name``."""
    try:
        values = in_memory_values(dataset, name)
        if values is None:  # a dataset read graph by graph
            values = torch.cat([torch.as_tensor(g[name]).reshape(-1) for g in dataset])
    except (KeyError, AttributeError, RuntimeError) as e:
        raise DataError(f"every training graph needs attribute {name!r}: {e}") from e
    if values.numel() != len(dataset):
        raise DataError(
            f"every training graph needs one number as attribute {name!r}: "
            f"{len(dataset)} graphs hold {values.numel()} values"
        )
    return values.reshape(-1)


def in_memory_values(dataset: Dataset | list[Data], name: str) -> torch.Tensor | None:
    """Every value of attribute ``name``, concatenated in graph order, if the dataset (or the
    dataset a Subset or an augmentation wraps) is held in memory; None if it is not.

    Read from the data as stored, before augmentation: for labels and target statistics.
    """
    dataset = getattr(dataset, "unaugmented", dataset)
    base, indices = dataset, None
    if isinstance(dataset, Subset):
        base, indices = dataset.dataset, list(dataset.indices)
    if isinstance(base, list):
        items = base if indices is None else [base[i] for i in indices]
        if not items or any(name not in g for g in items):
            return None  # a graph without it: the caller's own graphs have no provenance
        return torch.cat([torch.as_tensor(g[name]).reshape(-1, *g[name].shape[1:]) for g in items])
    if isinstance(base, InMemoryDataset):
        data, slices = pyg.storage(base) or ({}, {})
        stored = (data[name], slices[name]) if name in data else None
    elif hasattr(base, "stored_values"):  # on disk, with what samplers read kept in memory
        stored = base.stored_values(name)
    else:
        return None
    if stored is None:
        return None
    values, bounds = stored
    if indices is None:
        return values
    if len(values) == len(base) and bool((bounds.diff() == 1).all()):
        return values[indices]  # one row per graph: index it directly
    return torch.cat([values[bounds[i] : bounds[i + 1]] for i in indices])


def graph_sizes(dataset: Dataset | list[Data]) -> tuple[np.ndarray, np.ndarray]:
    """The numbers of nodes and of edges of each graph of ``dataset`` (or a Subset of one), in
    order: read from what a dataset in memory or on disk keeps (before augmentation), else
    graph by graph."""
    base = getattr(dataset, "unaugmented", dataset)
    inner, indices = base, None
    if isinstance(base, Subset):
        inner, indices = base.dataset, list(base.indices)
    if isinstance(inner, InMemoryDataset) and "x" in inner.slices:
        slices = inner.slices
        edges = slices["edge_index"].diff() if "edge_index" in slices else 0 * slices["x"][1:]
        counts = [slices["x"].diff().numpy(), edges.numpy()]
    elif isinstance(inner, DiskDataset):
        stored = [inner.stored_values(name) for name in (NUM_NODES, NUM_EDGES)]
        if None in stored:
            raise DataError(
                "training.batch_nodes needs each graph's numbers of nodes and edges, which a "
                f"disk cache built by an earlier version does not keep: delete "
                f"{inner.processed_dir} to have it built again"
            )
        counts = [values.numpy() for values, _ in stored]
    else:
        pairs = [(g.num_nodes, g.num_edges) for g in base]
        counts = [np.array([p[k] for p in pairs], dtype=np.int64) for k in (0, 1)]
    if indices is not None:
        counts = [c[np.asarray(indices, dtype=np.int64)] for c in counts]
    nodes, edges = (c.astype(np.int64) for c in counts)
    return nodes, edges
