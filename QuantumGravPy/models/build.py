"""The model a config names, and what its outputs must look like.

``model.type: null`` is the built-in :class:`~.gnn.GNNModel`. Any other ``nn.Module`` class is
built as ``cls(in_channels=N, outputs={task: (num_outputs, level)}, **model.kwargs)``: it learns
how many node features the data has and what each task needs, and its ``forward(batch)``
returns a dict from task name to tensor (or, with one task, the tensor alone), with one row per
graph for a graph-level task, one row per node for a node-level task, and one row per pair for
an edge-level task (whose entry is ``(num_outputs, "edge", pairs)``: ``batch[pairs]`` holds the
pairs, [2, P]). Such a model is
trained, averaged, checkpointed, resumed and tested exactly like the built-in one, in one
process or under DDP.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ..config import ModelConfig, check_kwargs, resolve
from ..config.objects import build_objects
from ..errors import ConfigError, QGError, RunError, cause, in_user_code
from .gnn import GNNModel

# What a task needs of the model: (number of outputs, "graph" or "node"), or for an edge-level
# task (number of outputs, "edge", the attribute of its pairs)
Outputs = Mapping[str, tuple]


def build_model(
    section: ModelConfig,
    in_channels: int,
    outputs: Outputs,
    *,
    graph_feature_channels: int = 0,
    edge_channels: int = 0,
) -> nn.Module:
    """The model of the ``model:`` section for data with ``in_channels`` node features.

    ``graph_feature_channels``: how many numbers ``model.graph_features`` add per graph;
    ``edge_channels``: the edge features (``edge_attr``) an edge-aware conv reads.
    """
    if section.type is None:
        edges = {"edge_channels": edge_channels}
        if len(outputs) == 1 and next(iter(outputs.values()))[1] == "graph":
            ((num_outputs, _),) = outputs.values()  # one head, whose outputs are returned as is
            return GNNModel.from_config(
                section, in_channels, num_outputs, graph_feature_channels, **edges
            )
        return GNNModel.from_config(
            section, in_channels, None, graph_feature_channels, outputs=dict(outputs), **edges
        )
    cls = resolve(section.type, key="model.type")
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ConfigError(f"model.type: {section.type!r} is not an nn.Module class")
    ours = ("in_channels", "outputs")
    check_kwargs(cls, dict(section.kwargs), "model.kwargs", passed=ours, name=section.type)
    kwargs = build_objects(dict(section.kwargs), "model.kwargs")
    try:
        return cls(in_channels=in_channels, outputs=dict(outputs), **kwargs)
    except (QGError, RunError):
        raise
    except Exception as e:  # the user's model could not be built: what it raised, where
        doing = f"{section.type}(in_channels=..., outputs=..., **model.kwargs)"
        mistake = ConfigError(f"model.kwargs: {doing} failed: {cause(e)}")
        raise in_user_code(e, f"building model.type {doing}") or mistake from e


def forward_failure(
    section: ModelConfig, model: nn.Module, error: BaseException, doing: str
) -> ConfigError | RunError:
    """What the model failing its first forward pass (``doing``) is: a ConfigError naming the
    key to look at when the error came from a part the config chose (``model.conv``, its
    kwargs, the norm, the activation, a ``model.type`` class) and cannot take this data; a
    RunError when it came from the device (a CUDA error) or from this package's own model code,
    which no config key changes (a bug to report, with its cause)."""
    if device_failure(error):
        return RunError(f"the device failed {doing}: {cause(error)}")
    if section.type is not None:
        key, what = "model.type", section.type
    else:
        key = _blamed_key(section, model, error)
        if key == "model":
            return RunError(
                f"{cause(error)} {doing}, in QuantumGravPy's built-in model and in no part the "
                "config chose: if the graphs' features differ in width from graph to graph (x, "
                "edge_attr, graph features), that is the cause; if not, a bug in the library: "
                "please report it with --debug's traceback"
            )
        what = {
            "model.conv": section.conv,
            "model.conv_kwargs": f"{section.conv} with model.conv_kwargs {section.conv_kwargs}",
            "model.activation": section.activation,
            "model.norm": f"norm {section.norm}",
        }[key]
    return ConfigError(
        f"{key}: {what} fails on a batch of the first training graphs: {cause(error)}"
    )


def device_failure(error: BaseException) -> bool:
    """Whether ``error`` is the accelerator failing (CUDA's errors, device-side asserts)."""
    if isinstance(error, getattr(torch, "AcceleratorError", ())):
        return True
    marks = ("CUDA error", "CUBLAS_STATUS", "cuDNN error", "device-side assert")
    return isinstance(error, RuntimeError) and any(mark in str(error) for mark in marks)


def _blamed_key(section: ModelConfig, model: nn.Module, error: BaseException) -> str:
    """The key of the outermost part of the built-in model on the error's traceback."""
    parts = {}
    for conv in getattr(model, "convs", ()):
        parts[id(conv)] = "model.conv_kwargs" if section.conv_kwargs else "model.conv"
    for norm in getattr(model, "norms", ()):
        parts[id(norm)] = "model.norm"
    for module in model.modules():
        if type(module) is type(getattr(model, "act", None)) and module is not model:
            parts.setdefault(id(module), "model.activation")
    tb = error.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if id(owner) in parts:
            return parts[id(owner)]
        tb = tb.tb_next
    return "model"


_ROW = {"graph": "graph", "node": "node", "edge": "pair"}


def task_output(
    outputs: Any, task: str, rows: int, num_outputs: int, *, model: str, level: str = "graph"
) -> Tensor:
    """The output for ``task`` of a forward pass, checked: ``[rows, num_outputs]``.

    ``outputs`` is what the model returned: a dict from task name to tensor, or (with one
    task) one tensor; ``rows`` is the number of graphs, or of nodes for a node-level task.
    A mistake in the model is a :class:`ConfigError` naming ``model.type``, the task, and the
    shapes expected and found.
    """
    if isinstance(outputs, Mapping):
        if task not in outputs:
            raise ConfigError(
                f"model.type: {model} returned no output for task {task!r} "
                f"(it returned {', '.join(map(repr, outputs)) or 'an empty dict'})"
            )
        outputs = outputs[task]
    if not isinstance(outputs, Tensor):
        raise ConfigError(
            f"model.type: {model} returned {type(outputs).__name__} for task {task!r}, "
            "expected a tensor"
        )
    if tuple(outputs.shape) != (rows, num_outputs):
        raise ConfigError(
            f"model.type: {model} returned shape {list(outputs.shape)} for task {task!r}, "
            f"expected [{rows}, {num_outputs}] (one row per {_ROW[level]}, one column per "
            "output)"
        )
    return outputs
