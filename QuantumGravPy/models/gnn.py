"""GNNModel: message passing, then one MLP head per task: on the pooled graph vector for a
graph-level task, on each node's embedding for a node-level one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint
from torch_geometric.data import Batch, Data
from torch_geometric.nn import (
    global_add_pool,
    global_max_pool,
    global_mean_pool,
)
from torch_geometric.utils import degree

from ..config import ModelConfig, resolve
from ..errors import DataError
from .blocks import accepts, make_activation, make_conv, make_norm, mlp, reads_edges


def size_normalised_add_pool(x: Tensor, batch: Tensor, size: int | None = None) -> Tensor:
    """Each graph's sum of node embeddings divided by the square root of its number of nodes.

    A plain sum grows with the graph: over causal sets of 32 to 64 elements it made the
    untrained model's first loss 7.9 for three classes (chance: 1.1). Divided by sqrt(n) it
    is sqrt(n) times the mean, so it still tells graphs of different sizes apart.
    """
    total = global_add_pool(x, batch, size)
    # counted in float32 (exact to 2^24 nodes, in any order, also under bf16 autocast)
    nodes = degree(batch, total.shape[0], dtype=torch.float32).clamp(min=1)
    return total / nodes.sqrt().to(total.dtype).unsqueeze(-1)


def std_pool(x: Tensor, batch: Tensor, size: int | None = None) -> Tensor:
    """Each graph's standard deviation of its node embeddings, channel by channel.

    With ``mean`` it describes how a graph's nodes spread without growing with their number:
    on sprinklings of 32 to 2,048 elements the untrained model's first loss with these two
    read-outs is 1.14 times chance at every size, where a maximum (the largest of more nodes)
    and a sum grow with it (1.5 and 6.6 times chance at 2,048 elements).
    """
    mean = global_mean_pool(x, batch, size)
    # in float32: the difference of two close means loses its digits in bf16
    square = global_mean_pool(x.float().square(), batch, size)
    variance = (square - mean.float().square()).clamp(min=0)
    return (variance + 1e-6).sqrt().to(mean.dtype)  # + 1e-6: a finite gradient at zero spread


# "add" is the plain sum (what the oldest checkpoints were trained with); "scaled_add" divides
# it by sqrt(n) (with mean and max, the default before mean and std).
POOLING = {
    "mean": global_mean_pool,
    "max": global_max_pool,
    "add": global_add_pool,
    "scaled_add": size_normalised_add_pool,
    "std": std_pool,
}


def edge_pairs(batch: Batch | Data, attribute: str, task: str) -> Tensor:
    """The node pairs ``batch[attribute]`` of edge-level task ``task``; a DataError naming
    them if the graphs lack them (graphs given to a trained model without them, say)."""
    pairs = getattr(batch, attribute, None)
    if not isinstance(pairs, Tensor):
        raise DataError(
            f"task {task!r} is edge-level: its graphs need their node pairs as {attribute!r} "
            "([2, P] node indices; for a causal set, its relations' (i, j), i before j), and "
            "these have none"
        )
    return pairs


class GNNModel(nn.Module):
    """A graph network with one head per task.

    ``GNNModel(in_channels, num_classes)``: one graph-level head; ``model(batch)`` returns its
    outputs, shape [num_graphs, num_classes]. ``GNNModel(in_channels, outputs={task:
    (num_outputs, level)})``: ``model(batch)`` returns a dict from task name to outputs,
    [num_graphs, num_outputs] for a ``"graph"`` task and [num_nodes, num_outputs] for a
    ``"node"`` task; all tasks share the message passing. An ``"edge"`` task's entry is
    ``(num_outputs, "edge", pairs)``: its head sees the two node embeddings of each pair
    ``batch[pairs]`` ([2, P]) side by side and returns [P, num_outputs]. (With a single
    graph-level task the config builds the first form.)

    ``graph_features`` names graph-level attributes of the batch (``graph_feature_channels``
    numbers per graph in all) that are concatenated to the pooled node embeddings.

    Node features are first projected to ``hidden_channels``; each of ``num_layers`` blocks is
    conv -> norm -> activation -> dropout, added to its input when ``residual``. The default
    norm (``graph``: GraphNorm) uses the statistics of each graph alone, so the output for a graph
    never depends on which other graphs share its batch. ``batch`` (BatchNorm) is available but
    gives up that property in training mode.

    The default read-outs, each graph's ``mean`` and standard deviation (``std``) of its node
    embeddings, do not grow with the number of nodes, so the untrained model's outputs, and its
    first loss, are near chance at any size. ``max``, ``add`` (the sum) and ``scaled_add`` (the
    sum over the square root of the number of nodes) grow with it.

    ``node_context``: a node-level head sees its node's embedding and its graph's read-out
    (the pooled embeddings and ``graph_features``), not the node's neighbourhood alone. A
    quantity that varies smoothly over a large graph, as curvature does over a causal set of
    thousands of elements, is pinned down by the whole graph far better than by the few hops a
    node's embedding reaches.

    ``activation_checkpointing``: in training, each block's activations are recomputed in the
    backward pass rather than kept (``torch.utils.checkpoint``, non-reentrant): the memory of
    one block's input per block instead of all its intermediates, for one more forward pass.
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int | None = None,
        *,
        outputs: Mapping[str, tuple] | None = None,
        conv: str | type = "torch_geometric.nn.GraphConv",
        conv_kwargs: dict[str, Any] | None = None,
        hidden_channels: int = 64,
        num_layers: int = 3,
        activation: str | type = "torch.nn.ReLU",
        dropout: float = 0.0,
        residual: bool = True,
        norm: str = "graph",
        pooling: Sequence[str] = ("mean", "std"),
        head_channels: Sequence[int] = (64,),
        graph_features: Sequence[str] = (),
        graph_feature_channels: int = 0,
        node_context: bool = False,
        activation_checkpointing: bool = False,
        edge_channels: int = 0,
    ):
        super().__init__()
        if (num_classes is None) == (outputs is None):
            raise ValueError("GNNModel needs num_classes (one graph-level head) or outputs")
        conv_cls = resolve(conv, key="model.conv") if isinstance(conv, str) else conv
        act_cls = (
            resolve(activation, key="model.activation")
            if isinstance(activation, str)
            else activation
        )
        self.pooling = tuple(pooling)
        self.graph_features = tuple(graph_features)
        self.residual = residual
        self.node_context = node_context
        self.norm_kind = norm
        self.activation_checkpointing = activation_checkpointing
        self.encoder = nn.Linear(in_channels, hidden_channels)
        kwargs = dict(conv_kwargs or {})
        if norm in ("graph", "batch") and "bias" not in kwargs and accepts(conv_cls, "bias"):
            # The norm subtracts the mean, so a conv bias would only be shifted away: its
            # gradient is zero, and adaptive optimizers turn the rounding noise of that zero
            # into steps of the size of the learning rate, which makes results depend on how
            # sums are ordered (and so on the number of processes). Set conv_kwargs.bias to keep it.
            kwargs["bias"] = False
        # The data's edge features (edge_attr, edge_channels of them) reach a conv that reads
        # them: one whose forward takes edge_attr, told their width where it takes edge_dim.
        self.edge_channels = edge_channels if reads_edges(conv_cls) else 0
        if self.edge_channels and "edge_dim" not in kwargs and accepts(conv_cls, "edge_dim"):
            kwargs["edge_dim"] = edge_channels
        self.act = make_activation(act_cls)  # first: a wrong activation is named as such
        self.convs = nn.ModuleList(
            make_conv(conv_cls, hidden_channels, kwargs, act_cls, given=conv_kwargs or {})
            for _ in range(num_layers)
        )
        self.norms = nn.ModuleList(make_norm(norm, hidden_channels) for _ in range(num_layers))
        self.dropout = nn.Dropout(dropout)
        pooled = hidden_channels * len(self.pooling) + graph_feature_channels
        node_width = hidden_channels + (pooled if node_context else 0)

        def head(width: int, num_outputs: int) -> nn.Sequential:
            return mlp(width, head_channels, num_outputs, act_cls, dropout)

        # One graph-level head is called ``head`` (the checkpoints of such models name it so).
        self.head = head(pooled, num_classes) if num_classes is not None else None
        self.levels = {name: spec[1] for name, spec in (outputs or {}).items()}
        # an edge-level task's pairs attribute (a third entry of its spec)
        self.pairs = {name: spec[2] for name, spec in (outputs or {}).items() if len(spec) > 2}
        width = {"graph": pooled, "node": node_width, "edge": 2 * node_width}
        self.heads = nn.ModuleDict(
            {name: head(width[spec[1]], spec[0]) for name, spec in (outputs or {}).items()}
        )

    @classmethod
    def from_config(
        cls,
        config: ModelConfig,
        in_channels: int,
        num_classes: int | None = None,
        graph_feature_channels: int = 0,
        *,
        outputs: Mapping[str, tuple[int, str]] | None = None,
        edge_channels: int = 0,
    ) -> GNNModel:
        return cls(
            config.in_channels or in_channels,
            None if outputs is not None else config.num_classes or num_classes,
            outputs=outputs,
            conv=config.conv,
            conv_kwargs=config.conv_kwargs,
            hidden_channels=config.hidden_channels,
            num_layers=config.num_layers,
            activation=config.activation,
            dropout=config.dropout,
            residual=config.residual,
            norm=config.norm,
            pooling=config.pooling,
            head_channels=config.head_channels,
            graph_features=config.graph_features,
            graph_feature_channels=graph_feature_channels,
            node_context=config.node_context,
            activation_checkpointing=config.activation_checkpointing,
            edge_channels=edge_channels,
        )

    @property
    def reads(self) -> tuple[str, ...]:
        """The attributes of a batch that :meth:`forward` reads (besides ``batch`` and
        ``ptr``): what the training loader gathers for it."""
        names = ["x", "edge_index", *self.graph_features, *self.pairs.values()]
        return tuple(names + (["edge_attr"] if self.edge_channels else []))

    def forward(self, batch: Batch | Data) -> Tensor | dict[str, Tensor]:
        x, edge_index = batch.x, batch.edge_index
        edges = None
        if self.edge_channels:  # built for edge features: every batch must bring them
            if getattr(batch, "edge_attr", None) is None:
                raise DataError(  # graphs of one dataset that differ: the data's, not a bug
                    f"the model reads {self.edge_channels} edge feature(s) (edge_attr), and "
                    "these graphs have none"
                )
            edges = batch.edge_attr.reshape(edge_index.shape[1], self.edge_channels)
        index = (
            batch.batch if batch.batch is not None else x.new_zeros(x.shape[0], dtype=torch.long)
        )
        num_graphs = batch.num_graphs if isinstance(batch, Batch) else 1
        x = self.encoder(x)
        # Recomputed in the backward pass, each block keeps only its input (the same dropout
        # masks: checkpoint restores the random state before recomputing).
        recompute = self.activation_checkpointing and self.training and torch.is_grad_enabled()
        for conv, norm in zip(self.convs, self.norms, strict=True):
            if recompute:
                x = checkpoint(
                    self._block,
                    conv,
                    norm,
                    x,
                    edge_index,
                    index,
                    num_graphs,
                    edges,
                    use_reentrant=False,
                )
            else:
                x = self._block(conv, norm, x, edge_index, index, num_graphs, edges)
        pooled_needed = self.head is not None or "graph" in self.levels.values()
        if not (pooled_needed or self.node_context):
            return {
                name: self._head(name, head, None, x, batch) for name, head in self.heads.items()
            }
        pooled = [POOLING[p](x, index, num_graphs) for p in self.pooling]
        # graph-level inputs join after pooling: one row of numbers per graph
        pooled += [batch[name].reshape(num_graphs, -1).to(x.dtype) for name in self.graph_features]
        graph = torch.cat(pooled, dim=-1)
        if self.head is not None:
            return self.head(graph)
        nodes = torch.cat([x, graph[index]], dim=-1) if self.node_context else x
        return {
            name: self._head(name, head, graph, nodes, batch) for name, head in self.heads.items()
        }

    def _head(
        self, name: str, head: nn.Module, graph: Tensor | None, nodes: Tensor, batch: Batch | Data
    ) -> Tensor:
        """Task ``name``'s outputs: of each graph's read-out, each node's, or each pair's two."""
        level = self.levels[name]
        if level == "graph":
            return head(graph)
        if level == "node":
            return head(nodes)
        pairs = edge_pairs(batch, self.pairs[name], name)
        return head(torch.cat([nodes[pairs[0]], nodes[pairs[1]]], dim=-1))

    def shard_units(self) -> list[list[nn.Module]]:
        """The parts that ``parallel.strategy: fsdp`` shards as units of their own: each
        message-passing block (its conv and norm) and each head."""
        blocks = [[conv, norm] for conv, norm in zip(self.convs, self.norms, strict=True)]
        heads = [self.head] if self.head is not None else list(self.heads.values())
        return blocks + [[head] for head in heads]

    def _block(
        self,
        conv: nn.Module,
        norm: nn.Module,
        x: Tensor,
        edge_index: Tensor,
        index: Tensor,
        num_graphs: int,
        edges: Tensor | None = None,
    ) -> Tensor:
        """One message-passing block: conv -> norm -> activation -> dropout (+ its input)."""
        h = conv(x, edge_index) if edges is None else conv(x, edge_index, edge_attr=edges.to(x))
        h = norm(h, index, num_graphs) if self.norm_kind in ("graph", "layer") else norm(h)
        h = self.dropout(self.act(h))
        return x + h if self.residual else h
