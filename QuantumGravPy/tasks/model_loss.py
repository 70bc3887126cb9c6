"""``model_loss``: a model that scores itself, as generative models do (a likelihood of the
data and a KL term, say): no target, its loss terms are its outputs."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .base import TaskKind, Values

if TYPE_CHECKING:
    import numpy as np
    import torchmetrics
    from torch import Tensor

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SUFFIX = "_loss"  # a term's metric: <term>_loss, which improves downwards as every loss does


class ModelLoss(TaskKind):
    """Loss terms the model computes itself (a generative model's likelihood and KL terms, say):
    its `forward(batch)` returns one value per graph for each term named in `terms`, and the
    loss is their sum weighted as `terms` says. Each term is a metric, `<term>_loss`: its mean
    over the graphs, exact for any number of processes."""

    name = "model_loss"
    needs_target = False
    # the metrics are its terms': offered per task (offered)

    def offered(self, task: Any) -> tuple[str, ...]:
        return tuple(f"{term}{SUFFIX}" for term in task.terms)

    def defaults(self, task: Any) -> tuple[str, ...]:
        return self.offered(task)

    def check(self, task: Any, key: str) -> None:
        super().check(task, key)
        if not task.terms:
            raise ConfigError(
                f"{key}.terms: a model_loss task needs the names of the loss terms its model "
                "returns, each with its weight, e.g. {nll: 1.0, kl: 0.1}"
            )
        for term, weight in task.terms.items():
            if not _NAME.fullmatch(str(term)):
                raise ConfigError(
                    f"{key}.terms: {term!r} is not a name (letters, digits and underscores)"
                )
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
                raise ConfigError(
                    f"{key}.terms.{term}: expected a weight of 0 or more, found {weight!r}"
                )
        for field, why in (
            ("target", "its model computes the loss from the batch itself"),
            ("loss", "its loss is the weighted sum of the terms"),
        ):
            if getattr(task, field) is not None:
                raise ConfigError(f"{key}.{field}: not for a model_loss task ({why})")
        if task.loss_kwargs:
            raise ConfigError(f"{key}.loss_kwargs: not for a model_loss task (it has no loss)")
        if task.level != "graph":
            raise ConfigError(f"{key}.level: a model_loss task's terms are one value per graph")
        if task.num_outputs not in (None, len(task.terms)):
            raise ConfigError(
                f"{key}.num_outputs: a model_loss task has one output per term "
                f"({len(task.terms)}), found {task.num_outputs}"
            )

    def count_outputs(
        self, task: Any, first: Tensor, values: Values, known: int | None, key: str, outputs: str
    ) -> int:
        return len(task.terms)

    def loss_for(self, task: Any) -> Any:
        return WeightedTerms(tuple(float(w) for w in task.terms.values()))

    def model_output(self, outputs: Any, task: Any, rows: int, model: str) -> Tensor:
        """The terms as a ``[graphs, terms]`` tensor, in the order of ``terms``: from the
        model's dict of terms (or its dict of tasks, this task's entry a dict of terms)."""
        import torch

        own = outputs.get(task.name) if isinstance(outputs, Mapping) else None
        terms = own if isinstance(own, Mapping) else outputs
        wanted = list(task.terms)
        if not isinstance(terms, Mapping):
            raise ConfigError(
                f"model.type: {model} returned {type(terms).__name__}, but task {task.name!r} "
                f"(model_loss) needs a dict of its loss terms {wanted}, one value per graph each"
            )
        columns = []
        for term in wanted:
            value = terms.get(term)
            if not isinstance(value, torch.Tensor):
                found = ", ".join(map(repr, terms)) or "nothing"
                raise ConfigError(
                    f"model.type: {model} returned no loss term {term!r} for task {task.name!r} "
                    f"(it returned {found})"
                )
            if (
                value.numel() != rows
                or value.dim() > 2
                or (value.dim() == 2 and value.shape[1] != 1)
            ):
                raise ConfigError(
                    f"model.type: {model} returned shape {list(value.shape)} for loss term "
                    f"{term!r} of task {task.name!r}, expected [{rows}] (one value per graph)"
                )
            columns.append(value.reshape(rows))
        return torch.stack(columns, dim=1)

    def task_metric(self, name: str, num_outputs: int, task: Any) -> torchmetrics.Metric:
        from torchmetrics.aggregation import MeanMetric

        metric = MeanMetric(sync_on_compute=False)
        metric.column = list(task.terms).index(name.removesuffix(SUFFIX))
        return metric

    def metric_inputs(self, outputs: Tensor, target: Any) -> tuple[Tensor, Any]:
        return outputs.double(), None

    def update_metric(
        self, name: str, metric: torchmetrics.Metric, preds: Tensor, target: Any
    ) -> None:
        metric.update(preds[:, metric.column])

    def columns(self, task: Any, values: np.ndarray, true: np.ndarray | None) -> dict:
        values = values.reshape(len(values), -1)
        return {f"{task.name}_{term}": values[:, k] for k, term in enumerate(task.terms)}


class WeightedTerms:
    """A model_loss task's loss: each term's mean over the graphs, weighted and added (so a
    batch's loss times its graphs is the sum of the weighted terms over them)."""

    def __init__(self, weights: tuple[float, ...]):
        self.weights = weights
        self._placed: dict[tuple, Tensor] = {}

    def __call__(self, outputs: Tensor, target: Any = None) -> Tensor:
        import torch

        key = (outputs.device, outputs.dtype)
        weights = self._placed.get(key)
        if weights is None:
            weights = self._placed[key] = torch.tensor(self.weights).to(outputs)
        return outputs.mean(dim=0) @ weights
