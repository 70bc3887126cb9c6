"""Importable ``data.dataset`` functions whose graphs are wrong in one place, as a tester
makes them: an index out of its graph, mixed feature widths, NaN features or targets, a pair
target of the wrong length."""

import torch
from user_data import ring_graphs, rings_with_edge_heat, rings_with_heat


def bad_edge(graph: int = 7, node: str = "n", attribute: str = "edge_index", num_graphs=40):
    """ring_graphs (or, for another attribute than edge_index, rings_with_edge_heat with the
    edges copied as ``attribute``) with one index of graph ``graph`` set to ``node``: ``n``
    (the graph's number of nodes), ``n+5`` or ``-1``."""
    graphs = ring_graphs(num_graphs) if attribute == "edge_index" else rings_with_edge_heat()
    for g in graphs:
        if attribute != "edge_index":
            g[attribute] = g.edge_index.clone()
    target = graphs[graph]
    n = target.num_nodes
    value = {"n": n, "n+5": n + 5, "-1": -1}[node]
    index = target[attribute].clone()
    index[1, 0] = value
    target[attribute] = index
    return graphs


def mixed_widths(graph: int = 5, num_graphs: int = 40):
    """ring_graphs whose graph ``graph`` has 4 features a node, the others 3."""
    graphs = ring_graphs(num_graphs)
    graphs[graph].x = torch.ones(graphs[graph].num_nodes, 4)
    return graphs


def nan_features(graphs_with_nan=(3,), num_graphs: int = 40):
    """ring_graphs with a NaN feature in each graph of ``graphs_with_nan``."""
    graphs = ring_graphs(num_graphs)
    for i in graphs_with_nan:
        graphs[i].x = graphs[i].x.clone()
        graphs[i].x[0, 0] = float("nan")
    return graphs


def nan_heat(graph: int = 4):
    """rings_with_heat whose graph ``graph`` has a NaN node target ``heat``."""
    graphs = rings_with_heat()
    graphs[graph].heat = graphs[graph].heat.clone()
    graphs[graph].heat[0, 0] = float("nan")
    return graphs


def short_flow(graph: int = 6):
    """rings_with_edge_heat whose graph ``graph`` has one ``flow`` value fewer than edges."""
    graphs = rings_with_edge_heat()
    graphs[graph].flow = graphs[graph].flow[:-1]
    return graphs


def bad_edge_in_memory(node: str = "n"):
    """:func:`bad_edge`'s graphs held as PyTorch Geometric holds a dataset in memory."""
    from user_data import _InMemory

    return _InMemory(bad_edge(node=node))
