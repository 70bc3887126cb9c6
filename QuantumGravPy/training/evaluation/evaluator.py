"""Evaluation as sums and counts weighted by graphs (or nodes), so it can be reduced exactly
across processes.

A mean of batch means is wrong whenever batches differ in size (the last one usually does, and in
a distributed run every process has its own last batch). Each task's loss is accumulated summed
over its rows (graphs, or nodes for a node-level task) with the number of rows, and divided once
at the end; its metrics are torchmetrics states (:class:`~.metrics.TaskMetrics`), combined over
processes before they are computed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Batch

from ... import logs
from ...config import ModelConfig
from ...data import fed
from ...errors import ConfigError, QGError, RunError, cause, in_user_code
from ...logs import get_logger
from ...models import forward_failure
from ...models.build import device_failure
from ...parallel import distributed
from ...runs.checkpoint import (
    evaluation_weights,
    load_checkpoint,
    load_model_state,
    model_changes,
)
from ..tasks.task import Task, make_criterion
from .metrics import TaskMetrics

__all__ = [
    "Accumulated",
    "Evaluation",
    "Tester",
    "Validator",
    "make_criterion",
    "to_device",
]

# picks (and checks) each task's output of a model's forward pass
Select = Callable[[Any, Any], dict[str, Tensor]]


@dataclass
class Accumulated:
    """What one pass over a loader collected in one process.

    ``sums`` is float64 ``[tasks, 2]``: each task's loss summed over its rows, and the rows.
    ``predictions``, when kept, holds per task the rows' graph index (their position in the
    evaluated set), prediction (class probabilities, the probability of 1, or values in the
    target's units) and target.
    """

    tasks: Sequence[Task]
    sums: Tensor
    metrics: list[TaskMetrics]
    predictions: dict[str, dict[str, list[Tensor]]] | None = field(default=None)

    def compute(self, prefix: str, *, across_ranks: bool = False) -> dict[str, Any]:
        """The columns: ``<prefix>_loss`` (weighted over tasks), ``<prefix>_<task>_loss`` with
        several tasks, ``<prefix>_<task>_<metric>``, and with one task ``<prefix>_<metric>``.

        ``sums`` must already be reduced when ``across_ranks``; the metrics are combined here.
        """
        single = len(self.tasks) == 1
        loss_sums, rows = self.sums[:, 0].tolist(), self.sums[:, 1].tolist()
        losses = [s / n if n else math.nan for s, n in zip(loss_sums, rows, strict=True)]
        result: dict[str, Any] = {
            f"{prefix}_loss": sum(
                t.weight * loss for t, loss in zip(self.tasks, losses, strict=True)
            )
        }
        for task, loss, metrics in zip(self.tasks, losses, self.metrics, strict=True):
            values = metrics.compute(across_ranks=across_ranks)
            if not single:
                result[f"{prefix}_{task.name}_loss"] = loss
            result.update({f"{prefix}_{task.name}_{m}": v for m, v in values.items()})
            if single:
                result.update({f"{prefix}_{m}": v for m, v in values.items()})
        return result

    def gathered_predictions(self, *, across_ranks: bool = False) -> dict[str, dict[str, Tensor]]:
        """Each task's kept predictions of all ranks, ordered by graph index (stable, so a
        graph's nodes keep their order): the same arrays for any number of processes."""
        mine = {
            name: {k: torch.cat(v) for k, v in parts.items() if v}
            for name, parts in (self.predictions or {}).items()
        }
        parts = distributed.all_gather_object(mine) if across_ranks else [mine]
        result = {}
        for name in mine:
            found = [p[name] for p in parts if p[name]]  # a rank may have had no graphs
            if not found:
                continue
            joined = {k: torch.cat([p[k] for p in found]) for k in found[0]}
            order = torch.sort(joined["graph"], stable=True).indices
            result[name] = {k: v[order] for k, v in joined.items()}
        return result


class Validator:
    """Evaluates a model's tasks over a loader; ``prefix`` names the columns (``val_loss``, ...).

    ``shard`` (rank, world size): the loader holds every ``world_size``-th graph of the set,
    starting at ``rank``, so that kept predictions can be put back in the set's order.
    """

    prefix = "val"
    confusion = False  # a confusion matrix per epoch would be a list in history.csv
    keep_predictions = False

    def __init__(
        self,
        tasks: Sequence[Task],
        device: torch.device | str,
        autocast_dtype: torch.dtype | None = None,
        float_dtype: torch.dtype = torch.float32,
        *,
        select: Select | None = None,
        shard: tuple[int, int] = (0, 1),
    ):
        self.tasks = list(tasks)
        self.select = select
        self.device = torch.device(device)
        self.autocast_dtype = autocast_dtype  # None: no autocast; else as training.precision says
        self.float_dtype = float_dtype  # the model's: float64 data for a float64 model
        self.shard = shard

    def task_metrics(self, task: Task) -> TaskMetrics:
        names = [m for m in task.metric_names if self.confusion or m not in task.kind.tables]
        return TaskMetrics(task.kind, names, task.num_outputs, device=self.device, task=task.config)

    @torch.no_grad()
    def accumulate(
        self,
        model: nn.Module,
        loader: Iterable,
        tasks: Sequence[Task] | None = None,
        *,
        scored: Collection[str] | None = None,
        progress: bool = False,
    ) -> Accumulated:
        """Loss sums and metric states of ``tasks`` (default: the validator's) over ``loader``.

        ``scored``: the tasks whose targets the data holds (default: all); the others are only
        predicted (kept predictions without ``true``; no loss, no metric). ``progress``: show
        it (a bar on a terminal, lines in a log; see :func:`~QuantumGravPy.logs.progress`).
        """
        was_training = model.training
        model.eval()
        tasks = self.tasks if tasks is None else list(tasks)
        scored = {t.name for t in tasks} if scored is None else set(scored)
        sums = torch.zeros(len(tasks), 2, dtype=torch.float64, device=self.device)
        metrics = [self.task_metrics(t) for t in tasks]
        kept = {t.name: {"graph": [], "predicted": [], "true": []} for t in tasks}
        rank, world_size = self.shard
        seen = 0  # graphs of this shard so far
        desc = {"val": "validating", "test": "testing"}.get(self.prefix, self.prefix)
        batches = fed(loader, self.device, self.float_dtype)
        for batch in logs.progress(batches, desc=desc, unit="batch", enabled=progress):
            with torch.autocast(
                self.device.type,
                dtype=self.autocast_dtype,
                enabled=self.autocast_dtype is not None,
            ):
                outputs = model(batch)
                outputs = self.select(outputs, batch) if self.select else {tasks[0].name: outputs}
                losses = [
                    t.loss(outputs[t.name], batch) if t.name in scored else None for t in tasks
                ]
            for i, (task, loss, task_metrics) in enumerate(
                zip(tasks, losses, metrics, strict=True)
            ):
                predicted = task.predictions(outputs[task.name].detach())
                if loss is not None:
                    rows = task.rows(batch)
                    sums[i, 0] += loss.double() * rows
                    sums[i, 1] += rows
                    target = task.target(batch) if task.kind.needs_target else None
                    task_metrics.update(predicted, target)
                if self.keep_predictions:
                    local = task.row_graphs(batch)
                    part = kept[task.name]
                    part["graph"].append((rank + (seen + local) * world_size).cpu())
                    if task.level == "edge":  # each pair's two nodes, numbered in their graph
                        part.setdefault("pair", []).append(
                            (task.pairs(batch) - batch.ptr[local]).t().cpu()
                        )
                    part["predicted"].append(task.kind.prediction_values(predicted).cpu())
                    if loss is not None and target is not None:
                        part["true"].append(target.cpu())
            seen += batch.num_graphs
        model.train(was_training)
        return Accumulated(tasks, sums, metrics, kept if self.keep_predictions else None)

    def evaluate(
        self, model: nn.Module, loader: Iterable, *, progress: bool = False
    ) -> dict[str, Any]:
        return self.accumulate(model, loader, progress=progress).compute(self.prefix)


class Evaluation:
    """Validation and testing as the processes of a run share them.

    ``sharded`` (``validation.mode: sharded`` under DDP): every process evaluates its shard of
    the set (its loader holds every W-th graph), the sums are added by ``reduce`` and the
    metric states gathered. Otherwise the main process evaluates everything through
    ``on_main`` (in one process, just that; under DDP, the others wait and share a failure) with
    the unwrapped model: a DDP forward on one rank alone could start a collective. ``show``:
    whether this process reports progress.
    """

    def __init__(
        self,
        validator: Validator,
        tester: Tester,
        *,
        sharded: bool,
        show: bool,
        on_main: Callable[[Callable[[], Any]], Any],
        reduce: Callable[[Tensor], Tensor],
    ):
        self.validator, self.tester = validator, tester
        self.sharded, self.show, self.on_main, self.reduce = sharded, show, on_main, reduce

    def validate(self, model: nn.Module, loader: Iterable) -> dict[str, Any]:
        """The validation columns of ``model`` over ``loader``, the same on every process."""
        return self._run(self.validator, model, loader, None, keep=False)[0]

    def test(
        self, model: nn.Module, loader: Iterable, tasks: Sequence[Task] | None = None
    ) -> tuple[dict[str, Any], dict[str, dict[str, Tensor]] | None]:
        """The test columns of ``tasks`` (default: the tester's), on every process, and each
        task's predictions in the order of the test set (on the main process)."""
        return self._run(self.tester, model, loader, tasks, keep=True)

    def evaluated_set(self, loader: Any) -> Any:
        """The whole set whose graphs ``loader`` evaluates (what kept predictions index)."""
        graphs = getattr(loader, "graphs", loader.dataset)
        return graphs.dataset if self.sharded else graphs  # a shard is a Subset of it

    def _run(self, evaluator: Validator, model, loader, tasks, *, keep: bool) -> tuple:
        if self.sharded:
            accumulated = evaluator.accumulate(model, loader, tasks, progress=self.show)
            accumulated.sums = self.reduce(accumulated.sums)
            columns = accumulated.compute(evaluator.prefix, across_ranks=True)
            return columns, accumulated.gathered_predictions(across_ranks=True) if keep else None
        kept = {}

        def on_main() -> dict[str, Any]:
            accumulated = evaluator.accumulate(model, loader, tasks, progress=True)
            if keep:  # stay on the main process, which writes them; only the columns are sent
                kept["predictions"] = accumulated.gathered_predictions()
            return accumulated.compute(evaluator.prefix)

        return self.on_main(on_main), kept.get("predictions")


def out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is memory running out: on a GPU (torch's OutOfMemoryError), in Python,
    or in torch's CPU allocator (a RuntimeError that only its message tells apart)."""
    if isinstance(error, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(error, RuntimeError) and "can't allocate memory" in str(error)


def check_forward(
    model: nn.Module,
    dataset: Any,
    tasks: Sequence[Task],
    section: ModelConfig,
    select: Callable[[Any, Any], dict[str, Tensor]],
    autocast: Callable[[], Any],
    *,
    device: torch.device,
    float_dtype: torch.dtype,
) -> None:
    """One forward pass and the losses on the first two graphs of ``dataset``, in evaluation
    mode and without gradients, so no random number is drawn and no weight or statistic
    changes. A failure is reported as what it is: memory running out, or an exception in the
    user's own code (a model.type, a conv of their own), as a RunError naming it and where it
    was raised; a built-in layer the config chose that cannot take this data as a ConfigError
    naming the ``model`` key (``section``) to look at; the device failing, or this package's own
    model code, as a RunError (:func:`~QuantumGravPy.models.forward_failure`).
    """
    graphs = [dataset[i] for i in range(min(2, len(dataset)))]
    if not graphs:
        return
    batch = to_device(Batch.from_data_list(graphs), device, float_dtype)
    was_training = model.training
    model.eval()
    doing = f"in the model's first forward pass, on 2 training graphs on {device}"
    try:
        with torch.no_grad(), autocast():
            outputs = model(batch)
    except (QGError, RunError):
        raise
    except Exception as e:
        if out_of_memory(e):
            raise RunError(f"out of memory {doing}: {cause(e)}") from e
        if device_failure(e):  # reported late, where the device is next waited for
            raise RunError(f"the device failed {doing}: {cause(e)}") from e
        raise in_user_code(e, doing) or forward_failure(section, model, e, doing) from e
    finally:
        model.train(was_training)
    outputs = select(outputs, batch)  # outputs of the wrong shape: a ConfigError of its own
    for i, task in enumerate(tasks):
        key = "criterion" if task.loss_takes_batch else f"tasks[{i}].loss"
        try:
            with torch.no_grad(), autocast():
                task.loss(outputs[task.name], batch)
        except (QGError, RunError):
            raise
        except Exception as e:
            mistake = ConfigError(
                f"{key}: {task.config.loss_name} fails on task {task.name!r}'s outputs for the "
                f"first training graphs: {cause(e)}"
            )
            raise in_user_code(e, f"in {key} of the first training graphs") or mistake from e


def checkpoint_model(
    model: nn.Module,
    tasks: Sequence[Task],
    checkpoint: Any,
    device: torch.device,
    configured: dict[str, Any],
) -> tuple[nn.Module, list[Task]]:
    """``model`` (a copy the caller made) with the evaluation weights of ``checkpoint``, and
    ``tasks`` with its standardisation of regression targets; ``configured`` (the config as a
    dict) names the settings that differ when the weights do not fit."""
    state = load_checkpoint(checkpoint, device)
    trained = state.get("config")
    load_model_state(
        model, evaluation_weights(state), checkpoint, trained=trained, configured=configured
    )
    changed = model_changes(trained, configured)
    if changed:  # the weights fit, but the model they were trained in computed otherwise
        get_logger().warning(
            "%s: %s; its results may differ from those of its run", checkpoint, changed[0]
        )
    scaling = state.get("target_scaling") or {}
    return model, [t.with_scaling(scaling.get(t.name)) for t in tasks]


def to_device(batch: Any, device: torch.device, float_dtype: torch.dtype = torch.float32) -> Any:
    """``batch`` on ``device``; its floating-point tensors in ``float_dtype`` if not float32."""
    batch = batch.to(device, non_blocking=True)
    if float_dtype != torch.float32:
        batch = batch.apply(lambda t: t.to(float_dtype) if t.is_floating_point() else t)
    return batch


class Tester(Validator):
    """Evaluates the test set: with confusion matrices, and keeping the predictions."""

    prefix = "test"
    confusion = True
    keep_predictions = True
