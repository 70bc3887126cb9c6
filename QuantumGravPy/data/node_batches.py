"""Batches of equal work: ``training.batch_nodes`` elements per process and step, whatever the
sizes of the causal sets.

With a fixed number of graphs per batch, a batch of causal sets of 64 to 2,048 elements varies
in work by an order of magnitude, the largest sets a batch can draw set the memory a GPU must
hold, and under DDP the rank that drew the smaller graphs waits for the other at every
gradient exchange. Here every rank computes the same plan for the epoch: the sequence one
process would draw (the sampler's, so class-balanced and weighted draws keep their meaning)
is cut, in order, into global batches, each split into one part per rank of at most
``batch_nodes`` nodes; a global batch ends where its next graph fits no part. Its graphs are
then dealt out again, largest first, each to the part with the fewest nodes that can take it
(when every graph finds a place; otherwise the first split stands), which leaves the parts
as equal as the graphs allow. Every rank takes the same number of steps (no rank waits for a
batch that never comes), the plan is a function of (seed, epoch) and the number of
processes, so a resumed run draws what an uninterrupted one would have, and the work per step
is bounded.

The budget counts nodes: the default model spends four hidden x hidden products per node and
layer against one hidden-wide sum per edge, and a causal set's links number a few per element
(ln N in 2D), so the nodes are the work.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import ConfigError


def pack(
    order: np.ndarray, sizes: np.ndarray, budget: int, parts: int, *, drop_last: bool = False
) -> list[list[list[int]]]:
    """``order`` (dataset positions, in the order drawn; a position may be drawn twice) cut
    into global batches of ``parts`` parts of at most ``budget`` nodes each (``sizes``: nodes
    per position); every part of every batch holds a graph, in the order drawn. The graphs
    left at the end make a last, smaller batch, unless ``drop_last`` or there are fewer of them
    than parts."""
    drawn = np.asarray(sizes)[order]  # the nodes of each draw
    batches: list[list[list[int]]] = []
    current: list[list[int]] = [[] for _ in range(parts)]  # draws (positions in order)
    loads = np.zeros(parts, dtype=np.int64)
    for draw, size in enumerate(drawn.tolist()):
        part = int(np.argmin(loads))
        if loads[part] + size > budget:  # the emptiest part cannot take it: no part can
            batches.append(_balanced(current, drawn, budget))
            current = [[] for _ in range(parts)]
            loads[:] = 0
            part = 0
        current[part].append(draw)
        loads[part] += size
    if all(current) and not drop_last:
        batches.append(_balanced(current, drawn, budget))
    return [[order[part].tolist() for part in batch] for batch in batches]


def _balanced(split: list[list[int]], sizes: np.ndarray, budget: int) -> list[list[int]]:
    """The draws of ``split`` dealt out again, largest first, each to the part with the fewest
    nodes that can take it; ``split`` itself when some draw finds no place (or a part would
    be left empty). Within a part, draws keep the order they were drawn in."""
    draws = sorted((d for part in split for d in part), key=lambda d: (-int(sizes[d]), d))
    parts: list[list[int]] = [[] for _ in split]
    loads = np.zeros(len(split), dtype=np.int64)
    for draw in draws:
        size = int(sizes[draw])
        for part in np.argsort(loads, kind="stable").tolist():
            if loads[part] + size <= budget:
                parts[part].append(draw)
                loads[part] += size
                break
        else:
            return split
    return [sorted(part) for part in parts] if all(parts) else split


class NodeBudgetBatches:
    """A batch sampler: this rank's part of each global batch of the epoch's plan (see the
    module's description). ``sampler`` draws the sequence of one process (``num_replicas`` 1)
    and is told the epoch as usual (``set_epoch``); ``sizes``: nodes of each graph of the
    dataset. ``global_graphs``: the graphs of each global batch, on all ranks together, which
    each rank's loss is weighted against."""

    def __init__(
        self,
        sampler: Any,
        sizes: np.ndarray,
        *,
        budget: int,
        rank: int,
        world_size: int,
        drop_last: bool = False,
    ):
        largest = int(sizes.max()) if len(sizes) else 0
        if largest > budget:
            raise ConfigError(
                f"training.batch_nodes: {budget} nodes cannot hold the largest training graph "
                f"({largest} nodes); set it to at least {largest}"
            )
        self.sampler, self.sizes, self.budget = sampler, np.asarray(sizes), budget
        self.rank, self.world_size, self.drop_last = rank, world_size, drop_last
        self._plan: tuple[Any, list[list[list[int]]]] | None = None

    def plan(self) -> list[list[list[int]]]:
        """The epoch's global batches, each a list of the ranks' parts (computed once per
        epoch: the same on every rank)."""
        epoch = getattr(self.sampler, "epoch", None)
        if self._plan is None or self._plan[0] != epoch:
            order = np.fromiter(iter(self.sampler), dtype=np.int64)
            parts, drop = self.world_size, self.drop_last
            self._plan = (epoch, pack(order, self.sizes, self.budget, parts, drop_last=drop))
        return self._plan[1]

    @property
    def global_graphs(self) -> list[int]:
        return [sum(map(len, batch)) for batch in self.plan()]

    def __len__(self) -> int:
        return len(self.plan())

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.plan():
            yield batch[self.rank]
