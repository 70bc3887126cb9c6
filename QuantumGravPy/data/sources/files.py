"""Causal sets from Zarr stores and HDF5 files, as QuantumGrav.jl writes them, as graphs.

Two layouts are read (``data.layout``):

- ``groups``: one group per causal set, ``cset_1``, ``cset_2``, ... (1-based), each holding its
  causal matrix (``adj``) or link matrix (``linkmat``), per-element vectors and scalars stored
  as 1-element arrays;
- ``stacked``: arrays with the sample index first: matrices (S, n_max, n_max), per-element
  arrays (S, n_max), scalars (S,), and the valid size of each sample in ``data.size`` (the rest
  is zero padding).

Julia stores arrays column-major, so a matrix Julia holds as ``M[i, j]`` reads here as its
transpose. ``data.transpose: auto`` decides per file from its first matrix: upper triangular
is read as stored, lower triangular is transposed (Julia's orientation); a matrix triangular in
neither orientation (elements not in a natural order) needs ``data.transpose`` set.

Every causal set becomes a graph as the embedded ones are: its elements in a natural labelling
(every relation points to a later element), its links as edges in both directions, node
features computed from the causal structure (or read from per-element arrays), and the arrays
of ``data.targets`` as graph attributes (one value per causal set), node attributes (one per
element) or values per pair (an n x n matrix, read at the set's relations or links,
``data.pairs``, which the graph holds as ``relations_index`` or ``links_index``). zarr and h5py
are the ``files`` extra. Files of general graphs (the ``graphs`` layout, and saved PyG graphs)
are read as they are (:mod:`.graph_files`), through the same cache, storage and provenance.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np
import torch
from torch_geometric.data import Data

from ... import logs
from ...config import UserFunction
from ...errors import DataError
from ...physics import (
    NotAnOrder,
    NotTwoDimensional,
    OrderStructure,
    is_naturally_labelled,
    light_cone_ranks,
    order_structure,
    structure_features,
    transitive_closure,
)
from ..storage.cache import DigestCachedDataset, collect
from .formats import format_of
from .graph_files import numbers, read_graph
from .pair_targets import order_pairs, values_at_pairs
from .stores import Samples, find_files, fingerprint, open_store

log = logging.getLogger(__name__)

# Bump when the graphs built from the same files and settings change, so caches are rebuilt.
FORMAT_VERSION = 2  # 2: every graph records its file and sample


def _check_square(matrix: np.ndarray, where: str, name: str) -> None:
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise DataError(f"{where}: {name!r} is not square (shape {list(matrix.shape)})")


def _orientation(matrix: np.ndarray, setting: str, where: str) -> bool:
    """Whether to transpose this file's matrices: ``data.transpose``, or decided from one."""
    if setting != "auto":
        return setting == "true"
    m = torch.from_numpy(matrix.astype(bool))
    if is_naturally_labelled(m):
        return False
    if is_naturally_labelled(m.t()):
        return True
    raise DataError(
        f"{where}: data.transpose is auto, but the matrix is triangular in neither orientation "
        "(its elements are not in a natural order); set data.transpose: true for matrices "
        "written by Julia (column-major), false for ones written by Python"
    )


class _Sample(NamedTuple):
    """A causal set read and checked, waiting for the longest chains of its block."""

    structure: OrderStructure | None  # None when data.node_features gives x
    x: torch.Tensor | None
    attributes: dict[str, torch.Tensor]
    ranks: torch.Tensor | None = None  # data.light_cone_ranks: [n, 2], over n


