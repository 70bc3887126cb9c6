"""The causal sets of a Zarr store or HDF5 file as graphs: each sample's causal or link
matrix read, checked and put in a natural labelling, with its targets and node features.

Julia stores arrays column-major, so a matrix Julia holds as ``M[i, j]`` reads here as its
transpose. ``data.transpose: auto`` decides per file from its first matrix
(:func:`file_orientation`): upper triangular is read as stored, lower triangular is transposed
(Julia's orientation); a matrix triangular in neither orientation (elements not in a natural
order) needs ``data.transpose`` set.

Every causal set becomes a graph as the embedded ones are: its elements in a natural labelling
(every relation points to a later element), its links as edges in both directions, node
features computed from the causal structure (or read from per-element arrays), and the arrays
of ``data.targets`` as graph attributes (one value per causal set), node attributes (one per
element) or values per pair (an n x n matrix, read at the set's relations or links,
``data.pairs``, which the graph holds as ``relations_index`` or ``links_index``).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
import torch
from torch_geometric.data import Data

from ...config import DataConfig
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
from .graph_files import numbers
from .pair_targets import order_pairs, values_at_pairs
from .stores import Samples

log = logging.getLogger(__name__)


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


# Samples whose longest chains are computed together: at most this many elements (a few MB of
# links and features held at once), so the sweep's fixed cost per wave is shared by dozens of
# large causal sets and a file of any size streams through bounded memory.
_BLOCK_ELEMENTS = 1 << 16


def causal_set_graphs(
    samples: Samples, first: int, last: int, transpose: bool, provenance: bool
) -> Iterator[tuple[int, Data]]:
    """(index, graph) for the causal sets ``first`` to ``last - 1`` of an open file, in order,
    read a sample at a time and built a block at a time (see :func:`build_graphs`)."""
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


def file_orientation(samples: Samples, data_cfg: DataConfig) -> bool:
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
