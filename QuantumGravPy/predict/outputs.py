"""Prediction tables and their files.

One row per graph, in input order: ``source`` and ``index`` (and ``group`` for files with one
group per causal set), then per graph-level task the predicted class and each class's
probability (``<task>_class``, ``<task>_prob_<k>``, k the class label), for a binary task the
probability of 1 and the class it rounds to (``<task>_prob``, ``<task>_class``), for a
regression the values in the target's units (``<task>``, or ``<task>_<k>`` for several), for a
count the expected counts (the same columns), and ``<task>_true`` where the data holds
labels. Node-level tasks get one row per node: ``graph`` (the row of its graph), ``element``
and the same columns. Edge-level tasks get one row per pair of their pairs attribute
(``relations_index``, say): ``graph``, ``element_from`` and ``element_to`` (the pair's two
elements, as the file numbers them where the graphs recorded it) and the same columns.

``.npz`` holds every column as an array (node rows under ``nodes.<column>``, pair rows under
``edges.<pairs>.<column>``); ``.csv`` the graph rows, with node rows in ``<stem>_nodes.csv``
and pair rows in ``<stem>_<pairs>.csv`` (where ``source`` and ``index`` stand in for
``graph``). Files are written under a temporary name and renamed.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import ConfigError, RunDirectoryError, flag
from ..training.tasks.task import Task

FORMATS = (".npz", ".csv")
NODES = "nodes."  # the prefix of node rows' arrays in an .npz
EDGES = "edges."  # and of pair rows', followed by the pairs attribute's name


@dataclass
class Predictions:
    """What :func:`~QuantumGravPy.predict` returns: ``graphs`` (one array per column, a row per
    graph in input order), ``nodes`` (the same for node-level tasks, a row per node; empty
    without them), ``edges`` (by pairs attribute, the same for edge-level tasks, a row per
    pair), ``metrics`` (of the tasks whose labels the data holds) and ``output`` (the file
    written, if any)."""

    graphs: dict[str, np.ndarray]
    nodes: dict[str, np.ndarray] = field(default_factory=dict)
    edges: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    output: Path | None = None

    def __len__(self) -> int:
        return len(self.graphs["index"])


def output_paths(output: Path, pairs: Sequence[str] = ()) -> list[Path]:
    """The files an output writes (a .csv may add ``<stem>_nodes.csv`` and, for edge-level
    tasks, ``<stem>_<pairs>.csv`` per pairs attribute)."""
    if output.suffix == ".csv":
        tables = ["nodes", *pairs]
        return [output, *(output.with_name(f"{output.stem}_{t}.csv") for t in tables)]
    return [output]


def check_output(output: Path, *, overwrite: bool, pairs: Sequence[str] = ()) -> None:
    """Refuse, before any work, an output of another format or one that exists."""
    if output.suffix not in FORMATS:
        raise ConfigError(f"--output: {output} must end in .npz or .csv")
    if output.is_dir():
        raise RunDirectoryError(f"--output: {output} is a directory; name a .npz or .csv file")
    if not overwrite:
        for path in output_paths(output, pairs):
            if path.exists():
                raise RunDirectoryError(
                    f"{path} exists; pass {flag('overwrite')} to replace it or choose another "
                    "--output"
                )
    if not output.parent.is_dir():
        raise RunDirectoryError(f"--output: folder {output.parent} does not exist")


def task_columns(
    task: Task, predicted: torch.Tensor, true: torch.Tensor | None
) -> dict[str, np.ndarray]:
    """One task's columns from its predictions (as ``test_predictions.npz`` holds them:
    probabilities, the probability of 1, or values) and targets (class indices, 0/1, values),
    as its kind names them."""
    return task.kind.columns(task.config, predicted.numpy(), None if true is None else true.numpy())


def write(
    output: Path,
    graphs: dict[str, np.ndarray],
    nodes: dict[str, np.ndarray],
    edges: dict[str, dict[str, np.ndarray]] | None = None,
) -> None:
    """The tables into ``output`` (.npz or .csv, see the module's description)."""
    edges = edges or {}
    if output.suffix == ".npz":
        arrays = {**graphs, **{f"{NODES}{k}": v for k, v in nodes.items()}}
        for pairs, table in edges.items():
            arrays.update({f"{EDGES}{pairs}.{k}": v for k, v in table.items()})
        _atomic(output, lambda f: np.savez_compressed(f, **arrays), binary=True)
        return
    _atomic(output, lambda f: _csv(f, graphs))
    keys = [k for k in ("source", "index", "group") if k in graphs]
    paths = output_paths(output, list(edges))
    for path, rows in zip(paths[1:], [nodes, *edges.values()], strict=True):
        if rows:
            table = {**{k: graphs[k][rows["graph"]] for k in keys}, **rows}
            table.pop("graph")
            _atomic(path, lambda f, table=table: _csv(f, table))


def _csv(f: Any, columns: dict[str, np.ndarray]) -> None:
    writer = csv.writer(f)
    names: Sequence[str] = list(columns)
    writer.writerow(names)
    writer.writerows(zip(*(columns[n].tolist() for n in names), strict=True))


def _atomic(path: Path, fill: Any, *, binary: bool = False) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb" if binary else "w", newline=None if binary else "") as f:
            fill(f)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read(path: str | Path) -> Predictions:
    """A prediction file back as :class:`Predictions` (.npz; for .csv, read it with any CSV
    reader)."""
    path = Path(path)
    edges: dict[str, dict[str, np.ndarray]] = {}
    with np.load(path) as arrays:
        graphs = {k: arrays[k] for k in arrays.files if not k.startswith((NODES, EDGES))}
        nodes = {k[len(NODES) :]: arrays[k] for k in arrays.files if k.startswith(NODES)}
        for k in arrays.files:
            if k.startswith(EDGES):
                pairs, column = k[len(EDGES) :].split(".", 1)
                edges.setdefault(pairs, {})[column] = arrays[k]
    return Predictions(graphs, nodes, edges, output=path)
