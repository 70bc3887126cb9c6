"""Your own model: GIN layers shared by a graph-level and a node-level head.

What the trainer needs of a model: ``__init__(in_channels, outputs, **model.kwargs)``, where
``outputs`` maps each task's name to ``(number of outputs, "graph" or "node")``, and
``forward(batch)`` returning ``{task: tensor}``, one row per graph or per node. DDP,
checkpoints, resuming, metrics, prediction and pictures are the trainer's.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import GINConv, global_add_pool, global_mean_pool


class CommunityGIN(nn.Module):
    def __init__(self, in_channels: int, outputs: dict, hidden: int = 32, layers: int = 3):
        super().__init__()
        self.levels = {task: level for task, (_, level) in outputs.items()}
        self.encode = nn.Linear(in_channels, hidden)
        self.convs = nn.ModuleList(
            GINConv(nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden)))
            for _ in range(layers)
        )
        self.heads = nn.ModuleDict(
            {
                # a graph head reads the mean and the sum of the nodes, and the graph's size
                task: nn.Sequential(
                    nn.Linear(2 * hidden + 2 if level == "graph" else hidden, hidden),
                    nn.ReLU(),
                    nn.Linear(hidden, n),
                )
                for task, (n, level) in outputs.items()
            }
        )

    def forward(self, batch):
        x = self.encode(batch.x)
        for conv in self.convs:
            x = x + conv(x, batch.edge_index).relu()
        graph = [
            global_mean_pool(x, batch.batch, batch.num_graphs),
            global_add_pool(x, batch.batch, batch.num_graphs) / 50,
            batch.stats.reshape(batch.num_graphs, -1),
        ]
        pooled = torch.cat(graph, dim=-1)
        return {
            task: head(pooled if self.levels[task] == "graph" else x)
            for task, head in self.heads.items()
        }
