"""Batches assembled from the rows of a :class:`~..storage.disk.DiskDataset`, without a ``Data``
per graph.

Each graph is one row (:mod:`..storage.rows`): a table of numbers, a JSON header, then each
tensor's raw bytes. :class:`DiskBatcher` reads the table at the start of every row of a batch
with one gather and gathers each attribute's elements by index arithmetic, as
:mod:`.batching` does for graphs held in memory; no header is read.
"""

from __future__ import annotations

import itertools
import math
import struct
from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

from ...compat import pyg
from ..storage.rows import FIXED, PER_TENSOR
from .assembly import Unbatchable, assemble_batch, ranges
from .chunks import Rows

_INDEXED = 1 << 19  # units gathered by one index at most (4 MB of index); more: slice by slice


def _gather(units: np.ndarray, firsts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The pieces ``units[firsts[i] : firsts[i] + counts[i]]``, joined: by one index over all
    their elements (quickest for a batch of small graphs, whose pieces are many and short), or,
    for a batch of large graphs, as slices, since an index of 8 bytes per element takes twice
    the memory of the float32 features it gathers (16 graphs of half a megabyte: 16 MB of
    index for 8 MB of features)."""
    if counts.sum() > _INDEXED:
        pieces = zip(firsts.tolist(), counts.tolist(), strict=True)
        return np.concatenate([units[f : f + c] for f, c in pieces])
    return units.take(ranges(firsts, counts))


class _Layout(NamedTuple):
    """How one stored attribute is read: its dtype, the integer unit it is gathered in (at
    most 8 bytes: complex128 as two), the units per step along the dimension the graphs are
    concatenated in, and for an attribute concatenated along its last dimension (an
    ``edge_index``), its number of rows (gathered row by row: row j of every graph, then
    j + 1)."""

    key: str
    column: int  # in the stored order
    dtype: torch.dtype
    unit: int
    width: int
    rows: int | None
    shape: tuple[int, ...]  # the first graph's (the sizes along the other axes: every graph's)


class DiskBatcher:
    """Batches of a :class:`~..storage.disk.DiskDataset`'s graphs assembled from their stored
    bytes, with no ``Data`` per graph; the batch ``Batch.from_data_list`` makes of the same
    graphs.

    The rows of a batch are joined into one buffer; the table at the start of each row
    (:func:`~..storage.rows.pack`) is read for all graphs with one gather, and every
    attribute's elements are gathered by index arithmetic, all attributes whose dtype has the
    same size at once (each tensor's bytes start at a multiple of 8, so the buffer can be read
    in units of the dtype's size). A batch is a few dozen array operations whatever its number
    of graphs and attributes; no header is unpickled.

    ``reads``: the attributes the batches hold (None: all; ``x`` always, whose rows count the
    nodes); the others are not gathered.

    Raises :class:`~.assembly.Unbatchable` for a per-graph transform, or graphs with
    attributes that are not tensors or without ``x``.
    """

    def __init__(self, dataset: Any, reads: Iterable[str] | None = None):
        if dataset.transform is not None:
            raise Unbatchable("a per-graph transform")
        first = dataset.db.get(0)
        specs, other, _ = dataset.header(first)
        keys = [spec[0] for spec in specs]
        if other or "x" not in keys or any("batch" in key for key in keys):
            raise Unbatchable("attributes that are not tensors, or graphs without x")
        self.dataset = dataset
        self.count, self.signature = struct.unpack_from("<2q", first)
        probe = Data()
        self.layouts: dict[str, _Layout] = {}
        size_columns = []  # per tensor: its column of the row's table holding the size wanted
        for column, (key, dtype_name, shape, _) in enumerate(specs):
            dtype = getattr(torch, dtype_name)
            unit = min(dtype.itemsize, 8)
            per = dtype.itemsize // unit
            last = len(shape) > 1 and probe.__cat_dim__(key, torch.empty(0)) == -1
            rows = math.prod(shape[:-1]) if last else None
            width = per if last else math.prod(shape[1:]) * per
            self.layouts[key] = _Layout(key, column, dtype, unit, width, rows, shape or (1,))
            size_columns.append(PER_TENSOR * column + (2 if last else 1))
            if reads is not None and key not in reads and key != "x":
                del self.layouts[key]  # neither the model nor a task reads it
        self.size_columns = np.array(size_columns)
        self.table = FIXED + np.arange(PER_TENSOR * len(specs))  # the words of the table
        # The order a graph read alone lists its attributes in (Data's constructor sets its
        # own named ones first), which the batch PyG makes of such graphs follows.
        kept = [key for key in keys if key in self.layouts]
        self.order = list(Data(**dict.fromkeys(kept, torch.empty(0))).to_dict())
        # per unit size: the tensors joined along their first axis (their columns, the units
        # per step along it), those joined along their last, and all of them in that order
        self.by_unit: dict[int, tuple[np.ndarray, np.ndarray, list[_Layout], list[_Layout]]] = {}
        for unit in dict.fromkeys(layout.unit for layout in self.layouts.values()):
            mine = [layout for layout in self.layouts.values() if layout.unit == unit]
            plain = [layout for layout in mine if layout.rows is None]
            rowwise = [layout for layout in mine if layout.rows is not None]
            self.by_unit[unit] = (
                np.array([layout.column for layout in plain], dtype=np.int64),
                np.array([layout.width for layout in plain], dtype=np.int64),
                rowwise,
                plain + rowwise,
            )
        self.template = pyg.empty_batch(Data)

    def __call__(self, indices: Any) -> Batch:
        return self._assemble(self.dataset.db.multi_get(indices))

    def many(self, batches: list[np.ndarray]) -> list[Batch]:
        """The batches of several arrays of indices, their rows read in one query."""
        blobs = self.dataset.db.multi_get(np.concatenate(batches))
        bounds = np.cumsum([0, *map(len, batches)]).tolist()
        parts = [blobs[first:end] for first, end in itertools.pairwise(bounds)]
        del blobs
        parts.reverse()  # popped from the end: a batch's rows are let go once it is made
        return [self._assemble(parts.pop()) for _ in batches]

    def _assemble(self, blobs: list[bytes]) -> Batch:
        k = len(blobs)
        bounds = np.zeros(k + 1, dtype=np.int64)  # where each graph's row starts in the join
        np.cumsum(np.fromiter(map(len, blobs), np.int64, k), out=bounds[1:])
        begins = bounds[:-1]
        joined = b"".join(blobs)
        del blobs  # the rows, once joined: a batch is held twice at most (joined, gathered)
        words = np.frombuffer(joined, dtype="<i8")  # every row's length is a multiple of 8
        at = begins // 8
        if (words[at] != self.count).any() or (words[at + 1] != self.signature).any():
            # graphs that differ in their attributes: as PyTorch Geometric collates them
            rows = [joined[first:end] for first, end in itertools.pairwise(bounds)]
            return Batch.from_data_list([self.dataset.deserialize(row) for row in rows])
        table = words.take(at[:, None] + self.table)  # graph by word
        where = table[:, 0::PER_TENSOR] + begins[:, None]  # graph by tensor: its first byte
        sizes = table[:, self.size_columns]  # graph by tensor: its size along the joined axis
        values: dict[str, Tensor] = {}
        for unit, (plain, widths, rowwise, in_order) in self.by_unit.items():
            # tensor by tensor, each graph's elements in turn: those joined along their first
            # axis all at once, then those joined along their last, row by row
            count = sizes[:, plain] * widths
            firsts, counts = [(where[:, plain] // unit).T.reshape(-1)], [count.T.reshape(-1)]
            totals = [count.sum(axis=0)]
            for layout in rowwise:  # row j of every graph, then row j + 1
                step = sizes[:, layout.column] * layout.width
                first = where[:, layout.column] // unit
                firsts.append((first + np.arange(layout.rows)[:, None] * step).reshape(-1))
                counts.append(np.tile(step, layout.rows))
                totals.append(step.sum(keepdims=True) * layout.rows)
            gathered = _gather(
                np.frombuffer(joined, dtype=f"<u{unit}"),
                np.concatenate(firsts),
                np.concatenate(counts),
            )
            ends = np.cumsum(np.concatenate(totals)).tolist()
            for layout, start, end in zip(in_order, [0, *ends[:-1]], ends, strict=True):
                values[layout.key] = torch.from_numpy(gathered[start:end]).view(layout.dtype)
        divisions: dict[bytes, Rows] = {}  # attributes of the same sizes share their Rows
        parts = []
        for key in self.order:
            layout = self.layouts[key]
            size = sizes[:, layout.column]
            rows = divisions.get(size.tobytes())
            if rows is None:
                rows = divisions[size.tobytes()] = Rows.of(size)
            flat, total, shape = values[key], int(rows.offsets[-1]), layout.shape
            if layout.rows is None:
                parts.append((key, flat.view(total, *shape[1:]), 0, rows))
            else:
                parts.append((key, flat.view(*shape[:-1], total), len(shape) - 1, rows))
        nodes = divisions[sizes[:, self.layouts["x"].column].tobytes()]
        return assemble_batch(self.template, nodes, parts)
