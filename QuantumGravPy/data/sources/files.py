"""Causal sets from Zarr stores and HDF5 files, as QuantumGrav.jl writes them, as graphs.

Two layouts are read (``data.layout``):

- ``groups``: one group per causal set, ``cset_1``, ``cset_2``, ... (1-based), each holding its
  causal matrix (``adj``) or link matrix (``linkmat``), per-element vectors and scalars stored
  as 1-element arrays;
- ``stacked``: arrays with the sample index first: matrices (S, n_max, n_max), per-element
  arrays (S, n_max), scalars (S,), and the valid size of each sample in ``data.size`` (the rest
  is zero padding).

Each causal set becomes a graph as the embedded ones are (:mod:`.causal_set_files`: the
matrices' orientation, the natural labelling, the targets). zarr and h5py are the ``files``
extra. Files of general graphs (the ``graphs`` layout, and saved PyG graphs) are read as they
are (:mod:`.graph_files`), through the same cache, storage and provenance.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from functools import cached_property
from typing import Any

import torch
from torch_geometric.data import Data

from ... import logs
from ...config import DataConfig, UserFunction
from ...errors import DataError
from ..storage.cache import DigestCachedDataset, collect
from .causal_set_files import causal_set_graphs, file_orientation
from .formats import format_of
from .graph_files import read_graph
from .stores import Samples, find_files, fingerprint, open_store

log = logging.getLogger(__name__)

# Bump when the graphs built from the same files and settings change, so caches are rebuilt.
FORMAT_VERSION = 2  # 2: every graph records its file and sample


def file_counts(data_cfg: DataConfig) -> list[int]:
    """How many causal sets each file of ``data.files`` holds, in order."""
    counts = []
    for path in find_files(data_cfg.files):
        with open_store(path) as store:
            counts.append(Samples(store, path, data_cfg).count)
    return counts


class FileSource:
    """The causal sets of ``data.files`` as a source of graphs for a cache on disk.

    Each graph says where it came from: ``source_file`` (the file's position among
    ``data.files``' matches) and ``source_sample`` (the sample's position in its file); with
    ``provenance`` also, per node, ``source_element`` (for predictions of node-level tasks; a
    cache of its own).
    """

    prefix = "files"

    def __init__(self, data_cfg: DataConfig, *, provenance: bool = False):
        self.data_cfg = data_cfg
        self.provenance = provenance
        self.params = cache_params(data_cfg) | ({"provenance": 1} if provenance else {})

    @cached_property
    def counts(self) -> list[int]:  # opens every file: only when graphs are built
        return file_counts(self.data_cfg)

    @property
    def total(self) -> int:
        return sum(self.counts)

    def graphs(self, start: int, end: int, *, progress: bool = True) -> Iterator[Data]:
        return iter_range(
            self.data_cfg, self.counts, start, end, progress=progress, provenance=self.provenance
        )

    @cached_property
    def pair_keys(self) -> frozenset[str]:
        """The targets read per pair (the matrices of ``data.targets``, with ``data.pairs``),
        from the first causal set's arrays."""
        cfg = self.data_cfg
        if cfg.pairs is None or not cfg.targets or cfg.reader is not None:
            return frozenset()
        path = find_files(cfg.files)[0]
        if format_of(path).holds_graphs:
            return frozenset()
        with open_store(path) as store:
            samples = Samples(store, path, cfg)
            if samples.layout == "graphs":
                return frozenset()
            return frozenset(
                a for a, name in cfg.targets.items() if samples.read(0, name).ndim == 2
            )

    def rejected_all(self) -> str:
        return (
            f"data.pre_filter: {self.data_cfg.pre_filter} rejected all {self.total} causal sets "
            f"of data.files ({', '.join(map(str, find_files(self.data_cfg.files)))})"
        )


def read_files(data_cfg: DataConfig, *, progress: bool = True, world_size: int = 1) -> list[Data]:
    """Every causal set of ``data.files`` as a graph, hooks applied, in file and sample order.

    With ``world_size`` > 1 that many processes read contiguous ranges of the samples (over
    all files) and the parts are joined in order: the same graphs as one process reads.
    """
    return collect(FileSource(data_cfg), world_size=world_size, progress=progress)


