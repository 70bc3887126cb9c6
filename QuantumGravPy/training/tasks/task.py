"""Tasks at run time: each reads its target from a batch, scores the model's outputs with its
loss, and turns outputs into predictions in the target's own units.

Built once per trainer from the config's tasks and the data (:func:`build_tasks`): that is
where a target the data lacks or a task that cannot fit it is refused, naming the key.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset

from ...config import Config, TaskConfig, check_kwargs, resolve, task_list
from ...data import check_target, target_statistics, task_num_outputs
from ...errors import ConfigError, DataError
from ...models import edge_pairs, task_output
from ...tasks import TaskKind


@dataclass(frozen=True)
class Task:
    """One task of a run: its settings, the number of outputs it has, its loss, and for a
    standardised regression the training split's ``mean`` and ``std`` (float64, per output)."""

    config: TaskConfig
    num_outputs: int
    loss_fn: Callable[..., Tensor]
    loss_takes_batch: bool = False  # the implicit task's criterion function f(outputs, batch)
    mean: Tensor | None = None
    std: Tensor | None = None
    # mean and std copied to each (device, dtype) once: a copy from the host every batch would
    # wait for the device's queued work on a GPU
    _copies: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    @functools.cached_property  # read a few times a step: looked up once
    def name(self) -> str:
        return self.config.name

    @functools.cached_property  # read a few times a step: looked up once
    def kind(self) -> TaskKind:
        return self.config.kind

    @functools.cached_property  # read a few times a step: looked up once
    def level(self) -> str:
        return self.config.level

    @functools.cached_property  # read a few times a step: looked up once
    def weight(self) -> float:
        return self.config.weight

    @property
    def metric_names(self) -> tuple[str, ...]:
        return self.config.metric_names

    @property
    def scaled(self) -> bool:
        return self.mean is not None

    @property
    def output_spec(self) -> tuple:
        """What a model is built with for this task: ``(num_outputs, level)``, and for an
        edge-level task the attribute of its pairs, ``(num_outputs, "edge", pairs)``."""
        if self.level == "edge":
            return (self.num_outputs, self.level, self.config.pairs)
        return (self.num_outputs, self.level)

    def pairs(self, batch: Any) -> Tensor:
        """An edge-level task's node pairs in ``batch``, ``[2, P]``."""
        return edge_pairs(batch, self.config.pairs, self.name)

    def rows(self, batch: Any) -> int:
        """How many outputs rows a batch has for this task: graphs, nodes, or pairs."""
        if self.level == "edge":
            return self.pairs(batch).shape[1]
        return batch.num_graphs if self.level == "graph" else batch.num_nodes

    def row_graphs(self, batch: Any) -> Tensor:
        """Each output row's graph, by its position in the batch."""
        graphs = torch.arange(batch.num_graphs, device=batch.ptr.device)
        if self.level == "graph":
            return graphs
        index = batch.batch if batch.batch is not None else graphs.new_zeros(batch.num_nodes)
        return index if self.level == "node" else index[self.pairs(batch)[0]]

    def target(self, batch: Any) -> Tensor:
        """The batch's targets, in their own units, one row per graph or node (class indices,
        0/1 or values ``[N, k]``, as the kind says)."""
        try:
            value = batch[self.config.target_name]
        except KeyError:
            raise DataError(
                f"task {self.name!r}: the batch has no target {self.config.target_name!r} (it "
                f"holds {', '.join(sorted(batch.keys()))}); a trainer's training batches hold "
                "only what its model and tasks read: train on batches of this trainer's own "
                "loaders (prepare_dataloaders)"
            ) from None
        return self.kind.target(value, self.rows(batch), self.num_outputs, self.config)

    def loss(self, outputs: Tensor, batch: Any) -> Tensor:
        """The task's loss of ``outputs`` on ``batch``: a mean over the batch's rows."""
        if self.loss_takes_batch:
            return self.loss_fn(outputs, batch)
        if not self.kind.needs_target:  # the outputs are the model's own loss terms
            return self.loss_fn(outputs, None)
        target = self.kind.loss_target(self.target(batch), outputs)
        if target.shape[0] == 0:  # a batch of graphs without pairs: a loss of 0, not NaN
            return outputs.sum() * 0.0
        return self.loss_fn(outputs, self.standardised(target))

    def standardised(self, target: Tensor) -> Tensor:
        """``target`` as the loss takes it: in units of the training split's spread, if the
        task standardises its targets."""
        if not self.scaled:
            return target
        mean, std = self._scaling_like(target)
        return (target - mean) / std

    def predictions(self, outputs: Tensor) -> Tensor:
        """Outputs in the target's units: as they are, or unscaled if standardised."""
        if self.scaled:
            outputs = outputs.double()
            mean, std = self._scaling_like(outputs)
            return outputs * std + mean
        return outputs

    def _scaling_like(self, like: Tensor) -> tuple[Tensor, Tensor]:
        key = (like.device, like.dtype)
        found = self._copies.get(key)
        if found is None:
            found = self._copies[key] = (self.mean.to(like), self.std.to(like))
        return found

    def correct(self, outputs: Tensor, batch: Any) -> Tensor:
        """How many rows a task of a kind that counts them gets right (a 0-dim tensor)."""
        return self.kind.correct(outputs, self.target(batch))

    def scaling(self) -> dict[str, list[float]] | None:
        """The standardisation, as a checkpoint records it."""
        if not self.scaled:
            return None
        return {"mean": self.mean.tolist(), "std": self.std.tolist()}

    def with_scaling(self, scaling: dict[str, Sequence[float]] | None) -> Task:
        if scaling is None:
            return dataclasses.replace(self, mean=None, std=None)
        return dataclasses.replace(
            self,
            mean=torch.tensor(scaling["mean"], dtype=torch.float64),
            std=torch.tensor(scaling["std"], dtype=torch.float64),
        )