def read_sample(
    samples: Samples,
    index: int,
    transpose: bool,
    *,
    provenance: bool = False,
    arrays: dict[str, np.ndarray] | None = None,
) -> _Sample:
    """Sample ``index`` of an open file, checked, in a natural labelling: all of its graph but
    the features that need the longest chains (see :func:`build_graphs`). ``arrays``: those
    of its arrays already read (see :func:`_arrays`), by name.

    ``provenance``: the graph also holds ``source_element``, each node's element as the file
    numbers it (nodes are put in a natural labelling, which may reorder them)."""
    cfg, path = samples.cfg, samples.path
    where = f"{path}: {samples.where(index)}"
    arrays = arrays or {}

    def read(name: str) -> np.ndarray:
        return arrays[name] if name in arrays else samples.read(index, name)

    matrix = read(samples.matrix)
    _check_square(matrix, where, samples.matrix)
    m = torch.from_numpy(matrix)
    if cfg.device != "cpu" and torch.cuda.is_available():  # the product and passes there
        m = m.to("cuda")
    n = m.shape[0]
    try:
        if samples.is_links:
            links = m.bool().t() if transpose else m.bool()
            try:
                related = transitive_closure(links)
                structure = order_structure(related)
            except NotAnOrder as e:
                raise NotAnOrder(f"the links close to a cycle ({e})") from None
        else:
            related = m.t() if transpose else m
            structure = order_structure(m, transposed=transpose)
    except NotAnOrder as e:
        raise DataError(f"{where}: {samples.matrix!r} is not a strict partial order: {e}") from None
    structure = OrderStructure(*(None if t is None else t.cpu() for t in structure))
    order = structure.labelling
    as_stored = related  # the relations in the file's labelling
    ranks = None
    if cfg.light_cone_ranks:  # in the natural labelling, from the links already found
        related = related.cpu() if order is None else related.cpu()[order][:, order]
        linked = torch.zeros(n, n, dtype=torch.bool)
        linked[structure.links[0], structure.links[1]] = True
        try:
            ranks = (light_cone_ranks(related, linked).float() + 0.5) / n
        except NotTwoDimensional as e:
            raise DataError(f"{where}: data.light_cone_ranks: {e}") from None
    attributes: dict[str, torch.Tensor] = {}
    pairs = None if cfg.pairs is None else order_pairs(cfg.pairs, as_stored, structure)
    for attribute, name in cfg.targets.items():
        value = numbers(read(name), f"{where}: {name!r}")
        matrix = value.dim() == 2 and value.shape[0] == n and value.shape[1] >= n
        if matrix and (n > 1 or pairs is not None):  # n x n: a value per pair
            if pairs is None:
                raise DataError(
                    f"{where}: {name!r} (data.targets.{attribute}) is a matrix of {n} x {n}, "
                    "a value per pair of elements: set data.pairs (relations or links) to read "
                    "it at the causal set's pairs"
                )
            attributes[attribute] = values_at_pairs(
                value, pairs, transpose, order, n, f"{where}: {name!r}", cfg.pairs
            )
            continue
        value = value.reshape(-1)
        if value.numel() == n and n != 1:
            attributes[attribute] = value if order is None else value[order]
        elif value.numel() == 1:
            attributes[attribute] = value
        else:
            raise DataError(
                f"{where}: {name!r} (data.targets.{attribute}) holds {value.numel()} values for "
                f"a causal set of {n} elements: expected 1 (per causal set), {n} (per element) "
                f"or a matrix of {n} x {n} (per pair: data.pairs)"
            )
    x = None
    if cfg.node_features is not None:
        columns = []
        for name in cfg.node_features:
            value = numbers(read(name), f"{where}: {name!r}").float()
            if transpose and samples.layout == "groups" and value.dim() == 2:
                value = value.t()  # Julia's n x F matrix reads as F x n (stacked: S x n x F)
            if value.dim() == 0 or value.shape[0] != n:
                raise DataError(
                    f"{where}: {name!r} (data.node_features) holds {value.numel()} values for "
                    f"{n} elements"
                )
            value = value.reshape(n, -1)
            columns.append(value if order is None else value[order])
        x = torch.cat(columns, dim=1)
    if pairs is not None:
        attributes[f"{cfg.pairs}_index"] = pairs
    if provenance:
        attributes["source_element"] = torch.arange(n) if order is None else order
    attributes["edge_index"] = torch.cat([structure.links, structure.links.flip(0)], dim=1)
    return _Sample(structure if x is None else None, x, attributes, ranks)


