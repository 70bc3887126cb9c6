"""Batches built from a stored dataset's tensors by index arithmetic.

An in-memory dataset keeps every graph's tensors concatenated, with per-graph boundaries
(``slices``). PyTorch Geometric's loader makes one ``Data`` per graph from them and then
concatenates those again (``Batch.from_data_list``); for many small graphs that costs more
than the model. :class:`IndexBatcher` gathers a batch's ranges directly: one index per
attribute, the node offsets added to ``edge_index``, ``batch`` and ``ptr`` from the node
counts. The batch is the one ``Batch.from_data_list([dataset[i] for i in indices])`` makes:
the same tensors, dtypes and attribute order, and the same bookkeeping, so that
``batch.to_data_list()`` gives the graphs back.

A batch of 32 small graphs is a few dozen array operations on a few thousand numbers, so the
cost is the fixed price of each operation: the arithmetic is done in NumPy (about a
microsecond an operation, a torch operation several), each graph's sizes and offsets are
worked out once for all the attributes that share them, and the finished tensors are put in
the batch's store in one update.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

from ..compat import pyg


class Unbatchable(ValueError):
    """A dataset whose graphs this batcher cannot assemble (the per-graph path serves it)."""


def _increment(key: str) -> bool:
    """Whether ``Data`` shifts the attribute by the node count when batching (its
    ``__inc__``: ``edge_index``, ``face`` and any other ``*index*`` attribute)."""
    return "index" in key or key == "face"


class Rows(NamedTuple):
    """How a batch's graphs divide one kind of attribute's rows: each graph's count, where
    each starts in the batch (and the total, last), and those offsets as the tensor that the
    batch's bookkeeping (``_slice_dict``) holds."""

    counts: np.ndarray
    offsets: np.ndarray
    slices: Tensor

    @classmethod
    def of(cls, counts: np.ndarray) -> Rows:
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return cls(counts, offsets, torch.from_numpy(offsets))


def assemble_batch(
    template: Batch, nodes: Rows, parts: Iterable[tuple[str, Tensor, int, Rows]]
) -> Batch:
    """The batch of graphs whose nodes ``nodes`` counts, from ``parts``: (attribute, the
    graphs' values concatenated along ``dim``, ``dim``, how the graphs divide it), in order.
    As ``Batch.from_data_list`` makes it: ``*index*`` attributes shifted by the nodes of the
    graphs before (in place), ``batch``, ``ptr`` and the bookkeeping ``to_data_list`` reads.
    ``template``: an empty batch of the right class, copied (PyG makes the class anew, slowly,
    for every empty batch, :func:`~QuantumGravPy.compat.pyg.empty_batch`)."""
    k = len(nodes.counts)
    ptr = nodes.slices
    starts, zeros = ptr[:-1], _constant(k).zeros
    values, slice_dict, inc_dict = {}, {}, {}
    shifts: dict[int, Tensor] = {}  # by the Rows they follow: one repeat for all that share it
    for key, out, dim, where in parts:
        if _increment(key):
            shift = shifts.get(id(where))
            if shift is None:
                shift = torch.from_numpy(np.repeat(nodes.offsets[:-1], where.counts))
                shifts[id(where)] = shift
            if out.dim() > 1:
                shape = [1] * out.dim()
                shape[dim] = -1  # along the dimension the graphs are concatenated in
                shift = shift.view(shape)
            out += shift
            inc_dict[key] = starts
        else:
            inc_dict[key] = zeros
        values[key] = out
        slice_dict[key] = where.slices
    values["batch"] = torch.from_numpy(np.repeat(_constant(k).arange, nodes.counts))
    values["ptr"] = ptr
    return _finish(template, values, slice_dict, inc_dict)


class _Constants(NamedTuple):
    """What every batch of k graphs has alike (read, never written, by the batches)."""

    arange: np.ndarray
    zeros: Tensor  # the increments of attributes that are not shifted
    one: Rows  # one row per graph


@functools.lru_cache(maxsize=16)
def _constant(k: int) -> _Constants:
    return _Constants(
        np.arange(k, dtype=np.int64),
        torch.zeros(k, dtype=torch.long),
        Rows.of(np.ones(k, dtype=np.int64)),
    )


def _finish(template: Batch, values: dict, slice_dict: dict, inc_dict: dict) -> Batch:
    # The store's own dictionary, in one update: its item assignment clears caches an empty
    # batch does not have, at a few microseconds an attribute.
    return pyg.fill(template, values, slice_dict, inc_dict, len(values["ptr"]) - 1)


