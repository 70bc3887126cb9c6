"""Batches made on the host, handed to the training loop on its GPU in one copy each, a batch
ahead.

``batch.to(device, non_blocking=True)`` copies a batch of graphs tensor by tensor, some 10 to
35 copies, each from pageable memory: the driver stages it through a pinned buffer of its own,
on the training step's stream and in order with its kernels, and may hold the host until then.
:class:`DevicePrefetcher` packs the tensors of each batch into one pinned buffer
(:func:`~.transfer.pack_attributes`), copies that with one asynchronous copy on a stream of its
own, and makes the batch on the GPU from views of the copy, a batch ahead of the training
step, so that the copy runs while the GPU works on the step before. Batches gathered a pass
at a time into one pinned buffer (:meth:`~.batching.IndexBatcher.many` with ``pin``) are
copied a pass at a time: one copy for all the batches of the pass, each then views of it. On
a CPU the batches are only converted to the run's float type, if it is not float32.
"""

from __future__ import annotations

import copy
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple, TypeVar

import torch
from torch import Tensor
from torch_geometric.data import Batch

from ...compat import pyg
from .transfer import pack_attributes, unpack_attributes

T = TypeVar("T")


class _Issued(NamedTuple):
    batch: Any  # on the device when ``buffer`` is set, else still to be moved
    buffer: Tensor | None  # the device buffer the batch's attributes view
    copied: torch.cuda.Event | None  # recorded on the side stream after the copy


class DevicePrefetcher:
    """The batches ``loader`` yields, on ``device``, their floating-point tensors in
    ``float_dtype``: tensor for tensor what ``to_device`` makes of them (the bookkeeping
    ``to_data_list`` reads stays on the host, as ``Batch.to`` leaves it).

    Used in place of the loader: ``for batch in DevicePrefetcher(loader, device=device)``;
    ``len()`` is the loader's, and any attribute it lacks (``dataset``, ``sampler``,
    ``batch_sampler``) is the loader's. ``copies`` and ``bytes_copied`` count the host-to-device
    copies issued and the bytes they moved (padding included). On a GPU, batches already there
    are only converted, and what :func:`~.transfer.pack_attributes` cannot pack (no batch of
    ``Data``; a tensor already on a device or sparse) is moved by its ``to`` when handed over,
    on the consumer's stream.
    """

    def __init__(
        self,
        loader: Iterable[Any],
        *,
        device: torch.device | str,
        float_dtype: torch.dtype = torch.float32,
    ):
        self.loader = loader
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.float_dtype = float_dtype
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self.copies = 0
        self.bytes_copied = 0
        self._pass: tuple[Tensor, Tensor, Any] | None = None  # host buffer, its copy, event

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:  # only for names the wrapper lacks
        if name == "loader":  # not yet set (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self) -> Iterator[Any]:
        if self.stream is None:
            yield from map(self._moved, self.loader)
            return
        # Depth 1: the copy of batch k+1 is issued before batch k is handed over, so it runs
        # while the GPU works on step k; a copy takes far less than a step, so a deeper queue
        # would hide nothing more, only hold more pinned and device memory. What it cannot
        # hide, assembling a batch on the host, is the worker processes' work.
        issued = None
        for item in self.loader:
            following = self._issue(item)
            if issued is not None:
                yield self._hand_over(issued)
            issued = following
        if issued is not None:
            yield self._hand_over(issued)

    def _issue(self, item: Any) -> _Issued:
        base = staged_buffer(item)
        if base is not None:  # a pass in one pinned buffer: copied once for all its batches
            if self._pass is None or self._pass[0].data_ptr() != base.data_ptr():
                with torch.cuda.stream(self.stream):
                    buffer = torch.empty(base.numel(), dtype=torch.uint8, device=self.device)
                    buffer.copy_(base, non_blocking=True)
                    self._pass = (base, buffer, self.stream.record_event())
                self.copies += 1
                self.bytes_copied += base.numel()
            _, buffer, copied = self._pass
            return _Issued(rebased(item, base, buffer), buffer, copied)
        # Packed straight into pinned memory (torch's caching host allocator serves it, and
        # keeps it from reuse until the copy out of it has run): one pass over the batch on
        # the host, as the driver's own staging of a pageable copy would make.
        packed = pack_attributes(item, pin_memory=True)
        if packed is None:
            return _Issued(item, None, None)
        size = packed.buffer.numel()
        with torch.cuda.stream(self.stream):
            buffer = torch.empty(size, dtype=torch.uint8, device=self.device)
            buffer.copy_(packed.buffer, non_blocking=True)
            copied = self.stream.record_event()
        self.copies += 1
        self.bytes_copied += size
        return _Issued(unpack_attributes(item, packed, buffer), buffer, copied)

    def _hand_over(self, issued: _Issued) -> Any:
        if issued.buffer is None:
            return self._moved(issued.batch)
        consumer = torch.cuda.current_stream(self.device)
        # An event, not ``wait_stream``: the side stream already holds the next batch's copy,
        # which this step need not wait for.
        consumer.wait_event(issued.copied)
        # The buffer was allocated on the side stream: once the batch is freed, the caching
        # allocator would give its memory to the next copy while this step's kernels still
        # read it, unless it knows the consumer's stream uses it.
        issued.buffer.record_stream(consumer)
        return self._converted(issued.batch)

    def _moved(self, item: Any) -> Any:
        stores = [{0: item}] if isinstance(item, Tensor) else getattr(item, "stores", [])
        tensors = [v for store in stores for v in store.values() if isinstance(v, Tensor)]
        # A batch gathered on the device (data.device) is handed over as it is: Batch.to
        # would rebuild it, a pass over its tensors in every step of a host-bound GPU run.
        # (a list, not a generator: resumed once per tensor, a call each, every step)
        if all([t.device == self.device for t in tensors]) and hasattr(item, "apply"):
            return self._converted(item)
        for value in tensors:
            if value.is_cpu and self.stream is not None:
                self.copies += 1
                self.bytes_copied += value.nbytes
        if hasattr(item, "to"):
            item = item.to(self.device, non_blocking=True)
        return self._converted(item)

    def _converted(self, item: Any) -> Any:
        if self.float_dtype == torch.float32 or not hasattr(item, "apply"):
            return item
        return item.apply(lambda t: t.to(self.float_dtype) if t.is_floating_point() else t)


