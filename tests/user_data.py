"""Importable helpers that configs in the tests name by dotted path."""

import torch
from torch_geometric.data import Data


def ring_graphs(num_graphs: int = 40, num_features: int = 3) -> list[Data]:
    """Rings (class 0) and paths (class 1) of 5 to 9 nodes, with constant node features."""
    graphs = []
    for i in range(num_graphs):
        n = 5 + i % 5
        src = torch.arange(n - 1)
        edges = torch.stack([src, src + 1])
        label = i % 2
        if label == 0:
            edges = torch.cat([edges, torch.tensor([[n - 1], [0]])], dim=1)
        edges = torch.cat([edges, edges.flip(0)], dim=1)
        graphs.append(
            Data(x=torch.ones(n, num_features), edge_index=edges, y=torch.tensor([label]))
        )
    return graphs


def not_a_dataset() -> int:
    return 42


def nan_loss(outputs, batch):
    """A criterion written as a function of (outputs, batch) that always diverges."""
    return outputs.sum() * float("nan")


def mean_cross_entropy(outputs, batch):
    return torch.nn.functional.cross_entropy(outputs, batch.y)