def ranges(first: np.ndarray, counts: np.ndarray, offsets: np.ndarray | None = None) -> np.ndarray:
    """The positions ``first[i]``, ..., ``first[i] + counts[i] - 1`` of every ``i``, in order
    (``offsets``: the exclusive cumulative sum of ``counts`` with the total last, if known)."""
    if offsets is None:
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
    positions = np.repeat(first - offsets[:-1], counts)
    positions += np.arange(offsets[-1], dtype=np.int64)
    return positions


def _span(bounds: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, Rows]:
    """The first stored row of each of the graphs ``index``, and how they divide the batch."""
    first = bounds[index]
    return first, Rows.of(bounds[index + 1] - first)


def _positions(bounds: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, Rows]:
    """The positions of the rows of the graphs ``index``, in order, and how they divide."""
    first, where = _span(bounds, index)
    return ranges(first, where.counts, where.offsets), where


class _Stored(NamedTuple):
    """One attribute of the dataset: its values (a NumPy view where NumPy has the dtype),
    which rows group it follows, and the dimension the graphs are concatenated in."""

    key: str
    values: np.ndarray | Tensor
    group: int
    dim: int
    row: tuple[torch.dtype, int] | None  # one value per graph: its row of the stacked values


def _take(values: np.ndarray | Tensor, dim: int, positions: np.ndarray) -> Tensor:
    if isinstance(values, Tensor):  # a dtype NumPy lacks (bfloat16)
        return values.index_select(dim, torch.from_numpy(positions))
    return torch.from_numpy(values.take(positions, axis=dim))


_ON_DEVICE: dict[int, dict[torch.device, dict[str, Tensor]]] = {}  # by id(data), while it lives


def on_device(data: Data, device: torch.device) -> dict[str, Tensor]:
    """Every tensor of ``data`` (a dataset's concatenated graphs) on ``device``, copied once
    for all the loaders that batch it there, and freed with ``data``."""
    copies = _ON_DEVICE.get(id(data))
    if copies is None:
        copies = _ON_DEVICE[id(data)] = {}
        weakref.finalize(data, _ON_DEVICE.pop, id(data), None)
    if device not in copies:
        copies[device] = {key: value.to(device) for key, value in data.to_dict().items()}
    return copies[device]


def _numpy(value: Tensor) -> np.ndarray | Tensor:
    """The values as a NumPy array sharing their memory, or the tensor itself where NumPy has
    no such dtype."""
    try:
        return value.numpy()
    except TypeError:
        return value


