"""Longest chains through each element, from the links alone, for many causal sets at once.

A chain's length here is its number of links. The longest chain ending at an element (its
height) is one more than the largest height among the elements linked to it from the past, so
the heights follow from the links in one sweep in topological order: the elements are taken
in waves (first the minimal ones, then those whose every past link is to an element already
taken), and each link is read once, when its earlier element is taken. A causal set of N
elements and L links costs O(N + L) work in as many waves as its longest chain has elements;
the waves of many causal sets (given as one disjoint union) are taken together, so a batch
pays the per-wave cost once.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + c) for s, c in zip(starts, counts)])`` without a loop."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(counts)
    return np.arange(total, dtype=np.int64) + np.repeat(starts - ends + counts, counts)


def chain_heights(first: np.ndarray, second: np.ndarray, num_nodes: int) -> np.ndarray:
    """The longest chain (in links) ending at each of ``num_nodes`` nodes of the directed
    acyclic graph with edges ``first[k] -> second[k]`` (int64 arrays); int64 [num_nodes].

    Nodes on a cycle are never reached: a graph with one raises ValueError.
    """
    first, second = np.asarray(first, dtype=np.int64), np.asarray(second, dtype=np.int64)
    targets = second  # grouped by the earlier node (the order within a group does not matter)
    if len(first) and not bool(np.all(first[:-1] <= first[1:])):
        targets = second[np.argsort(first)]
    out_degree = np.bincount(first, minlength=num_nodes)
    offsets = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(out_degree, out=offsets[1:])
    waiting = np.bincount(second, minlength=num_nodes)  # past links not yet taken
    height = np.zeros(num_nodes, dtype=np.int64)
    slot = np.empty(num_nodes, dtype=np.int64)
    wave = np.flatnonzero(waiting == 0)
    taken, level = 0, 0
    while len(wave):
        height[wave] = level
        taken += len(wave)
        reached = targets[_ranges(offsets[wave], out_degree[wave])]
        np.subtract.at(waiting, reached, 1)
        ready = reached[waiting[reached] == 0]  # a node once per link just taken
        # once each, without sorting: of a node's places in `ready`, the one its slot keeps
        places = np.arange(len(ready))
        slot[ready] = places
        wave = ready[slot[ready] == places]
        level += 1
    if taken != num_nodes:
        raise ValueError(f"the links form a cycle ({num_nodes - taken} elements on or above one)")
    return height


def chain_lengths(links: list[Tensor], sizes: list[int]) -> list[tuple[Tensor, Tensor]]:
    """(height, depth) of every element of several causal sets: the longest chain, in links,
    ending and starting at it (float32 [N] each). ``links[b]``: [2, L] (earlier, later)
    element pairs of set b, which has ``sizes[b]`` elements.

    All sets, and both directions, are one disjoint union: set b's elements are numbered from
    its offset, and each element has a twin in a reversed copy whose heights are the depths.
    """
    offsets = np.cumsum([0, *sizes])
    total = int(offsets[-1])
    if total == 0:
        return [(torch.zeros(0), torch.zeros(0)) for _ in sizes]
    pairs = [np.asarray(e.cpu(), dtype=np.int64) + o for e, o in zip(links, offsets, strict=False)]
    edges = np.concatenate(pairs, axis=1) if pairs else np.zeros((2, 0), dtype=np.int64)
    # each set's links come sorted by the earlier element; the reversed copy's, sorted here
    by_later = np.argsort(edges[1])
    first = np.concatenate([edges[0], total + edges[1][by_later]])
    second = np.concatenate([edges[1], total + edges[0][by_later]])
    both = torch.from_numpy(chain_heights(first, second, 2 * total).astype(np.float32))
    return [
        (both[start:end], both[total + start : total + end])
        for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)
    ]
