"""What a run learns: its tasks, their metrics, and the history columns they make.

A task is one target of the data (a Data attribute) with its type, level, loss, weight and
metrics. Which metrics each task type offers and which columns a config's history will have are
decided here, in the config layer, so that a config naming a metric or column that cannot exist
is refused when it is loaded; the training layer computes them
(:mod:`QuantumGravPy.training.metrics`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigError
from .dotted import DottedPath

# The functions below take the whole Config (schema.py imports this module, so not its type).
Config = Any

TASK_TYPES = ("classification", "binary", "regression")

#: The metrics each task type offers (``confusion_matrix`` goes to the summary and its picture,
#: never to history.csv).
METRIC_NAMES: dict[str, tuple[str, ...]] = {
    "classification": (
        "accuracy",
        "balanced_accuracy",
        "f1_macro",
        "f1_weighted",
        "precision_macro",
        "recall_macro",
        "auroc",
        "confusion_matrix",
    ),
    "binary": ("accuracy", "f1", "precision", "recall", "auroc", "average_precision",
               "confusion_matrix"),
    "regression": ("mse", "rmse", "mae", "r2", "max_error"),
}  # fmt: skip

#: The metrics of a task that names none.
DEFAULT_METRICS: dict[str, tuple[str, ...]] = {
    "classification": ("accuracy", "f1_macro", "confusion_matrix"),
    "binary": ("accuracy", "f1", "auroc", "confusion_matrix"),
    "regression": ("mse", "mae", "r2"),
}

#: The loss of a task that names none, called as loss(outputs, target).
DEFAULT_LOSSES = {
    "classification": "torch.nn.CrossEntropyLoss",
    "binary": "torch.nn.BCEWithLogitsLoss",
    "regression": "torch.nn.MSELoss",
}

# The task of a config without a tasks: section, classifying each graph's y.
IMPLICIT_TASK = "y"

# Columns whose names end so improve downwards (losses, errors); all others upwards (scores).
_LOWER_IS_BETTER = ("loss", "mse", "mae", "max_error")  # rmse ends in mse


def improves_towards(column: str) -> Literal["min", "max"]:
    """Which way a history column improves: ``min`` for losses and errors, ``max`` for scores."""
    return "min" if column.endswith(_LOWER_IS_BETTER) else "max"


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class TaskConfig:
    name: str  # names the task's columns (val_<name>_<metric>) and its output of the model
    # classification: a class index per graph or node; binary: 0 or 1, learnt as one logit;
    # regression: one or more real values
    type: Literal["classification", "binary", "regression"] = "classification"
    target: str | None = None  # the Data attribute holding the target; null: the task's name
    level: Literal["graph", "node"] = "graph"  # one target per graph, or one per node
    weight: float = field(  # of this task's loss in the total loss
        default=1.0, metadata={"check": lambda v: v > 0, "expected": "a positive number"}
    )
    # a loss class (built without arguments) or function, called as loss(outputs, target);
    # null: CrossEntropyLoss, BCEWithLogitsLoss or MSELoss by type
    loss: DottedPath | None = None
    # classes (classification) or values per graph or node (regression); binary: 1;
    # null: read from the data
    num_outputs: int | None = field(
        default=None, metadata={"check": lambda v: v > 0, "expected": "a positive number"}
    )
    # classification: the label values, in class order: class k is a target equal to
    # classes[k] (e.g. [1, 2] for QuantumGrav.jl's 1-based labels); null: the targets are the
    # class indices 0, 1, ...
    classes: tuple[int, ...] | None = None
    # any of those offered for the type (see "Tasks and metrics" in the docs); null: accuracy,
    # f1_macro, confusion_matrix (classification); accuracy, f1, auroc, confusion_matrix
    # (binary); mse, mae, r2 (regression)
    metrics: tuple[str, ...] | None = None
    # regression: learn targets scaled by the training split's mean and std (kept in the
    # checkpoint); metrics and predictions are always in the original units
    standardize: bool = True

    @property
    def target_name(self) -> str:
        return self.target or self.name

    @property
    def metric_names(self) -> tuple[str, ...]:
        return DEFAULT_METRICS[self.type] if self.metrics is None else self.metrics

    @property
    def loss_name(self) -> str:
        return self.loss or DEFAULT_LOSSES[self.type]

    def check(self, key: str) -> None:
        """The checks of one task; ``key`` (``tasks[i]``) names it in errors."""
        if not _NAME.fullmatch(self.name):
            raise ConfigError(
                f"{key}.name: expected letters, digits and underscores (it names history "
                f"columns and model outputs), found {self.name!r}"
            )
        offered = METRIC_NAMES[self.type]
        for metric in self.metric_names:
            if metric not in offered:
                other = [t for t, names in METRIC_NAMES.items() if metric in names]
                why = f"a metric of {' and '.join(other)} tasks" if other else "not a metric"
                raise ConfigError(
                    f"{key}.metrics: {metric!r} is {why}, not of a {self.type} task like "
                    f"{self.name!r} (choose from {', '.join(offered)})"
                )
        if self.type == "binary" and self.num_outputs not in (None, 1):
            raise ConfigError(
                f"{key}.num_outputs: a binary task has one output, a logit; task {self.name!r} "
                f"has {self.num_outputs}"
            )
        if self.classes is not None:
            if self.type != "classification":
                raise ConfigError(
                    f"{key}.classes: only for classification tasks; task {self.name!r} is "
                    f"{self.type}"
                )
            if len(self.classes) < 2 or len(set(self.classes)) != len(self.classes):
                raise ConfigError(
                    f"{key}.classes: expected two or more different label values, found "
                    f"{list(self.classes)}"
                )
            if self.num_outputs not in (None, len(self.classes)):
                raise ConfigError(
                    f"{key}.num_outputs: {self.num_outputs}, but {key}.classes names "
                    f"{len(self.classes)} classes; leave num_outputs out"
                )
        if self.type == "classification" and self.num_outputs == 1:
            raise ConfigError(
                f"{key}.num_outputs: a classification task needs 2 or more classes (use type "
                f"binary for one logit); task {self.name!r} has 1"
            )


def task_list(config: Config) -> tuple[TaskConfig, ...]:
    """The config's tasks; without a ``tasks:`` section, one classification of each graph's y."""
    if config.tasks:
        return config.tasks
    return (
        TaskConfig(
            name=IMPLICIT_TASK,
            type="classification",
            target="y",
            num_outputs=config.model.num_classes,
            metrics=("accuracy", "f1_macro", "confusion_matrix"),
        ),
    )


def history_columns(config: Config) -> tuple[str, ...]:
    """The columns of history.csv a config's runs have, besides those of every run (epoch, lr,
    epoch_seconds, and the monitor's grad_norm_mean, grad_norm_max and skipped_steps)."""
    tasks = task_list(config)
    single = len(tasks) == 1
    train, val = ["train_loss"], ["val_loss"]
    for t in tasks:
        if not single:
            train.append(f"train_{t.name}_loss")
            val.append(f"val_{t.name}_loss")
        if t.type != "regression":
            train.append(f"train_{t.name}_accuracy")
        val += [f"val_{t.name}_{m}" for m in t.metric_names if m != "confusion_matrix"]
    if single:
        (t,) = tasks
        if t.type != "regression":
            train.append("train_accuracy")
        val += [f"val_{m}" for m in t.metric_names if m != "confusion_matrix"]
    return (*val, *train)


