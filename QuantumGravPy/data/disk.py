"""Datasets larger than memory: graphs in an SQLite table, read a batch at a time.

``data.storage: disk`` keeps the processed graphs in torch_geometric's on-disk store
(:class:`~torch_geometric.data.OnDiskDataset` over an SQLite table) instead of one tensor file
loaded whole. A loader reads only the graphs its sampler asks for, one query per batch, so a
dataset many times the size of memory trains with the memory of a few batches, and each DDP rank
reads only its own share.

What samplers and tasks read of every graph (labels, weights, per-element targets: every
attribute of at most one dimension except edge attributes) is kept beside the table in a small
file, so class counts, balancing weights and target statistics never scan the table.

Graphs are stored in a compact binary form (a small header, then each tensor's raw bytes), which
reads several times faster than pickling each graph. The cache is named by the same digest as the
in-memory one, built under a temporary name and renamed when complete, with several processes
each writing a contiguous range that is then joined in order.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import pickle
import sqlite3
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Batch, Data, InMemoryDataset, OnDiskDataset, SQLiteDatabase

from ..errors import DataError
from .batching import Rows, Unbatchable, assemble_batch, ranges
from .cache import GraphSource, cache_name
from .sharding import DistributedRangeSplitter, in_parallel

log = logging.getLogger(__name__)

_TABLE = "graphs"
_INSERT_EVERY = 128  # graphs written per transaction: bounds memory while building
_ALIGN = 8
_FIXED, _PER_TENSOR = 3, 3  # integers at the start of a row, and per tensor (see pack)
_FORMAT = 2  # of a row; in the table's file name, so that a table of another is never read
_IN_QUERY = 900  # keys per query: below SQLite's oldest limit on parameters (999)


# --- one graph as bytes ---------------------------------------------------------------------


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
    - a pickled header: names, dtypes, shapes and where each tensor's bytes start, and the
      attributes that are not tensors;
    - each tensor's raw bytes, aligned so that they can be viewed in place when read.
    """
    specs, other, chunks, offset = [], {}, [], 0
    for key, value in graph.items():
        if not isinstance(value, torch.Tensor):
            other[key] = value
            continue
        raw = value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        pad = -len(raw) % _ALIGN
        specs.append((key, str(value.dtype).removeprefix("torch."), tuple(value.shape), offset))
        chunks.append(raw + bytes(pad))
        offset += len(raw) + pad
    header = pickle.dumps((specs, other), protocol=pickle.HIGHEST_PROTOCOL)
    fixed = 8 * (_FIXED + _PER_TENSOR * len(specs))
    start = fixed + len(header) + (-(fixed + len(header)) % _ALIGN)
    table = [len(specs), _signature(specs, other), len(header)]
    for _, _, shape, at in specs:
        table += [start + at, shape[0] if shape else 1, shape[-1] if shape else 1]
    head = np.array(table, dtype="<i8").tobytes() + header
    return head + bytes(start - len(head)) + b"".join(chunks)


def _header(blob: bytes) -> tuple[list, dict, int]:
    """(tensor specs, other attributes, where the tensors' bytes start) of :func:`pack`'s bytes."""
    count, _, size = struct.unpack_from("<3q", blob)
    first = 8 * (_FIXED + _PER_TENSOR * count)
    specs, other = pickle.loads(blob[first : first + size])
    return specs, other, first + size + (-(first + size) % _ALIGN)


