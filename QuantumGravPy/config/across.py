"""What a config's sections say together: its tasks (without a ``tasks:`` section, the one
implicit task), the columns a run's history will have, and the checks of settings of
different sections that exclude each other (:func:`check_across`, run once the whole
:class:`~.schema.Config` is built; each section's own are its ``validate`` method's).
"""

from __future__ import annotations

from ..embedded import data_kind
from ..errors import ConfigError
from .schema import Config
from .tasks import TaskConfig, balanced_task, implicit_task, improves_towards


def task_list(config: Config) -> tuple[TaskConfig, ...]:
    """The config's tasks; without a ``tasks:`` section, one classification of each graph's y."""
    return config.tasks or (implicit_task(config.model.num_classes),)


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


def check_across(config: Config) -> None:
    """The checks that tie settings of different sections together (what a
    ``parallel.strategy`` refuses, its class says: ``parallel/``)."""
    validate_tasks(config)
    check_padding(config)


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


def check_padding(config: Config) -> None:
    """``training.pad_batches``: node-budget batches of the built-in model, whose graphs do not
    see each other, whose edges the budget bounds (see ``data.batches.padding``)."""
    if not config.training.pad_batches:
        return
    against = None
    if config.training.batch_nodes is None:
        against = "needs training.batch_nodes, the budget of nodes"
    elif config.model.type is not None:
        against = f"not with model.type {config.model.type} (its graphs might see the padding)"
    elif config.model.norm == "batch":
        against = "not with model.norm: batch, whose statistics would count the padding nodes"
    elif config.training.precision == "16":
        against = 'not with training.precision: "16", whose range the padding rows might leave'
    elif config.augmentation.preset is not None:
        against = "not with augmentation.preset, which can add links past the edge budget"
    elif any(t.level == "edge" for t in config.tasks):
        against = "not with an edge-level task, whose pairs the padding does not budget"
    if against is not None:
        raise ConfigError(f"training.pad_batches: {against}")
