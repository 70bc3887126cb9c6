"""A batch made from the tensors gathered for it, with the bookkeeping
``Batch.from_data_list`` would give it, so that ``batch.to_data_list()`` gives the graphs back.

Both batchers end here: :class:`~.batching.IndexBatcher` (graphs held in memory) and
:class:`~.row_batches.DiskBatcher` (the rows of a table on disk) gather each attribute's rows
and hand them to :func:`assemble_batch`, which shifts the index attributes by the nodes before
and fills ``batch``, ``ptr`` and the slices in one update of the batch's store.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Batch

from ...compat import pyg
from .chunks import Rows


class Unbatchable(ValueError):
    """A dataset whose graphs this batcher cannot assemble (the per-graph path serves it)."""


def shifted(key: str) -> bool:
    """Whether ``Data`` shifts the attribute by the node count when batching (its
    ``__inc__``: ``edge_index``, ``face`` and any other ``*index*`` attribute)."""
    return "index" in key or key == "face"


def assemble_batch(
    template: Batch, nodes: Rows, parts: Iterable[tuple[str, Tensor, int, Rows]]
) -> Batch:
    """The batch of graphs whose nodes ``nodes`` counts, from ``parts``: (attribute, the
    graphs' values concatenated along ``dim``, ``dim``, how the graphs divide it), in order.
    As ``Batch.from_data_list`` makes it: ``*index*`` attributes shifted by the nodes of the
    graphs before (in place), ``batch``, ``ptr`` and the bookkeeping ``to_data_list`` reads.
    ``template``: an empty batch of the right class, copied (PyG makes the class anew, slowly,
    for every empty batch, :func:`~QuantumGravPy.compat.pyg.empty_batch`)."""
    k = len(nodes.counts)
    ptr = nodes.slices
    starts, zeros = ptr[:-1], batch_constants(k).zeros
    values, slice_dict, inc_dict = {}, {}, {}
    shifts: dict[int, Tensor] = {}  # by the Rows they follow: one repeat for all that share it
    for key, out, dim, where in parts:
        if shifted(key):
            shift = shifts.get(id(where))
            if shift is None:
                shift = torch.from_numpy(np.repeat(nodes.offsets[:-1], where.counts))
                shifts[id(where)] = shift
            if out.dim() > 1:
                shape = [1] * out.dim()
                shape[dim] = -1  # along the dimension the graphs are concatenated in
                shift = shift.view(shape)
            out += shift
            inc_dict[key] = starts
        else:
            inc_dict[key] = zeros
        values[key] = out
        slice_dict[key] = where.slices
    values["batch"] = torch.from_numpy(np.repeat(batch_constants(k).arange, nodes.counts))
    values["ptr"] = ptr
    return finish_batch(template, values, slice_dict, inc_dict)


class Constants(NamedTuple):
    """What every batch of k graphs has alike (read, never written, by the batches)."""

    arange: np.ndarray
    zeros: Tensor  # the increments of attributes that are not shifted
    one: Rows  # one row per graph


@functools.lru_cache(maxsize=16)
def batch_constants(k: int) -> Constants:
    """The constants of a batch of ``k`` graphs, made once for each ``k`` in use."""
    return Constants(
        np.arange(k, dtype=np.int64),
        torch.zeros(k, dtype=torch.long),
        Rows.of(np.ones(k, dtype=np.int64)),
    )


def finish_batch(template: Batch, values: dict, slice_dict: dict, inc_dict: dict) -> Batch:
    # The store's own dictionary, in one update: its item assignment clears caches an empty
    # batch does not have, at a few microseconds an attribute.
    return pyg.fill(template, values, slice_dict, inc_dict, len(values["ptr"]) - 1)


def ranges(first: np.ndarray, counts: np.ndarray, offsets: np.ndarray | None = None) -> np.ndarray:
    """The positions ``first[i]``, ..., ``first[i] + counts[i] - 1`` of every ``i``, in order
    (``offsets``: the exclusive cumulative sum of ``counts`` with the total last, if known)."""
    if offsets is None:
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
    positions = np.repeat(first - offsets[:-1], counts)
    positions += np.arange(offsets[-1], dtype=np.int64)
    return positions