def iter_range(
    data_cfg: DataConfig,
    counts: list[int],
    start: int,
    end: int,
    *,
    progress: bool = True,
    provenance: bool = False,
) -> Iterator[Data]:
    """Causal sets ``start`` to ``end - 1`` of ``data.files`` (numbered over all files in
    order; ``counts``: how many each file holds), as graphs with the hooks applied, one at a
    time; with ``provenance``, each says where it came from (see :class:`FileSource`)."""
    pre_filter = _hook(data_cfg.pre_filter, "data.pre_filter")
    pre_transform = _hook(data_cfg.pre_transform, "data.pre_transform")
    reader = _hook(data_cfg.reader, "data.reader")
    bar = logs.progress(
        total=end - start, desc="preparing causal sets", unit="causal set", enabled=progress
    )
    offset = 0
    for number, (path, count) in enumerate(zip(find_files(data_cfg.files), counts, strict=True)):
        first, last = max(start - offset, 0), min(end - offset, count)
        offset += count
        if first >= last:
            continue
        with open_store(path) as store:
            samples = Samples(store, path, data_cfg)
            arrays = reader is None and samples.layout != "graphs"  # causal sets' matrices
            transpose = file_orientation(samples, data_cfg) if arrays else False
            for index, graph in _graphs(samples, first, last, transpose, reader, provenance):
                bar.update()
                if pre_filter is not None and not pre_filter(graph):
                    continue
                if pre_transform is not None:
                    graph = pre_transform(graph)
                # where it came from (two numbers: every run's test predictions name it)
                graph.source_file = torch.tensor([number])
                graph.source_sample = torch.tensor([index])
                if provenance and "source_element" not in graph:  # a reader's: as it numbers
                    graph.source_element = torch.arange(graph.num_nodes)
                yield graph
    bar.close()


def _graphs(
    samples: Samples,
    first: int,
    last: int,
    transpose: bool,
    reader: Callable | None,
    provenance: bool,
) -> Iterator[tuple[int, Data]]:
    """(index, graph) for samples ``first`` to ``last - 1`` of an open file, in order."""
    if reader is not None:
        for index in range(first, last):
            graph = reader(str(samples.path), index)
            if not isinstance(graph, Data):
                raise DataError(
                    f"data.reader: {samples.cfg.reader}({str(samples.path)!r}, {index}) "
                    f"returned {type(graph).__name__}, expected a torch_geometric Data"
                )
            yield index, graph
        return
    if samples.layout == "graphs":
        for index in range(first, last):
            yield index, read_graph(samples, index)
        return
    yield from causal_set_graphs(samples, first, last, transpose, provenance)


def _hook(dotted: str | None, key: str) -> Callable | None:
    return None if dotted is None else UserFunction(dotted, key)


def cache_params(data_cfg: DataConfig) -> dict[str, Any]:
    """Everything the processed cache depends on: a change to any of it rebuilds the cache."""
    files = find_files(data_cfg.files)
    return {
        "files": [[str(p.resolve()), fingerprint(p)] for p in files],
        "layout": data_cfg.layout,
        "relations": data_cfg.relations,
        "links": data_cfg.links,
        "size": data_cfg.size,
        "targets": dict(sorted(data_cfg.targets.items())),
        "node_features": list(data_cfg.node_features) if data_cfg.node_features else None,
        **({"light_cone_ranks": True} if data_cfg.light_cone_ranks else {}),
        **({"pairs": data_cfg.pairs} if data_cfg.pairs else {}),  # absent: caches stay valid
        "transpose": data_cfg.transpose,
        "hooks": [data_cfg.reader, data_cfg.pre_filter, data_cfg.pre_transform],
        "version": FORMAT_VERSION,
    }


class FileDataset(DigestCachedDataset):
    """The causal sets of ``data.files`` as graphs, processed once and cached under ``data.root``.

    The cache file is named by a digest of :func:`cache_params`: the files (with sizes and
    modification times), the field mapping, the hooks and the format version, so a change to
    any of them builds a new one. ``data.transform`` is applied each time a graph is read.
    """

    def __init__(
        self,
        data_cfg: DataConfig,
        *,
        progress: bool = True,
        world_size: int = 1,
        provenance: bool = False,
    ):
        super().__init__(
            data_cfg.root,
            FileSource(data_cfg, provenance=provenance),
            transform=_hook(data_cfg.transform, "data.transform"),
            progress=progress,
            world_size=world_size,
        )