def build_tasks(
    config: Config, dataset: Dataset | list | None, *, outputs: dict[str, int] | None = None
) -> list[Task]:
    """The config's tasks (or its implicit one) checked against ``dataset``, without scaling;
    or, given ``outputs`` (each task's number of outputs, as a trained model has), without
    reading any data."""
    tasks = []
    explicit = bool(config.tasks)
    for i, tc in enumerate(task_list(config)):
        target_key = f"tasks[{i}].target" if explicit else "data"
        outputs_key = f"tasks[{i}].num_outputs" if explicit else "model.num_classes"
        if outputs is not None:
            num_outputs = outputs[tc.name]
        elif not tc.kind.needs_target:  # no target to read: the kind knows its outputs
            num_outputs = tc.kind.count_outputs(tc, None, lambda: None, None, target_key, "")
        else:
            check_target(dataset, tc, target_key)
            num_outputs = task_num_outputs(dataset, tc, target_key, outputs_key)
        if explicit:
            loss = tc.kind.loss_for(tc) or make_loss(tc, f"tasks[{i}]")
            tasks.append(Task(tc, num_outputs, loss))
        else:
            tasks.append(Task(tc, num_outputs, make_criterion(config.criterion), True))
    return tasks


def fit_scaling(tasks: Sequence[Task], train_dataset: Dataset | list) -> list[Task]:
    """The tasks with each standardised target not yet scaled (a resumed run keeps its
    checkpoint's scaling) scaled by ``train_dataset``'s mean and standard deviation."""
    fitted = []
    for t in tasks:
        if t.kind.standardizes and t.config.standardize and not t.scaled:
            mean, std = target_statistics(train_dataset, t.config, t.num_outputs)
            t = dataclasses.replace(t, mean=mean, std=std)
        fitted.append(t)
    return fitted


def add_train_sums(
    sums: torch.Tensor, tasks: list[Task], losses: list[Tensor], outputs: dict, batch: Any
) -> None:
    """Add a batch to ``sums`` (per task: loss summed over rows, rows right, rows).

    Each is one in-place addition to a view (``sums[j, 0] += x`` would copy the result back
    with a second operation); a float32 loss times the rows is exact in float64."""
    for row, task, loss in zip(sums, tasks, losses, strict=True):
        rows = task.rows(batch)
        row[0].add_(loss.detach(), alpha=rows)
        if task.kind.counts_right:
            row[1].add_(task.correct(outputs[task.name].detach(), batch))
        row[2].add_(rows)


def train_columns(tasks: list[Task], sums: torch.Tensor) -> dict[str, float]:
    """The training columns of history.csv from the summed per-task losses and counts."""
    single = len(tasks) == 1
    columns: dict[str, float] = {}
    total = 0.0
    for task, (loss_sum, right, rows) in zip(tasks, sums.tolist(), strict=True):
        loss = loss_sum / rows if rows else math.nan
        total += task.weight * loss
        if not single:
            columns[f"train_{task.name}_loss"] = loss
        if task.kind.counts_right:
            columns[f"train_{task.name}_accuracy"] = right / rows if rows else math.nan
            if single:
                columns["train_accuracy"] = columns[f"train_{task.name}_accuracy"]
    return {"train_loss": total, **columns}


