"""The models layer: what turns a batch of graphs into outputs.

- :mod:`.gnn`: :class:`GNNModel`, message passing, pooling to one vector per graph and an MLP
  head, built from the ``model:`` section of the config;
- :mod:`.build`: the model ``model.type`` names (the built-in one or the user's own class) and
  the check of what it returns for each task;
- :mod:`.growth`: :class:`CausalSetGrowth`, a generative model that grows causal sets one
  element at a time (a ``model_loss`` model with a ``generate`` method, sampled by ``qg sample``);
- :mod:`.tensor_inputs`: :class:`TensorInputs`, a model whose ``forward`` takes tensors
  (``x, edge_index, batch``) trained as it is, its outputs named after the tasks.

A model is an ordinary ``nn.Module`` called as ``model(batch)``; it knows nothing of processes,
files or data loading. Imports ``config`` and the ground floor.
"""

from .build import build_model, forward_failure, task_output
from .gnn import GNNModel, edge_pairs
from .growth import CausalSetGrowth
from .tensor_inputs import TensorInputs

__all__ = [
    "CausalSetGrowth",
    "GNNModel",
    "TensorInputs",
    "build_model",
    "edge_pairs",
    "forward_failure",
    "task_output",
]
