"""What the tasks need to know of the data: that their targets exist, how many outputs they
have, and the mean and spread of a regression target over the training split.

Everything is read from the first graph, or from the concatenated attribute of a dataset held
in memory; nothing here iterates over a dataset that is not (except the statistics of a
regression target, which need every training value once).
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset
from torch_geometric.data import Data, InMemoryDataset

from ..config import TaskConfig
from ..errors import ConfigError, DataError
from .datasets import in_memory_values


def num_node_features(dataset: Dataset | list[Data]) -> int:
    """How many features each node of ``dataset`` has (read from the first graph)."""
    if isinstance(dataset, InMemoryDataset):
        return dataset.num_node_features
    return dataset[0].x.shape[1]


def check_target(dataset: Dataset | list[Data], task: TaskConfig, key: str) -> None:
    """A clear error, naming ``key`` (``tasks[i].target``), when the first graph lacks the
    task's target or holds it in a shape that does not fit the task's level and type."""
    first = dataset[0]
    name = task.target_name
    value = first[name] if name in first else None
    if not isinstance(value, torch.Tensor):
        have = ", ".join(k for k in first.keys() if isinstance(first[k], torch.Tensor))
        raise ConfigError(
            f"{key}: the data has no tensor attribute {name!r} for task {task.name!r} "
            f"(the first graph has {have})"
        )
    if task.level == "node" and (value.dim() == 0 or value.shape[0] != first.num_nodes):
        raise ConfigError(
            f"{key}: task {task.name!r} is node-level, so {name!r} needs one row per node "
            f"({first.num_nodes} in the first graph), found shape {list(value.shape)}"
        )
    if task.level == "graph" and task.type != "regression" and value.numel() != 1:
        raise ConfigError(
            f"{key}: task {task.name!r} is a graph-level {task.type} task, so {name!r} needs "
            f"one label per graph, found shape {list(value.shape)}"
        )
    if task.type == "classification" and value.is_floating_point():
        raise ConfigError(
            f"{key}: task {task.name!r} classifies, so {name!r} must hold integer class "
            f"indices, found {value.dtype} (use type regression for continuous values)"
        )


def task_num_outputs(
    dataset: Dataset | list[Data], task: TaskConfig, key: str, outputs_key: str
) -> int:
    """The task's ``num_outputs``, or when null, read from the data.

    Errors name ``key`` (the task's target) or ``outputs_key`` (where the count is given).
    """
    if task.type == "binary":
        values = in_memory_values(dataset, task.target_name)
        if (
            values is not None
            and values.numel()
            and not bool(((values == 0) | (values == 1)).all())
        ):
            bad = values[(values != 0) & (values != 1)][0].item()
            raise DataError(
                f"{key}: the binary task {task.name!r} needs targets 0 or 1 in "
                f"{task.target_name!r}, found {bad}"
            )
        return 1
    if task.classes is not None:
        values = in_memory_values(dataset, task.target_name)
        if values is not None:
            class_indices(values.reshape(-1), task.classes, task=task.name, key=key)
        return len(task.classes)
    if task.num_outputs is not None:
        return task.num_outputs
    if task.type == "regression":
        value = dataset[0][task.target_name]
        if task.level == "node":
            return 1 if value.dim() == 1 else int(value[0].numel())
        return int(value.numel())
    classes = getattr(dataset, "num_classes_of", None)  # datasets that know their classes
    if callable(classes) and classes(task.target_name) is not None:
        return int(classes(task.target_name))
    values = in_memory_values(dataset, task.target_name)
    if values is None:
        raise ConfigError(
            f"{outputs_key}: the data is not held in memory, so the number of classes of task "
            f"{task.name!r} cannot be read cheaply; give it"
        )
    return max(int(values.max()) + 1, 2)


def class_indices(
    labels: torch.Tensor, classes: tuple[int, ...], *, task: str, key: str | None = None
) -> torch.Tensor:
    """The class index of each label under ``tasks[].classes``: k where the label is
    ``classes[k]``. A label that is none of them is a DataError naming it."""
    known = torch.tensor(classes, device=labels.device, dtype=labels.dtype)
    match = labels.reshape(-1, 1) == known
    found = match.any(dim=1)
    if labels.device.type != "cpu":
        # On an accelerator, checked without waiting for it (no sync in the training step);
        # the labels of data held in memory were checked, with the message below, when the
        # task was built.
        torch._assert_async(found.all(), f"a label of task {task!r} is not one of {classes}")
        return match.int().argmax(dim=1)
    if not bool(found.all()):
        bad = labels[~found][0].item()
        where = key.rsplit(".", 1)[0] + ".classes" if key else "tasks[].classes"
        raise DataError(
            f"{where}: task {task!r} has the label {bad}, which is not one of {list(classes)}"
        )
    return match.int().argmax(dim=1)


def label_notice(dataset: Dataset | list[Data], task: TaskConfig, key: str | None) -> str | None:
    """A word for a classification whose class count is read from labels that never take the
    value 0 (Julia's 1-based labels): the model gets an output for a class that never occurs.
    ``key`` is ``tasks[i]``, None for the implicit task of a config without tasks."""
    if task.type != "classification" or task.classes is not None or task.num_outputs:
        return None
    values = in_memory_values(dataset, task.target_name)
    if values is None or not values.numel() or int(values.min()) < 1:
        return None
    seen = sorted(int(v) for v in values.unique())
    fix = (
        f"set {key}.classes: {seen}"
        if key
        else f"give the task with its classes, tasks: [{{name: {task.name}, classes: {seen}}}]"
    )
    return (
        f"the labels {task.target_name!r} of task {task.name!r} run from {seen[0]} to "
        f"{seen[-1]}, so class 0 never occurs and the model has {seen[-1] + 1} outputs; if "
        f"they count from 1 (as QuantumGrav.jl's do), {fix} to learn them as classes 0, 1, ..."
    )


def target_statistics(
    dataset: Dataset | list[Data], task: TaskConfig, num_outputs: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation (float64, one per output) of a regression target.

    Over graphs for a graph-level task, over nodes for a node-level one. A constant output
    gets a spread of 1, so it is shifted but not blown up.
    """
    values = in_memory_values(dataset, task.target_name)
    if values is None:
        values = torch.cat(
            [torch.as_tensor(g[task.target_name]).reshape(-1, num_outputs) for g in dataset]
        )
    values = values.double().reshape(-1, num_outputs)
    if len(values) == 0:
        raise DataError(f"task {task.name!r}: the training split holds no targets")
    mean = values.mean(dim=0)
    std = values.std(dim=0, unbiased=False)
    return mean, torch.where(std > 0, std, torch.ones_like(std))
