"""Batches padded to fixed budgets of nodes, edges and graphs (``training.pad_batches``).

A compiled step is specialised to the shapes it sees; node-budget batches
(``training.batch_nodes``) bound the nodes of a batch but not their exact number, nor the
edges or graphs. Padded to the same shapes every time, the step is compiled once, and on a GPU
captured once as CUDA graphs (``mode="reduce-overhead"``) and replayed, which removes the
launch of each of its hundreds of small kernels: what bounds small graphs on a GPU.

The padding makes graphs of its own, after the real ones: zero features, one node each (the
last takes the remaining padding nodes). The padding edges run from the first padding node,
which receives none, to the others in turn, at most :data:`PADDING_DEGREE` into each: no
cycle, so no padding value grows from layer to layer (self-loops on one node made it grow by
the number of edges at every layer, past float16's range in three). No edge joins a padding
node to a real one, and the built-in model normalises and pools each graph by itself, so the
real graphs' outputs are what they would be without padding; the loss and the metrics read only
the real rows, and so do the gradients.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import Dataset
from torch_geometric.data import Batch

from ...compat import pyg
from ...errors import RunError
from ..sources.datasets import graph_sizes

# The most padding edges into one padding node: its sum of messages stays the size of a real
# node's with that many neighbours. Sets the padding nodes a batch holds beyond the graphs'.
PADDING_DEGREE = 128


class Budgets(NamedTuple):
    """What every padded batch holds: nodes, edges and graphs (one graph at least of them
    padding, which the remaining padding nodes belong to)."""

    nodes: int
    edges: int
    graphs: int


def budgets(dataset: Dataset | list, batch_nodes: int, *, repeats: bool = False) -> Budgets:
    """The budgets that every batch of at most ``batch_nodes`` nodes of ``dataset`` fits.

    Graphs: as many of the smallest graphs as fit ``batch_nodes``, and one for the padding.
    Edges: the most a batch can hold, bounded as a knapsack of ``batch_nodes`` nodes filled
    with the graphs of most edges per node first, the last one in part (no batch of whole
    graphs holds more); ``repeats`` (a sampler that can draw a graph twice in a batch): the
    graph of most edges per node, as often as it fits. Nodes: ``batch_nodes``, one for each
    padding graph, and enough to receive all padding edges at :data:`PADDING_DEGREE` each.
    """
    nodes, edges = graph_sizes(dataset)
    fit = int(np.searchsorted(np.cumsum(np.sort(nodes)), batch_nodes, side="right"))
    ratio = edges / np.maximum(nodes, 1)
    if repeats:
        fit = batch_nodes // max(int(nodes.min()), 1)
        return _with_room(batch_nodes, int(np.ceil(float(ratio.max()) * batch_nodes)), fit + 1)
    order = np.argsort(-ratio, kind="stable")
    filled = np.cumsum(nodes[order])
    whole = int(np.searchsorted(filled, batch_nodes, side="right"))  # graphs that fit whole
    edge_budget = float(edges[order[:whole]].sum())
    if whole < len(order):  # and the part of the next that fits
        room = batch_nodes - (int(filled[whole - 1]) if whole else 0)
        edge_budget += room * edges[order[whole]] / max(int(nodes[order[whole]]), 1)
    return _with_room(batch_nodes, int(np.ceil(edge_budget)), fit + 1)


def _with_room(batch_nodes: int, edges: int, graphs: int) -> Budgets:
    receivers = -(-edges // PADDING_DEGREE)  # for a batch with no edges of its own
    return Budgets(nodes=batch_nodes + graphs + 1 + receivers, edges=edges, graphs=graphs)


def pad_batch(batch: Batch, budgets: Budgets, graph_features: Sequence[str] = ()) -> Batch:
    """What the model reads of ``batch`` (``x``, ``edge_index``, ``batch`` and the graph-level
    ``graph_features``), padded to ``budgets``: the real nodes, edges and graphs first, in
    their order."""
    x, edge_index, index = batch.x, batch.edge_index, batch.batch
    n, e, g = x.shape[0], edge_index.shape[1], batch.num_graphs
    if n >= budgets.nodes or e > budgets.edges or g >= budgets.graphs:
        raise RunError(
            f"a batch of {n} nodes, {e} edges and {g} graphs does not fit the padding budgets "
            f"{tuple(budgets)} (nodes, edges, graphs); this is a bug, please report it"
        )
    device = x.device
    fill_nodes, fill_graphs = budgets.nodes - n, budgets.graphs - g
    # one padding node for each padding graph, the rest to the last
    extra = torch.arange(fill_nodes, device=device).clamp_(max=fill_graphs - 1).add_(g)
    # from the first padding node (which receives none) to the others in turn: no cycle
    to = torch.arange(budgets.edges - e, device=device).remainder_(fill_nodes - 1).add_(n + 1)
    edges = torch.stack([torch.full_like(to, n), to])
    padded = Batch(
        x=torch.cat([x, x.new_zeros(fill_nodes, *x.shape[1:])]),
        edge_index=torch.cat([edge_index, edges.to(edge_index.dtype)], dim=1),
        batch=torch.cat([index, extra.to(index.dtype)]),
    )
    for name in graph_features:
        value = batch[name].reshape(g, -1)
        padded[name] = torch.cat([value, value.new_zeros(fill_graphs, value.shape[1])])
    pyg.set_num_graphs(padded, budgets.graphs)
    return padded
