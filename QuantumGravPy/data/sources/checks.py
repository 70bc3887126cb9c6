"""A user's own graphs (``data.dataset``, or graphs given from Python) checked as the readers of
files check theirs, once, when the run starts: node indices within their graph, the same
feature widths in every graph, finite numbers, and one target row per node or pair.

PyG's batches shift every ``*index*`` attribute by the nodes of the graphs before it, so an
index of ``n`` (or ``-1``) in a graph of ``n`` nodes reads a node of the next (or previous)
graph of the batch and trains without complaint; mixed widths fail deep in ``collate``; and a
NaN in the test graphs alone makes NaN predictions that metrics count. Each is one line here,
naming the data's source, the graph (its position in the dataset) and the attribute.

Each attribute is checked across many graphs at once, a few tensor operations for all: a
dataset held as PyTorch Geometric holds one in memory (``data.files``, an ``InMemoryDataset``)
in its joined tensors, without a graph object made; any other in chunks of graphs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import Dataset
from torch_geometric.data import Data, InMemoryDataset

from ...compat import pyg
from ...config import DataConfig, ModelConfig, TaskConfig
from ...errors import DataError
from ..storage.disk import DiskDataset
from .causal_sets import CausalSetDataset
from .files import FileDataset
from .provenance import provenance

# graphs read and checked together: at most CHUNK, holding about BUDGET numbers (a few tens of
# MB of temporaries, however large the graphs and their pairs)
CHUNK = 512
BUDGET = 1 << 22


@dataclass(frozen=True)
class GraphChecks:
    """What to check of every graph: ``indices`` (attributes of node pairs, [2, P]),
    ``numbers`` (attributes whose floating-point values must be finite), ``node_rows``
    (targets of one row per node), ``pair_rows`` (target -> the attribute of its pairs, one
    row per pair), ``graph_values`` (targets of one value, or vector, per graph). What graph 0
    holds every graph must hold (a batch is joined from what the first holds); what graph 0
    lacks is named by the tasks' and the model's own checks of it."""

    indices: tuple[str, ...] = ("edge_index",)
    numbers: tuple[str, ...] = ("x", "edge_attr")
    node_rows: tuple[str, ...] = ()
    pair_rows: dict[str, str] = field(default_factory=dict)
    graph_values: tuple[str, ...] = ()


def checks_for(tasks: Sequence[TaskConfig], model: ModelConfig) -> GraphChecks:
    """The checks a run of ``tasks`` (as :func:`~QuantumGravPy.config.task_list` gives them)
    with ``model`` needs: the indices, features and targets its model and tasks read."""
    indices, node_rows, graph_values, pair_rows = ["edge_index"], [], [], {}
    for task in tasks:
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
    features = ["x", "edge_attr", *model.graph_features]
    return GraphChecks(
        indices=tuple(dict.fromkeys(indices)),
        numbers=tuple(dict.fromkeys(features + targets)),
        node_rows=tuple(node_rows),
        pair_rows=pair_rows,
        graph_values=tuple(graph_values),
    )


def check_graphs(
    dataset: Dataset | Sequence[Data],
    checks: GraphChecks,
    *,
    source: str,
    name: Callable[[int], str] = lambda i: f"graph {i}",
) -> None:
    """Every graph of ``dataset`` as ``checks`` says; a DataError naming ``source`` (where the
    graphs come from), the graph (``name(i)``: by default its position) and the attribute at
    the first that is not."""
    first = dataset[0]
    held = {k for k in first.keys() if isinstance(first[k], torch.Tensor)}
    wanted = {
        "x",
        "edge_attr",
        *checks.indices,
        *checks.numbers,
        *checks.node_rows,
        *checks.pair_rows,
        *checks.graph_values,
    } & held
    fail = _Failure(f"{source}: ", name)
    stored = pyg.storage(dataset) if isinstance(dataset, InMemoryDataset) else None
    if stored is not None and "x" in stored[1] and wanted <= set(stored[1]):
        data, slices = stored
        sizes = sum(slices[k].diff() * _entry(k, data[k]) for k in wanted)  # per graph
        for start, stop in _chunks(sizes.tolist()):
            columns = {k: _stored(k, data[k], slices[k], start, stop) for k in wanted}
            nodes = slices["x"][start : stop + 1].diff()
            _check(columns, nodes, start, first, held, checks, fail)
        return
    graphs: list[Data] = []
    size = start = 0
    for i in range(len(dataset)):
        graph = dataset[i]
        if not isinstance(graph, Data):
            fail(i, f"is a {type(graph).__name__}, not a torch_geometric Data")
        graphs.append(graph)
        size += sum(graph[k].numel() for k in wanted if k in graph and torch.is_tensor(graph[k]))
        if len(graphs) == CHUNK or size >= BUDGET or i == len(dataset) - 1:
            columns = {key: _join(graphs, start, key, fail) for key in wanted}
            nodes = torch.tensor([graph.num_nodes for graph in graphs])
            _check(columns, nodes, start, first, held, checks, fail)
            graphs, size, start = [], 0, i + 1


def _chunks(sizes: list[int]) -> list[tuple[int, int]]:
    """Ranges of graphs, each of at most CHUNK graphs and about BUDGET numbers (or one graph)."""
    ranges, start, size = [], 0, 0
    for i, n in enumerate(sizes):
        size += n
        if i + 1 - start == CHUNK or size >= BUDGET or i == len(sizes) - 1:
            ranges.append((start, i + 1))
            start, size = i + 1, 0
    return ranges


def _entry(key: str, values: torch.Tensor) -> int:
    """The numbers in one entry of an attribute as PyG's storage joins it (node pairs along
    their last dimension, anything else along its first)."""
    if "index" in key:
        return values.numel() // max(values.shape[-1], 1)
    return values.numel() // max(values.shape[0], 1) if values.dim() else 1


def _stored(key: str, values: torch.Tensor, slices: torch.Tensor, start: int, stop: int) -> _Joined:
    """Graphs ``start`` to ``stop`` of attribute ``key`` as PyG's storage joins it: a view."""
    first, last = int(slices[start]), int(slices[stop])
    if values.dim():
        values = values.narrow(-1 if "index" in key else 0, first, last - first)
    return _Joined(values, slices[start : stop + 1].diff())


