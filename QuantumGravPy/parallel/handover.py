"""Results handed from the ranks to the process that started them, as data.

A rank's result is turned into tensors and plain values (:func:`plain`), written with
``torch.save`` and read back with ``torch.load(weights_only=True)`` (:func:`read`), which
rebuilds nothing else: a file planted in its place is refused, never run, and its tensors come
back as a few large reads instead of one ``torch.load`` per tensor (what unpickling torch's
legacy format does, minutes for a few hundred thousand graphs). Values the weights-only loader
does not know (numpy's, frozen sets, graphs, the library's own objects) travel as tagged
dictionaries; the library's objects are rebuilt from their attributes without calling any code
of theirs, as the loader itself rebuilds the classes it allows.
"""

from __future__ import annotations

import importlib
import os
import pickle
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import QGError, refused_global

_TAG = "__qg_handed_over__"
_ATOMS = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size)
_OWN = "QuantumGravPy"  # whose objects are rebuilt from their attributes


class NotData(QGError):
    """A result that is not data, or a file of results that holds more than data (a library
    bug, or a planted file: exit status 1)."""

    users = False


def write(path: Path, result: Any) -> None:
    """``result`` into ``path``, as data; whole or not at all."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(plain(result), tmp)
    os.replace(tmp, path)


def read(path: Path) -> Any:
    """What :func:`write` wrote to ``path``; :class:`NotData` if it holds anything else."""
    try:
        tree = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as e:
        named = refused_global(e)
        raise NotData(
            f"{path}: holds objects other than tensors and plain values{named}, which are not "
            "loaded (loading them would run code from the file)"
        ) from e
    return rebuilt(tree)


def plain(obj: Any) -> Any:
    """``obj`` as tensors, plain values and containers of them (tagged where needed)."""
    kind = type(obj)
    if kind in _ATOMS or kind in (torch.Tensor, torch.nn.Parameter):
        return obj
    if isinstance(obj, torch.Tensor):  # a subclass the loader does not know
        return obj.as_subclass(torch.Tensor)
    if kind in (list, tuple, set):
        return kind(plain(x) for x in obj)
    if kind in (dict, OrderedDict):
        if _TAG in obj:
            raise NotData(f"a result may not use the key {_TAG!r}")
        return kind((_key(k), plain(v)) for k, v in obj.items())
    if kind is frozenset:
        return {_TAG: "frozenset", "items": [plain(x) for x in obj]}
    if isinstance(obj, np.ndarray) and obj.dtype.kind in "biufc":  # what a tensor can hold
        return {_TAG: "ndarray", "tensor": torch.from_numpy(np.ascontiguousarray(obj))}
    if isinstance(obj, np.generic) and obj.dtype.kind in "biufc":
        return {_TAG: "numpy", "dtype": obj.dtype.str, "value": obj.item()}
    name = f"{kind.__module__}:{kind.__qualname__}"
    if kind.__module__.startswith("torch_geometric.") and hasattr(obj, "to_dict"):
        return {_TAG: "graph", "class": name, "dict": plain(obj.to_dict())}
    if kind.__module__.split(".")[0] == _OWN and hasattr(obj, "__dict__"):
        return {_TAG: "object", "class": name, "state": plain(vars(obj))}
    raise NotData(
        f"a result holds a {kind.__module__}.{kind.__qualname__}, which is not handed over "
        "between processes: return tensors, numbers, strings, numeric numpy values and "
        "containers of them"
    )


def _key(key: Any) -> Any:
    if type(key) not in _ATOMS and type(key) is not tuple:
        raise NotData(f"a result's dictionary has a key of type {type(key).__name__}")
    return key


def rebuilt(tree: Any) -> Any:
    """The inverse of :func:`plain`."""
    kind = type(tree)
    if kind in (list, tuple, set):
        return kind(rebuilt(x) for x in tree)
    if kind in (dict, OrderedDict):
        tag = tree.get(_TAG)
        if tag is None:
            return kind((k, rebuilt(v)) for k, v in tree.items())
        if tag == "frozenset":
            return frozenset(rebuilt(x) for x in tree["items"])
        if tag == "ndarray":
            return tree["tensor"].numpy()
        if tag == "numpy":
            return np.dtype(tree["dtype"]).type(tree["value"])
        if tag == "graph":
            from torch_geometric.data.data import BaseData

            cls = _class(tree["class"], "torch_geometric.")
            if not issubclass(cls, BaseData):
                raise NotData(f"a result names {tree['class']} as a graph's class")
            return cls.from_dict(rebuilt(tree["dict"]))
        if tag == "object":
            cls = _class(tree["class"], f"{_OWN}.")
            if cls.__new__ is not object.__new__:  # made otherwise than by its attributes
                raise NotData(f"a result names {tree['class']}, which is not handed over")
            obj = object.__new__(cls)
            obj.__dict__.update(rebuilt(tree["state"]))
            return obj
        raise NotData(f"a result holds an unknown tag {tag!r}")
    return tree


def _class(name: str, package: str) -> type:
    """The class ``module:qualname``, from ``package`` only (imported, as installed code)."""
    module, _, qualname = name.partition(":")
    if not module.startswith(package):
        raise NotData(f"a result names the class {name}, which is not handed over")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    if not isinstance(found, type):
        raise NotData(f"a result names {name}, which is no class")
    return found