def staged_buffer(item: Any) -> Tensor | None:
    """The pinned buffer (bytes) that every tensor attribute of ``item`` is a contiguous view
    of (a batch of a pass gathered with ``pin``), or None."""
    if not isinstance(item, Batch):
        return None
    storage = None
    for value in pyg.attributes(item).values():
        if not isinstance(value, Tensor):
            continue
        if not value.is_contiguous():
            return None
        mine = value.untyped_storage()
        if storage is None:
            storage = mine
        elif mine.data_ptr() != storage.data_ptr():
            return None
    if storage is None or not storage.is_pinned():
        return None
    return torch.empty(0, dtype=torch.uint8).set_(storage)


def rebased(item: Batch, base: Tensor, buffer: Tensor) -> Batch:
    """``item``, whose tensor attributes view ``base``, with each viewing the same bytes of
    ``buffer`` (a copy of ``base`` on a device) instead; the bookkeeping stays on the host,
    as ``Batch.to`` leaves it."""
    moved = copy.copy(item)
    mapping = pyg.attributes(moved)
    start = base.data_ptr()
    for key, value in mapping.items():
        if isinstance(value, Tensor):
            at = value.data_ptr() - start
            part = buffer[at : at + value.nbytes]
            mapping[key] = part.view(value.dtype).view(value.shape)
    return moved


def ahead(items: Iterator[T], name: str = "qg-gather") -> Iterator[T]:
    """``items``, made by a thread of their own one ahead of the one handed out: while the
    training step uses one, the next is made. The thread's failure is raised here; closing
    the iterator stops the thread."""
    handed: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(entry: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                handed.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for item in items:
                if not put((True, item)):
                    return
        except BaseException as e:  # handed to the consumer, raised there
            put((False, e))
            return
        put((False, None))

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    try:
        while True:
            more, item = handed.get()
            if not more:
                if item is not None:
                    raise item
                return
            yield item
    finally:
        stop.set()
        thread.join()


def fed(loader: Iterable[Any], device: torch.device, float_dtype: torch.dtype) -> Iterable[Any]:
    """What a loop over ``loader`` training or evaluating on ``device`` iterates over: its
    batches on ``device`` in ``float_dtype``, the one place they are moved; on a GPU a step
    ahead, each in one copy (:class:`DevicePrefetcher`)."""
    return DevicePrefetcher(loader, device=device, float_dtype=float_dtype)
