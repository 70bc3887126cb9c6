"""Datasets from the config: the embedded causal sets or the user's own, checked, and the
per-graph attributes (labels, weights) that samplers and the model's dimensions are read from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset, Subset
from torch_geometric.data import Data, InMemoryDataset

from ..config import resolve
from ..errors import DataError
from ..physics import NUM_FEATURES
from .causal_sets import CausalSetDataset


def dataset_from_config(
    data_cfg: Any, *, progress: bool = True, world_size: int = 1
) -> Dataset | list[Data]:
    """Build (or load from cache) the dataset a ``data:`` config section describes."""
    if data_cfg.files:
        from .files import FileDataset

        return FileDataset(data_cfg, progress=progress, world_size=world_size)
    if data_cfg.dataset is None:
        return CausalSetDataset(
            data_cfg.root,
            num_graphs=data_cfg.num_graphs,
            num_points=data_cfg.num_points,
            dimensions=data_cfg.dimensions,
            seed=data_cfg.seed,
            progress=progress,
            world_size=world_size,
        )
    factory = resolve(data_cfg.dataset, key="data.dataset")
    try:
        dataset = factory(**data_cfg.dataset_kwargs)
    except TypeError as e:
        raise DataError(f"data.dataset: calling {data_cfg.dataset} failed: {e}") from e
    check_dataset(dataset, source=f"data.dataset ({data_cfg.dataset})")
    return dataset


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


def dataset_dimensions(dataset: Dataset | list[Data]) -> tuple[int, int]:
    """(number of node features, number of classes) of a graph classification dataset."""
    if isinstance(dataset, CausalSetDataset):
        return NUM_FEATURES, len(dataset.dimensions)
    if isinstance(dataset, InMemoryDataset):
        return dataset.num_node_features, int(dataset._data.y.max()) + 1
    return dataset[0].x.shape[1], max(int(g.y.max()) for g in dataset) + 1


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
        raise DataError(f"every training graph needs attribute {name!r}: {e}") from None
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
    if isinstance(base, InMemoryDataset):
        if name not in base._data:
            return None
        values, bounds = base._data[name], base.slices[name]
        if indices is None:
            return values
        if len(values) == len(base) and bool((bounds.diff() == 1).all()):
            return values[indices]  # one row per graph: index it directly
        return torch.cat([values[bounds[i] : bounds[i + 1]] for i in indices])
    if isinstance(base, list):
        items = base if indices is None else [base[i] for i in indices]
        return torch.cat([torch.as_tensor(g[name]).reshape(-1, *g[name].shape[1:]) for g in items])
    return None
