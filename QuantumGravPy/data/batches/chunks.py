"""Several batches gathered in one pass: which graphs, where each batch's rows lie in the
pass, and how each batch's tensors are cut from the pass's as contiguous views.

An attribute concatenated along its first dimension (``x``, per-node values) is gathered in
the batches' order, and a batch's part is a run of rows. One concatenated along a later
dimension (``edge_index``, ``[2, edges]``) is gathered block by block (:func:`block_order`),
so that each batch's ``[2, its edges]`` is contiguous too, as a batch gathered alone is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor


class Rows(NamedTuple):
    """How a batch's graphs divide one kind of attribute's rows: each graph's count, where
    each starts in the batch (and the total, last), and those offsets as the tensor that the
    batch's bookkeeping (``_slice_dict``) holds."""

    counts: np.ndarray
    offsets: np.ndarray
    slices: Tensor

    @classmethod
    def of(cls, counts: np.ndarray) -> Rows:
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return cls(counts, offsets, torch.from_numpy(offsets))


class Chunk(NamedTuple):
    """Several batches gathered in one pass: their graphs in order (``index``), where each
    batch's graphs start (``starts``, the total last), each graph's batch (``owner``) and its
    position in its batch (``place``)."""

    index: np.ndarray
    starts: np.ndarray
    owner: np.ndarray
    place: np.ndarray

    @classmethod
    def of(cls, batches: Sequence[Sequence[int] | np.ndarray]) -> Chunk:
        parts = [np.asarray(b, dtype=np.int64) for b in batches]
        if not parts or any(part.ndim != 1 or len(part) == 0 for part in parts):
            raise ValueError("indices must be a non-empty sequence of graph indices")
        index = parts[0] if len(parts) == 1 else np.concatenate(parts)
        counts = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        starts = Rows.of(counts).offsets
        owner = np.repeat(np.arange(len(parts), dtype=np.int64), counts)
        return cls(index, starts, owner, np.arange(len(index), dtype=np.int64) - starts[owner])


class Span(NamedTuple):
    """How the graphs of a chunk divide one kind of row: each graph's first stored row and
    count, where each graph's rows start in the chunk (the total last), and where each
    batch's rows start (the total last)."""

    first: np.ndarray
    counts: np.ndarray
    offsets: np.ndarray
    batches: np.ndarray

    def rows(self, g0: int, g1: int) -> Rows:
        """How the graphs ``g0:g1`` of the chunk (one batch) divide these rows."""
        offsets = self.offsets[g0 : g1 + 1] - self.offsets[g0]
        return Rows(self.counts[g0:g1], offsets, torch.from_numpy(offsets))


def block_order(lead: int, batches: np.ndarray, on: tuple[Tensor, ...] | None = None) -> tuple:
    """For an attribute concatenated along a dimension that is not its first (``edge_index``,
    ``[2, edges]``), with ``lead`` entries before it: the order in which a chunk's values are
    gathered so that each batch's part is contiguous, ``[*lead, its rows, ...]``. Per position
    of the result: the leading entry, and the row of the chunk. ``batches``: where each batch's
    rows start in the chunk (the total last). Worked out with NumPy, or with torch on the
    device that ``on`` lies on: :func:`block_counts` of ``batches`` copied there (the rows
    are the chunk's edges: they are not copied)."""
    counts = np.diff(batches)
    total = lead * int(batches[-1])
    if on is None:
        which = np.repeat(np.arange(len(counts), dtype=np.int64), lead * counts)
        local = np.arange(total, dtype=np.int64)
        start, count = batches[:-1], counts
    else:
        start, count, spread = on
        device = start.device
        which = torch.repeat_interleave(
            torch.arange(len(counts), device=device), spread, output_size=total
        )
        local = torch.arange(total, device=device)
    local = local - lead * start[which]
    entry = local // count[which]
    return entry, start[which] + local - entry * count[which]


def block_counts(lead: int, batches: np.ndarray) -> list[np.ndarray]:
    """What :func:`block_order` reads of ``batches`` on a device: where each batch's rows
    start, how many, and those times ``lead``."""
    counts = np.diff(batches)
    return [batches[:-1], counts, lead * counts]


class Cut(NamedTuple):
    """Batch ``j``'s part of a chunk's values: rows ``starts[j]:starts[j + 1]`` along ``dim``."""

    starts: list[int]
    dim: int

    def __call__(self, out: Tensor, j: int) -> Tensor:
        return out.narrow(self.dim, self.starts[j], self.starts[j + 1] - self.starts[j])


class Block(NamedTuple):
    """Batch ``j``'s part of values gathered in :func:`block_order`: ``lead`` blocks of its
    rows, in ``shape`` with its rows along ``dim``."""

    starts: list[int]
    shape: tuple[int, ...]
    dim: int
    lead: int

    def __call__(self, out: Tensor, j: int) -> Tensor:
        a, b = self.starts[j], self.starts[j + 1]
        shape = (*self.shape[: self.dim], b - a, *self.shape[self.dim + 1 :])
        return out[self.lead * a : self.lead * b].view(shape)


def first_nodes(node_counts: np.ndarray, chunk: Chunk) -> np.ndarray:
    """Each graph's first node in its batch: the nodes of the graphs before it there."""
    offsets = Rows.of(node_counts).offsets
    return offsets[:-1] - offsets[chunk.starts[chunk.owner]]


def dtype_of(values: np.ndarray | Tensor) -> torch.dtype:
    """The torch dtype of a NumPy array or a tensor."""
    if isinstance(values, Tensor):
        return values.dtype
    return torch.from_numpy(np.empty(0, dtype=values.dtype)).dtype


_ALIGN = 16  # where each tensor of a staging buffer starts: a multiple of it


def staging(shapes: list[tuple[torch.dtype, tuple[int, ...]]], pin: bool) -> list[Tensor]:
    """Empty tensors of the dtypes and shapes ``shapes``, views of one buffer (pinned with
    ``pin``, so that a GPU copies all of them in one asynchronous copy)."""
    places, size = [], 0
    for dtype, shape in shapes:
        places.append(size)
        size += -(-math.prod(shape) * dtype.itemsize // _ALIGN) * _ALIGN
    buffer = torch.empty(size, dtype=torch.uint8, pin_memory=pin)
    return [
        buffer[at : at + math.prod(shape) * dtype.itemsize].view(dtype).view(shape)
        for at, (dtype, shape) in zip(places, shapes, strict=True)
    ]


def take(values: np.ndarray | Tensor, dim: int, positions: np.ndarray) -> Tensor:
    if isinstance(values, Tensor):  # a dtype NumPy lacks (bfloat16)
        return values.index_select(dim, torch.from_numpy(positions))
    return torch.from_numpy(values.take(positions, axis=dim))


def take_into(out: Tensor, values: np.ndarray | Tensor, dim: int, positions: np.ndarray) -> None:
    """``out`` = ``values``' entries ``positions`` along ``dim``, written in place."""
    if isinstance(values, Tensor):  # a dtype NumPy lacks
        torch.index_select(values, dim, torch.from_numpy(positions), out=out)
    else:  # clip, not raise: raise would gather into a buffer of its own and copy it over
        values.take(positions, axis=dim, out=out.numpy(), mode="clip")