def unpack(blob: bytes) -> Data:
    """The graph :func:`pack` made; its tensors are views of ``blob``, which nothing else
    holds (a fresh row from the table), so no byte is copied."""
    specs, other, start = _header(blob)
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
    """Batches of a :class:`DiskDataset`'s graphs assembled from their stored bytes, with no
    ``Data`` per graph; the batch ``Batch.from_data_list`` makes of the same graphs.

    The rows of a batch are joined into one buffer; the table at the start of each row
    (:func:`pack`) is read for all graphs with one gather, and every attribute's elements are
    gathered by index arithmetic, all attributes whose dtype has the same size at once (each
    tensor's bytes start at a multiple of 8, so the buffer can be read in units of the dtype's
    size). A batch is a few dozen array operations whatever its number of graphs and
    attributes; no header is unpickled.

    Raises :class:`~.batching.Unbatchable` for a per-graph transform, or graphs with
    attributes that are not tensors or without ``x``.
    """

    def __init__(self, dataset: DiskDataset):
        if dataset.transform is not None:
            raise Unbatchable("a per-graph transform")
        first = dataset.db.get(0)
        specs, other, _ = _header(first)
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
        self.size_columns = np.array(size_columns)
        self.table = _FIXED + np.arange(_PER_TENSOR * len(specs))  # the words of the table
        # The order a graph read alone lists its attributes in (Data's constructor sets its
        # own named ones first), which the batch PyG makes of such graphs follows.
        self.order = list(Data(**dict.fromkeys(keys, torch.empty(0))).to_dict())
        # per unit size: the tensors joined along their first axis (their columns, the units
        # per step along it), and those joined along their last; and their keys in that order
        self.by_unit: dict[int, tuple[np.ndarray, np.ndarray, list[_Layout]]] = {}
        self.unit_keys: dict[int, list[tuple[str, torch.dtype]]] = {}
        for unit in dict.fromkeys(layout.unit for layout in self.layouts.values()):
            mine = [layout for layout in self.layouts.values() if layout.unit == unit]
            plain = [layout for layout in mine if layout.rows is None]
            rowwise = [layout for layout in mine if layout.rows is not None]
            self.by_unit[unit] = (
                np.array([layout.column for layout in plain], dtype=np.int64),
                np.array([layout.width for layout in plain], dtype=np.int64),
                rowwise,
            )
            self.unit_keys[unit] = [(layout.key, layout.dtype) for layout in plain + rowwise]
        self.template = Batch(_base_cls=Data)

    def __call__(self, indices: Any) -> Batch:
        blobs = self.dataset.db.multi_get(indices)
        k = len(blobs)
        begins = np.zeros(k, dtype=np.int64)  # where each graph's row starts in the join
        np.cumsum(np.fromiter(map(len, blobs[:-1]), np.int64, k - 1), out=begins[1:])
        joined = b"".join(blobs)
        words = np.frombuffer(joined, dtype="<i8")  # every row's length is a multiple of 8
        at = begins // 8
        if (words[at] != self.count).any() or (words[at + 1] != self.signature).any():
            # graphs that differ in their attributes: as PyTorch Geometric collates them
            return Batch.from_data_list([unpack(blob) for blob in blobs])
        table = words.take(at[:, None] + self.table)  # graph by word
        where = table[:, 0::_PER_TENSOR] + begins[:, None]  # graph by tensor: its first byte
        sizes = table[:, self.size_columns]  # graph by tensor: its size along the joined axis
        values: dict[str, Tensor] = {}
        for unit, (plain, widths, rowwise) in self.by_unit.items():
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
            gathered = np.frombuffer(joined, dtype=f"<u{unit}").take(
                ranges(np.concatenate(firsts), np.concatenate(counts))
            )
            ends = np.cumsum(np.concatenate(totals)).tolist()
            for (key, dtype), start, end in zip(
                self.unit_keys[unit], [0, *ends[:-1]], ends, strict=True
            ):
                values[key] = torch.from_numpy(gathered[start:end]).view(dtype)
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


def _light(graph: Data) -> Data:
    """What is kept beside the table: tensors of at most one dimension, edges' aside."""
    return Data(
        **{
            key: value
            for key, value in graph.items()
            if isinstance(value, torch.Tensor)
            and value.dim() <= 1
            and key not in ("x", "edge_index", "pos")
            and not key.startswith("edge_")
        }
    )


# --- the table ------------------------------------------------------------------------------


