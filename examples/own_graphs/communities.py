"""Your own graphs: random graphs, some with a planted community.

Each graph has 10 to 200 nodes, each pair joined with a small probability. In half of them a
group of nodes (a community) is joined far more densely. What a model learns from them:

- ``y``, per graph: 1 if the graph has a community, else 0 (a graph-level class);
- ``member``, per node: 1.0 if the node is in the community, else 0.0 (a node-level binary);
- ``stats``, per graph: [number of nodes / 200, density of edges] (graph features).

Node features ``x``: the node's degree and the mean degree of its neighbours (over 10), and a
constant. ``make_graphs`` is seeded: every process of a job that calls it gets the same graphs
in the same order (they must; the run checks).
"""

from __future__ import annotations

import torch
from torch_geometric.data import Data
from torch_geometric.utils import degree, to_undirected


def make_graph(generator: torch.Generator) -> Data:
    n = int(torch.randint(10, 201, (1,), generator=generator))
    p = 4.0 / n  # a sparse background: about 4 neighbours a node
    planted = bool(torch.randint(0, 2, (1,), generator=generator))
    member = torch.zeros(n)
    prob = torch.full((n, n), p)
    if planted:
        k = max(5, n // 5)
        chosen = torch.randperm(n, generator=generator)[:k]
        member[chosen] = 1.0
        inside = member[:, None] * member[None, :] > 0
        prob[inside] = min(1.0, 0.5 + p)
    upper = torch.rand(n, n, generator=generator) < prob
    upper = torch.triu(upper, diagonal=1)
    edge_index = to_undirected(upper.nonzero().t(), num_nodes=n)
    deg = degree(edge_index[0], n)
    neighbours = torch.zeros(n).index_add_(0, edge_index[0], deg[edge_index[1]])
    x = torch.stack([deg / 10, neighbours / deg.clamp(min=1) / 10, torch.ones(n)], dim=1)
    density = edge_index.shape[1] / max(n * (n - 1), 1)
    return Data(
        x=x,
        edge_index=edge_index,
        y=torch.tensor([int(planted)]),
        member=member[:, None],
        stats=torch.tensor([[n / 200, density]]),
    )


def make_graphs(num_graphs: int = 400, seed: int = 0) -> list[Data]:
    """``num_graphs`` graphs, the same for the same seed (in every process of a job)."""
    generator = torch.Generator().manual_seed(seed)
    return [make_graph(generator) for _ in range(num_graphs)]
