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
of ``data.targets`` as graph attributes (one value per causal set) or node attributes (one per
element). zarr and h5py are the ``files`` extra.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from functools import cached_property
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data
from tqdm.auto import tqdm

from ..config import resolve, task_list
from ..errors import ConfigError, DataError
from ..physics import (
    is_naturally_labelled,
    natural_labelling,
    node_features,
    order_violation,
    transitive_closure,
    transitive_reduction,
)
from .cache import DigestCachedDataset, collect
from .stores import Samples, find_files, fingerprint, open_store

log = logging.getLogger(__name__)

# Bump when the graphs built from the same files and settings change, so caches are rebuilt.
FORMAT_VERSION = 1


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


def _values(array: np.ndarray, where: str) -> torch.Tensor:
    if array.dtype.kind == "f":
        if not np.isfinite(array).all():
            raise DataError(f"{where} holds NaN or infinite values")
        return torch.from_numpy(array.astype(np.float32))
    if array.dtype.kind in "biu":
        return torch.from_numpy(array.astype(np.int64))
    raise DataError(f"{where}: expected numbers, found {array.dtype}")


def build_graph(samples: Samples, index: int, transpose: bool, *, provenance: bool = False) -> Data:
    """Sample ``index`` of an open file as a graph (see the module's description).

    ``provenance``: the graph also holds ``source_element``, each node's element as the file
    numbers it (nodes are put in a natural labelling, which may reorder them)."""
    cfg, path = samples.cfg, samples.path
    where = f"{path}: {samples.where(index)}"
    matrix = samples.read(index, samples.matrix)
    _check_square(matrix, where, samples.matrix)
    m = torch.from_numpy(matrix.astype(bool))
    if transpose:
        m = m.t().contiguous()
    n = m.shape[0]
    if samples.is_links:
        relations = transitive_closure(m)
        problem = order_violation(relations)
        if problem:
            problem = f"the links close to a cycle ({problem})"
    else:
        relations = m
        problem = order_violation(relations)
    if problem:
        raise DataError(f"{where}: {samples.matrix!r} is not a strict partial order: {problem}")
    links = m if samples.is_links else transitive_reduction(relations)
    order = None if is_naturally_labelled(relations) else natural_labelling(relations)
    if order is not None:
        relations = relations[order][:, order]
        links = links[order][:, order]
    attributes: dict[str, torch.Tensor] = {}
    for attribute, name in cfg.targets.items():
        value = _values(samples.read(index, name), f"{where}: {name!r}").reshape(-1)
        if value.numel() == n and n != 1:
            attributes[attribute] = value if order is None else value[order]
        elif value.numel() == 1:
            attributes[attribute] = value
        else:
            raise DataError(
                f"{where}: {name!r} (data.targets.{attribute}) holds {value.numel()} values for "
                f"a causal set of {n} elements: expected 1 (per causal set) or {n} (per element)"
            )
    if cfg.node_features is None:
        x = node_features(relations[None], links[None])[0]
    else:
        columns = []
        for name in cfg.node_features:
            value = _values(samples.read(index, name), f"{where}: {name!r}").float()
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
    if provenance:
        attributes["source_element"] = torch.arange(n) if order is None else order
    edges = links.nonzero().t()
    return Data(x=x, edge_index=torch.cat([edges, edges.flip(0)], dim=1), **attributes)


def file_counts(data_cfg: Any) -> list[int]:
    """How many causal sets each file of ``data.files`` holds, in order."""
    counts = []
    for path in find_files(data_cfg.files):
        with open_store(path) as store:
            counts.append(Samples(store, path, data_cfg).count)
    return counts


def check_file_targets(config: Any) -> None:
    """Before anything is read: every task's target must be one of ``data.targets``, the
    attributes a graph of ``data.files`` gets. The error suggests the mapping when the first
    file holds an array of the target's name. Skipped when a hook (``data.reader``,
    ``data.pre_transform``, ``data.transform``) may add attributes itself."""
    data = config.data
    if not data.files or data.reader or data.pre_transform or data.transform:
        return
    explicit = bool(config.tasks)
    for i, task in enumerate(task_list(config)):
        name = task.target_name
        if name in data.targets:
            continue
        key = f"tasks[{i}].target" if explicit else "data.targets"
        what = f"task {task.name!r}" if explicit else "the config has no tasks:, so its one task"
        reads = ", ".join(data.targets) or "nothing"
        arrays = _first_arrays(data)
        if name in arrays:
            hint = f"; the files hold an array {name!r}: set data.targets: {{{name}: {name}}}"
        else:
            held = f" (the first causal set holds {', '.join(sorted(arrays))})" if arrays else ""
            hint = f"; map it to an array of the files, data.targets: {{{name}: ARRAY}}{held}"
        raise ConfigError(
            f"{key}: {what} learns the graph attribute {name!r}, but data.targets reads "
            f"{reads} from data.files{hint}"
        )


def _first_arrays(data_cfg: Any) -> set[str]:
    """The array names of the first causal set of the first file (empty if it cannot be read:
    reading the files later says why)."""
    try:
        path = find_files(data_cfg.files)[0]
        with open_store(path) as store:
            return Samples(store, path, data_cfg).arrays
    except Exception:
        return set()


class FileSource:
    """The causal sets of ``data.files`` as a source of graphs for a cache on disk.

    ``provenance``: each graph also says where it came from (for predictions): ``source_file``
    (the file's position among ``data.files``' matches), ``source_sample`` (the sample's
    position in its file) and, per node, ``source_element``. A cache of its own.
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
    bar = tqdm(
        total=end - start,
        desc="causal sets",
        unit="causal set",
        leave=False,
        disable=None if progress else True,
    )
    offset = 0
    for number, (path, count) in enumerate(zip(find_files(data_cfg.files), counts, strict=True)):
        first, last = max(start - offset, 0), min(end - offset, count)
        offset += count
        if first >= last:
            continue
        with open_store(path) as store:
            samples = Samples(store, path, data_cfg)
            transpose = False if reader is not None else _file_orientation(samples, data_cfg)
            for index in range(first, last):
                if reader is not None:
                    graph = reader(str(path), index)
                    if not isinstance(graph, Data):
                        raise DataError(
                            f"data.reader: {data_cfg.reader}({str(path)!r}, {index}) returned "
                            f"{type(graph).__name__}, expected a torch_geometric Data"
                        )
                else:
                    graph = build_graph(samples, index, transpose, provenance=provenance)
                bar.update()
                if pre_filter is not None and not pre_filter(graph):
                    continue
                if pre_transform is not None:
                    graph = pre_transform(graph)
                if provenance:
                    graph.source_file = torch.tensor([number])
                    graph.source_sample = torch.tensor([index])
                    if "source_element" not in graph:  # a reader's graph: as it numbers them
                        graph.source_element = torch.arange(graph.num_nodes)
                yield graph
    bar.close()


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
    return None if dotted is None else resolve(dotted, key=key)


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