class _Table(SQLiteDatabase):
    """torch_geometric's SQLite store holding :func:`pack`'s bytes as they are."""

    def __init__(self, path: str, *, page_size: int = 65536):
        self.page_size = page_size
        super().__init__(path, name=_TABLE, schema=object)

    def connect(self) -> None:
        super().connect()
        # Set before the table is made; no effect on a table that exists.
        self.cursor.execute(f"PRAGMA page_size = {self.page_size}")

    def multi_get(self, indices: Any, batch_size: int | None = None) -> list[Any]:
        # One query for many keys (``id IN (...)``, in runs below SQLite's limit on
        # parameters): 2.5x quicker than a lookup per graph, which was quicker than
        # torch_geometric's join through a temporary table (which also writes).
        if isinstance(indices, torch.Tensor):
            indices = indices.tolist()
        indices = [int(i) for i in indices]
        rows: dict[int, Any] = {}
        wanted = list(dict.fromkeys(indices))  # a sampler may draw a graph twice
        for first in range(0, len(wanted), _IN_QUERY):
            part = wanted[first : first + _IN_QUERY]
            self.cursor.execute(
                f"SELECT id, COL_0 FROM {_TABLE} WHERE id IN ({','.join('?' * len(part))})",
                part,
            )
            rows.update(self.cursor.fetchall())
        return [rows[i] for i in indices]

    def _serialize(self, row: Any) -> list[Any]:
        return [row]

    def _deserialize(self, row: tuple[Any, ...]) -> Any:
        return row[0]


def _write_range(source: GraphSource, start: int, end: int, path: str, progress: bool):
    """Write samples ``start`` to ``end - 1`` into a new table at ``path``; return what is kept
    beside it, one light graph per stored graph."""
    table = None
    light: list[Data] = []
    pending: list[bytes] = []
    try:
        for graph in source.graphs(start, end, progress=progress):
            light.append(_light(graph))
            pending.append(pack(graph))
            if table is None:
                table = _Table(path, page_size=page_size(len(pending[0])))
            if len(pending) == _INSERT_EVERY:
                table.multi_insert(range(len(light) - len(pending), len(light)), pending)
                pending = []
        table = table or _Table(path)
        if pending:
            table.multi_insert(range(len(light) - len(pending), len(light)), pending)
    finally:
        if table is not None:
            table.close()
    return light


def page_size(row: int) -> int:
    """SQLite's page size for rows of about ``row`` bytes: the power of two that holds one,
    from 4 KiB to 64 KiB. A batch reads rows at random, each a page or a few: pages much
    larger than a row are copied for nothing (a batch of 32 rows of 7 KiB reads in 95 us
    from 8 KiB pages, 146 us from 64 KiB ones), and a row of a megabyte spans 16 pages of
    64 KiB, not 256 of 4 KiB."""
    return min(max(4096, 1 << (row - 1).bit_length()), 65536)


def _write_part(rank: int, world_size: int, source: GraphSource, path: str, progress: bool):
    start, end = DistributedRangeSplitter(source.total, world_size).get_rank_range(rank)
    return _write_range(source, start, end, f"{path}.part{rank}", progress and rank == 0)


def _join(parts: list[str], counts: list[int], path: str) -> None:
    """Append the tables ``parts`` (holding ``counts`` graphs) to the table at ``path`` in order,
    numbering on from the graphs before them, without unpacking a graph."""
    connection = sqlite3.connect(path)
    try:
        offset = 0
        for part, count in zip(parts, counts, strict=True):
            connection.execute("ATTACH DATABASE ? AS part", (part,))
            connection.execute(
                f"INSERT INTO main.{_TABLE} SELECT id + ?, COL_0 FROM part.{_TABLE} ORDER BY id",
                (offset,),
            )
            connection.commit()
            connection.execute("DETACH DATABASE part")
            offset += count
    finally:
        connection.close()