class _Failure:
    def __init__(self, source: str, name: Callable[[int], str]):
        self.source, self.name = source, name

    def __call__(self, graph: int, message: str) -> None:
        raise DataError(f"{self.source}{self.name(graph)}: {message}")


class _Joined:
    """An attribute of many graphs: ``values`` joined as PyG joins them (node pairs along
    their last dimension, anything else along the first), ``counts`` each graph's part."""

    def __init__(self, values: torch.Tensor, counts: torch.Tensor, shapes: list | None = None):
        self.values, self.counts, self.shapes = values, counts, shapes

    def graph_of(self, position: int) -> int:
        """The graph (counted from the first of these) that holds joined entry ``position``."""
        return int(torch.searchsorted(self.counts.cumsum(0), position, right=True))


def _join(graphs: list, start: int, key: str, fail: _Failure) -> _Joined:
    """``key`` (which graph 0 holds) of each of ``graphs`` (graph ``start`` onwards), joined."""
    values = []
    for i, graph in enumerate(graphs):
        value = graph[key] if key in graph else None
        if not isinstance(value, torch.Tensor):
            fail(start + i, f"has no tensor attribute {key!r}, which graph 0 has")
        if "index" in key and not _node_pairs(value):
            fail(
                start + i,
                f"{key!r} must hold node indices [2, pairs] (integers), found {value.dtype} of "
                f"shape {list(value.shape)}",
            )
        values.append(value)
    shapes = [tuple(v.shape) for v in values]
    if "index" in key:
        return _Joined(torch.cat(values, dim=1), torch.tensor([v.shape[1] for v in values]), shapes)
    # flattened: graphs of other widths cannot be joined as they are (they are refused)
    flat = torch.cat([v.reshape(-1) for v in values])
    return _Joined(flat, torch.tensor([v.numel() for v in values]), shapes)


def _node_pairs(value: torch.Tensor) -> bool:
    integer = not value.is_floating_point() and value.dtype != torch.bool
    return integer and value.dim() == 2 and value.shape[0] == 2


