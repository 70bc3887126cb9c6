"""One graph as bytes, and batches assembled from such bytes without a ``Data`` per graph.

The on-disk storage (:mod:`.disk`) keeps each graph as one row in this form: a table of
numbers, a JSON header, then each tensor's raw bytes, aligned so that they can be viewed in
place. :func:`unpack` reads one graph; :class:`DiskBatcher` assembles a batch of many from the
numbers at the start of each row, with no header read. Nothing in a row is unpickled: a row
planted in a shared ``data.root`` is refused, never run.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import struct
from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

from ..compat import pyg
from ..errors import DataError
from .batching import Rows, Unbatchable, assemble_batch, ranges

_ALIGN = 8
_FIXED, _PER_TENSOR = 3, 3  # integers at the start of a row, and per tensor (see pack)
FORMAT = 3  # of a row; in a table's file name, so that a table of another is never read
# 3: the header is JSON (2 pickled it)


def _signature(specs: list[tuple], other: dict) -> int:
    """A number equal for graphs whose attributes have the same names, dtypes and numbers of
    dimensions (a 64-bit digest: two different structures share one by a chance of 2^-64)."""
    structure = repr(([(*spec[:2], len(spec[2])) for spec in specs], sorted(other)))
    return int.from_bytes(
        hashlib.blake2b(structure.encode(), digest_size=8).digest(), "little", signed=True
    )


def pack(graph: Data) -> bytes:
    """A graph as bytes, in three parts, each starting at a multiple of 8 bytes:

    - a table of 64-bit integers: the number of tensors, the structure's :func:`_signature`,
      the header's length, then per tensor where its bytes start in the row and its sizes
      along its first and its last axis (what a batch is assembled from, read for all of a
      batch's graphs with one gather);
    - a JSON header: names, dtypes, shapes and where each tensor's bytes start, and the
      attributes that are not tensors (numbers, strings, lists and dicts of them);
    - each tensor's raw bytes, aligned so that they can be viewed in place when read.
    """
    specs, other, chunks, offset = [], {}, [], 0
    for key, value in graph.items():
        if not isinstance(value, torch.Tensor):
            other[key] = value
            continue
        flat = value.detach().cpu().contiguous().reshape(-1)
        if flat.numel() and flat.stride(0) != 1:  # one element may keep its stride (a matrix
            # column's), which .contiguous() leaves as it is and .view refuses: copied
            flat = torch.empty(flat.numel(), dtype=flat.dtype).copy_(flat)
        raw = flat.view(torch.uint8).numpy().tobytes()
        pad = -len(raw) % _ALIGN
        specs.append((key, str(value.dtype).removeprefix("torch."), tuple(value.shape), offset))
        chunks.append(raw + bytes(pad))
        offset += len(raw) + pad
    try:
        header = json.dumps([specs, other], default=_plain).encode()
    except TypeError as e:
        raise DataError(
            f"data.storage: disk keeps a graph's attributes that are not tensors as numbers, "
            f"strings, lists and dicts of them; {e}"
        ) from None
    fixed = 8 * (_FIXED + _PER_TENSOR * len(specs))
    start = fixed + len(header) + (-(fixed + len(header)) % _ALIGN)
    table = [len(specs), _signature(specs, other), len(header)]
    for _, _, shape, at in specs:
        table += [start + at, shape[0] if shape else 1, shape[-1] if shape else 1]
    head = np.array(table, dtype="<i8").tobytes() + header
    return head + bytes(start - len(head)) + b"".join(chunks)


def _plain(value: Any) -> Any:
    """A numpy number as Python's; anything else JSON does not know is refused by name."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"one is a {type(value).__name__}")


def header(blob: bytes) -> tuple[list, dict, int]:
    """(tensor specs, other attributes, where the tensors' bytes start) of :func:`pack`'s bytes;
    a :class:`DataError` for bytes :func:`pack` did not make."""
    try:
        count, _, size = struct.unpack_from("<3q", blob)
        first = 8 * (_FIXED + _PER_TENSOR * count)
        specs, other = json.loads(blob[first : first + size])
        specs = [(key, _dtype(name), tuple(shape), int(at)) for key, name, shape, at in specs]
    except (struct.error, ValueError, TypeError, UnicodeDecodeError) as e:
        raise DataError(f"a stored graph is not one this library wrote ({e})") from None
    return specs, dict(other), first + size + (-(first + size) % _ALIGN)


def _dtype(name: str) -> str:
    """``name`` if it names a torch dtype (what :func:`pack` writes), else a ValueError."""
    if not isinstance(getattr(torch, str(name), None), torch.dtype):
        raise ValueError(f"{name!r} is no dtype")
    return name


def unpack(blob: bytes) -> Data:
    """The graph :func:`pack` made; its tensors are views of ``blob``, which nothing else
    holds (a fresh row from the table), so no byte is copied."""
    specs, other, start = header(blob)
    attributes = dict(other)
    for key, dtype_name, shape, offset in specs:
        dtype = getattr(torch, dtype_name)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes == 0:
            attributes[key] = torch.empty(shape, dtype=dtype)
            continue
        # (bytes are read-only to Python, not to torch: _Table silences torch's warning)
        raw = torch.frombuffer(blob, dtype=torch.uint8, count=nbytes, offset=start + offset)
        attributes[key] = raw.view(dtype).view(shape)
    return Data(**attributes)


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
    """Batches of a :class:`~.disk.DiskDataset`'s graphs assembled from their stored bytes, with no
    ``Data`` per graph; the batch ``Batch.from_data_list`` makes of the same graphs.

    The rows of a batch are joined into one buffer; the table at the start of each row
    (:func:`pack`) is read for all graphs with one gather, and every attribute's elements are
    gathered by index arithmetic, all attributes whose dtype has the same size at once (each
    tensor's bytes start at a multiple of 8, so the buffer can be read in units of the dtype's
    size). A batch is a few dozen array operations whatever its number of graphs and
    attributes; no header is unpickled.

    ``reads``: the attributes the batches hold (None: all; ``x`` always, whose rows count the
    nodes); the others are not gathered.

    Raises :class:`~.batching.Unbatchable` for a per-graph transform, or graphs with
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
            size_columns.append(_PER_TENSOR * column + (2 if last else 1))
            if reads is not None and key not in reads and key != "x":
                del self.layouts[key]  # neither the model nor a task reads it
        self.size_columns = np.array(size_columns)
        self.table = _FIXED + np.arange(_PER_TENSOR * len(specs))  # the words of the table
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
        where = table[:, 0::_PER_TENSOR] + begins[:, None]  # graph by tensor: its first byte
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
