"""Batches built from a stored dataset's tensors by index arithmetic.

An in-memory dataset keeps every graph's tensors concatenated, with per-graph boundaries
(``slices``). PyTorch Geometric's loader makes one ``Data`` per graph from them and then
concatenates those again (``Batch.from_data_list``); for many small graphs that costs more
than the model. :class:`IndexBatcher` gathers a batch's ranges directly: one index per
attribute, the node offsets added to ``edge_index``, ``batch`` and ``ptr`` from the node
counts. The batch is the one ``Batch.from_data_list([dataset[i] for i in indices])`` makes:
the same tensors, dtypes and attribute order, and the same bookkeeping, so that
``batch.to_data_list()`` gives the graphs back.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Batch, Data


class Unbatchable(ValueError):
    """A dataset whose graphs this batcher cannot assemble (the per-graph path serves it)."""


def _increment(key: str) -> bool:
    """Whether ``Data`` shifts the attribute by the node count when batching (its
    ``__inc__``: ``edge_index``, ``face`` and any other ``*index*`` attribute)."""
    return "index" in key or key == "face"


def assemble_batch(
    template: Batch, nodes: np.ndarray, parts: Iterable[tuple[str, Tensor, int, np.ndarray]]
) -> Batch:
    """The batch of graphs with ``nodes`` nodes each, from ``parts``: (attribute, the graphs'
    values concatenated along ``dim``, ``dim``, each graph's size along it), in order. As
    ``Batch.from_data_list`` makes it: ``*index*`` attributes shifted by the nodes of the
    graphs before (in place), ``batch``, ``ptr`` and the bookkeeping ``to_data_list`` reads.
    ``template``: an empty batch of the right class, copied (PyG makes the class anew, slowly,
    for every ``Batch(_base_cls=...)``)."""
    k = len(nodes)
    node_offsets = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(nodes, out=node_offsets[1:])
    ptr = torch.from_numpy(node_offsets)
    zeros = torch.zeros(k, dtype=torch.long)
    batch = copy.copy(template)
    slice_dict, inc_dict = {}, {}
    for key, out, dim, sizes in parts:
        if _increment(key):
            shape = [1] * out.dim()
            shape[dim] = -1  # along the dimension the graphs are concatenated in
            out += torch.from_numpy(np.repeat(node_offsets[:-1], sizes)).view(shape)
            inc_dict[key] = ptr[:-1]
        else:
            inc_dict[key] = zeros
        offsets = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        batch[key] = out
        slice_dict[key] = torch.from_numpy(offsets)
    batch.batch = torch.from_numpy(np.repeat(np.arange(k, dtype=np.int64), nodes))
    batch.ptr = ptr
    batch._num_graphs = k
    batch._slice_dict = slice_dict
    batch._inc_dict = inc_dict
    return batch


def _gather(bounds: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions of the rows of the graphs ``index``, in order; each graph's row count;
    their offsets in the batch, starting at 0). Index arithmetic on a few thousand numbers is
    quicker in NumPy than in torch, whose every operation costs microseconds to dispatch."""
    starts = bounds[index]
    counts = bounds[index + 1] - starts
    offsets = np.zeros(len(index) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    positions = np.repeat(starts - offsets[:-1], counts)
    positions += np.arange(offsets[-1], dtype=np.int64)
    return positions, counts, offsets


def _select(value: Tensor, dim: int, positions: np.ndarray) -> Tensor:
    """``value.index_select(dim, positions)``; along the last of several dimensions (an
    ``edge_index``) as one gather over the flat storage, 3x quicker than the strided one."""
    if dim == 0 or dim != value.dim() - 1 or not value.is_contiguous():
        return value.index_select(dim, torch.from_numpy(positions))
    length = value.size(dim)
    rows = value.numel() // length
    flat = (np.arange(0, rows * length, length)[:, None] + positions).reshape(-1)
    out = value.view(-1).index_select(0, torch.from_numpy(flat))
    return out.view(*value.shape[:-1], len(positions))


class IndexBatcher:
    """Assembles batches of an in-memory dataset (``_data`` and ``slices``, as PyTorch
    Geometric's ``InMemoryDataset`` holds them) by gathering index ranges.

    Raises :class:`Unbatchable` for what it does not cover: a per-graph ``transform``,
    attributes that are not dense tensors, or graphs without ``x``.
    """

    def __init__(self, dataset: Any):
        data, slices = getattr(dataset, "_data", None), getattr(dataset, "slices", None)
        if not isinstance(data, Data) or not isinstance(slices, dict) or not slices:
            raise Unbatchable("not an in-memory dataset of Data")
        if getattr(dataset, "transform", None) is not None:
            raise Unbatchable("a per-graph transform")
        if "x" not in slices:
            raise Unbatchable("graphs without x")
        self.base_cls = type(data)
        # Attributes with the same boundaries (every node-level one shares the nodes', every
        # graph-level one has one row per graph) share the positions gathered for a batch.
        self.bounds: list[np.ndarray | None] = []  # distinct boundaries; None: one per graph
        self.attributes: list[tuple[str, Tensor, int, int, bool]] = []
        for key, bounds in slices.items():  # the order a graph of the dataset lists them in
            value = data[key]
            if not isinstance(value, Tensor) or value.is_sparse or value.is_nested:
                raise Unbatchable(f"attribute {key!r} is not a dense tensor")
            if "batch" in key:
                raise Unbatchable(f"attribute {key!r} counts graphs")
            cat_dim = data.__cat_dim__(key, value)
            if cat_dim is None or not isinstance(cat_dim, int):
                raise Unbatchable(f"attribute {key!r} is stacked, not concatenated")
            per_graph = len(bounds) == len(slices["x"]) and torch.equal(
                bounds, torch.arange(len(bounds), device=bounds.device)
            )
            group = self._group(None if per_graph else bounds)
            self.attributes.append((key, value, group, cat_dim % value.dim(), _increment(key)))
        self.nodes = self._group(slices["x"])
        self.num_graphs = len(slices["x"]) - 1
        # One value per graph (labels, graph-level targets): stacked by dtype, so that a batch
        # takes them in one selection per dtype; each is then a row of the result.
        self.rows: dict[str, tuple[torch.dtype, int]] = {}
        columns: dict[torch.dtype, list[Tensor]] = {}
        for key, value, group, _, incremented in self.attributes:
            if self.bounds[group] is None and value.dim() == 1 and not incremented:
                self.rows[key] = (value.dtype, len(columns.setdefault(value.dtype, [])))
                columns[value.dtype].append(value)
        self.stacked = {dtype: torch.stack(values) for dtype, values in columns.items()}
        self.template = Batch(_base_cls=self.base_cls)  # copied: its class is made once

    def _group(self, bounds: Tensor | None) -> int:
        array = None if bounds is None else bounds.numpy()
        for i, known in enumerate(self.bounds):
            if known is array or (
                known is not None and array is not None and np.array_equal(known, array)
            ):
                return i
        self.bounds.append(array)
        return len(self.bounds) - 1

    def __call__(self, indices: Sequence[int] | Tensor) -> Batch:
        """The batch of the dataset's graphs ``indices``, in that order."""
        index = torch.as_tensor(indices, dtype=torch.long)
        if index.dim() != 1 or len(index) == 0:
            raise ValueError("indices must be a non-empty sequence of graph indices")
        k, where = len(index), index.numpy()
        gathered = [
            (where, np.ones(k, dtype=np.int64)) if bounds is None else _gather(bounds, where)
            for bounds in self.bounds
        ]
        per_graph = {dtype: values.index_select(1, index) for dtype, values in self.stacked.items()}
        parts = []
        for key, value, group, cat_dim, _ in self.attributes:
            positions, counts = gathered[group][:2]
            if key in self.rows:
                dtype, row = self.rows[key]
                parts.append((key, per_graph[dtype][row], cat_dim, counts))
            else:
                parts.append((key, _select(value, cat_dim, positions), cat_dim, counts))
        return assemble_batch(self.template, gathered[self.nodes][1], parts)
