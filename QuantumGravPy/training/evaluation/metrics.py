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

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ...compat import torchmetrics as compat_metrics
from ...parallel import distributed
from ...tasks import TaskKind, task_kind
from ...tasks.metric import own_metric

if TYPE_CHECKING:
    import torchmetrics

__all__ = ["TaskMetrics"]


class TaskMetrics:
    """The metrics of one task, updated batch by batch and computed over all processes.

    ``outputs`` are the model's outputs for the task (in the target's units), one row per graph
    or per node, and ``target`` the true targets; the task's kind (or its name) turns them into
    what its metrics take (:meth:`~QuantumGravPy.tasks.TaskKind.metric_inputs`).
    """

    def __init__(
        self,
        kind: TaskKind | str,
        names: Sequence[str],
        num_outputs: int,
        *,
        device: torch.device | str = "cpu",
        task: Any = None,
    ):
        self.kind = task_kind(kind) if isinstance(kind, str) else kind
        offered = self.kind.offered(task) if task is not None else self.kind.metrics
        unknown = [n for n in names if n not in offered]
        if unknown:
            raise ValueError(
                f"{', '.join(map(repr, unknown))} is not a metric of a {self.kind.name} task "
                f"(choose from {', '.join(offered)})"
            )
        self.num_outputs = self.kind.metric_outputs(num_outputs)
        self.metrics: dict[str, torchmetrics.Metric] = {}
        for name in names:
            own = own_metric(self.kind, name)
            if own is not None:
                metric = own.make(self.num_outputs, sync_on_compute=False)
            elif task is not None:
                metric = self.kind.task_metric(name, self.num_outputs, task)
            else:
                metric = self.kind.make_metric(name, self.num_outputs)
            # float states (sums of errors) and inputs in float64; after .to(), which resets
            # the dtype torchmetrics casts inputs to
            self.metrics[name] = metric.to(device).set_dtype(torch.float64)

    def update(self, outputs: Tensor, target: Tensor | None) -> None:
        """``target``: None for a kind that reads none (model_loss)."""
        target = None if target is None else target.detach()
        preds, target = self.kind.metric_inputs(outputs.detach(), target)
        for name, metric in self.metrics.items():
            self.kind.update_metric(name, metric, preds, target)

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
                value = _compute_in_float64(metric, counts=name in self.kind.tables)
            finally:
                if sync:
                    metric.unsync()  # back to this rank's own states
            if name in self.kind.tables:
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
        for k, reduction in compat_metrics.states(metric).items()
        if isinstance(v := getattr(metric, k), Tensor)
        and not v.is_floating_point()
        and reduction is dim_zero_sum
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
