"""What a prediction reads: the run's data source or new files, as graphs that say where they
came from.

New files (``--files``) are read by the same readers and ``data.*`` options as training, into
the disk storage (read a batch at a time: any number of causal sets in the memory of a few
batches) unless ``data.storage`` is given. Their labels are optional: a ``data.targets`` array
that some file lacks is left out (and its task only predicted), while the arrays the model
itself reads (the causal or link matrix, ``data.node_features``, the targets named in
``model.graph_features``) must be in every file.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
from torch.utils.data import Dataset
from torch_geometric.data import Data
from torch_geometric.data.data import BaseData

from ..config import Config, DataConfig
from ..data import in_memory_values, split_dataset
from ..data.sources.datasets import check_dataset
from ..data.sources.stores import Samples, find_files, open_store
from ..errors import ConfigError, DataError
from ..logs import get_logger

SPLITS = ("all", "train", "val", "test")


def given_graphs(inputs: Any) -> list[Data] | None:
    """``inputs`` as graphs to predict on, when they are graphs (one ``Data`` or a list of
    them, as users hold them) rather than paths; None for paths. Checked as ``data.dataset``'s
    graphs are."""
    if isinstance(inputs, BaseData):
        inputs = [inputs]
    if not isinstance(inputs, (list, tuple)) or not inputs:
        return None
    kinds = {isinstance(g, BaseData) for g in inputs}
    if kinds == {False}:
        return None
    if kinds != {True}:
        raise DataError("qg.predict: give paths of files or torch_geometric Data objects, not both")
    check_dataset(list(inputs), source="qg.predict's graphs")
    return list(inputs)


def input_overrides(files: Sequence[str] | None, overrides: Sequence[str]) -> list[str]:
    """The overrides that make the run's config read ``files``: ``data.files``, and the disk
    storage unless the overrides choose one."""
    overrides = list(overrides)
    if not files:
        return overrides
    chosen = any(o.partition("=")[0].strip() == "data.storage" for o in overrides)
    extra = [f"data.files={json.dumps([str(f) for f in files])}"]
    return overrides + extra + ([] if chosen else ["data.storage=disk"])


def with_available_targets(config: Config) -> Config:
    """``config`` reading only the ``data.targets`` every file of ``data.files`` holds (the
    others are labels the new data may lack); those ``model.graph_features`` read stay, and a
    file without them is refused by the reader, naming it and the array."""
    data = config.data
    if not data.files or data.reader is not None:
        return config
    needed = {k: v for k, v in data.targets.items() if k in config.model.graph_features}
    probe = dataclasses.replace(data, targets=needed)
    held: set[str] | None = None
    for path in find_files(data.files):
        with open_store(path) as store:
            arrays = Samples(store, path, probe).arrays
        held = arrays if held is None else held & arrays
    kept = {k: v for k, v in data.targets.items() if k in needed or v in (held or set())}
    dropped = sorted(set(data.targets) - set(kept))
    if dropped:
        get_logger().info(
            "data.targets: %s not in every file: predicted without labels",
            ", ".join(f"{k} ({data.targets[k]})" for k in dropped),
        )
    return dataclasses.replace(config, data=dataclasses.replace(data, targets=kept))


def select_split(dataset: Dataset, data: DataConfig, split: str) -> Dataset:
    """``split`` of ``dataset`` as training splits it (``data.split`` with ``data.seed`` of the
    ``data:`` section ``data``), or all of it."""
    if split not in SPLITS:
        raise ConfigError(f"--split: expected one of {', '.join(SPLITS)}, found {split!r}")
    if split == "all":
        return dataset
    train, val, test = split_dataset(dataset, data.split, data.seed)
    return {"train": train, "val": val, "test": test}[split]


def elements(dataset: Dataset, graph: np.ndarray) -> np.ndarray:
    """Each node row's element (``graph``: the row's graph, sorted): as its file numbers it
    when the graphs recorded it, else its position in its graph."""
    recorded = in_memory_values(dataset, "source_element")
    if recorded is not None and len(recorded) == len(graph):
        return recorded.numpy()
    first = np.searchsorted(graph, graph)  # the first row of each row's graph
    return np.arange(len(graph)) - first


def pair_elements(
    dataset: Dataset, graph: np.ndarray, pair: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each pair row's two elements (``graph``: the row's graph, sorted; ``pair``: ``[P, 2]`` node
    positions in it): as its file numbers them when the graphs recorded it, else the
    positions."""
    pair = np.asarray(pair).reshape(-1, 2).copy()
    graphs, starts = np.unique(graph, return_index=True)  # sorted: each graph's rows in a run
    ends = np.r_[starts[1:], len(graph)]
    for g, start, end in zip(graphs.tolist(), starts, ends, strict=True):
        recorded = getattr(dataset[g], "source_element", None)
        if recorded is not None:
            pair[start:end] = recorded.numpy()[pair[start:end]]
    return pair[:, 0], pair[:, 1]


def labelled(dataset: Dataset, names: Sequence[str]) -> set[str]:
    """Which of the target attributes ``names`` the graphs hold (read from the first)."""
    if len(dataset) == 0:
        return set()
    first = dataset[0]
    return {n for n in names if n in first}
