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

import itertools
import math
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

from ...compat import pyg
from .assembly import Unbatchable, batch_constants, finish_batch, ranges, shifted
from .chunks import (
    Block,
    Chunk,
    Cut,
    Rows,
    Span,
    block_counts,
    block_order,
    dtype_of,
    first_nodes,
    staging,
    take_into,
)


class _Stored(NamedTuple):
    """One attribute of the dataset: its values (a NumPy view where NumPy has the dtype),
    which rows group it follows, and the dimension the graphs are concatenated in."""

    key: str
    values: np.ndarray | Tensor
    group: int
    dim: int
    row: tuple[torch.dtype, int] | None  # one value per graph: its row of the stacked values


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

    ``reads``: the attributes the batches hold (None: all); what the model and the tasks do
    not read is not gathered. :meth:`many` gathers several batches in one pass (an epoch's, or
    as many as :meth:`bytes_of` allows), each batch's tensors contiguous views of the pass's.

    Raises :class:`Unbatchable` for what it does not cover: a per-graph ``transform``,
    attributes that are not dense tensors, or graphs without ``x``.
    """

    def __init__(
        self,
        dataset: Any,
        device: torch.device | None = None,
        reads: Iterable[str] | None = None,
    ):
        data, slices = pyg.storage(dataset) or (None, None)
        if not slices:
            raise Unbatchable("not an in-memory dataset of Data")
        if getattr(dataset, "transform", None) is not None:
            raise Unbatchable("a per-graph transform")
        if "x" not in slices:
            raise Unbatchable("graphs without x")
        self.reads = None if reads is None else frozenset(reads)
        # Attributes with the same boundaries (every node-level one shares the nodes', every
        # graph-level one has one row per graph) share the positions gathered for a batch.
        self.bounds: list[np.ndarray | None] = []  # distinct boundaries; None: one per graph
        self.nodes = self._group(slices["x"])
        self.stored: list[_Stored] = []
        # One value per graph (labels, graph-level targets): stacked by dtype, so that a batch
        # takes them in one selection per dtype; each is then a row of the result.
        columns: dict[torch.dtype, list[Tensor]] = {}
        graphs = len(slices["x"]) - 1
        self.graph_bytes = np.zeros(graphs, dtype=np.int64)  # what a graph's rows take
        for key, bounds in slices.items():  # the order a graph of the dataset lists them in
            if self.reads is not None and key not in self.reads:
                continue  # neither the model nor a task reads it
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
            if per_graph and value.dim() == 1 and not shifted(key):
                row = (value.dtype, len(columns.setdefault(value.dtype, [])))
                columns[value.dtype].append(value)
            dim = cat_dim % value.dim()
            value = value.contiguous()
            self.stored.append(_Stored(key, _numpy(value), group, dim, row))
            rows = 1 if per_graph else np.diff(bounds.numpy())
            per_row = value.element_size() * value.numel() // max(value.shape[dim], 1)
            self.graph_bytes += rows * per_row
        self.stacked = {dtype: _numpy(torch.stack(values)) for dtype, values in columns.items()}
        # each stored array's torch dtype (NumPy's arrays do not say it), by the array
        self.dtypes = {id(stored.values): dtype_of(stored.values) for stored in self.stored}
        self.template = pyg.empty_batch(type(data))  # copied: its class is made once
        self.device = None if device is None else torch.device(device)
        if self.device is not None:
            moved = on_device(data, self.device)
            self.stored = [
                stored._replace(values=moved[stored.key].contiguous()) for stored in self.stored
            ]
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

    def bytes_of(self, index: np.ndarray) -> np.ndarray:
        """What the attributes of each graph ``index`` take, in bytes."""
        return self.graph_bytes[index]

    def __call__(self, indices: Sequence[int] | Tensor) -> Batch:
        """The batch of the dataset's graphs ``indices``, in that order."""
        return self.many([np.asarray(indices, dtype=np.int64)])[0]

    def many(
        self, batches: Sequence[Sequence[int] | np.ndarray], *, pin: bool = False
    ) -> list[Batch]:
        """The batches of several arrays of indices, gathered in one pass: one selection per
        attribute for all of them, each batch's tensors contiguous views of it. On the host
        they lie in one buffer, pinned with ``pin`` (for one copy to a GPU)."""
        chunk = Chunk.of(batches)
        spans = [None if b is None else self._span(b, chunk) for b in self.bounds]
        if self.device is None:
            gathered = self._on_host(chunk, spans, pin)
        else:
            gathered = self._on_device(chunk, spans)
        parts, batch_vector, ptrs = gathered
        made, starts = [], chunk.starts.tolist()
        node_span = spans[self.nodes]
        node_starts = starts if node_span is None else node_span.batches.tolist()
        for j in range(len(starts) - 1):
            g0, g1 = starts[j], starts[j + 1]
            constants = batch_constants(g1 - g0)
            rows = [constants.one if s is None else s.rows(g0, g1) for s in spans]
            nodes = rows[self.nodes]
            begins, zeros = nodes.slices[:-1], constants.zeros
            values, slice_dict, inc_dict = {}, {}, {}
            for (key, _, group, _, _), (out, cut) in zip(self.stored, parts, strict=True):
                values[key] = cut(out, j)
                slice_dict[key] = rows[group].slices
                inc_dict[key] = begins if shifted(key) else zeros
            values["batch"] = batch_vector[node_starts[j] : node_starts[j + 1]]
            values["ptr"] = ptrs[g0 + j : g1 + j + 1]
            made.append(finish_batch(self.template, values, slice_dict, inc_dict))
        return made

    def _span(self, bounds: np.ndarray, chunk: Chunk) -> Span:
        first = bounds[chunk.index]
        counts = bounds[chunk.index + 1] - first
        offsets = Rows.of(counts).offsets
        return Span(first, counts, offsets, offsets[chunk.starts])

    def _rows(self, span: Span | None, chunk: Chunk) -> tuple[np.ndarray, np.ndarray]:
        """(each graph's row count, where each batch's rows start) of a group."""
        if span is None:
            return np.ones(len(chunk.index), dtype=np.int64), chunk.starts
        return span.counts, span.batches

    def _on_host(self, chunk: Chunk, spans: list[Span | None], pin: bool = False) -> tuple:
        """The chunk's attributes gathered with NumPy, straight into one buffer (pinned with
        ``pin``, for one copy to a GPU): per attribute its values and how a batch's part is
        cut from them; the ``batch`` vector; each batch's ``ptr``, in a row."""
        g, m = len(chunk.index), len(chunk.starts) - 1
        node_counts, node_batches = self._rows(spans[self.nodes], chunk)
        within = first_nodes(node_counts, chunk)
        shapes = []  # of what the buffer holds: each attribute, the rows per graph, batch, ptr
        for _, values, group, dim, row in self.stored:
            if row is None:
                total = int(self._rows(spans[group], chunk)[1][-1])
                lead = math.prod(values.shape[:dim])
                shape = (*values.shape[:dim], total, *values.shape[dim + 1 :])
                block = (lead * total, math.prod(values.shape[dim + 1 :]))
                shapes.append((self.dtypes[id(values)], shape if lead == 1 else block))
        shapes += [(dtype, (v.shape[0], g)) for dtype, v in self.stacked.items()]
        shapes += [(torch.int64, (int(node_batches[-1]),)), (torch.int64, (g + m,))]
        views = staging(shapes, pin)
        rows_of_graphs = views[len(views) - 2 - len(self.stacked) : -2]
        for values, out in zip(self.stacked.values(), rows_of_graphs, strict=True):
            take_into(out, values, 1, chunk.index)
        per_graph = dict(zip(self.stacked, rows_of_graphs, strict=True))
        batch_vector, ptrs = views[-2:]
        batch_vector.numpy()[:] = np.repeat(chunk.place, node_counts)
        ptrs_np = ptrs.numpy()
        ptrs_np[np.arange(g) + chunk.owner] = within
        ptrs_np[chunk.starts[1:] + np.arange(m)] = np.diff(node_batches)
        parts, filled = [], iter(views)
        for key, values, group, dim, row in self.stored:
            if row is not None:
                parts.append((per_graph[row[0]][row[1]], Cut(chunk.starts.tolist(), 0)))
                continue
            out = next(filled)
            span = spans[group]
            counts, batches = self._rows(span, chunk)
            positions = (
                chunk.index if span is None else ranges(span.first, span.counts, span.offsets)
            )
            shift = np.repeat(within, counts) if shifted(key) else None
            lead = math.prod(values.shape[:dim])
            if lead == 1:
                take_into(out, values, dim, positions)
                if shift is not None:
                    shift = shift.reshape([-1 if d == dim else 1 for d in range(out.dim())])
                cut: Any = Cut(batches.tolist(), dim)
            else:
                entry, order = block_order(lead, batches)
                rows = values.shape[dim]
                take_into(out, values.reshape(lead * rows, -1), 0, entry * rows + positions[order])
                if shift is not None:
                    shift = shift[order][:, None]
                cut = Block(batches.tolist(), tuple(values.shape), dim, lead)
            if shift is not None:
                if isinstance(values, np.ndarray):  # NumPy's add: no torch operation here
                    array = out.numpy()
                    np.add(array, shift, out=array, casting="unsafe")
                else:
                    out += torch.from_numpy(shift)
            parts.append((out, cut))
        return parts, batch_vector, ptrs

    def _on_device(self, chunk: Chunk, spans: list[Span | None]) -> tuple:
        """The chunk gathered on ``self.device``: each graph's sizes and offsets are worked out
        on the host (a few numbers per graph), moved in one copy, and expanded there. Returns
        what :meth:`_on_host` does, and each batch's ``ptr`` in a row (on the device)."""
        g, m = len(chunk.index), len(chunk.starts) - 1
        node_counts, node_batches = self._rows(spans[self.nodes], chunk)
        within = first_nodes(node_counts, chunk)
        ptrs = np.empty(g + m, dtype=np.int64)  # each batch's ptr: its nodes' offsets, total
        ptrs[np.arange(g) + chunk.owner] = within
        ptrs[chunk.starts[1:] + np.arange(m)] = np.diff(node_batches)
        host = [chunk.index, within, chunk.place, node_counts, ptrs]
        for span in spans:
            if span is not None:
                host += [span.first - span.offsets[:-1], span.counts]
        for _, values, group, dim, row in self.stored:
            if row is None and (lead := math.prod(values.shape[:dim])) > 1:
                host += block_counts(lead, self._rows(spans[group], chunk)[1])
        # the pass's few numbers per graph and per batch, in one copy (from pinned memory to
        # a GPU, which then need not wait for the copy)
        cuda = self.device.type == "cuda"
        small = torch.empty(sum(map(len, host)), dtype=torch.int64, pin_memory=cuda)
        np.concatenate(host, out=small.numpy())
        small = small.to(self.device, non_blocking=True)
        pieces = iter(small.split([len(a) for a in host]))
        index, within_d, place, node_counts_d, ptrs_d = itertools.islice(pieces, 5)
        longest = max([g] + [int(span.offsets[-1]) for span in spans if span is not None])
        arange = torch.arange(longest, device=self.device)
        positions, counts = [], []
        for span in spans:
            if span is None:
                positions.append(index)
                counts.append(None)
                continue
            shift, count = next(pieces), next(pieces)
            total = int(span.offsets[-1])
            positions.append(
                torch.repeat_interleave(shift, count, output_size=total) + arange[:total]
            )
            counts.append(count)
        per_graph = {dtype: values.index_select(1, index) for dtype, values in self.stacked.items()}
        parts = []
        for key, values, group, dim, row in self.stored:
            if row is not None:
                parts.append((per_graph[row[0]][row[1]], Cut(chunk.starts.tolist(), 0)))
                continue
            _, batches = self._rows(spans[group], chunk)
            shift = None
            if shifted(key):
                shift = within_d
                if counts[group] is not None:
                    total = int(spans[group].offsets[-1])
                    shift = torch.repeat_interleave(shift, counts[group], output_size=total)
            lead = math.prod(values.shape[:dim])
            if lead == 1:
                out = values.index_select(dim, positions[group])
                if shift is not None:
                    shift = shift.view([-1 if d == dim else 1 for d in range(out.dim())])
                cut: Any = Cut(batches.tolist(), dim)
            else:
                on = (next(pieces), next(pieces), next(pieces))
                entry, order = block_order(lead, batches, on)
                rows = values.shape[dim]
                source = entry * rows + positions[group][order]
                out = values.reshape(lead * rows, -1).index_select(0, source)
                if shift is not None:
                    shift = shift[order][:, None]
                cut = Block(batches.tolist(), tuple(values.shape), dim, lead)
            parts.append((out if shift is None else out + shift, cut))
        if spans[self.nodes] is None:  # one node per graph
            batch_vector = place
        else:
            batch_vector = torch.repeat_interleave(
                place, node_counts_d, output_size=int(node_batches[-1])
            )
        return parts, batch_vector, ptrs_d
