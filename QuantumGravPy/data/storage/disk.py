"""Datasets larger than memory: graphs in an SQLite table, read a batch at a time.

``data.storage: disk`` keeps the processed graphs in torch_geometric's on-disk store
(:class:`~torch_geometric.data.OnDiskDataset` over an SQLite table) instead of one tensor file
loaded whole. A loader reads only the graphs its sampler asks for, one query per batch, so a
dataset many times the size of memory trains with the memory of a few batches, and each DDP rank
reads only its own share.

What samplers and tasks read of every graph (labels, weights, per-element targets: every
attribute of at most one dimension except edge attributes) is kept beside the table in a small
file, so class counts, balancing weights and target statistics never scan the table.

Graphs are stored in a compact binary form (:mod:`.rows`: a table of numbers, a small header,
then each tensor's raw bytes), which reads several times faster than pickling each graph, and
from which a batch is assembled without a ``Data`` per graph. The cache is named by the same
digest as the in-memory one, built under a temporary name and renamed when complete, with
several processes each writing a contiguous range that is then joined in order.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data, OnDiskDataset, SQLiteDatabase

from ...compat import pyg
from ...errors import DataError
from .cache import GraphSource, cache_name
from .ranges import DistributedRangeSplitter, in_parallel
from .rows import FORMAT, header, pack, unpack
from .saved_graphs import load_collated

log = logging.getLogger(__name__)

_TABLE = "graphs"
_INSERT_EVERY = 128  # graphs written per transaction: bounds memory while building
_IN_QUERY = 900  # keys per query: below SQLite's oldest limit on parameters (999)
# kept for every graph too: training.batch_nodes packs and balances by them
NUM_NODES, NUM_EDGES = "qg_num_nodes", "qg_num_edges"


def _names(keys: list[str]) -> str:
    return ", ".join(k for k in keys if k not in (NUM_NODES, NUM_EDGES)) or "none"


class Kept:
    """What is kept beside the table, for every graph in order: its tensors of at most one
    dimension (edges' aside), concatenated per attribute with each graph's count of values.

    Held as a few long tensors, not a ``Data`` per graph (3 kB each: 200,000 causal sets would
    have taken 0.7 GB), and collated as ``InMemoryDataset.collate`` would the light graphs.
    """

    def __init__(self, skip: frozenset[str] = frozenset()) -> None:
        self.skip = skip  # per-pair targets: as many values as pairs, which disk storage is for
        self.keys: list[str] | None = None
        self.values: dict[str, list[torch.Tensor]] = {}
        self.counts: dict[str, list[torch.Tensor]] = {}
        self._pending: list[list[torch.Tensor]] = []
        self._length = 0

    def __len__(self) -> int:
        return self._length + len(self._pending)

    def add(self, graph: Data) -> None:
        kept = (
            key
            for key, value in graph.items()
            if isinstance(value, torch.Tensor)
            and value.dim() <= 1
            and key not in ("x", "edge_index", "pos")
            and key not in self.skip
            and not key.startswith("edge_")
        )
        keys = [*sorted(kept), NUM_NODES, NUM_EDGES]
        if self.keys is None:
            self.keys = keys
            self.values = {k: [] for k in keys}
            self.counts = {k: [] for k in keys}
        elif keys != self.keys:
            raise DataError(
                f"graph {len(self)} has the attributes {_names(keys)}, the first graph "
                f"{_names(self.keys)}: every graph needs the same"
            )
        counts = {
            NUM_NODES: torch.tensor([graph.num_nodes]),
            NUM_EDGES: torch.tensor([graph.num_edges]),
        }
        self._pending.append([counts[k] if k in counts else graph[k].reshape(-1) for k in keys])
        if len(self._pending) == _INSERT_EVERY:
            self._compact()

    def _compact(self) -> None:
        if not self._pending:
            return
        for k, parts in zip(self.keys or (), zip(*self._pending, strict=True), strict=True):
            self.values[k].append(torch.cat(parts))
            self.counts[k].append(torch.tensor([len(p) for p in parts]))
        self._length += len(self._pending)
        self._pending = []

    def extend(self, other: Kept) -> None:
        """Append ``other``'s graphs after these."""
        self._compact()
        other._compact()
        if self.keys is None:
            self.keys, self.values, self.counts = other.keys, other.values, other.counts
        elif other.keys is not None:
            if other.keys != self.keys:
                raise DataError(
                    f"graph {len(self)} has the attributes {_names(other.keys)}, the first "
                    f"graph {_names(self.keys)}: every graph needs the same"
                )
            for k in self.keys:
                self.values[k] += other.values[k]
                self.counts[k] += other.counts[k]
        self._length += other._length

    def collate(self) -> tuple[Data, dict[str, torch.Tensor]]:
        """Every attribute's values, concatenated, and where each graph's start."""
        self._compact()
        values, slices = {}, {}
        for k in self.keys or ():
            values[k] = torch.cat(self.values[k])
            counts = torch.cat(self.counts[k])
            slices[k] = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
        return Data(**values), slices


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
        if isinstance(indices, (torch.Tensor, np.ndarray)):
            indices = indices.tolist()
        else:
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


def _write_range(source: GraphSource, start: int, end: int, path: str, progress: bool) -> Kept:
    """Write samples ``start`` to ``end - 1`` into a new table at ``path``; return what is kept
    beside it."""
    table = None
    kept = Kept(getattr(source, "pair_keys", frozenset()))
    pending: list[bytes] = []
    try:
        for graph in source.graphs(start, end, progress=progress):
            kept.add(graph)
            pending.append(pack(graph))
            if table is None:
                table = _Table(path, page_size=page_size(len(pending[0])))
            if len(pending) == _INSERT_EVERY:
                table.multi_insert(range(len(kept) - len(pending), len(kept)), pending)
                pending = []
        table = table or _Table(path)
        if pending:
            table.multi_insert(range(len(kept) - len(pending), len(kept)), pending)
    finally:
        if table is not None:
            table.close()
    return kept


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
    each a contiguous range); return what is kept beside it (:class:`Kept`), in order."""
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
            _join(parts, [len(kept) for kept in lights], path)
        finally:
            for part in parts:
                Path(part).unlink(missing_ok=True)
        joined = Kept()
        for part in lights:
            joined.extend(part)
        return joined
    return _write_range(source, 0, source.total, path, progress)


def table_file_names(source: GraphSource) -> list[str]:
    """The files of a source's table and of the values kept beside it (named by the row
    format too: a table written in an earlier one is never read)."""
    name = f"{cache_name(source)}.rows{FORMAT}"
    return [f"{name}.db", f"{name}.labels.pt"]


class DiskDataset(pyg.ProcessOnce, OnDiskDataset):
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
        try:
            values, slices = load_collated(self.processed_paths[1])
        except (RuntimeError, EOFError, OSError, DataError) as e:
            if isinstance(e, (PermissionError, FileNotFoundError)):
                raise
            # cut short, or planted where a shared data.root lets others write: the table and
            # its labels are derived from the data, so both are built again, never run
            log.warning(
                "%s: the processed cache cannot be read (%s); building it again from the data",
                self.processed_paths[1],
                str(e).removeprefix(f"{self.processed_paths[1]}: "),
            )
            for path in self.processed_paths:
                Path(path).unlink(missing_ok=True)
            self.process()
            values, slices = load_collated(self.processed_paths[1])
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
        return self._read(unpack, data)

    def header(self, data: bytes) -> tuple[list, dict, int]:
        """A stored row's tensor specs, other attributes and where its tensors' bytes start."""
        return self._read(header, data)

    def _read(self, read: Callable, data: bytes) -> Any:
        try:
            return read(data)
        except DataError as e:
            raise DataError(
                f"{self.processed_paths[0]}: {e}; it is derived from the data: delete it and "
                "the next run builds it again"
            ) from None

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
            torch.save(light.collate(), f"{labels}.tmp{os.getpid()}")
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
