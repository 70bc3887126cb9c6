"""What every task kind is asked: the :class:`TaskKind` base.

A task's kind (``tasks[i].type``) is what it learns: a class out of several, a yes or no, real
values. The rest of the package asks the kind instead of comparing its name: the config which
metrics it offers and computes by default, its default loss and what it checks of a task; the
data whether the targets fit and how many outputs they need; training how a batch's target
becomes what the loss takes and how many rows the model got right; evaluation its metrics
(torchmetrics') and what a prediction file holds; ``qg predict`` the columns of its table; the
run's pictures the one of its test set.

The arguments called ``task`` are a task's settings (a :class:`~QuantumGravPy.config.TaskConfig`:
``name``, ``level``, ``num_outputs``, ``classes``, ``target_name``). Nothing here imports torch
when the module loads: the config checks the kinds while it is read, before any model library
is loaded.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import ConfigError
from ..registry import Registry

if TYPE_CHECKING:
    import numpy as np
    import torchmetrics
    from torch import Tensor

KINDS: Registry[TaskKind] = Registry("tasks[].type")

# What count_outputs reads every target value of the task with (None: not held in memory).
Values = Callable[[], "Tensor | None"]


class TaskKind:
    """A kind of task; subclasses set the class attributes and override what they do
    differently. Kinds hold no state: :func:`task_kind` gives the one object of each."""

    name: ClassVar[str] = ""  # the value of tasks[i].type; a subclass with one is registered
    metrics: ClassVar[tuple[str, ...]] = ()  # offered, in the order the docs list them
    default_metrics: ClassVar[tuple[str, ...]] = ()  # of a task that names none
    minimized: ClassVar[tuple[str, ...]] = ()  # the metrics that improve downwards
    default_loss: ClassVar[str] = ""  # a loss class (dotted), called as loss(outputs, target)
    counts_right: ClassVar[bool] = False  # whether a row is right or wrong (train accuracy)
    has_classes: ClassVar[bool] = False  # one label per graph, which a sampler can balance
    standardizes: ClassVar[bool] = False  # targets scaled by the training split's statistics
    picture: ClassVar[str | None] = None  # the file of its test set's picture, if it draws one
    # metrics that are a table of counts, not one number (a confusion matrix): in the test
    # summary and its picture, never a column of history.csv or a headline
    tables: ClassVar[tuple[str, ...]] = ()
    # whether it reads a target of the data (model_loss does not: the model scores itself)
    needs_target: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if cls.name:
            KINDS.add(cls)

    @classmethod
    def summary(cls) -> str:
        """The first paragraph of the class's docstring: what the kind learns (for the docs)."""
        doc = inspect.getdoc(cls) or ""
        return " ".join(doc.split("\n\n")[0].split()).replace("``", "`")

    # --- the config ----------------------------------------------------------------------------

    def check(self, task: Any, key: str) -> None:
        """The checks of a task of this kind beyond those of every task; ``key`` is
        ``tasks[i]``."""
        if task.classes is not None:
            raise ConfigError(
                f"{key}.classes: only for classification tasks; task {task.name!r} is {self.name}"
            )

    def offered(self, task: Any) -> tuple[str, ...]:
        """The metrics a task of this kind may name (a kind whose metrics depend on the task's
        settings overrides it)."""
        return self.metrics

    def defaults(self, task: Any) -> tuple[str, ...]:
        """The metrics of a task that names none."""
        return self.default_metrics

    def loss_for(self, task: Any) -> Any:
        """The task's loss, ``loss(outputs, target)``, where the kind makes it itself; None: the
        loss ``tasks[i].loss`` names (or :attr:`default_loss`)."""
        return None

    # --- the data ------------------------------------------------------------------------------

    def check_target(self, value: Tensor, task: Any, key: str) -> None:
        """A clear error naming ``key`` (``tasks[i].target``) if the first graph's target
        ``value`` cannot be this kind's (its level is checked already)."""
        if task.level == "graph" and self.has_classes and value.numel() != 1:
            raise ConfigError(
                f"{key}: task {task.name!r} is a graph-level {self.name} task, so "
                f"{task.target_name!r} needs one label per graph, found shape {list(value.shape)}"
            )

    def count_outputs(
        self, task: Any, first: Tensor, values: Values, known: int | None, key: str, outputs: str
    ) -> int:
        """How many outputs the task needs: ``task.num_outputs``, or read from the data (the
        first graph's target ``first``, every value from ``values()``, or the classes the
        dataset says it has, ``known``). Errors name ``key`` (the target) or ``outputs``
        (where the count is given)."""
        raise NotImplementedError

    def notice(self, task: Any, values: Values, key: str | None) -> str | None:
        """A warning for the start of a run about the task's targets, if any."""
        return None

    # --- a batch -------------------------------------------------------------------------------

    def target(self, value: Tensor, rows: int, num_outputs: int, task: Any) -> Tensor:
        """A batch's target attribute ``value`` as the task's targets in their own units, one
        row per graph or node (``rows``)."""
        return value.reshape(-1)

    def loss_target(self, target: Tensor, outputs: Tensor) -> Tensor:
        """The targets as the loss takes them beside ``outputs``."""
        return target

    def correct(self, outputs: Tensor, target: Tensor) -> Tensor:
        """How many rows ``outputs`` get right (a 0-dim tensor), for a kind that counts them."""
        raise NotImplementedError(f"a {self.name} task has no right or wrong rows")

    def model_output(self, outputs: Any, task: Any, rows: int, model: str) -> Tensor | None:
        """The task's ``[rows, outputs]`` tensor of a forward pass's ``outputs``, checked, where
        the kind reads them its own way; None: the model's output named after the task."""
        return None

    # --- metrics -------------------------------------------------------------------------------

    def metric_outputs(self, num_outputs: int) -> int:
        """The outputs the metrics are built for; a ValueError if they cannot be."""
        return num_outputs

    def make_metric(self, name: str, num_outputs: int) -> torchmetrics.Metric:
        """torchmetrics' metric ``name`` (one of :attr:`metrics`), exact (never binned) and
        never synchronising by itself (``sync_on_compute=False``)."""
        raise NotImplementedError

    def task_metric(self, name: str, num_outputs: int, task: Any) -> torchmetrics.Metric:
        """The metric ``name`` of ``task`` (a kind whose metrics depend on the task's settings
        overrides it): :meth:`make_metric`'s."""
        return self.make_metric(name, num_outputs)

    def metric_inputs(self, outputs: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """(predictions, targets) as the metrics take them, in float64: probabilities, never
        logits (torchmetrics would guess from their range)."""
        return outputs.double(), target

    def update_metric(
        self, name: str, metric: torchmetrics.Metric, preds: Tensor, target: Tensor
    ) -> None:
        metric.update(preds, target)

    # --- predictions ---------------------------------------------------------------------------

    def prediction_values(self, predicted: Tensor) -> Tensor:
        """What a prediction file holds of outputs in the target's units (probabilities where
        the outputs are logits)."""
        return predicted.double()

    def columns(self, task: Any, values: np.ndarray, true: np.ndarray | None) -> dict:
        """The columns of ``qg predict``'s table: from :meth:`prediction_values` ``values`` and
        the targets ``true`` (None where the data has none), each named after the task."""
        raise NotImplementedError

    def plot(self, predicted: np.ndarray, true: np.ndarray, output: Path, title: str) -> Path:
        """The picture of the test set's predictions (for a kind with a :attr:`picture`)."""
        raise NotImplementedError(f"a {self.name} task draws no picture of its predictions")


@functools.cache
def _instance(cls: type[TaskKind]) -> TaskKind:
    return cls()


def task_kind(name: str, *, key: str | None = None) -> TaskKind:
    """The kind ``name`` names; a ConfigError naming ``key`` (``tasks[i].type``) if none."""
    return _instance(KINDS.get(name, key=key))


def lower_is_better() -> tuple[str, ...]:
    """The endings of the history columns that improve downwards: losses, and every kind's
    minimised metrics."""
    return ("loss", *sorted({m for cls in KINDS for m in cls.minimized}))


def reference_markdown() -> str:
    """The table of task kinds and their metrics for the documentation (defaults in bold),
    from the registered classes (the site's build puts it into docs/training.md)."""
    lines = ["| `type` | what it learns | metrics (default in bold) |", "|---|---|---|"]
    for cls in KINDS:
        metrics = ", ".join(
            f"**`{m}`**" if m in cls.default_metrics else f"`{m}`" for m in cls.metrics
        )
        lines.append(f"| `{cls.name}` | {cls.summary()} | {metrics} |")
    return "\n".join(lines)
