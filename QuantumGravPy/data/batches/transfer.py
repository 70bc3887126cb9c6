"""Batches handed over by data-loader workers in one piece.

A worker process hands each batch to the training process through shared memory, and torch
does that tensor by tensor: a new shared-memory segment and a file descriptor for each. A batch
of graphs holds some 35 small tensors (the attributes, ``batch``, ``ptr``, and the bookkeeping
``to_data_list`` reads), and handing them over took several milliseconds a batch on a 2-core
machine, more than assembling the batch. :func:`pack` copies every tensor of a batch into one
buffer in the worker, and :func:`unpack` makes the batch again in the training process from
views of that buffer: one segment a batch. :class:`BatchLoader` does both around torch's
``DataLoader``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.utils.data import DataLoader, get_worker_info
from torch_geometric.data import Batch, Data

from ...compat import pyg

_ALIGN = 16  # every tensor starts at a multiple of it, so that it can be viewed in place


class Packed(NamedTuple):
    """A batch of graphs in one buffer. ``entries``: per attribute and per bookkeeping entry,
    in order, (which dictionary, key, the tensor's (dtype, shape, offset) or the value)."""

    buffer: Tensor
    base: type  # the class of its graphs (Data or a subclass)
    entries: list[tuple[int, str, Any]]
    num_graphs: int

    def pin_memory(self) -> Packed:  # what a loader's pin_memory calls: pins the one buffer
        return self._replace(buffer=self.buffer.pin_memory())


class _Tensor(NamedTuple):
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int


def pack(batch: Any) -> Any:
    """``batch`` in one buffer if it is a batch of ``Data`` (else as it is)."""
    base = pyg.graph_class(batch)
    if base is None:
        return batch
    dictionaries = (pyg.attributes(batch), *pyg.bookkeeping(batch))
    placed: dict[int, _Tensor] = {}  # by id: a tensor in several places is copied once
    tensors, entries, size = [], [], 0
    for where, dictionary in enumerate(dictionaries):
        for key, value in dictionary.items():
            if isinstance(value, Tensor) and value.layout == torch.strided and value.is_cpu:
                if id(value) not in placed:
                    placed[id(value)] = _Tensor(value.dtype, tuple(value.shape), size)
                    tensors.append(value)
                    size += math.ceil(value.numel() * value.element_size() / _ALIGN) * _ALIGN
                value = placed[id(value)]
            entries.append((where, key, value))
    buffer = torch.empty(size, dtype=torch.uint8)
    for value in tensors:
        _view(buffer, placed[id(value)]).copy_(value)
    return Packed(buffer, base, entries, batch.num_graphs)


def _view(buffer: Tensor, spec: _Tensor) -> Tensor:
    nbytes = math.prod(spec.shape) * spec.dtype.itemsize
    return buffer[spec.offset : spec.offset + nbytes].view(spec.dtype).view(spec.shape)


_TEMPLATES: dict[type, Batch] = {}  # an empty batch per class of graphs, copied


def unpack(item: Any) -> Any:
    """The batch :func:`pack` packed, its tensors views of the one buffer (anything else as
    it is)."""
    if not isinstance(item, Packed):
        return item
    template = _TEMPLATES.get(item.base)
    if template is None:
        template = _TEMPLATES[item.base] = pyg.empty_batch(item.base)
    dictionaries: tuple[dict, dict, dict] = ({}, {}, {})
    views: dict[_Tensor, Tensor] = {}
    for where, key, value in item.entries:
        if isinstance(value, _Tensor):
            if value not in views:
                views[value] = _view(item.buffer, value)
            value = views[value]
        dictionaries[where][key] = value
    return pyg.fill(template, dictionaries[0], dictionaries[1], dictionaries[2], item.num_graphs)


class Attributes(NamedTuple):
    """The tensors of a batch's attributes in one buffer (:func:`pack_attributes`); ``places``:
    per attribute in the buffer, its key and where it lies."""

    buffer: Tensor
    places: list[tuple[str, _Tensor]]


def pack_attributes(batch: Any, *, pin_memory: bool = False) -> Attributes | None:
    """The tensors of the attributes of ``batch``, a batch of ``Data`` on the host, in one
    buffer (in pinned memory with ``pin_memory``), for ``Batch.to``'s work in one copy; None for
    anything else, or when ``to`` would move something the buffer cannot hold (a tensor already
    on a device or sparse, tensors in a list). Unlike :func:`pack`, the bookkeeping is left
    out: ``to`` leaves it on the host."""
    if not (isinstance(batch, Batch) and isinstance(batch, Data)):
        return None
    placed: dict[int, _Tensor] = {}  # by id: a tensor in several places is copied once
    tensors, places, size = [], [], 0
    for key, value in pyg.attributes(batch).items():
        if isinstance(value, Tensor) and value.layout == torch.strided and value.is_cpu:
            if id(value) not in placed:
                placed[id(value)] = _Tensor(value.dtype, tuple(value.shape), size)
                tensors.append(value)
                size += math.ceil(value.numel() * value.element_size() / _ALIGN) * _ALIGN
            places.append((key, placed[id(value)]))
        elif not _inert(value):
            return None
    buffer = torch.empty(size, dtype=torch.uint8, pin_memory=pin_memory)
    for value in tensors:
        _view(buffer, placed[id(value)]).copy_(value)
    return Attributes(buffer, places)


def _inert(value: Any) -> bool:  # what ``Batch.to`` leaves as it is
    if isinstance(value, list | tuple):
        return all(map(_inert, value))
    return value is None or isinstance(value, str | int | float | bool)


def unpack_attributes(batch: Batch, packed: Attributes, buffer: Tensor) -> Batch:
    """``batch`` as ``Batch.to`` moves it to the device of ``buffer``, a copy there of
    ``packed.buffer``: its attributes views of ``buffer``, the rest (the bookkeeping
    ``to_data_list`` reads, values that are no tensors) its own, as ``to`` leaves them."""
    moved = copy.copy(batch)  # ``to`` would change ``batch`` in place
    mapping = pyg.attributes(moved)
    views: dict[_Tensor, Tensor] = {}
    for key, spec in packed.places:
        if spec not in views:
            views[spec] = _view(buffer, spec)
        mapping[key] = views[spec]
    return moved


class Packing:
    """A collate function that packs what ``collate`` makes when it runs in a worker."""

    def __init__(self, collate: Callable[[Any], Any]):
        self.collate = collate

    def __call__(self, items: Any) -> Any:
        batch = self.collate(items)
        return pack(batch) if get_worker_info() is not None else batch


class BatchLoader(DataLoader):
    """torch's ``DataLoader`` whose worker processes hand batches of graphs over in one piece
    (its ``collate_fn`` is wrapped in :class:`Packing`).

    Without workers it iterates as torch's single-process iterator does (the batch sampler,
    the seed that iterator draws from the loader's generator, or torch's global one, before
    the first batch; the dataset's ``__getitems__`` and the collate function), the same batches
    and random states, without the profiler record and checks it makes per batch (about 40 us,
    a sixth of assembling a batch of 32 small graphs). A dataset with a ``read_ahead`` method
    (:class:`~.loaders.IndexBatches`) makes the batches of the sampler's indices itself,
    several in a row.
    """

    def __init__(self, dataset: Any, *, collate_fn: Callable[[Any], Any], **options: Any):
        super().__init__(dataset, collate_fn=Packing(collate_fn), **options)

    def __iter__(self) -> Iterator[Any]:
        if self.num_workers > 0:
            return map(unpack, super().__iter__())
        batches = iter(self.batch_sampler)
        torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        return self._in_process(batches)

    def _in_process(self, batches: Iterator[list[int]]) -> Iterator[Any]:
        fetch = getattr(self.dataset, "__getitems__", None)
        collate = self.collate_fn
        read_ahead = getattr(self.dataset, "read_ahead", None)  # several batches in a row
        if read_ahead is not None:
            yield from map(collate, read_ahead(batches))
            return
        for indices in batches:
            yield collate(fetch(indices) if fetch else [self.dataset[i] for i in indices])
