"""Where each graph of a dataset came from: the file and its sample (and group), or its
position among the generated ones. File graphs record their file and sample as they are
prepared; prediction tables and a run's test predictions name them from that."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Subset

from ...config import DataConfig
from .datasets import in_memory_values
from .stores import Samples, find_files, open_store


def dataset_positions(dataset: Dataset) -> np.ndarray:
    """Each graph's position in the dataset under any Subsets."""
    positions = None
    while isinstance(dataset, Subset):
        outer = np.asarray(list(dataset.indices), dtype=np.int64)
        positions = outer if positions is None else outer[positions]
        dataset = dataset.dataset
    return np.arange(len(dataset)) if positions is None else positions


def provenance(data: DataConfig, dataset: Dataset) -> dict[str, np.ndarray]:
    """Where each graph of ``dataset`` (in its order) came from: ``source`` (the file, or
    ``generated`` / the ``data.dataset`` function), ``index`` (the sample's position in its
    file, or the graph's in the generated data) and, for files with groups, ``group``; ``data``:
    the ``data:`` section the graphs were made by."""
    if not data.files or data.dataset is not None:
        name = "generated" if data.dataset is None else str(data.dataset)
        index = dataset_positions(dataset)
        return {"source": np.full(len(index), name), "index": index}
    files = find_files(data.files)
    number = _values(dataset, "source_file")
    sample = _values(dataset, "source_sample")
    columns = {"source": np.asarray([str(p) for p in files])[number], "index": sample}
    groups = []
    for path in files:
        with open_store(path) as store:
            found = Samples(store, path, dataclasses.replace(data, targets={}))
            groups.append(found.groups)  # None: stacked arrays, or saved graphs
    if any(g is not None for g in groups):
        columns["group"] = np.asarray(
            [
                groups[f][s] if groups[f] is not None else ""
                for f, s in zip(number.tolist(), sample.tolist(), strict=True)
            ]
        )
    return columns


def _values(dataset: Dataset, name: str) -> np.ndarray:
    values = in_memory_values(dataset, name)
    if values is None:  # a dataset read graph by graph
        values = torch.cat([torch.as_tensor(g[name]).reshape(-1) for g in dataset])
    return values.reshape(-1).numpy()


def with_sources(
    predictions: dict[str, dict[str, Any]], sources: dict[str, np.ndarray]
) -> dict[str, dict[str, Any]]:
    """Each task's rows of ``predictions`` with ``source``, ``index`` (and ``group``) of the
    row's graph from :func:`provenance`'s ``sources``: the file and sample it was read from (as
    ``qg predict``'s table names them), or its position among the generated graphs."""
    out = {}
    for task, parts in predictions.items():
        graph = np.asarray(parts["graph"]).astype(np.int64)
        out[task] = {**parts, **{key: values[graph] for key, values in sources.items()}}
    return out