def build_graphs(block: list[_Sample]) -> list[Data]:
    """The graphs of a block of samples read by :func:`read_sample`: node features computed
    from the causal structure (the longest chains of all of them in one sweep) unless read."""
    computing = [s.structure for s in block if s.x is None]
    features = iter(structure_features(computing) if computing else [])
    xs = [next(features) if s.x is None else s.x for s in block]
    xs = [torch.cat([x, s.ranks], 1) if s.ranks is not None else x for x, s in zip(xs, block)]  # noqa: B905
    return [Data(x=x, **s.attributes) for x, s in zip(xs, block, strict=True)]


def file_counts(data_cfg: Any) -> list[int]:
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

    def __init__(self, data_cfg: Any, *, provenance: bool = False):
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


def read_files(data_cfg: Any, *, progress: bool = True, world_size: int = 1) -> list[Data]:
    """Every causal set of ``data.files`` as a graph, hooks applied, in file and sample order.

    With ``world_size`` > 1 that many processes read contiguous ranges of the samples (over
    all files) and the parts are joined in order: the same graphs as one process reads.
    """
    return collect(FileSource(data_cfg), world_size=world_size, progress=progress)


def iter_range(
    data_cfg: Any,
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
            transpose = _file_orientation(samples, data_cfg) if arrays else False
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


# Samples whose longest chains are computed together: at most this many elements (a few MB of
# links and features held at once), so the sweep's fixed cost per wave is shared by dozens of
# large causal sets and a file of any size streams through bounded memory.
_BLOCK_ELEMENTS = 1 << 16


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
    block: list[tuple[int, _Sample]] = []
    elements = 0
    for index, arrays in zip(range(first, last), _arrays(samples, first, last), strict=True):
        sample = read_sample(samples, index, transpose, provenance=provenance, arrays=arrays)
        block.append((index, sample))
        elements += len(sample.x if sample.structure is None else sample.structure.past)
        if elements >= _BLOCK_ELEMENTS or index == last - 1:
            yield from zip([i for i, _ in block], build_graphs([s for _, s in block]), strict=True)
            block, elements = [], 0


# Samples read ahead of the one being prepared.
_AHEAD = 2


def _arrays(samples: Samples, first: int, last: int) -> Iterator[dict[str, np.ndarray]]:
    """The arrays :func:`read_sample` reads (the causal or link matrix, the targets, the node
    features) of samples ``first`` to ``last - 1``, by name, each sample's read in a thread
    while the ones before it are prepared: reading (decompressing, and on a cluster's file
    system waiting for it) overlaps the matrix product, which releases the interpreter. A read
    that fails raises here, in order."""
    cfg = samples.cfg
    names = list(dict.fromkeys([samples.matrix, *cfg.targets.values(), *(cfg.node_features or ())]))

    def read(index: int) -> dict[str, np.ndarray]:
        return {name: samples.read(index, name) for name in names}

    with ThreadPoolExecutor(1, thread_name_prefix="qg-read") as pool:
        ahead: deque[Future] = deque()
        for index in range(first, last):
            while len(ahead) <= _AHEAD and index + len(ahead) < last:
                ahead.append(pool.submit(read, index + len(ahead)))
            yield ahead.popleft().result()


def _file_orientation(samples: Samples, data_cfg: Any) -> bool:
    """Whether to transpose a file's matrices, decided once per file from its first one."""
    where = f"{samples.path}: {samples.where(0)}"
    first = samples.read(0, samples.matrix)
    _check_square(first, where, samples.matrix)
    transpose = _orientation(first, data_cfg.transpose, where)
    log.info(
        "%s: %d causal sets (%s layout), %s",
        samples.path,
        samples.count,
        samples.layout,
        "matrices transposed (written column-major, as Julia does)"
        if transpose
        else "matrices read as stored (row-major)",
    )
    return transpose


def _hook(dotted: str | None, key: str) -> Callable | None:
    return None if dotted is None else UserFunction(dotted, key)


def cache_params(data_cfg: Any) -> dict[str, Any]:
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
        data_cfg: Any,
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
