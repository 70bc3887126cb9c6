"""The layers :class:`~.gnn.GNNModel` is built from, by the names the config gives: the
message-passing layer (``model.conv``), the norm, the activation, and the MLP heads. A name
that cannot be built is refused in one line naming its key, or, when the user's own class
fails, as a failure in the user's code.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor, nn
from torch_geometric.nn import BatchNorm, GraphNorm, LayerNorm

from ..errors import ConfigError, RunError, cause, in_user_code


def mlp(
    width: int, hidden: Sequence[int], num_outputs: int, act_cls: Any, dropout: float
) -> nn.Sequential:
    layers: list[nn.Module] = []
    for channels in hidden:
        layers += [nn.Linear(width, channels), make_activation(act_cls), nn.Dropout(dropout)]
        width = channels
    layers.append(nn.Linear(width, num_outputs))
    return nn.Sequential(*layers)


def make_activation(act: Any) -> nn.Module:
    if isinstance(act, type) and issubclass(act, nn.Module):
        try:
            return act()
        except Exception as e:
            mistake = ConfigError(
                f"model.activation: {_name(act)}() cannot be built, so it is no activation "
                f"function ({cause(e)}); name one such as torch.nn.ReLU or torch.nn.GELU"
            )
            raise in_user_code(e, f"building model.activation {_name(act)}") or mistake from e
    if isinstance(act, type):
        raise ConfigError(
            f"model.activation: {_name(act)} is a class but not an nn.Module; name a module "
            "such as torch.nn.ReLU or a function such as torch.nn.functional.relu"
        )
    return _Lambda(act)


def _name(obj: Any) -> str:
    """How the config names a class: its dotted path, as short as the user may have written it
    (``torch.nn.Linear`` rather than ``torch.nn.modules.linear.Linear``)."""
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if module is None or name is None:
        return repr(obj)
    parts = module.split(".")
    for i in range(1, len(parts) + 1):  # the shortest package that exports it
        package = sys.modules.get(".".join(parts[:i]))
        if package is not None and getattr(package, name, None) is obj:
            return f"{'.'.join(parts[:i])}.{name}"
    return f"{module}.{name}"


def _check_width(conv: nn.Module, hidden: int) -> nn.Module:
    """An attention layer that puts its heads side by side (GATConv, TransformerConv, ...)
    outputs heads x hidden features per node, where the blocks add up hidden ones."""
    heads = getattr(conv, "heads", None)
    if isinstance(heads, int) and heads > 1 and getattr(conv, "concat", False):
        raise ConfigError(
            f"model.conv_kwargs: {type(conv).__name__} with heads: {heads} concatenates its "
            f"heads into {heads * hidden} features per node, but the blocks add up "
            f"hidden_channels ({hidden}); add concat: false to model.conv_kwargs to average "
            "the heads instead"
        )
    return conv


class _Lambda(nn.Module):
    def __init__(self, fn: Any):
        super().__init__()
        self.fn = fn

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x)


def reads_edges(conv_cls: Any) -> bool:
    """Whether a message-passing layer reads edge features: its forward takes ``edge_attr``
    (GINEConv, GATConv, TransformerConv, ...; GraphConv and GCNConv take one weight an edge)."""
    try:
        return "edge_attr" in inspect.signature(conv_cls.forward).parameters
    except (TypeError, ValueError, AttributeError):
        return False


def accepts(cls: type, name: str) -> bool:
    try:
        return name in inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return False


def make_conv(
    conv_cls: type, channels: int, kwargs: dict[str, Any], act_cls: Any, *, given: Mapping
) -> nn.Module:
    """One message-passing layer; ``given`` is what ``model.conv_kwargs`` said (errors name it)."""
    if not (isinstance(conv_cls, type) and issubclass(conv_cls, nn.Module)):
        raise ConfigError(
            f"model.conv: {_name(conv_cls)} is not an nn.Module class; name a message-passing "
            "layer such as torch_geometric.nn.GraphConv"
        )
    if not _takes_two_inputs(conv_cls.forward):
        raise ConfigError(
            f"model.conv: {_name(conv_cls)} is not a message-passing layer: its forward does "
            "not take (x, edge_index); name one such as torch_geometric.nn.GraphConv"
        )
    params = inspect.signature(conv_cls.__init__).parameters
    args: tuple = (channels, channels)
    ours: dict[str, Any] = {}
    if "nn" in params and "in_channels" not in params:
        # GIN-style layers take the network that transforms the aggregated features
        args = ()
        ours["nn"] = nn.Sequential(
            nn.Linear(channels, channels), make_activation(act_cls), nn.Linear(channels, channels)
        )
    try:
        conv = conv_cls(*args, **ours, **kwargs)
    except (ConfigError, RunError):
        raise
    except Exception as e:
        key = "model.conv_kwargs" if given else "model.conv"
        shown = ", ".join([*map(str, args), *(f"{k}={v!r}" for k, v in kwargs.items())])
        built = f"{_name(conv_cls)}({shown})"
        mistake = ConfigError(f"{key}: {built} cannot be built: {cause(e)}")
        raise in_user_code(e, f"building model.conv {built}") or mistake from e
    return _check_width(conv, channels)


def _takes_two_inputs(forward: Any) -> bool:
    """Whether ``forward(self, x, edge_index)`` can be called with two positional inputs."""
    try:
        params = list(inspect.signature(forward).parameters.values())[1:]  # without self
    except (TypeError, ValueError):
        return True  # not introspectable: the forward check of the trainer decides
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2


def make_norm(kind: str, channels: int) -> nn.Module:
    if kind == "graph":
        return GraphNorm(channels)
    if kind == "layer":
        return LayerNorm(channels, mode="node")
    if kind == "batch":
        return BatchNorm(channels)
    return nn.Identity()
