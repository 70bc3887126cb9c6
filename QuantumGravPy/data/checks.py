"""A user's own graphs (``data.dataset``, or graphs given from Python) checked as the readers of
files check theirs, once, when the run starts: node indices within their graph, the same
feature widths in every graph, finite numbers, and one target row per node or pair.

PyG's batches shift every ``*index*`` attribute by the nodes of the graphs before it, so an
index of ``n`` (or ``-1``) in a graph of ``n`` nodes reads a node of the next (or previous)
graph of the batch and trains without complaint; mixed widths fail deep in ``collate``; and a
NaN in the test graphs alone makes NaN predictions that metrics count. Each is one line here,
naming the data's source, the graph (its position in the dataset) and the attribute.

The graphs are read in chunks and each attribute is checked across a chunk at once: a few
tensor operations per chunk, not per graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import Dataset
from torch_geometric.data import Data

from ..config import Config, task_list
from ..errors import DataError
from .causal_sets import CausalSetDataset
from .disk import DiskDataset
from .files import FileDataset

CHUNK = 512  # graphs read and checked together
_LIBRARY_MADE = (CausalSetDataset, DiskDataset, FileDataset)


@dataclass(frozen=True)
class GraphChecks:
    """What to check of every graph: ``indices`` (attributes of node pairs, [2, P]),
    ``numbers`` (attributes whose floating-point values must be finite), ``node_rows``
    (targets of one row per node), ``pair_rows`` (target -> the attribute of its pairs, one
    row per pair), ``graph_values`` (targets of one value, or vector, per graph); an attribute
    the first graph lacks is not asked of the others unless ``required``."""

    indices: tuple[str, ...] = ("edge_index",)
    numbers: tuple[str, ...] = ("x", "edge_attr")
    node_rows: tuple[str, ...] = ()
    pair_rows: dict[str, str] = field(default_factory=dict)
    graph_values: tuple[str, ...] = ()
    required: tuple[str, ...] = ("x",)


def checks_for(config: Config, *, labels: bool = True) -> GraphChecks:
    """The checks a run of ``config`` needs: the indices, features and targets its model and
    tasks read (without ``labels``, for prediction, the targets only where a graph holds
    them)."""
    indices, node_rows, graph_values, pair_rows = ["edge_index"], [], [], {}
    for task in task_list(config):
        if task.level == "edge" and task.pairs:
            indices.append(task.pairs)
        if not task.kind.needs_target:
            continue
        name = task.target_name
        if task.level == "edge" and task.pairs:
            pair_rows[name] = task.pairs
        elif task.level == "node":
            node_rows.append(name)
        else:
            graph_values.append(name)
    targets = [*node_rows, *pair_rows, *graph_values]
    features = ["x", "edge_attr", *config.model.graph_features]
    return GraphChecks(
        indices=tuple(dict.fromkeys(indices)),
        numbers=tuple(dict.fromkeys(features + targets)),
        node_rows=tuple(node_rows),
        pair_rows=pair_rows,
        graph_values=tuple(graph_values),
        required=("x", *config.model.graph_features, *(targets if labels else ())),
    )


def check_graphs(dataset: Dataset | Sequence[Data], checks: GraphChecks, *, source: str) -> None:
    """Every graph of ``dataset`` as ``checks`` says; a DataError naming ``source`` (where the
    graphs come from), the graph and the attribute at the first that is not."""
    first = dataset[0]
    held = {k for k in first.keys() if isinstance(first[k], torch.Tensor)}
    shapes = {name: tuple(first[name].shape[1:]) for name in ("x", "edge_attr") if name in held}
    graph_shapes = {name: tuple(first[name].shape) for name in checks.graph_values if name in held}
    for start in range(0, len(dataset), CHUNK):
        stop = min(start + CHUNK, len(dataset))
        if isinstance(dataset, (list, tuple)):
            graphs = dataset[start:stop]
        else:
            graphs = [dataset[i] for i in range(start, stop)]
        _Chunk(graphs, start, held, checks, source).check(shapes, graph_shapes)


class _Chunk:
    """Graphs ``start`` to ``start + len(graphs)`` of a dataset, checked together."""

    def __init__(self, graphs: list, start: int, held: set[str], checks: GraphChecks, source: str):
        self.graphs, self.start, self.held, self.checks = graphs, start, held, checks
        self.source = source
        self._columns: dict[str, list[torch.Tensor | None]] = {}

    def fail(self, position: int, message: str) -> None:
        raise DataError(f"{self.source}: graph {self.start + position}: {message}")

    def column(self, name: str) -> list[torch.Tensor | None]:
        """Each graph's ``name`` (None where a graph lacks it and need not have it)."""
        if name in self._columns:
            return self._columns[name]
        required = name in self.checks.required or name in self.held
        values = []
        for i, graph in enumerate(self.graphs):
            if not isinstance(graph, Data):
                self.fail(i, f"is a {type(graph).__name__}, not a torch_geometric Data")
            value = graph[name] if name in graph else None
            if not isinstance(value, torch.Tensor):
                if required:
                    self.fail(i, f"has no tensor attribute {name!r}, which graph 0 has")
                value = None
            values.append(value)
        self._columns[name] = values
        return values

    def check(self, shapes: dict[str, tuple], graph_shapes: dict[str, tuple]) -> None:
        checks = self.checks
        xs = self.column("x")
        for name, width in shapes.items():  # x, edge_attr: the model's widths, from graph 0
            for i, value in enumerate(self.column(name)):
                if tuple(value.shape[1:]) != width:
                    self.fail(
                        i,
                        f"{name!r} has shape {list(value.shape)} where graph 0's is "
                        f"[*, {', '.join(map(str, width))}]: every graph needs the same width",
                    )
        nodes = torch.tensor([graph.num_nodes for graph in self.graphs])
        for i, (x, n) in enumerate(zip(xs, nodes.tolist(), strict=True)):
            if x.shape[0] != n:
                self.fail(i, f"'x' has {x.shape[0]} rows for the graph's {n} nodes")
        pairs = {name: self.indices(name, nodes) for name in checks.indices}
        edges = pairs.get("edge_index")
        if "edge_attr" in shapes and edges is not None:
            self.rows("edge_attr", edges, "one row per column of 'edge_index'")
        for name in checks.node_rows:
            self.rows(name, nodes, "one row per node")
        for name, of in checks.pair_rows.items():
            if pairs.get(of) is not None:
                self.rows(name, pairs[of], f"one row per pair of {of!r}")
        for name, shape in graph_shapes.items():
            for i, value in enumerate(self.column(name)):
                if value is not None and tuple(value.shape) != shape:
                    self.fail(
                        i, f"{name!r} has shape {list(value.shape)}, graph 0 has {list(shape)}"
                    )
        for name in checks.numbers:
            self.finite(name)

    def indices(self, name: str, nodes: torch.Tensor) -> torch.Tensor | None:
        """Each graph's number of pairs in ``name``, all checked within its graph's nodes."""
        values = self.column(name)
        if all(v is None for v in values):
            return None
        for i, value in enumerate(values):
            if value is None:
                continue
            if (
                value.dim() != 2
                or value.shape[0] != 2
                or value.is_floating_point()
                or (value.dtype == torch.bool)
            ):
                self.fail(
                    i,
                    f"{name!r} must hold node indices [2, pairs] (integers), found "
                    f"{value.dtype} of shape {list(value.shape)}",
                )
        counts = torch.tensor([0 if v is None else v.shape[1] for v in values])
        if int(counts.sum()) == 0:
            return counts
        joined = torch.cat([v for v in values if v is not None], dim=1)
        bound = nodes.repeat_interleave(counts)
        bad = ((joined < 0) | (joined >= bound)).any(0)
        if bool(bad.any()):
            column = int(bad.nonzero()[0])
            i = int(torch.searchsorted(counts.cumsum(0), column, right=True))
            pair = joined[:, column].tolist()
            node = pair[0] if not 0 <= pair[0] < int(nodes[i]) else pair[1]
            self.fail(
                i,
                f"{name!r} names node {node}, but the graph has {int(nodes[i])} nodes (0 to "
                f"{int(nodes[i]) - 1}): a batch would read another graph's node there",
            )
        return counts

    def rows(self, name: str, expected: torch.Tensor, what: str) -> None:
        for i, (value, want) in enumerate(zip(self.column(name), expected.tolist(), strict=True)):
            if value is not None and (value.dim() == 0 or value.shape[0] != want):
                self.fail(
                    i,
                    f"{name!r} needs {what} ({want} in this graph), found shape "
                    f"{list(value.shape)}",
                )

    def finite(self, name: str) -> None:
        present = [(i, v) for i, v in enumerate(self.column(name)) if v is not None]
        if not present or not present[0][1].is_floating_point():
            return
        counts = torch.tensor([v.numel() for _, v in present])
        finite = torch.isfinite(torch.cat([v.reshape(-1) for _, v in present]))
        if not bool(finite.all()):
            where = int((~finite).nonzero()[0])
            position = int(torch.searchsorted(counts.cumsum(0), where, right=True))
            self.fail(present[position][0], f"{name!r} holds NaN or infinite values")


def user_graphs_source(config: Config) -> str:
    """How an error names graphs of ``data.dataset``: by the function's import path."""
    return f"data.dataset ({config.data.dataset})"


def check_user_graphs(dataset: Any, config: Config, *, source: str, labels: bool = True) -> None:
    """A user's graphs checked for a run of ``config`` (see :func:`checks_for`); the
    library's own datasets (generated, or read from files) were checked as they were made."""
    if not isinstance(getattr(dataset, "unaugmented", dataset), _LIBRARY_MADE):
        check_graphs(dataset, checks_for(config, labels=labels), source=source)
