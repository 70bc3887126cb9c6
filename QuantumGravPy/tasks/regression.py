"""``regression``: one or more real values; its picture is predicted against true values.
``count`` is a subclass of it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..figures import new_figure, save
from .base import TaskKind, Values

if TYPE_CHECKING:
    import numpy as np
    import torchmetrics
    from torch import Tensor

_OWN = {"sync_on_compute": False}
_MAX_POINTS = 20_000  # a scatter plot of more shows nothing more


class Regression(TaskKind):
    """One or more real values per graph or node, learnt with the mean squared error, on
    targets standardised by the training split unless `standardize: false`. With several
    outputs, each metric is averaged over them."""

    name = "regression"
    metrics = ("mse", "rmse", "mae", "r2", "max_error")
    default_metrics = ("mse", "mae", "r2")
    minimized = ("mse", "rmse", "mae", "max_error")
    default_loss = "torch.nn.MSELoss"
    standardizes = True
    picture = "regression.png"

    def count_outputs(
        self, task: Any, first: Tensor, values: Values, known: int | None, key: str, outputs: str
    ) -> int:
        """``num_outputs``, or the values of a row of the first graph's target ``first`` (a row
        per graph, node or pair)."""
        if task.num_outputs is not None:
            return task.num_outputs
        if task.level != "graph":  # a row per node or pair
            return 1 if first.dim() == 1 else int(first[0].numel())
        return int(first.numel())

    def target(self, value: Tensor, rows: int, num_outputs: int, task: Any) -> Tensor:
        return value.reshape(rows, num_outputs)

    def loss_target(self, target: Tensor, outputs: Tensor) -> Tensor:
        return target.to(outputs.dtype)

    def make_metric(self, name: str, num_outputs: int) -> Any:
        """torchmetrics' ``mse``, ``rmse``, ``mae``, ``r2`` or ``max_error``, each averaged over
        the outputs."""
        from torchmetrics import regression as tmr
        from torchmetrics.aggregation import MaxMetric

        k = num_outputs
        return {
            "mse": lambda: tmr.MeanSquaredError(num_outputs=k, **_OWN),
            "rmse": lambda: tmr.MeanSquaredError(squared=False, num_outputs=k, **_OWN),
            "mae": lambda: tmr.MeanAbsoluteError(**_OWN),
            "r2": lambda: tmr.R2Score(multioutput="uniform_average", **_OWN),
            "max_error": lambda: MaxMetric(**_OWN),
        }[name]()

    def metric_inputs(self, outputs: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """Predicted values and targets in float64: a row each, or one value each for one
        output."""
        preds = outputs.double().reshape(len(outputs), -1)
        target = target.double().reshape(len(target), -1)
        if preds.shape[1] == 1:
            return preds.reshape(-1), target.reshape(-1)
        return preds, target

    def update_metric(
        self, name: str, metric: torchmetrics.Metric, preds: Tensor, target: Tensor
    ) -> None:
        """``max_error`` takes the batch's largest error; the others the values."""
        if name != "max_error":
            metric.update(preds, target)
        elif len(preds):
            metric.update((preds - target).abs().max())
        else:
            metric.update(preds.new_zeros(()))

    def columns(self, task: Any, values: np.ndarray, true: np.ndarray | None) -> dict:
        """``<task>`` (``<task>_<k>`` for several outputs), and ``<task>_true`` where the data
        has targets."""
        values = values.reshape(len(values), -1)
        single = values.shape[1] == 1
        columns = {}
        for k in range(values.shape[1]):
            columns[task.name if single else f"{task.name}_{k}"] = values[:, k]
        if true is not None:
            truth = true.reshape(len(values), -1)
            for k in range(truth.shape[1]):
                columns[f"{task.name}_true" if single else f"{task.name}_{k}_true"] = truth[:, k]
        return columns

    def plot(self, predicted: np.ndarray, true: np.ndarray, output: Path, title: str) -> Path:
        """Predicted against true values (with the diagonal), and the residuals."""
        import numpy as np

        predicted = np.asarray(predicted, dtype=np.float64).reshape(-1)
        true = np.asarray(true, dtype=np.float64).reshape(-1)
        if len(true) > _MAX_POINTS:  # a fixed subsample: the same picture every time
            keep = np.random.default_rng(0).choice(len(true), _MAX_POINTS, replace=False)
            predicted, true = predicted[keep], true[keep]
        fig = new_figure(9.5, 4.2)
        left, right = fig.subplots(1, 2)
        alpha = 0.6 if len(true) < 2000 else 0.2
        left.scatter(true, predicted, s=8, alpha=alpha, color="C0")
        if len(true):
            lo = float(min(true.min(), predicted.min()))
            hi = float(max(true.max(), predicted.max()))
            left.plot([lo, hi], [lo, hi], ":", color="grey")
        left.set(xlabel="true", ylabel="predicted", title=f"{title}: predicted against true")
        right.scatter(true, predicted - true, s=8, alpha=alpha, color="C1")
        right.axhline(0.0, linestyle=":", color="grey")
        rmse = float(np.sqrt(np.mean((predicted - true) ** 2))) if len(true) else math.nan
        right.set(xlabel="true", ylabel="predicted - true", title=f"residuals (RMSE {rmse:.4g})")
        for ax in (left, right):
            ax.grid(alpha=0.3)
        return save(fig, output)
