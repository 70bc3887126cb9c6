"""Graphs as PyTorch Geometric users save them, read without running code from the file.

Three contents are read: a list of ``Data`` (``torch.save(graphs, path)``), one ``Data``, and
an ``InMemoryDataset``'s processed file (``InMemoryDataset.save``, or the ``(data, slices)``
pair that older releases wrote).

``torch.load(weights_only=True)`` rebuilds only tensors, containers and the classes allowed.
PyG allows ``Data`` but not the storage classes a pickled ``Data`` refers to, and its own loader
(``torch_geometric.io.fs.torch_load``) then falls back to an unrestricted load, which runs
whatever a file holds. Here those storage classes are allowed while the file is read (this
module is the one place that names them), and a file that needs anything else is refused. The
library's own caches under ``data.root/processed`` are read through :func:`load_plain` too: a
file planted there is refused, never run.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch
from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.data.data import BaseData, DataEdgeAttr, DataTensorAttr
from torch_geometric.data.storage import BaseStorage, EdgeStorage, GlobalStorage, NodeStorage

from ...errors import DataError, cause, refused_global

# What a pickled Data (or HeteroData, refused by name) refers to besides the classes PyG allows.
_ALLOWED = [BaseStorage, GlobalStorage, NodeStorage, EdgeStorage, DataEdgeAttr, DataTensorAttr]

EXPECTED = (
    "a list of torch_geometric Data (torch.save(graphs, path)), one Data, or an "
    "InMemoryDataset's file (InMemoryDataset.save)"
)


class UnsafeFile(DataError):
    """A file that holds Python objects other than tensors, containers and PyG's graphs."""


def load_plain(path: str | Path) -> Any:
    """What ``torch.save`` wrote to ``path``, rebuilt from tensors, plain containers and
    torch_geometric's graphs only: an :class:`UnsafeFile` naming the first other object, which
    is never built (building it could run code). Reading errors are torch's own."""
    try:
        with torch.serialization.safe_globals(_ALLOWED):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        named = refused_global(e)
        raise UnsafeFile(
            f"{path}: holds objects other than tensors and torch_geometric graphs{named}, which "
            "are not loaded (loading them would run code from the file)"
        ) from e


def load_graphs(path: Path) -> list[Data]:
    """The graphs saved in ``path``, in order; a DataError naming it if it holds anything else
    or cannot be read."""
    try:
        content = load_plain(path)
    except UnsafeFile as e:
        raise UnsafeFile(f"{e}; save {EXPECTED}") from e.__cause__
    except (RuntimeError, OSError, EOFError, ValueError) as e:
        raise DataError(
            f"{path}: cannot be read as saved graphs ({cause(e).split('. ')[0]}); the file may be "
            "truncated or not written by torch.save"
        ) from e
    return _graphs(content, path)


def load_collated(path: str | Path) -> tuple[BaseData, dict]:
    """The ``(data, slices)`` of an ``InMemoryDataset``'s file (``InMemoryDataset.save`` or
    ``collate``'s pair), read by :func:`load_plain`; a :class:`DataError` if it holds
    anything else."""
    content = load_plain(path)
    if not isinstance(content, tuple) or len(content) not in (2, 3) or not _collated(content):
        raise DataError(f"{path}: not a processed dataset (a collated graph and its slices)")
    data, slices = content[0], content[1]
    data_class = content[2] if len(content) == 3 else Data
    if not (isinstance(data_class, type) and issubclass(data_class, BaseData)):
        raise DataError(f"{path}: names {data_class!r} as its graphs' class, which is no graph")
    return (data_class.from_dict(data) if isinstance(data, dict) else data), slices


def _graphs(content: Any, path: Path) -> list[Data]:
    if isinstance(content, tuple) and len(content) in (2, 3) and _collated(content):
        content = _separated(content)
    elif isinstance(content, BaseData):
        content = [content]
    if not isinstance(content, (list, tuple)) or not content:
        what = "an empty list" if isinstance(content, (list, tuple)) else type(content).__name__
        raise DataError(f"{path}: holds {what}; expected {EXPECTED}")
    for i, graph in enumerate(content):
        if not isinstance(graph, Data):
            raise DataError(
                f"{path}: item {i} is a {type(graph).__name__}, not a torch_geometric Data "
                "(graphs of one node and one edge type)"
            )
    return list(content)


def _collated(content: tuple) -> bool:
    """Whether ``content`` is what ``InMemoryDataset.save`` writes: (data as a dict or a Data,
    slices, and the Data class in newer releases)."""
    data, slices = content[0], content[1]
    return isinstance(data, (dict, BaseData)) and (slices is None or isinstance(slices, dict))


def _separated(content: tuple) -> list[BaseData]:
    """The graphs of an ``InMemoryDataset``'s file, through its public ``get``."""
    data, slices = content[0], content[1]
    data_class = content[2] if len(content) == 3 else Data
    dataset = InMemoryDataset()
    dataset.data = data_class.from_dict(data) if isinstance(data, dict) else data
    dataset.slices = slices
    return [dataset.get(i) for i in range(dataset.len())]
