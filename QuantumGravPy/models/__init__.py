"""The models layer: what turns a batch of graphs into outputs.

- :mod:`.gnn`: :class:`GNNModel`, message passing, pooling to one vector per graph and an MLP
  head, built from the ``model:`` section of the config;
- :mod:`.build`: the model ``model.type`` names (the built-in one or the user's own class) and
  the check of what it returns for each task.

A model is an ordinary ``nn.Module`` called as ``model(batch)``; it knows nothing of processes,
files or data loading. Imports ``config`` and the ground floor.
"""

from .build import build_model, forward_failure, task_output
from .gnn import GNNModel

__all__ = ["GNNModel", "build_model", "forward_failure", "task_output"]