def balanced_task(config: Config) -> TaskConfig | None:
    """The task whose classes the class_balanced and progressive samplers balance: the first
    graph-level classification or binary task."""
    for t in task_list(config):
        if t.type != "regression" and t.level == "graph":
            return t
    return None


def validate_tasks(config: Config) -> None:
    """The checks that tie the tasks to the other sections."""
    tasks = config.tasks
    names = [t.name for t in tasks]
    for i, (task, name) in enumerate(zip(tasks, names, strict=True)):
        task.check(f"tasks[{i}]")
        if name in names[:i]:
            raise ConfigError(f"tasks[{i}].name: {name!r} names two tasks")
    if config.data.kind == "ricci" and not tasks and not config.data.files:
        raise ConfigError(
            "tasks: data.kind ricci has no classes to learn; give a task, e.g. "
            "{name: ricci, type: regression, level: node} (see configs/ricci.yaml)"
        )
    if tasks and config.criterion != "torch.nn.CrossEntropyLoss":
        raise ConfigError(
            "criterion: only for configs without tasks:; give each task its loss "
            f"(tasks[i].loss), found {config.criterion!r}"
        )
    if tasks and config.model.num_classes is not None:
        raise ConfigError(
            "model.num_classes: only for configs without tasks:; give each task its "
            f"num_outputs, found {config.model.num_classes}"
        )
    columns = history_columns(config)
    es = config.early_stopping
    for metric in es.metrics:
        if metric not in columns:
            raise ConfigError(
                f"early_stopping.metric: {metric!r} is not a column of this config's "
                f"history.csv (choose from {', '.join(columns)})"
            )
    expected = improves_towards(es.metrics[0])
    if es.mode != expected:
        raise ConfigError(
            f"early_stopping.mode: {es.metrics[0]} improves towards {expected}, found {es.mode!r}"
        )
    sampler = config.training.sampler
    if sampler in ("class_balanced", "progressive") and balanced_task(config) is None:
        raise ConfigError(
            f"training.sampler: {sampler} balances the classes of a graph-level classification "
            "or binary task, and this config has none"
        )


def headline_columns(config: Config, prefix: str = "val") -> tuple[str, ...]:
    """The column of each task's first metric (with one task, unprefixed): what the epoch's
    log line and ``curves.png`` show."""
    tasks = task_list(config)
    columns = []
    for t in tasks:
        first = next((m for m in t.metric_names if m != "confusion_matrix"), None)
        if first is not None:
            columns.append(f"{prefix}_{first}" if len(tasks) == 1 else f"{prefix}_{t.name}_{first}")
    return tuple(columns)


def shown_columns(config: Config) -> tuple[str, ...]:
    """The validation columns the epoch's log line and ``curves.png`` show: each task's first
    metric, then the early-stopping metrics that decide the best epoch, if not among them."""
    columns = headline_columns(config)
    deciding = [m for m in config.early_stopping.metrics if m not in columns and m not in _LOSSES]
    return (*columns, *deciding)


_LOSSES = ("train_loss", "val_loss")  # always shown
