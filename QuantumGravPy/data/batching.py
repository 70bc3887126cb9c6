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
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data


class Unbatchable(ValueError):
    """A dataset whose graphs this batcher cannot assemble (the per-graph path serves it)."""


def _increment(key: str) -> bool:
    """Whether ``Data`` shifts the attribute by the node count when batching (its
    ``__inc__``: ``edge_index``, ``face`` and any other ``*index*`` attribute)."""
    return "index" in key or key == "face"


def _gather(bounds: Tensor, index: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(positions of the rows of the graphs ``index``, in order; each graph's row count;
    their offsets in the batch, starting at 0)."""
    starts = bounds[index]
    counts = bounds[index + 1] - starts
    offsets = torch.zeros(len(index) + 1, dtype=torch.long)
    torch.cumsum(counts, 0, out=offsets[1:])
    total = int(offsets[-1])
    shift = torch.repeat_interleave(starts - offsets[:-1], counts, output_size=total)
    return shift.add_(torch.arange(total)), counts, offsets


def _select(value: Tensor, dim: int, positions: Tensor) -> Tensor:
    """``value.index_select(dim, positions)``; along the last of several dimensions (an
    ``edge_index``) as one gather over the flat storage, 3x quicker than the strided one."""
    if dim == 0 or dim != value.dim() - 1 or not value.is_contiguous():
        return value.index_select(dim, positions)
    length = value.size(dim)
    rows = value.numel() // length
    starts = torch.arange(0, rows * length, length).unsqueeze(1)
    flat = value.view(-1).index_select(0, (starts + positions).view(-1))
    return flat.view(*value.shape[:-1], len(positions))


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
        self.bounds: list[Tensor | None] = []  # distinct boundaries; None: one row per graph
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
        for i, known in enumerate(self.bounds):
            if known is bounds or (
                known is not None and bounds is not None and torch.equal(known, bounds)
            ):
                return i
        self.bounds.append(bounds)
        return len(self.bounds) - 1

    def __call__(self, indices: Sequence[int] | Tensor) -> Batch:
        """The batch of the dataset's graphs ``indices``, in that order."""
        index = torch.as_tensor(indices, dtype=torch.long)
        if index.dim() != 1 or len(index) == 0:
            raise ValueError("indices must be a non-empty sequence of graph indices")
        ones = torch.ones(len(index), dtype=torch.long)
        offsets_of_graphs = torch.arange(len(index) + 1)
        gathered = [
            (index, ones, offsets_of_graphs) if bounds is None else _gather(bounds, index)
            for bounds in self.bounds
        ]
        _, nodes, node_offsets = gathered[self.nodes]
        batch = copy.copy(self.template)
        slice_dict, inc_dict = {}, {}
        zeros = torch.zeros(len(index), dtype=torch.long)
        per_graph = {dtype: values.index_select(1, index) for dtype, values in self.stacked.items()}
        for key, value, group, cat_dim, incremented in self.attributes:
            positions, counts, offsets = gathered[group]
            if key in self.rows:
                dtype, row = self.rows[key]
                out = per_graph[dtype][row]
            else:
                out = _select(value, cat_dim, positions)
            if incremented:
                shift = node_offsets[:-1]
                shape = [1] * out.dim()
                shape[cat_dim] = -1  # along the dimension the graphs are concatenated in
                out += torch.repeat_interleave(shift, counts, output_size=out.size(cat_dim)).view(
                    shape
                )
                inc_dict[key] = shift
            else:
                inc_dict[key] = zeros
            batch[key] = out
            slice_dict[key] = offsets
        batch.batch = torch.repeat_interleave(
            offsets_of_graphs[:-1], nodes, output_size=int(node_offsets[-1])
        )
        batch.ptr = node_offsets
        batch._num_graphs = len(index)
        batch._slice_dict = slice_dict
        batch._inc_dict = inc_dict
        return batch
