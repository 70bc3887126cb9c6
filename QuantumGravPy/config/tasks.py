"""What a run learns: its tasks and their metrics.

A task is one target of the data (a Data attribute) with its type, level, loss, weight and
metrics. Its type names its kind (:mod:`QuantumGravPy.tasks`), which says what metrics it offers;
which columns a config's history will have is decided in the config layer too (:mod:`.across`),
so that a config naming a metric or column that cannot exist is refused when it is loaded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigError
from ..tasks import KINDS, TaskKind, lower_is_better, task_kind
from .dotted import DottedPath

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
    # null: the type's (CrossEntropyLoss, BCEWithLogitsLoss, MSELoss, PoissonNLLLoss)
    loss: DottedPath | None = None
    # keyword arguments for the loss (a class is built with them, a function called with them):
    # e.g. {pos_weight: [5.0]}, {weight: [1.0, 3.0]}, {label_smoothing: 0.1}; a list of numbers
    # is handed over as a tensor, as torch's losses take weights
    loss_kwargs: dict[str, Any] = field(default_factory=dict)
    # classes (classification) or values per graph or node (regression, count); binary: 1;
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


def balanced_task(tasks: Iterable[TaskConfig]) -> TaskConfig | None:
    """The task of ``tasks`` (a run's: :func:`task_list`) whose classes the class_balanced and
    progressive samplers balance: the first graph-level task of a kind with classes
    (classification, binary)."""
    for t in tasks:
        if t.kind.has_classes and t.level == "graph":
            return t
    return None
