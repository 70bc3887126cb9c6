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

import logging
import math
import os
import pickle
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Batch, Data, InMemoryDataset, OnDiskDataset, SQLiteDatabase

from ..errors import DataError
from .batching import Unbatchable, assemble_batch
from .cache import GraphSource, cache_name
from .sharding import DistributedRangeSplitter, in_parallel

log = logging.getLogger(__name__)

_TABLE = "graphs"
_INSERT_EVERY = 128  # graphs written per transaction: bounds memory while building
_ALIGN = 8
_IN_QUERY = 900  # keys per query: below SQLite's oldest limit on parameters (999)


# --- one graph as bytes ---------------------------------------------------------------------


def pack(graph: Data) -> bytes:
    """A graph as bytes: a pickled header (names, dtypes, shapes, non-tensor attributes), then
    each tensor's raw bytes, aligned so that they can be viewed in place when read."""
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
    head = len(header).to_bytes(8, "little") + header
    return head + bytes(-len(head) % _ALIGN) + b"".join(chunks)


def unpack(blob: bytes) -> Data:
    """The graph :func:`pack` made; its tensors are views of ``blob``, which nothing else
    holds (a fresh row from the table), so no byte is copied."""
    size = int.from_bytes(blob[:8], "little")
    specs, other = pickle.loads(blob[8 : 8 + size])
    start = 8 + size + (-(8 + size) % _ALIGN)
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


def _header(blob: bytes) -> tuple[list, dict, int]:
    """(tensor specs, other attributes, where the tensors' bytes start) of :func:`pack`'s bytes."""
    size = int.from_bytes(blob[:8], "little")
    specs, other = pickle.loads(blob[8 : 8 + size])
    return specs, other, 8 + size + (-(8 + size) % _ALIGN)


class DiskBatcher:
    """Batches of a :class:`DiskDataset`'s graphs assembled from their stored bytes: each
    attribute's bytes joined over the batch and viewed as one tensor, with no ``Data`` per
    graph; the batch ``Batch.from_data_list`` makes of the same graphs.

    Raises :class:`~.batching.Unbatchable` for a per-graph transform, or graphs with
    attributes that are not tensors or without ``x``.
    """

    def __init__(self, dataset: DiskDataset):
        if dataset.transform is not None:
            raise Unbatchable("a per-graph transform")
        specs, other, _ = _header(dataset.db.get(0))
        keys = [spec[0] for spec in specs]
        if other or "x" not in keys or any("batch" in key for key in keys):
            raise Unbatchable("attributes that are not tensors, or graphs without x")
        self.dataset = dataset
        # The order a graph read alone lists its attributes in (Data's constructor sets its
        # own named ones first), which the batch PyG makes of such graphs follows.
        self.keys = keys
        self.order = list(Data(**dict.fromkeys(keys, torch.empty(0))).to_dict())
        probe = Data()
        self.cat_last = {key: probe.__cat_dim__(key, torch.empty(0)) == -1 for key in keys}
        self.template = Batch(_base_cls=Data)

    def __call__(self, indices: Any) -> Batch:
        blobs = self.dataset.db.multi_get(indices)
        heads = [_header(blob) for blob in blobs]
        keys = self.keys
        if any(other or [spec[0] for spec in specs] != keys for specs, other, _ in heads):
            # graphs that differ in their attributes: as PyTorch Geometric collates them
            return Batch.from_data_list([unpack(blob) for blob in blobs])
        views = [memoryview(blob) for blob in blobs]
        nodes = np.array([specs[keys.index("x")][2][0] for specs, _, _ in heads], dtype=np.int64)
        parts = []
        for key in self.order:
            i = keys.index(key)
            dtype = getattr(torch, heads[0][0][i][1])
            shapes = [specs[i][2] or (1,) for specs, _, _ in heads]  # a scalar is one row
            last = self.cat_last[key] and len(shapes[0]) > 1
            sizes = np.array([shape[-1] if last else shape[0] for shape in shapes], dtype=np.int64)
            pieces = []
            if last:  # rows of [r, n_i] are joined row by row
                rows, width = shapes[0][0], dtype.itemsize
                for row in range(rows):
                    for (specs, _, start), view, n in zip(heads, views, sizes, strict=True):
                        first = start + specs[i][3] + row * int(n) * width
                        pieces.append(view[first : first + int(n) * width])
            else:
                for (specs, _, start), view, shape in zip(heads, views, shapes, strict=True):
                    first = start + specs[i][3]
                    pieces.append(view[first : first + math.prod(shape) * dtype.itemsize])
            joined = bytearray().join(pieces)
            flat = torch.frombuffer(joined, dtype=dtype) if joined else torch.empty(0, dtype=dtype)
            total = int(sizes.sum())
            shape = (*shapes[0][:-1], total) if last else (total, *shapes[0][1:])
            parts.append((key, flat.view(shape), len(shape) - 1 if last else 0, sizes))
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

    def __init__(self, path: str):
        super().__init__(path, name=_TABLE, schema=object)

    def connect(self) -> None:
        super().connect()
        # Large pages: a graph of a megabyte spans 16 pages, not 256 (set before the table is
        # made; no effect on a table that exists).
        self.cursor.execute("PRAGMA page_size = 65536")

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
    table = _Table(path)
    light: list[Data] = []
    pending: list[bytes] = []
    try:
        for graph in source.graphs(start, end, progress=progress):
            light.append(_light(graph))
            pending.append(pack(graph))
            if len(pending) == _INSERT_EVERY:
                table.multi_insert(range(len(light) - len(pending), len(light)), pending)
                pending = []
        if pending:
            table.multi_insert(range(len(light) - len(pending), len(light)), pending)
    finally:
        table.close()
    return light


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
            _Table(path).close()
            _join(parts, [len(light) for light in lights], path)
        finally:
            for part in parts:
                Path(part).unlink(missing_ok=True)
        return [g for light in lights for g in light]
    return _write_range(source, 0, source.total, path, progress)


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
        name = cache_name(self.source)
        return [f"{name}.db", f"{name}.labels.pt"]

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
