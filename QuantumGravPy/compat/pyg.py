"""PyTorch Geometric's internals: a ``Batch``'s storage and bookkeeping, an in-memory dataset's
storage, a dataset's processing step (written for torch_geometric 2.5-2.8).

A batch assembled by the library (``data/batches/batching.py``: straight from the dataset's storage;
``data/batches/transfer.py``: packed into one buffer for a worker or a device) is made the way
``Batch.from_data_list`` makes one, without its per-attribute work: its attributes go into the
store's mapping in one update, and the bookkeeping ``to_data_list`` and ``num_graphs`` read is
set beside them. PyG has no public constructor for that.

A dataset's processing step (``Dataset._process``) records ``pre_transform.pt`` and
``pre_filter.pt`` beside the processed files and reads them back with an unrestricted
``torch.load``, which runs whatever a file planted there holds. The library's caches are named
by a digest of everything they depend on and have no such records: :class:`ProcessOnce`
processes without them.
"""

from __future__ import annotations

import copy
import os
from typing import Any

from torch_geometric.data import Batch, Data, Dataset, InMemoryDataset

from . import moved

DISTRIBUTION = "torch-geometric"


def attributes(batch: Any) -> dict[str, Any]:
    """The mapping of ``batch``'s (or a ``Data``'s) attributes, itself (not a copy): writing
    it sets attributes without the store's per-item checks."""
    return batch._store._mapping


def bookkeeping(batch: Batch) -> tuple[dict, dict]:
    """``(slice_dict, inc_dict)``: where each graph's rows of each attribute lie in ``batch``,
    and by how much its indices were shifted."""
    return batch._slice_dict, batch._inc_dict


def graph_class(batch: Any) -> type | None:
    """The class of the graphs a ``Batch`` holds (``Data`` or a subclass), or None for what is
    not a batch of them. PyG makes a batch's class at run time, a subclass of ``Batch`` and of
    the graphs' class, in that order after itself."""
    if not isinstance(batch, Batch) or "_store" not in batch.__dict__:
        return None
    base = type(batch).__mro__[2]
    return base if issubclass(base, Data) else None


def empty_batch(graph_class: type = Data) -> Batch:
    """An empty batch of graphs of ``graph_class``, to copy and :func:`fill` (making the class of
    a batch of a given class of graphs is slow; a copy keeps it)."""
    return Batch(_base_cls=graph_class)


def fill(template: Batch, values: dict, slice_dict: dict, inc_dict: dict, num_graphs: int) -> Batch:
    """A copy of ``template`` (an empty batch of the right class) holding ``values``, with its
    bookkeeping, as ``Batch.from_data_list`` would have made it."""
    batch = copy.copy(template)
    batch._store._mapping.update(values)
    set_num_graphs(batch, num_graphs)
    batch._slice_dict = slice_dict
    batch._inc_dict = inc_dict
    return batch


def set_num_graphs(batch: Batch, num_graphs: int) -> None:
    """What ``batch.num_graphs`` says (a padded batch counts its padding graph)."""
    batch._num_graphs = num_graphs


class ProcessOnce:
    """Before a ``Dataset`` class among its bases: ``process()`` runs when a processed file is
    missing, and nothing else is read or written (PyG's records of the transforms are not)."""

    def _process(self) -> None:
        if all(os.path.exists(path) for path in self.processed_paths):
            return
        os.makedirs(self.processed_dir, exist_ok=True)
        self.process()


def storage(dataset: Any) -> tuple[Data, dict] | None:
    """``(data, slices)``: the collated storage of an ``InMemoryDataset`` (every graph's
    attributes joined, and where each graph's rows lie), or None for another dataset."""
    data, slices = getattr(dataset, "_data", None), getattr(dataset, "slices", None)
    return (data, slices) if isinstance(data, Data) and isinstance(slices, dict) else None


def check() -> None:
    """Every internal above, on a batch and a dataset of two small graphs."""
    import torch

    graphs = [Data(x=torch.zeros(2, 1), edge_index=torch.tensor([[0], [1]])) for _ in range(2)]
    batch = Batch.from_data_list(graphs)
    for name in ("_store", "_slice_dict", "_inc_dict", "_num_graphs"):
        if getattr(batch, name, None) is None:
            raise moved(DISTRIBUTION, f"Batch.from_data_list no longer sets {name}")
    if not hasattr(batch._store, "_mapping") or "x" not in batch._store._mapping:
        raise moved(DISTRIBUTION, "a Batch's store keeps its attributes elsewhere than _mapping")
    if type(batch).__mro__[1] is not Batch or type(batch).__mro__[2] is not Data:
        raise moved(DISTRIBUTION, "a batch's class is no longer (Batch, the graphs' class)")
    if "x" not in batch._slice_dict or "edge_index" not in batch._inc_dict:
        raise moved(DISTRIBUTION, "a batch's _slice_dict or _inc_dict holds something else")
    made = fill(empty_batch(Data), dict(batch._store._mapping), *bookkeeping(batch), 2)
    if made.num_graphs != 2 or len(made.to_data_list()) != 2:
        raise moved(DISTRIBUTION, "a batch filled in its store does not read back as graphs")

    if not callable(getattr(Dataset, "_process", None)):
        raise moved(DISTRIBUTION, "Dataset no longer processes through _process")

    class Counted(ProcessOnce, InMemoryDataset):
        made = 0

        @property
        def processed_file_names(self) -> list[str]:
            return ["never.pt"]

        def process(self) -> None:
            type(self).made += 1

    import tempfile

    with tempfile.TemporaryDirectory() as root:
        Counted(root, log=False)
        if Counted.made != 1 or os.listdir(os.path.join(root, "processed")):
            raise moved(DISTRIBUTION, "a Dataset is processed elsewhere than in _process")

    dataset = InMemoryDataset(None)
    dataset.data, dataset.slices = InMemoryDataset.collate(graphs)  # as a dataset's process()
    found = storage(dataset)
    if found is None or not isinstance(found[0], Data) or "x" not in found[1]:
        raise moved(DISTRIBUTION, "InMemoryDataset keeps its storage elsewhere than _data")
