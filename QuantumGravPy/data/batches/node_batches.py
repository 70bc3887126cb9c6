"""Batches of equal work: ``training.batch_nodes`` elements per process and step, whatever the
sizes of the causal sets.

With a fixed number of graphs per batch, a batch of causal sets of 64 to 2,048 elements varies
in work by an order of magnitude, the largest sets a batch can draw set the memory a GPU must
hold, and under DDP the rank that drew the smaller graphs waits for the other at every
gradient exchange. Here every rank computes the same plan for the epoch: the sequence one
process would draw (the sampler's, so class-balanced and weighted draws keep their meaning)
is cut, in order, into global batches, each split into one part per rank of at most
``batch_nodes`` nodes; a global batch ends where its next graph fits no part. Its graphs are
then dealt out again, the most work first, each to the part with the least work that has room
for it (when every graph finds room; otherwise the first split stands), which leaves the parts
as equal as the graphs allow. Every rank takes the same number of steps (no rank waits for a
batch that never comes), the plan is a function of (seed, epoch) and the number of
processes, so a resumed run draws what an uninterrupted one would have, and the work per step
is bounded.

The budget counts nodes: what a step holds (node embeddings, and messages along the links, a
handful per element) grows with them, and a user knows them. The parts are balanced by an
estimate of the work, in which an edge counts an eighth of a node (:data:`EDGE_WORK`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ...errors import ConfigError

# The work of an edge against a node's. The default model (hidden 64, three GraphConv blocks),
# forward and backward on one thread: 5.9 us a node and 0.75 us an edge (messages are gathered
# and summed edge by edge); a causal set's links in both directions number 7 (128 elements)
# to 11 (1,024) per element, so the edges are nearly half the work, and more of it the larger
# the sets. Parts balanced by nodes alone left the waiting rank exposed 4.8 % of an epoch on
# sizes from 64 to 2,048; by this estimate, less.
EDGE_WORK = 0.125


def pack(
    order: np.ndarray,
    nodes: np.ndarray,
    budget: int,
    parts: int,
    *,
    work: np.ndarray | None = None,
    drop_last: bool = False,
) -> list[list[list[int]]]:
    """``order`` (dataset positions, in the order drawn; a position may be drawn twice) cut
    into global batches of ``parts`` parts of at most ``budget`` nodes each (``nodes``: per
    position), balanced by ``work`` (per position; default: the nodes); every part of every
    batch holds a graph, in the order drawn. The graphs left at the end make a last, smaller
    batch, unless ``drop_last`` or there are fewer of them than parts."""
    size = np.asarray(nodes)[order]  # per draw
    cost = size if work is None else np.asarray(work, dtype=np.float64)[order]
    batches: list[list[list[int]]] = []
    current: list[list[int]] = [[] for _ in range(parts)]  # draws (positions in order)
    loads = np.zeros(parts, dtype=np.int64)
    for draw, n in enumerate(size.tolist()):
        part = int(np.argmin(loads))
        if loads[part] + n > budget:  # the emptiest part cannot take it: no part can
            batches.append(_balanced(current, size, cost, budget))
            current = [[] for _ in range(parts)]
            loads[:] = 0
            part = 0
        current[part].append(draw)
        loads[part] += n
    if all(current) and not drop_last:
        batches.append(_balanced(current, size, cost, budget))
    return [[order[part].tolist() for part in batch] for batch in batches]


def _balanced(
    split: list[list[int]], size: np.ndarray, cost: np.ndarray, budget: int
) -> list[list[int]]:
    """The draws of ``split`` dealt out again, the most work first, each to the part with the
    least work that has room for its nodes; ``split`` itself when some draw finds no room (or
    a part would be left empty). Within a part, draws keep the order they were drawn in."""
    draws = sorted((d for part in split for d in part), key=lambda d: (-float(cost[d]), d))
    parts: list[list[int]] = [[] for _ in split]
    loads = np.zeros(len(split), dtype=np.int64)
    work = np.zeros(len(split))
    for draw in draws:
        for part in np.argsort(work, kind="stable").tolist():
            if loads[part] + size[draw] <= budget:
                parts[part].append(draw)
                loads[part] += size[draw]
                work[part] += cost[draw]
                break
        else:
            return split
    return [sorted(part) for part in parts] if all(parts) else split


class NodeBudgetBatches:
    """A batch sampler: this rank's part of each global batch of the epoch's plan (see the
    module's description). ``sampler`` draws the sequence of one process (``num_replicas`` 1)
    and is told the epoch as usual (``set_epoch``); ``sizes``: the nodes and the edges of each
    graph of the dataset. ``global_graphs``: the graphs of each global batch, on all ranks
    together, which each rank's loss is weighted against."""

    def __init__(
        self,
        sampler: Any,
        sizes: tuple[np.ndarray, np.ndarray],
        *,
        budget: int,
        rank: int,
        world_size: int,
        drop_last: bool = False,
    ):
        nodes, edges = sizes
        largest = int(nodes.max()) if len(nodes) else 0
        if largest > budget:
            raise ConfigError(
                f"training.batch_nodes: {budget} nodes cannot hold the largest training graph "
                f"({largest} nodes); set it to at least {largest}"
            )
        self.sampler, self.nodes, self.budget = sampler, nodes, budget
        self.work = nodes + EDGE_WORK * edges
        self.rank, self.world_size, self.drop_last = rank, world_size, drop_last
        self._plan: tuple[Any, list[list[list[int]]]] | None = None

    def plan(self) -> list[list[list[int]]]:
        """The epoch's global batches, each a list of the ranks' parts (computed once per
        epoch: the same on every rank)."""
        epoch = getattr(self.sampler, "epoch", None)
        if self._plan is None or self._plan[0] != epoch:
            order = np.fromiter(iter(self.sampler), dtype=np.int64)
            self._plan = (
                epoch,
                pack(
                    order,
                    self.nodes,
                    self.budget,
                    self.world_size,
                    work=self.work,
                    drop_last=self.drop_last,
                ),
            )
        return self._plan[1]

    @property
    def global_graphs(self) -> list[int]:
        return [sum(map(len, batch)) for batch in self.plan()]

    def __len__(self) -> int:
        return len(self.plan())

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.plan():
            yield batch[self.rank]
