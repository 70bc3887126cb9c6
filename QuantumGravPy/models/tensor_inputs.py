"""A model whose ``forward`` takes tensors (``x, edge_index, batch``), as PyTorch Geometric's
examples and the predecessor's models are written, trained as it is (``model.type``).

This package calls ``model(batch)`` and reads a dict from task name to output. :class:`TensorInputs`
stands between: it passes the batch's attributes the model takes, in order, and names what it
returns after the tasks::

    model:
      type: QuantumGravPy.models.TensorInputs
      kwargs:
        module: {object: theirpackage.GNN}     # a class, built here; or an instance: {class: ...}
        module_kwargs: {hidden_channels: 64, out_channels: 3}
        inputs: [x, edge_index, batch]        # the default
        returns: {dim: 0, d: 1}               # task -> position in a returned tuple (or key of a
                                              # returned dict); default: one task, the output
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor, nn

from ..errors import ConfigError

KEY = "model.kwargs"
# What a module's constructor may call the width of the node features it reads.
FEATURE_WIDTHS = ("in_channels", "in_features")


class TensorInputs(nn.Module):
    """``module`` (an ``nn.Module``, or its class built with ``module_kwargs``, given the data's
    node features as ``in_channels`` or ``in_features``, whichever it takes, when
    ``module_kwargs`` gives neither) called with
    the batch's attributes ``inputs``; its output(s) named after the tasks as ``returns`` says.
    """

    def __init__(
        self,
        in_channels: int,
        outputs: Mapping[str, tuple[int, str]],
        module: nn.Module | type,
        module_kwargs: Mapping[str, Any] | None = None,
        inputs: Sequence[str] = ("x", "edge_index", "batch"),
        returns: Mapping[str, int | str] | None = None,
    ):
        super().__init__()
        kwargs = dict(module_kwargs or {})
        if isinstance(module, type):
            takes = inspect.signature(module).parameters
            for name in FEATURE_WIDTHS:  # the predecessor's models say in_features
                if name in takes and not any(n in kwargs for n in FEATURE_WIDTHS):
                    kwargs[name] = in_channels
                    break
            module = module(**kwargs)
        elif kwargs:
            raise ConfigError(
                f"{KEY}.module_kwargs: only with a class ({{object: ...}}); the module is "
                "already built"
            )
        if not isinstance(module, nn.Module):
            raise ConfigError(f"{KEY}.module: expected an nn.Module or its class, found {module!r}")
        tasks = list(outputs)
        if returns is None:
            if len(tasks) > 1:
                raise ConfigError(
                    f"{KEY}.returns: the config has {len(tasks)} tasks ({', '.join(tasks)}); "
                    "say which of the module's outputs is whose, e.g. {"
                    + ", ".join(f"{t}: {i}" for i, t in enumerate(tasks))
                    + "}"
                )
            returns = {tasks[0]: None}
        unknown = sorted(set(returns) - set(tasks))
        missing = sorted(set(tasks) - set(returns))
        if unknown or missing:
            raise ConfigError(
                f"{KEY}.returns: names the tasks {sorted(returns)}, but the config's are {tasks}"
            )
        self.module, self.inputs, self.returns = module, tuple(inputs), dict(returns)

    @property
    def reads(self) -> tuple[str, ...]:
        """The attributes of a batch the module is called with: what the training loader
        gathers for it (``batch`` and ``ptr`` are always there)."""
        return tuple(name for name in self.inputs if name not in ("batch", "ptr"))

    def forward(self, batch: Any) -> dict[str, Tensor]:
        missing = [name for name in self.inputs if not hasattr(batch, name)]
        if missing:
            raise ConfigError(
                f"{KEY}.inputs: the batch has no attribute {missing[0]!r} (it has "
                f"{', '.join(sorted(k for k in batch.keys()))}, and batch)"
            )
        result = self.module(*(getattr(batch, name) for name in self.inputs))
        picked = {}
        for task, where in self.returns.items():
            if where is None:
                picked[task] = result
                continue
            try:
                picked[task] = result[where]
            except (IndexError, KeyError, TypeError):
                got = (
                    f"keys {list(result)}" if isinstance(result, Mapping) else type(result).__name__
                )
                raise ConfigError(
                    f"{KEY}.returns.{task}: the module's output has no {where!r} ({got})"
                ) from None
        return picked