def select_outputs(
    tasks: Sequence[Task], outputs: Any, batch: Any, *, model: str | None
) -> dict[str, Tensor]:
    """Each task's output of a forward pass, checked: ``[graphs or nodes, num_outputs]``.

    ``model`` is ``model.type`` (None: the built-in model), named in the errors.
    """
    model = model or "GNNModel"
    if isinstance(outputs, Tensor) and len(tasks) > 1:
        raise ConfigError(
            f"model.type: {model} returned one tensor, but the config has {len(tasks)} tasks; "
            "return a dict from task name to tensor"
        )
    selected = {}
    for t in tasks:
        rows = t.rows(batch)
        own = t.kind.model_output(outputs, t.config, rows, model)
        selected[t.name] = (
            own
            if own is not None
            else task_output(outputs, t.name, rows, t.num_outputs, model=model, level=t.level)
        )
    return selected


def unpadded(outputs: Any, tasks: Sequence[Task], batch: Any) -> Any:
    """The outputs of ``batch`` padded (``training.pad_batches``): each task's rows of the
    real graphs or nodes, which come first."""
    if isinstance(outputs, Tensor):
        return outputs[: tasks[0].rows(batch)]
    rows = {t.name: t.rows(batch) for t in tasks}
    return {k: v[: rows[k]] if k in rows else v for k, v in outputs.items()}


def scalings(tasks: Sequence[Task]) -> dict[str, dict[str, list[float]] | None]:
    return {t.name: t.scaling() for t in tasks}


def make_loss(tc: TaskConfig, key: str) -> Callable[..., Tensor]:
    """A task's loss, called as ``loss(outputs, target)``: its class built with
    ``loss_kwargs`` (lists of numbers as float tensors), or its function called with them."""
    loss = resolve(tc.loss_name, key=f"{key}.loss")
    kwargs = {
        k: torch.tensor(v, dtype=torch.float32) if _numbers(v) else v
        for k, v in tc.loss_kwargs.items()
    }
    given = 0 if isinstance(loss, type) else 2  # a function also takes outputs and target
    check_kwargs(loss, kwargs, f"{key}.loss_kwargs", given=given, name=tc.loss_name)
    if isinstance(loss, type):
        try:  # built here once, so that what it refuses is named before training
            built = loss(**kwargs)
        except (TypeError, ValueError, RuntimeError) as e:
            raise ConfigError(f"{key}.loss_kwargs: {tc.loss_name} refused them: {e}") from e
        if not kwargs:
            return built
    return _Placed(loss, kwargs) if kwargs else loss


class _Placed:
    """A loss with its ``loss_kwargs``, whose tensors go where the outputs are (their device,
    and float64 in a float64 run): a class built there with them, a function called with
    them; once per place."""

    def __init__(self, loss: Callable[..., Any], kwargs: dict[str, Any]):
        self.loss, self.kwargs = loss, kwargs
        self._placed: dict[tuple, Callable[..., Tensor]] = {}

    def __call__(self, outputs: Tensor, target: Tensor) -> Tensor:
        dtype = torch.float64 if outputs.dtype == torch.float64 else torch.float32
        fn = self._placed.get((outputs.device, dtype))
        if fn is None:
            placed = {
                k: v.to(outputs.device, dtype) if isinstance(v, Tensor) else v
                for k, v in self.kwargs.items()
            }
            built = isinstance(self.loss, type)
            fn = self.loss(**placed) if built else functools.partial(self.loss, **placed)
            self._placed[(outputs.device, dtype)] = fn
        return fn(outputs, target)


def _numbers(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)
    )


def make_criterion(dotted: str) -> Callable[[Tensor, Any], Tensor]:
    """``criterion(outputs, batch)``: a loss class gets ``batch.y``, a function the whole batch.

    Losses are expected to average over the graphs of a batch (PyTorch's default reduction).
    """
    obj = resolve(dotted, key="criterion")
    if isinstance(obj, type):
        loss = obj()

        def criterion(outputs: Tensor, batch: Any) -> Tensor:
            return loss(outputs, batch.y)

        criterion.reads = ("y",)  # type: ignore[attr-defined]  # what the batch gives it
        criterion.loss = loss  # type: ignore[attr-defined]  # what it takes y with
        return criterion
    return obj


def total_loss(tasks: list[Task], losses: list[torch.Tensor]) -> torch.Tensor:
    """The tasks' losses weighted as they say; one task of weight 1 adds no operation."""
    if len(tasks) == 1 and tasks[0].weight == 1.0:
        return losses[0]
    return sum(task.weight * x for task, x in zip(tasks, losses, strict=True))