def _check(
    columns: dict[str, _Joined],
    nodes: torch.Tensor,
    start: int,
    first: Data,
    held: set[str],
    checks: GraphChecks,
    fail: _Failure,
) -> None:
    """The checks of graphs ``start`` onwards, each with ``nodes`` nodes, given their
    attributes ``columns`` (``shapes`` known: graph by graph; else as PyG keeps them)."""
    for key in ("x", "edge_attr"):  # the model's widths, read from graph 0
        column = columns.get(key)
        if column is None or column.shapes is None or key not in held:
            continue
        width = tuple(first[key].shape[1:])
        for i, shape in enumerate(column.shapes):
            if shape[1:] != width:
                fail(
                    start + i,
                    f"{key!r} has shape {list(shape)} where graph 0's is "
                    f"[*, {', '.join(map(str, width))}]: every graph needs the same width",
                )
    rows = {k: _rows(c) for k, c in columns.items() if "index" not in k}
    if "x" in rows:
        _same(rows["x"], nodes, start, fail, _said("'x' has {found} rows for {want} nodes"))
    pairs = {}
    for key in checks.indices:
        if key in columns:
            pairs[key] = _indices(key, columns[key], nodes, start, fail)
    if "edge_attr" in rows and "edge_index" in pairs:
        _same(
            rows["edge_attr"], pairs["edge_index"], start, fail, _needs("edge_attr", "edge_index")
        )
    for key in checks.node_rows:
        if key in rows:
            _same(rows[key], nodes, start, fail, _needs(key, None))
    for key, of in checks.pair_rows.items():
        if key in rows and of in pairs:
            _same(rows[key], pairs[of], start, fail, _needs(key, of))
    for key in checks.graph_values:
        column = columns.get(key)
        if column is not None and key in held:
            want = tuple(first[key].shape)
            if column.shapes is None:  # as PyG keeps them: rows joined, the rest alike
                rows = torch.full_like(column.counts, want[0] if want else 1)
                said = _said(f"{key!r} has {{found}} rows, graph 0's has {{want}}")
                _same(column.counts, rows, start, fail, said)
                continue
            for i, shape in enumerate(column.shapes):
                if shape != want:
                    fail(start + i, f"{key!r} has shape {list(shape)}, graph 0's {list(want)}")
    for key in checks.numbers:
        column = columns.get(key)
        if column is not None and column.values.is_floating_point():
            values = column.values
            bad = ~torch.isfinite(values.reshape(values.shape[0] if values.dim() else 1, -1)).all(1)
            if bool(bad.any()):
                graph = start + column.graph_of(int(bad.nonzero()[0]))
                fail(graph, f"{key!r} holds NaN or infinite values")


def _rows(column: _Joined) -> torch.Tensor:
    """Each graph's rows of an attribute (one for a single number)."""
    if column.shapes is None:
        return column.counts
    return torch.tensor([s[0] if s else 1 for s in column.shapes])


def _needs(key: str, of: str | None) -> Callable[[int, int], str]:
    what = "one row per node" if of is None else f"one row per pair of {of!r}"
    if key == "edge_attr":
        what = "one row per column of 'edge_index'"
    return _said(f"{key!r} needs {what} ({{want}} in this graph), found {{found}} rows")


def _said(template: str) -> Callable[[int, int], str]:
    return lambda want, found: template.format(want=want, found=found)


def _same(rows: torch.Tensor, want: torch.Tensor, start: int, fail: _Failure, message) -> None:
    """Each graph's ``rows`` equal to ``want``."""
    bad = rows != want
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        fail(start + i, message(int(want[i]), int(rows[i])))


def _indices(key: str, column: _Joined, nodes: torch.Tensor, start: int, fail: _Failure):
    """Each graph's number of pairs in ``key``, all checked within the graph's nodes."""
    values = column.values
    if not _node_pairs(values):
        fail(
            start,
            f"{key!r} must hold node indices [2, pairs] (integers), found "
            f"{values.dtype} of shape {list(values.shape)}",
        )
    if values.numel():
        bound = nodes.repeat_interleave(column.counts)
        bad = ((values < 0) | (values >= bound)).any(0)
        if bool(bad.any()):
            position = int(bad.nonzero()[0])
            i = column.graph_of(position)
            n, pair = int(nodes[i]), values[:, position].tolist()
            node = pair[0] if not 0 <= pair[0] < n else pair[1]
            fail(
                start + i,
                f"{key!r} names node {node}, but the graph has {n} nodes (0 to {n - 1}): a "
                "batch would read another graph's node there",
            )
    return column.counts


def user_graphs_source(data: DataConfig) -> str:
    """How an error names graphs of ``data.dataset``: by the function's import path."""
    return f"data.dataset ({data.dataset})"


def check_user_graphs(dataset: Any, checks: GraphChecks, data: DataConfig, *, source: str) -> None:
    """A user's graphs checked by ``checks`` (a run's: :func:`checks_for`); and the
    graphs of ``data.files`` held in memory, each read alone, for what only the run's tasks
    can say of them (a pair target of one sample per element, say), named by file and sample.
    Generated graphs, and files on disk (read whole once more for it), are not."""
    base = getattr(dataset, "unaugmented", dataset)
    if isinstance(base, FileDataset):
        check_graphs(base, checks, source="data.files", name=_file_sample(data, base))
    elif not isinstance(base, (CausalSetDataset, DiskDataset)):
        check_graphs(dataset, checks, source=source)


def _file_sample(data: DataConfig, dataset: FileDataset) -> Callable[[int], str]:
    """How a graph of ``data.files`` is named: its file and sample (or group), read only for
    the graph named."""

    def name(i: int) -> str:
        found = provenance(data, dataset)
        group = found.get("group")
        where = group[i] if group is not None and group[i] else f"sample {found['index'][i]}"
        return f"{found['source'][i]}: {where}"

    return name
