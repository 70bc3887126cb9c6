"""What a run learns: its tasks, their metrics, and the history columns they make.

A task is one target of the data (a Data attribute) with its type, level, loss, weight and
metrics. Its type names its kind (:mod:`QuantumGravPy.tasks`), which says what metrics it offers;
which columns a config's history will have is decided here, in the config layer, so that a
config naming a metric or column that cannot exist is refused when it is loaded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..embedded import data_kind
from ..errors import ConfigError
from ..tasks import KINDS, TaskKind, lower_is_better, task_kind
from .dotted import DottedPath

# The functions below take the whole Config (schema.py imports this module, so not its type).
Config = Any

# The task of a config without a tasks: section, classifying each graph's y.
IMPLICIT_TASK = "y"


def improves_towards(column: str) -> Literal["min", "max"]:
    """Which way a history column improves: ``min`` for losses and errors (the metrics a task
    kind minimises), ``max`` for scores."""
    return "min" if column.endswith(lower_is_better()) else "max"


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class TaskConfig:
    name: str  # names the task's columns (val_<name>_<metric>) and its output of the model
    # what it learns: the name of a task kind (the docs' Training page lists them, from their
    # classes), one of your own among them (docs: Extending)
    type: str = "classification"
    target: str | None = None  # the Data attribute holding the target; null: the task's name
    # one target per graph, per node, or per pair of nodes (edge: the pairs are named by pairs)
    level: Literal["graph", "node", "edge"] = "graph"
    # edge level: the Data attribute of the task's node pairs, [2, P] node indices, one target
    # row per pair: relations_index or links_index (the relations or links data.pairs gives
    # causal sets), edge_index (one target per edge) or one of your graphs' own; its name
    # contains "index", so that batches shift it
    pairs: str | None = None
    weight: float = field(  # of this task's loss in the total loss
        default=1.0, metadata={"check": lambda v: v > 0, "expected": "a positive number"}
    )
    # a loss class (built with loss_kwargs) or function, called as loss(outputs, target);
    # null: the type's (CrossEntropyLoss, BCEWithLogitsLoss, MSELoss)
    loss: DottedPath | None = None
    # keyword arguments for the loss (a class is built with them, a function called with them):
    # e.g. {pos_weight: [5.0]}, {weight: [1.0, 3.0]}, {label_smoothing: 0.1}; a list of numbers
    # is handed over as a tensor, as torch's losses take weights
    loss_kwargs: dict[str, Any] = field(default_factory=dict)
    # classes (classification) or values per graph or node (regression); binary: 1;
    # null: read from the data
    num_outputs: int | None = field(
        default=None, metadata={"check": lambda v: v > 0, "expected": "a positive number"}
    )
    # classification: the label values, in class order: class k is a target equal to
    # classes[k] (e.g. [1, 2] for QuantumGrav.jl's 1-based labels); null: the targets are the
    # class indices 0, 1, ...
    classes: tuple[int, ...] | None = None
    # any of those offered for the type (see "Tasks and metrics" in the docs); null: the type's
    # defaults (in bold there)
    metrics: tuple[str, ...] | None = None
    # regression: learn targets scaled by the training split's mean and std (kept in the
    # checkpoint); metrics and predictions are always in the original units
    standardize: bool = True
    # model_loss: the loss terms the model returns (one value per graph each), by name, with
    # their weights in the loss, e.g. {nll: 1.0, kl: 0.1}; each is a metric, <term>_loss
    terms: dict[str, float] = field(default_factory=dict)

    @property
    def target_name(self) -> str:
        return self.target or self.name

    @property
    def kind(self) -> TaskKind:
        """What the task learns (its type's object)."""
        return task_kind(self.type)

    @property
    def metric_names(self) -> tuple[str, ...]:
        return self.kind.defaults(self) if self.metrics is None else self.metrics

    @property
    def loss_name(self) -> str:
        return self.loss or self.kind.default_loss

    def check(self, key: str) -> None:
        """The checks of one task; ``key`` (``tasks[i]``) names it in errors."""
        if not _NAME.fullmatch(self.name):
            raise ConfigError(
                f"{key}.name: expected letters, digits and underscores (it names history "
                f"columns and model outputs), found {self.name!r}"
            )
        kind = task_kind(self.type, key=f"{key}.type")
        if self.level == "edge" and self.pairs is None:
            raise ConfigError(
                f"{key}.pairs: task {self.name!r} is edge-level; name the attribute of its node "
                "pairs, e.g. relations_index (a causal set's relations, with data.pairs: "
                "relations) or edge_index (one target per edge)"
            )
        if self.pairs is not None and self.level != "edge":
            raise ConfigError(
                f"{key}.pairs: only for an edge-level task (level: edge); task {self.name!r} is "
                f"{self.level}-level"
            )
        if self.pairs is not None and "index" not in self.pairs:
            raise ConfigError(
                f'{key}.pairs: {self.pairs!r} must have "index" in its name, as PyG\'s batches '
                "shift such attributes by the nodes of the graphs before them (rename it, e.g. "
                f"{self.pairs}_index)"
            )
        if self.terms and kind.needs_target:
            raise ConfigError(
                f"{key}.terms: only for a task whose model returns its own loss terms (type "
                f"model_loss); task {self.name!r} is {self.type}"
            )
        kind.check(self, key)
        offered = kind.offered(self)
        for metric in self.metric_names:
            if metric not in offered:
                other = [k.name for k in KINDS if metric in k.metrics]
                why = f"a metric of {' and '.join(other)} tasks" if other else "not a metric"
                raise ConfigError(
                    f"{key}.metrics: {metric!r} is {why}, not of a {self.type} task like "
                    f"{self.name!r} (choose from {', '.join(offered)})"
                )


def task_list(config: Config) -> tuple[TaskConfig, ...]:
    """The config's tasks; without a ``tasks:`` section, one classification of each graph's y."""
    return config.tasks or (implicit_task(config.model.num_classes),)


def implicit_task(num_classes: int | None = None) -> TaskConfig:
    """The one task of a config without ``tasks:``: a classification of each graph's y into
    ``model.num_classes`` classes (None: read from the data)."""
    return TaskConfig(
        name=IMPLICIT_TASK,
        type="classification",
        target="y",
        num_outputs=num_classes,
        metrics=("accuracy", "f1_macro", "confusion_matrix"),
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
        if t.kind.counts_right:
            train.append(f"train_{t.name}_accuracy")
        val += [f"val_{t.name}_{m}" for m in t.metric_names if m not in t.kind.tables]
    if single:
        (t,) = tasks
        if t.kind.counts_right:
            train.append("train_accuracy")
        val += [f"val_{m}" for m in t.metric_names if m not in t.kind.tables]
    return (*val, *train)


def balanced_task(tasks: Iterable[TaskConfig]) -> TaskConfig | None:
    """The task of ``tasks`` (a run's: :func:`task_list`) whose classes the class_balanced and
    progressive samplers balance: the first graph-level task of a kind with classes
    (classification, binary)."""
    for t in tasks:
        if t.kind.has_classes and t.level == "graph":
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
        if not task.kind.needs_target and config.model.type is None:
            raise ConfigError(
                f"tasks[{i}].type: a {task.type} task needs your own model.type, whose "
                "forward(batch) returns its loss terms; the built-in model returns predictions"
            )
        if task.level == "edge":
            _check_edge_task(config, task, f"tasks[{i}]")
    _check_pairs_kept(config)
    kind = data_kind(config.data.kind, key="data.kind")
    generated = not config.data.files and config.data.dataset is None
    if generated and not tasks and kind.classes(config.data.dimensions) is None:
        example = f", e.g. {kind.example_task}" if kind.example_task else ""
        raise ConfigError(
            f"tasks: data.kind {kind.name} has no classes to learn; give a task{example}"
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
    if sampler in ("class_balanced", "progressive") and balanced_task(task_list(config)) is None:
        raise ConfigError(
            f"training.sampler: {sampler} balances the classes of a graph-level classification "
            "or binary task, and this config has none"
        )


# the pairs the causal sets (of data.files, or generated) hold, by data.pairs
MADE_PAIRS = {"relations_index": "relations", "links_index": "links"}


def _check_edge_task(config: Config, task: TaskConfig, key: str) -> None:
    """An edge-level task's pairs must exist and keep pointing at the right nodes."""
    made = MADE_PAIRS.get(task.pairs)
    causal_sets = config.data.dataset is None  # of data.files, or generated
    if made is not None and causal_sets and config.data.pairs != made:
        found = "null" if config.data.pairs is None else config.data.pairs
        raise ConfigError(
            f"{key}.pairs: {task.pairs} is what data.pairs: {made} makes of the causal sets "
            f"(found data.pairs: {found}); set data.pairs: {made} (for files of general graphs "
            "holding their own pairs, it only names them)"
        )


def _check_pairs_kept(config: Config) -> None:
    """Augmentation removes elements and links: pairs of nodes (an edge-level task's, or the
    ones data.pairs makes) would point at other nodes after it."""
    if config.augmentation.preset is None:
        return
    edge = next((i for i, t in enumerate(config.tasks) if t.level == "edge"), None)
    if edge is not None:
        why = f"an edge-level task (tasks[{edge}], {config.tasks[edge].name!r})"
    elif config.data.pairs is not None:
        why = f"data.pairs ({config.data.pairs})"
    else:
        return
    raise ConfigError(
        f"augmentation.preset: not with {why}: removing elements or links would leave the pairs "
        "pointing at other nodes"
    )


def headline_columns(config: Config, prefix: str = "val") -> tuple[str, ...]:
    """The column of each task's first metric (with one task, unprefixed): what the epoch's
    log line and ``curves.png`` show."""
    tasks = task_list(config)
    columns = []
    for t in tasks:
        first = next((m for m in t.metric_names if m not in t.kind.tables), None)
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