class IndexBatcher:
    """Assembles batches of an in-memory dataset (``_data`` and ``slices``, as PyTorch
    Geometric's ``InMemoryDataset`` holds them) by gathering index ranges.

    ``device``: where the batches are made; the dataset's tensors are copied there once
    (:func:`on_device`) and each batch is gathered there with torch operations, so that only
    the batch's few integers per graph (which graphs, their sizes and offsets, in one copy)
    cross from the host. None: on the host, with NumPy (quicker for small arrays).

    Raises :class:`Unbatchable` for what it does not cover: a per-graph ``transform``,
    attributes that are not dense tensors, or graphs without ``x``.
    """

    def __init__(self, dataset: Any, device: torch.device | None = None):
        data, slices = pyg.storage(dataset) or (None, None)
        if not slices:
            raise Unbatchable("not an in-memory dataset of Data")
        if getattr(dataset, "transform", None) is not None:
            raise Unbatchable("a per-graph transform")
        if "x" not in slices:
            raise Unbatchable("graphs without x")
        # Attributes with the same boundaries (every node-level one shares the nodes', every
        # graph-level one has one row per graph) share the positions gathered for a batch.
        self.bounds: list[np.ndarray | None] = []  # distinct boundaries; None: one per graph
        self.nodes = self._group(slices["x"])
        self.stored: list[_Stored] = []
        # One value per graph (labels, graph-level targets): stacked by dtype, so that a batch
        # takes them in one selection per dtype; each is then a row of the result.
        columns: dict[torch.dtype, list[Tensor]] = {}
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
            row = None
            if per_graph and value.dim() == 1 and not _increment(key):
                row = (value.dtype, len(columns.setdefault(value.dtype, [])))
                columns[value.dtype].append(value)
            self.stored.append(_Stored(key, _numpy(value), group, cat_dim % value.dim(), row))
        self.stacked = {dtype: _numpy(torch.stack(values)) for dtype, values in columns.items()}
        self.template = pyg.empty_batch(type(data))  # copied: its class is made once
        self.device = None if device is None else torch.device(device)
        if self.device is not None:
            moved = on_device(data, self.device)
            self.stored = [stored._replace(values=moved[stored.key]) for stored in self.stored]
            self.stacked = {
                dtype: torch.stack(
                    [moved[key] for key, *_, row in self.stored if row and row[0] == dtype]
                )
                for dtype in columns
            }

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
        index = np.asarray(indices, dtype=np.int64)
        if index.ndim != 1 or len(index) == 0:
            raise ValueError("indices must be a non-empty sequence of graph indices")
        if self.device is not None:
            return self._on_device(index)
        one = _constant(len(index)).one
        gathered = [
            (index, one) if bounds is None else _positions(bounds, index) for bounds in self.bounds
        ]
        per_graph = {dtype: _take(values, 1, index) for dtype, values in self.stacked.items()}
        parts = []
        for key, values, group, dim, row in self.stored:
            positions, where = gathered[group]
            if row is not None:
                parts.append((key, per_graph[row[0]][row[1]], dim, where))
            else:
                parts.append((key, _take(values, dim, positions), dim, where))
        return assemble_batch(self.template, gathered[self.nodes][1], parts)

    def many(self, batches: list[np.ndarray]) -> list[Batch]:
        """The batches of several arrays of indices (as :class:`~.rows.DiskBatcher` makes
        them, whose rows it reads in one query)."""
        return [self(index) for index in batches]

    def _on_device(self, index: np.ndarray) -> Batch:
        """The batch gathered on ``self.device``: each graph's sizes and offsets are worked out
        on the host (a few numbers per graph), moved in one copy, and expanded there."""
        k, constants = len(index), _constant(len(index))
        spans = []  # per group: (first row - its offset in the batch, Rows), None: per graph
        for bounds in self.bounds:
            if bounds is None:
                spans.append(None)
            else:
                first, rows = _span(bounds, index)
                spans.append((first - rows.offsets[:-1], rows))
        nodes = constants.one if spans[self.nodes] is None else spans[self.nodes][1]
        host = [index, nodes.offsets]
        for span in spans:
            if span is not None:
                host += [span[0], span[1].counts]
        small = torch.from_numpy(np.concatenate(host)).to(self.device, non_blocking=True)
        index_d, ptr = small[:k], small[k : 2 * k + 1]
        longest = max([k] + [int(span[1].offsets[-1]) for span in spans if span is not None])
        arange = torch.arange(longest, device=self.device)
        positions, counts, at = [], [], 2 * k + 1
        for span in spans:
            if span is None:
                positions.append(index_d)
                counts.append(None)
                continue
            shift, count = small[at : at + k], small[at + k : at + 2 * k]
            at += 2 * k
            total = int(span[1].offsets[-1])
            positions.append(
                torch.repeat_interleave(shift, count, output_size=total) + arange[:total]
            )
            counts.append(count)
        per_graph = {
            dtype: values.index_select(1, index_d) for dtype, values in self.stacked.items()
        }
        one, starts, zeros = constants.one, nodes.slices[:-1], constants.zeros
        values, slice_dict, inc_dict = {}, {}, {}
        for key, stored, group, dim, row in self.stored:
            where = one if spans[group] is None else spans[group][1]
            if row is not None:
                out = per_graph[row[0]][row[1]]
            else:
                out = stored.index_select(dim, positions[group])
            if _increment(key):
                shift = ptr[:-1]
                if counts[group] is not None:
                    total = int(where.offsets[-1])
                    shift = torch.repeat_interleave(shift, counts[group], output_size=total)
                shape = [1] * out.dim()
                shape[dim] = -1
                out = out + shift.view(shape)
                inc_dict[key] = starts
            else:
                inc_dict[key] = zeros
            values[key] = out
            slice_dict[key] = where.slices
        if counts[self.nodes] is None:  # one node per graph
            values["batch"] = arange[:k].clone()
        else:
            values["batch"] = torch.repeat_interleave(
                arange[:k], counts[self.nodes], output_size=int(nodes.offsets[-1])
            )
        values["ptr"] = ptr
        return _finish(self.template, values, slice_dict, inc_dict)
