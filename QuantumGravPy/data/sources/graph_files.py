"""General graphs from files: the graphs layout of HDF5 files and Zarr stores, and saved PyG
graphs (``.pt``), read as they are.

In an array file each graph is a group (``graph_1``, ``graph_2``, ... : a name and a number,
in the order of the numbers) holding ``edge_index`` (2 x E, integers), ``x`` (nodes x
features) and any other arrays: ``edge_attr`` (E x D), targets per graph or per node, a graph's
feature vector (stored 1 x F, as in a ``Data``). Every array of the first group becomes the
attribute of its name on every graph; a 0-dimensional array is a value of shape [1]. Floating
point numbers are read as float32 (the model's type), integers and booleans as int64.

A file of saved graphs is read graph by graph as saved. Either way ``data.targets`` adds
attributes under other names (``{y: label}``), ``data.node_features`` makes ``x`` from per-node
arrays, and every graph is checked: ``edge_index`` two rows of node numbers below the graph's
number of nodes, ``x`` one row per node, ``edge_attr`` one row per edge, floating-point numbers
(features and targets) finite.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from ...errors import DataError
from .stores import EDGES, Samples


def numbers(array: np.ndarray, where: str) -> torch.Tensor:
    """An array of a file as a tensor: floats as float32 (checked finite), integers and
    booleans as int64."""
    if array.dtype.kind == "f":
        if not np.isfinite(array).all():
            raise DataError(f"{where} holds NaN or infinite values")
        return torch.from_numpy(array.astype(np.float32))
    if array.dtype.kind in "biu":
        return torch.from_numpy(array.astype(np.int64))
    raise DataError(f"{where}: expected numbers, found {array.dtype}")


def read_graph(samples: Samples, index: int) -> Data:
    """Graph ``index`` of a file in the graphs layout, with ``data.targets`` and
    ``data.node_features`` applied, checked."""
    cfg = samples.cfg
    where = f"{samples.path}: {samples.where(index)}"
    if samples.format.holds_graphs:
        attributes: dict[str, Any] = samples.format.graph(samples.store, index)
        missing = sorted(samples.arrays - set(attributes))
        if missing:
            raise DataError(
                f"{where} has no {missing[0]!r}, which the first graph has: every graph needs "
                "the same attributes"
            )
        for name, value in attributes.items():  # saved as they are: checked as arrays are
            if torch.is_tensor(value) and value.is_floating_point():
                if not bool(torch.isfinite(value).all()):
                    raise DataError(f"{where}: {name!r} holds NaN or infinite values")
    else:
        attributes = {}
        for name in sorted(samples.arrays):
            value = numbers(samples.read(index, name), f"{where}: {name!r}")
            attributes[name] = value.reshape(1) if value.dim() == 0 else value
    for attribute, name in cfg.targets.items():
        attributes[attribute] = attributes[name]
    if cfg.node_features:
        attributes["x"] = _features(attributes, cfg.node_features, where)
    elif attributes["x"].dim() == 1:
        attributes["x"] = attributes["x"].reshape(-1, 1)
    _check(attributes, where)
    return Data(**attributes)


def _features(attributes: dict[str, Any], names: tuple[str, ...], where: str) -> torch.Tensor:
    """``x`` from the per-node arrays ``names`` (data.node_features), as columns."""
    columns = [torch.as_tensor(attributes[name]).float() for name in names]
    n = len(columns[0])
    for name, column in zip(names, columns, strict=True):
        if column.dim() == 0 or len(column) != n:
            raise DataError(
                f"{where}: {name!r} (data.node_features) holds {column.numel()} values; "
                f"{names[0]!r} has {n} rows"
            )
    return torch.cat([c.reshape(n, -1) for c in columns], dim=1)


def _check(attributes: dict[str, Any], where: str) -> None:
    x, edges = attributes["x"], attributes[EDGES]
    if not isinstance(edges, torch.Tensor) or edges.dim() != 2 or edges.shape[0] != 2:
        shape = list(edges.shape) if isinstance(edges, torch.Tensor) else type(edges).__name__
        raise DataError(f"{where}: {EDGES!r} should be 2 x E (one column per edge), found {shape}")
    if edges.is_floating_point() or edges.dtype == torch.bool:
        raise DataError(
            f"{where}: {EDGES!r} should hold node numbers (integers), found {edges.dtype}"
        )
    n = x.shape[0]
    if edges.numel() and (int(edges.min()) < 0 or int(edges.max()) >= n):
        bad = int(edges.max()) if int(edges.max()) >= n else int(edges.min())
        raise DataError(
            f"{where}: {EDGES!r} names node {bad}, but the graph has {n} nodes (the rows of x)"
        )
    edge_attr = attributes.get("edge_attr")
    if isinstance(edge_attr, torch.Tensor) and edge_attr.shape[0] != edges.shape[1]:
        raise DataError(
            f"{where}: 'edge_attr' has {edge_attr.shape[0]} rows for {edges.shape[1]} edges "
            "(one row per column of edge_index)"
        )
