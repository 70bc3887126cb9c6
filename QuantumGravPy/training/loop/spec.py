"""What a run's model is built from (its spec), and the model built from it.

The spec (the node features the model reads, each task's outputs, the width of the graph
features) is read from the data when a run starts and recorded in its checkpoints, so that
``qg predict`` rebuilds the same model for new data without the training set.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.utils.data import Dataset

from ...config import Config, ModelConfig, TrainingConfig, balanced_task, resolve, task_list
from ...data import graph_feature_width, num_edge_features, num_node_features
from ...data.sources.checks import check_user_graphs, checks_for, user_graphs_source
from ...errors import ConfigError, DataError
from ...models import build_model
from ...models.blocks import reads_edges
from ...runs.init_weights import load_starting_weights
from ..tasks.task import Task, build_tasks


def run_tasks(config: Config, dataset: Dataset | list, *, given: bool) -> list[Task]:
    """The tasks of a run of ``config`` on ``dataset`` (``given`` from Python, else the
    config's), with a user's graphs checked for them before a step reads one."""
    tasks = build_tasks(config, dataset)
    source = "the dataset given" if given else user_graphs_source(config.data)
    checks = checks_for(task_list(config), config.model)
    check_user_graphs(dataset, checks, config.data, source=source)
    return tasks


def model_spec(
    model: ModelConfig, training: TrainingConfig, dataset: Dataset | list, tasks: list[Task]
) -> dict[str, Any]:
    """The spec of the ``model:`` section's model for ``dataset`` (kept in every checkpoint);
    ``model.in_channels``, if given, must be the data's node features, and
    ``training.pad_batches`` refuses edge features the conv reads."""
    in_channels = num_node_features(dataset)
    declared = model.in_channels
    if declared is not None and declared != in_channels:
        raise ConfigError(
            f"model.in_channels: the data has {in_channels} node features, found {declared}"
        )
    edge_channels = num_edge_features(dataset)
    if edge_channels and training.pad_batches and model.type is None:
        if reads_edges(resolve(model.conv, key="model.conv")):
            raise ConfigError(
                f"training.pad_batches: the data's edge features (edge_attr), which "
                f"{model.conv} reads, are not padded; set pad_batches to false"
            )
    return {
        "in_channels": in_channels,
        "outputs": {t.name: t.num_outputs for t in tasks},
        "graph_feature_channels": graph_feature_width(dataset, model.graph_features),
        "edge_channels": edge_channels,
    }


def model_from_spec(model: ModelConfig, spec: dict[str, Any], tasks: list[Task]) -> nn.Module:
    """The ``model:`` section's model as ``spec`` says, with a head for each of ``tasks``, on
    the CPU (built from the seeded generator, so that its initial weights do not depend on the
    device)."""
    return build_model(
        model,
        spec["in_channels"],
        {t.name: t.output_spec for t in tasks},
        graph_feature_channels=spec["graph_feature_channels"],
        edge_channels=spec.get("edge_channels", 0),  # 0 in the checkpoints of older versions
    )


def initial_model(
    section: ModelConfig, spec: dict[str, Any], tasks: list[Task], *, resuming: bool = False
) -> tuple[nn.Module, str | None]:
    """The model a run starts from, built as :func:`model_from_spec` builds it, with the
    weights ``model.init_from`` names loaded into it; and a line for the log saying what was
    loaded (None without init_from, or when ``resuming``: the checkpoint's weights replace them,
    and the file they came from may be gone)."""
    model = model_from_spec(section, spec, tasks)
    if section.init_from is None or resuming:
        return model, None
    return model, load_starting_weights(model, section.init_from, strict=section.init_strict)


def train_reads(section: ModelConfig, model: nn.Module, tasks: list[Task]) -> dict[str, Any]:
    """What the training loader is told its batches are read for: the label a class-balancing
    sampler balances, and the attributes the batches hold (``reads``): those the model reads
    (``model.reads``, or the model's own ``reads``) and the tasks' targets and pairs. None:
    every attribute, for a model that does not say, or a criterion function (given the whole
    batch; a criterion class reads ``y``)."""
    label = getattr(balanced_task(t.config for t in tasks), "target_name", "y")
    said = section.reads if section.reads is not None else getattr(model, "reads", None)
    given = [getattr(t.loss_fn, "reads", None) for t in tasks if t.loss_takes_batch]
    if said is None or None in given:  # a criterion function: it may read anything
        return {"label": label, "reads": None}
    names = set(said).union(*given)
    for task in tasks:
        if task.loss_takes_batch:
            continue
        if task.kind.needs_target:
            names.add(task.config.target_name)
        if task.level == "edge":
            names.add(task.config.pairs)
    return {"label": label, "reads": frozenset(names)}


def check_data(config: Config, dataset: Dataset | list, spec: dict[str, Any]) -> None:
    """A dataset other than the one the model was built for must fit it: the same node
    features, and the targets of ``config``'s tasks; and its graphs are checked."""
    if num_node_features(dataset) != spec["in_channels"]:
        raise DataError(
            f"the dataset has {num_node_features(dataset)} node features but the model was "
            f"built for {spec['in_channels']}"
        )
    build_tasks(config, dataset)  # its targets are checked
    checks = checks_for(task_list(config), config.model)
    check_user_graphs(dataset, checks, config.data, source="the dataset given")
