"""Task metrics: torchmetrics' definitions, combined over processes through the parallel layer.

Each process updates a task's metrics with the predictions it made. Before computing, every
metric state is gathered from all ranks with :func:`~QuantumGravPy.parallel.distributed.
all_gather_object` and reduced the way torchmetrics defines it: confusion counts and sums of
errors are added, the predictions an AUROC needs are concatenated. So the value is the one a
single process computes on all the data, whatever the number of processes, and equal to
scikit-learn's on the same predictions. Sums of real numbers are kept in float64: adding them
in another order (per rank, then over ranks) changes them by rounding only.

Where only rank 0 evaluates (``validation.mode: rank0``), it computes with ``across_ranks=False``
and nothing is exchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..config import DEFAULT_METRICS, METRIC_NAMES, TASK_TYPES
from ..parallel import distributed

if TYPE_CHECKING:
    import torchmetrics

__all__ = ["DEFAULT_METRICS", "METRIC_NAMES", "TASK_TYPES", "TaskMetrics"]


_OWN = {"sync_on_compute": False}


@functools.cache
def _factories() -> dict[str, dict[str, Callable[[int], torchmetrics.Metric]]]:
    """name -> a torchmetrics metric for that many outputs; exact, never binned
    (thresholds=None). Loaded on first use: torchmetrics takes a second to import (it loads
    scipy.signal), which a process that never computes a metric (the one that starts a job's
    ranks) does not pay.

    compute() never synchronises by itself (sync_on_compute=False): only
    compute(across_ranks=True) does, so a rank that evaluates alone never waits for the others.
    """
    from torchmetrics import classification as tmc
    from torchmetrics import regression as tmr
    from torchmetrics.aggregation import MaxMetric

    return {
        "classification": {
            "accuracy": lambda c: tmc.MulticlassAccuracy(c, average="micro", **_OWN),
            "balanced_accuracy": lambda c: tmc.MulticlassAccuracy(c, average="macro", **_OWN),
            "f1_macro": lambda c: tmc.MulticlassF1Score(c, average="macro", **_OWN),
            "f1_weighted": lambda c: tmc.MulticlassF1Score(c, average="weighted", **_OWN),
            "precision_macro": lambda c: tmc.MulticlassPrecision(c, average="macro", **_OWN),
            "recall_macro": lambda c: tmc.MulticlassRecall(c, average="macro", **_OWN),
            "auroc": lambda c: tmc.MulticlassAUROC(c, average="macro", thresholds=None, **_OWN),
            "confusion_matrix": lambda c: tmc.MulticlassConfusionMatrix(c, **_OWN),
        },
        "binary": {
            "accuracy": lambda _: tmc.BinaryAccuracy(**_OWN),
            "f1": lambda _: tmc.BinaryF1Score(**_OWN),
            "precision": lambda _: tmc.BinaryPrecision(**_OWN),
            "recall": lambda _: tmc.BinaryRecall(**_OWN),
            "auroc": lambda _: tmc.BinaryAUROC(thresholds=None, **_OWN),
            "average_precision": lambda _: tmc.BinaryAveragePrecision(thresholds=None, **_OWN),
            "confusion_matrix": lambda _: tmc.BinaryConfusionMatrix(**_OWN),
        },
        "regression": {
            "mse": lambda k: tmr.MeanSquaredError(num_outputs=k, **_OWN),
            "rmse": lambda k: tmr.MeanSquaredError(squared=False, num_outputs=k, **_OWN),
            "mae": lambda _: tmr.MeanAbsoluteError(**_OWN),
            "r2": lambda _: tmr.R2Score(multioutput="uniform_average", **_OWN),
            "max_error": lambda _: MaxMetric(**_OWN),
        },
    }


class TaskMetrics:
    """The metrics of one task, updated batch by batch and computed over all processes.

    ``outputs`` are the model's raw outputs for the task: logits ``[N, C]`` (classification),
    one logit ``[N]`` or ``[N, 1]`` (binary), values ``[N, k]`` or ``[N]`` (regression), with
    one row per graph or per node; ``target`` holds class indices, 0/1 labels or true values.
    """

    def __init__(
        self,
        task_type: str,
        names: Sequence[str],
        num_outputs: int,
        *,
        device: torch.device | str = "cpu",
    ):
        if task_type not in TASK_TYPES:
            raise ValueError(f"task type must be one of {', '.join(TASK_TYPES)}, got {task_type!r}")
        offered = METRIC_NAMES[task_type]
        unknown = [n for n in names if n not in offered]
        if unknown:
            raise ValueError(
                f"{', '.join(map(repr, unknown))} is not a metric of a {task_type} task "
                f"(choose from {', '.join(offered)})"
            )
        if task_type == "classification" and num_outputs < 2:
            raise ValueError(f"a classification task needs 2 or more classes, got {num_outputs}")
        self.task_type = task_type
        self.num_outputs = 1 if task_type == "binary" else num_outputs
        self.metrics: dict[str, torchmetrics.Metric] = {}
        for name in names:
            metric = _factories()[task_type][name](self.num_outputs)
            # float states (sums of errors) and inputs in float64; after .to(), which resets
            # the dtype torchmetrics casts inputs to
            self.metrics[name] = metric.to(device).set_dtype(torch.float64)

    def update(self, outputs: Tensor, target: Tensor) -> None:
        outputs = outputs.detach()
        target = target.detach()
        if self.task_type == "classification":
            # probabilities, never logits: torchmetrics would guess from their range
            preds = outputs.double().softmax(dim=-1)
            target = target.reshape(-1).long()
        elif self.task_type == "binary":
            preds = outputs.double().reshape(-1).sigmoid()
            target = target.reshape(-1).long()
        else:
            preds = outputs.double().reshape(len(outputs), -1)
            target = target.double().reshape(len(target), -1)
            if self.num_outputs == 1:
                preds, target = preds.reshape(-1), target.reshape(-1)
        for name, metric in self.metrics.items():
            if name == "max_error":
                metric.update((preds - target).abs().max() if len(preds) else torch.zeros(()))
            else:
                metric.update(preds, target)

    def compute(self, *, across_ranks: bool = True) -> dict[str, Any]:
        """``{metric: value}``: floats, and the confusion matrix as a list of rows of counts.

        With ``across_ranks`` (and a process group of more than one), every rank must call this
        with its own updates; each gets the value of all the data.
        """
        sync = across_ranks and distributed.get_world_size() > 1
        values: dict[str, Any] = {}
        for name, metric in self.metrics.items():
            if sync:
                metric.sync(dist_sync_fn=_gather, distributed_available=lambda: True)
            try:
                value = _compute_in_float64(metric, counts=name == "confusion_matrix")
            finally:
                if sync:
                    metric.unsync()  # back to this rank's own states
            if name == "confusion_matrix":
                values[name] = value.long().tolist()
            else:  # several regression outputs: their average, as scikit-learn's default
                values[name] = float(value.double().mean())
        return values


def _compute_in_float64(metric: torchmetrics.Metric, *, counts: bool) -> Tensor:
    """``metric``'s value from its current states, ratios of counts divided in float64.

    torchmetrics divides integer counts (true and false positives, ...) in float32, so an
    accuracy of 4/18 would read 0.22222222387, and builds ROC curves in the default dtype; the
    counts are cast and the default is float64 for the call. The metric's unwrapped
    ``compute`` is called, so nothing is cached or synchronised meanwhile.
    """
    from torchmetrics.utilities.data import dim_zero_sum

    integer = {  # summed counts only; gathered labels (an AUROC's targets) stay integers
        k: v
        for k in metric._defaults
        if isinstance(v := getattr(metric, k), Tensor)
        and not v.is_floating_point()
        and metric._reductions[k] is dim_zero_sum
    }
    default = torch.get_default_dtype()
    try:
        # curves (AUROC) promote integer labels to the default dtype before summing them
        torch.set_default_dtype(torch.float64)
        if not counts:
            for k, v in integer.items():
                setattr(metric, k, v.double())
        return type(metric).compute(metric)
    finally:
        torch.set_default_dtype(default)
        for k, v in integer.items():
            setattr(metric, k, v)


def _gather(tensor: Tensor, group: Any = None) -> list[Tensor]:
    """torchmetrics' all-gather, through the parallel layer: one state from every rank."""
    states = distributed.all_gather_object(tensor.detach().cpu())
    return [state.to(tensor.device) for state in states]
