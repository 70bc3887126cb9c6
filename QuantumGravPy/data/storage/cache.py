"""Datasets processed once and cached in files named by a digest of what they depend on.

A cache is built from a :class:`GraphSource` (the generated causal sets, or the user's files):
a change to any of its parameters names another file, so a stale cache is never reused, and
files are written under a temporary name and renamed, so an interrupted build leaves nothing a
later run would load. A cache is read as data only (:func:`~.saved_graphs.load_plain`): one that
holds anything else, planted where a shared ``data.root`` lets others write, is rebuilt, never
run. :class:`DigestCachedDataset` holds the graphs in memory (one ``.pt``
file); :mod:`.disk` keeps them in a table read per batch. Either is built by one process or by
several, each a contiguous range of the samples, joined in order.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from torch_geometric.data import Data, InMemoryDataset

from ...compat import pyg
from ...errors import DataError, cause
from .ranges import DistributedRangeSplitter, in_parallel
from .saved_graphs import load_collated

log = logging.getLogger(__name__)


class GraphSource(Protocol):
    """Where a cache's graphs come from: generated causal sets or the user's files."""

    prefix: str  # the cache file's name starts with it
    params: dict[str, Any]  # everything the graphs depend on (hashed into the name)
    total: int  # samples before any filter
    # (optional) the per-pair targets its graphs hold, which disk storage does not keep in memory
    pair_keys: frozenset[str]

    def graphs(self, start: int, end: int, *, progress: bool) -> Iterator[Data]:
        """Samples ``start`` to ``end - 1`` as graphs, in order (filtered ones left out)."""
        ...

    def rejected_all(self) -> str:
        """The error when a filter left no graph at all."""
        ...


def digest(params: dict[str, Any]) -> str:
    """A short name for ``params`` (plain JSON values): equal exactly when they are."""
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]


def cache_name(source: GraphSource) -> str:
    """``<prefix>_<digest>``: the name of the source's cache files, without the suffix."""
    return f"{source.prefix}_{digest(source.params)}"


def collect(source: GraphSource, *, world_size: int = 1, progress: bool = True) -> list[Data]:
    """Every graph of ``source``, in order; with ``world_size`` > 1 that many processes make
    contiguous ranges, joined in order: the same graphs as one process makes."""
    if world_size > 1:
        parts = in_parallel(_collect_part, world_size, source, progress)
        graphs = [g for part in parts for g in part]
    else:
        graphs = list(source.graphs(0, source.total, progress=progress))
    if not graphs:
        raise DataError(source.rejected_all())
    return graphs


def _collect_part(rank: int, world_size: int, source: GraphSource, progress: bool) -> list[Data]:
    start, end = DistributedRangeSplitter(source.total, world_size).get_rank_range(rank)
    return list(source.graphs(start, end, progress=progress and rank == 0))


class DigestCachedDataset(pyg.ProcessOnce, InMemoryDataset):
    """The graphs of ``source`` in memory, cached in ``root/processed/<prefix>_<digest>.pt``
    and built on first use by ``world_size`` processes."""

    def __init__(
        self,
        root: str,
        source: GraphSource,
        *,
        transform: Callable | None = None,
        progress: bool = True,
        world_size: int = 1,
    ):
        self.source = source
        self.params = source.params
        self.progress = progress
        self.world_size = world_size  # processes that build a missing cache
        super().__init__(root, transform=transform, log=False)
        path = self.processed_paths[0]
        try:
            self.load(path)
        except (PermissionError, FileNotFoundError):
            raise
        except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, DataError) as e:
            # truncated or half copied (a killed copy, a full shared disk), or planted: it is
            # derived from the data, so it is built again rather than ending the run
            log.warning(
                "%s: the processed cache cannot be read (%s); building it again from the data",
                path,
                str(e).removeprefix(f"{path}: ")
                if isinstance(e, DataError)
                else cause(e).split(". ")[0],
            )
            os.unlink(path)
            self.process()
            self.load(path)

    def load(self, path: str, data_cls: type = Data) -> None:
        """``InMemoryDataset.load`` without its fallback to unrestricted unpickling."""
        self.data, self.slices = load_collated(path)

    @property
    def raw_file_names(self) -> list[str]:
        return []

    @property
    def processed_file_names(self) -> list[str]:
        return [f"{cache_name(self.source)}.pt"]

    def download(self) -> None:  # nothing to fetch: the graphs are built locally
        pass

    def process(self) -> None:
        log.info(
            "processing %d samples into %s with %d process(es)",
            self.source.total,
            self.processed_paths[0],
            self.world_size,
        )
        graphs = collect(self.source, world_size=self.world_size, progress=self.progress)
        tmp = self.processed_paths[0] + f".tmp{os.getpid()}"
        self.save(graphs, tmp)
        os.replace(tmp, self.processed_paths[0])

    def num_classes_of(self, name: str) -> int | None:
        """The classes of a label when the source knows them without reading the graphs."""
        classes = getattr(self.source, "num_classes_of", None)
        return classes(name) if callable(classes) else None
