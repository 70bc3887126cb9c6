"""Graphs handed from one process to another as a few long tensors, one per attribute.

A list of ``Data`` pickled (or saved) graph by graph costs a ``torch.load`` of every tensor when
it is read back: minutes, single-threaded, for a few hundred thousand causal sets. Joined into
columns (each attribute's tensors concatenated along the dimension PyG batches them on, with
each graph's size), they travel as a handful of tensors (:mod:`QuantumGravPy.parallel.handover`
reads them back as data), and the graphs are views into them again: the same tensors, with the
same shapes and types, as the graphs the process made.
"""

from __future__ import annotations

from typing import Any

import torch
from torch_geometric.data import Data

from ...logs import progress

_KIND = "__qg_graph_columns__"


def packable(items: Any) -> bool:
    """Whether ``items`` is a non-empty list of graphs of one class with the same attributes."""
    if not isinstance(items, list) or not items or not isinstance(items[0], Data):
        return False
    cls, keys = type(items[0]), set(items[0].keys())
    return all(type(g) is cls and set(g.keys()) == keys for g in items)


def pack(graphs: list[Data]) -> dict[str, Any]:
    """``graphs`` (see :func:`packable`) as columns: tensors and plain values."""
    first = graphs[0]
    columns = {}
    for key in first.keys():
        values = [g[key] for g in graphs]
        columns[key] = _column(first, key, values)
    cls = type(first)
    return {
        _KIND: f"{cls.__module__}:{cls.__qualname__}",
        "count": len(graphs),
        "columns": columns,
    }


def _column(first: Data, key: str, values: list) -> dict[str, Any]:
    head = values[0]
    tensors = all(isinstance(v, torch.Tensor) for v in values)
    if tensors and all(v.dtype == head.dtype and v.dim() == head.dim() for v in values):
        if head.dim() == 0:
            return {"kind": "stack", "values": torch.stack(values)}
        dim = first.__cat_dim__(key, head)
        if dim is not None:
            dim = dim % head.dim()
            rest = [s for i, s in enumerate(head.shape) if i != dim]
            if all([s for i, s in enumerate(v.shape) if i != dim] == rest for v in values):
                sizes = torch.tensor([v.shape[dim] for v in values])
                return {"kind": "cat", "dim": dim, "sizes": sizes, "values": torch.cat(values, dim)}
        if all(v.shape == head.shape for v in values):
            return {"kind": "stack", "values": torch.stack(values)}
    return {"kind": "list", "values": values}  # numbers, strings, tensors of varied shapes


def is_packed(item: Any) -> bool:
    return isinstance(item, dict) and _KIND in item


def unpack(packed: dict[str, Any], *, cls: type = Data, show: bool = False) -> list[Data]:
    """The graphs of :func:`pack`, as graphs of ``cls`` (the class they were packed from must
    be it or one of its subclasses: the name in ``packed`` is checked, never imported)."""
    name = packed[_KIND]
    allowed = {f"{c.__module__}:{c.__qualname__}": c for c in _subclasses(cls)}
    if name not in allowed:
        raise TypeError(f"handed-over graphs of class {name}, not a {cls.__qualname__}")
    cls = allowed[name]
    count = packed["count"]
    columns = {}
    for key, column in packed["columns"].items():
        values = column["values"]
        if column["kind"] == "cat":
            columns[key] = torch.split(values, column["sizes"].tolist(), dim=column["dim"])
        elif column["kind"] == "stack":
            columns[key] = values.unbind(0)
        else:
            columns[key] = values
        if len(columns[key]) != count:
            raise ValueError(
                f"handed-over graphs: {key} has {len(columns[key])} values, not {count}"
            )
    keys = list(columns)
    graphs = []
    with progress(total=count, desc="handing over graphs", unit="graph", enabled=show) as bar:
        for i in range(count):
            graphs.append(cls.from_dict({k: columns[k][i] for k in keys}))
            bar.update()
    return graphs


def _subclasses(cls: type) -> list[type]:
    found = [cls]
    for sub in cls.__subclasses__():
        found.extend(_subclasses(sub))
    return found
