"""What the tasks need to know of the data: that their targets exist, how many outputs they
have, and the mean and spread of a regression target over the training split.

Everything is read from the first graph, or from the concatenated attribute of a dataset held
in memory; nothing here iterates over a dataset that is not (except the statistics of a
regression target, which need every training value once).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import torch
from torch.utils.data import Dataset
from torch_geometric.data import Data, InMemoryDataset

from ...config import DataConfig, TaskConfig
from ...config.tasks import implicit_task
from ...errors import ConfigError, DataError, QGError
from .datasets import in_memory_values
from .formats import format_of
from .stores import Samples, find_files, open_store


def num_node_features(dataset: Dataset | list[Data]) -> int:
    """How many features each node of ``dataset`` has (read from the first graph)."""
    if isinstance(dataset, InMemoryDataset):
        return dataset.num_node_features
    return dataset[0].x.shape[1]


def num_edge_features(dataset: Dataset | list[Data]) -> int:
    """How many features each edge of ``dataset`` has in ``edge_attr`` (read from the first
    graph; one for a vector of one number an edge), 0 without them."""
    first = dataset[0]
    value = first.edge_attr if "edge_attr" in first else None
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return 0
    return 1 if value.dim() == 1 else int(value.shape[-1])


def check_target(dataset: Dataset | list[Data], task: TaskConfig, key: str) -> None:
    """A clear error, naming ``key`` (``tasks[i].target``), when the first graph lacks the
    task's target or holds it in a shape that does not fit the task's level and kind."""
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
    if task.level == "edge":
        _check_pairs(first, task, value, key)
    task.kind.check_target(value, task, key)


def _check_pairs(first: Data, task: TaskConfig, value: torch.Tensor, key: str) -> None:
    """An edge-level task's pairs in the first graph: ``[2, P]`` node indices, and one target
    row per pair."""
    name, where = task.pairs, key.replace(".target", ".pairs")
    pairs = first[name] if name in first else None
    if not isinstance(pairs, torch.Tensor):
        made = {
            "relations_index": " (data.pairs: relations makes it, of causal sets)",
            "links_index": " (data.pairs: links makes it, of causal sets)",
        }.get(name, "")
        held = [k for k in first.keys() if isinstance(first[k], torch.Tensor) and "index" in k]
        close = difflib.get_close_matches(name, held, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ConfigError(
            f"{where}: the data has no tensor attribute {name!r} for the pairs of task "
            f"{task.name!r}{made}{hint}"
        )
    if pairs.dim() != 2 or pairs.shape[0] != 2 or pairs.is_floating_point():
        raise ConfigError(
            f"{where}: {name!r} must hold node indices [2, pairs], found "
            f"{pairs.dtype} of shape {list(pairs.shape)}"
        )
    if pairs.numel() and not 0 <= int(pairs.min()) <= int(pairs.max()) < first.num_nodes:
        raise ConfigError(
            f"{where}: {name!r} names nodes outside the first graph's {first.num_nodes}"
        )
    if value.dim() == 0 or value.shape[0] != pairs.shape[1]:
        raise ConfigError(
            f"{key}: task {task.name!r} is edge-level, so {task.target_name!r} needs one row "
            f"per pair of {name!r} ({pairs.shape[1]} in the first graph), found shape "
            f"{list(value.shape)}"
        )


def task_num_outputs(
    dataset: Dataset | list[Data], task: TaskConfig, key: str, outputs_key: str
) -> int:
    """The task's ``num_outputs``, or when null, read from the data as its kind says.

    Errors name ``key`` (the task's target) or ``outputs_key`` (where the count is given).
    """
    classes_of = getattr(dataset, "num_classes_of", None)  # datasets that know their classes
    known = classes_of(task.target_name) if callable(classes_of) else None
    return task.kind.count_outputs(
        task,
        dataset[0][task.target_name],
        lambda: in_memory_values(dataset, task.target_name),
        None if known is None else int(known),
        key,
        outputs_key,
    )


def label_notice(dataset: Dataset | list[Data], task: TaskConfig, key: str | None) -> str | None:
    """What the task's kind has to say of its targets at the start of a run (a classification
    whose labels never take the value 0, say); ``key`` is ``tasks[i]``, None for the implicit
    task of a config without tasks."""
    return task.kind.notice(task, lambda: in_memory_values(dataset, task.target_name), key)


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


def check_file_targets(data: DataConfig, tasks: Sequence[TaskConfig]) -> None:
    """Before anything is read: the target of every task of ``tasks`` (the config's ``tasks:``;
    none: its one implicit task, a class ``y``) must be one of ``data.targets``, the attributes
    a graph of ``data.files`` gets. The error suggests the mapping when the first file holds an
    array of the target's name. Skipped when a hook (``data.reader``, ``data.pre_transform``,
    ``data.transform``) may add attributes itself."""
    if not data.files or data.reader or data.pre_transform or data.transform:
        return
    explicit = bool(tasks)
    first: tuple[str, set[str]] | None = None
    for i, task in enumerate(tasks or (implicit_task(),)):
        name = task.target_name
        if name in data.targets or not task.kind.needs_target:
            continue
        first = first or _first_arrays(data)
        if first is None:  # the files cannot be read: reading them says why
            return
        layout, arrays = first
        if layout == "graphs" and name in arrays:  # general graphs: every array is read
            continue
        key = f"tasks[{i}].target" if explicit else "data.targets"
        what = f"task {task.name!r}" if explicit else "the config has no tasks:, so its one task"
        reads = ", ".join(data.targets) or "nothing"
        if layout == "graphs":
            raise ConfigError(
                f"{key}: {what} learns the attribute {name!r}, which the graphs of data.files do "
                f"not hold (the first holds {', '.join(sorted(arrays))})"
            )
        if name in arrays:
            hint = f"; the files hold an array {name!r}: set data.targets: {{{name}: {name}}}"
        else:
            held = f" (the first causal set holds {', '.join(sorted(arrays))})" if arrays else ""
            hint = f"; map it to an array of the files, data.targets: {{{name}: ARRAY}}{held}"
        raise ConfigError(
            f"{key}: {what} learns the graph attribute {name!r}, but data.targets reads "
            f"{reads} from data.files{hint}"
        )


def _first_arrays(data_cfg: DataConfig) -> tuple[str, set[str]] | None:
    """The layout of the first file and the array names of its first sample (None if it
    cannot be read: reading the files later says why). None for a file of saved graphs too:
    opening one reads all of it, at every run's start, cache or not; the tasks' own check of the
    first graph (:func:`check_target`) names a missing target once the data is loaded."""
    try:
        path = find_files(data_cfg.files)[0]
        if format_of(path).holds_graphs:
            return None
        with open_store(path) as store:
            samples = Samples(store, path, data_cfg)
            return samples.layout, samples.arrays
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        IndexError,
        RuntimeError,
        QGError,
    ):
        return None  # a file that cannot be read so: loading the data reports it, naming it