def build_table(source: GraphSource, path: str, *, world_size: int = 1, progress: bool = True):
    """Write every graph of ``source`` into a table at ``path`` (with ``world_size`` processes,
    each a contiguous range); return the light graphs kept beside it, in order."""
    if world_size > 1:
        parts = [f"{path}.part{rank}" for rank in range(world_size)]
        try:
            lights = in_parallel(_write_part, world_size, source, path, progress)
            first = sqlite3.connect(parts[0])  # the pages the first part chose
            try:
                (size,) = first.execute("PRAGMA page_size").fetchone()
            finally:
                first.close()
            _Table(path, page_size=size).close()
            _join(parts, [len(light) for light in lights], path)
        finally:
            for part in parts:
                Path(part).unlink(missing_ok=True)
        return [g for light in lights for g in light]
    return _write_range(source, 0, source.total, path, progress)


def table_file_names(source: GraphSource) -> list[str]:
    """The files of a source's table and of the values kept beside it (named by the row
    format too: a table written in an earlier one is never read)."""
    name = f"{cache_name(source)}.rows{_FORMAT}"
    return [f"{name}.db", f"{name}.labels.pt"]


class DiskDataset(OnDiskDataset):
    """The graphs of ``source`` in an SQLite table under ``root/processed``, read per batch.

    Built on first use (by ``world_size`` processes) and named by a digest of the source's
    parameters like the in-memory cache, with ``.db`` for the table and ``.labels.pt`` for the
    attributes kept in memory. ``transform`` is applied each time a graph is read.
    """

    def __init__(
        self,
        source: GraphSource,
        root: str,
        *,
        transform: Callable | None = None,
        progress: bool = True,
        world_size: int = 1,
    ):
        self.source = source
        self.progress = progress
        self.world_size = world_size
        self._pid: int | None = None
        super().__init__(root, transform=transform, log=False)
        values, slices = torch.load(self.processed_paths[1], weights_only=False)
        self._labels, self._slices = values, slices
        self._numel = next(iter(slices.values())).numel() - 1 if slices else len(self.db)

    @property
    def processed_file_names(self) -> list[str]:
        return table_file_names(self.source)

    @property
    def raw_file_names(self) -> list[str]:
        return []

    def download(self) -> None:  # nothing to fetch: the graphs are built locally
        pass

    @property
    def db(self) -> _Table:
        # A connection must not cross a fork: a data-loader worker opens its own.
        if self._db is None or self._pid != os.getpid():
            self._db = _Table(self.processed_paths[0])
            self._pid = os.getpid()
        return self._db

    def serialize(self, data: Data) -> bytes:
        return pack(data)

    def deserialize(self, data: bytes) -> Data:
        return unpack(data)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_db"] = None  # reopened where it is unpickled (spawned workers)
        return state

    def process(self) -> None:
        db, labels = self.processed_paths
        tmp = f"{db}.tmp{os.getpid()}"
        log.info(
            "processing %d samples into %s with %d process(es)",
            self.source.total,
            db,
            self.world_size,
        )
        try:
            light = build_table(
                self.source, tmp, world_size=self.world_size, progress=self.progress
            )
            if not light:
                raise DataError(self.source.rejected_all())
            torch.save(InMemoryDataset.collate(light), f"{labels}.tmp{os.getpid()}")
            os.replace(f"{labels}.tmp{os.getpid()}", labels)
            os.replace(tmp, db)  # last: a table exists only with its labels beside it
        finally:
            Path(tmp).unlink(missing_ok=True)
            Path(f"{labels}.tmp{os.getpid()}").unlink(missing_ok=True)

    # --- what samplers and tasks read without touching the table ----------------------------

    def stored_values(self, name: str) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Attribute ``name`` of every graph, concatenated, and where each graph's values start
        (``bounds[i]:bounds[i + 1]``); None if it is not kept in memory."""
        if name not in self._labels:
            return None
        return self._labels[name], self._slices[name]

    def num_classes_of(self, name: str) -> int | None:
        classes = getattr(self.source, "num_classes_of", None)
        return classes(name) if callable(classes) else None
