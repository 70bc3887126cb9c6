"""Causal sets that are not sprinklings: random d-orders, Kleitman-Rothschild (layered) orders,
transitive percolation, and sprinklings whose order was partly destroyed.

Each returns a :class:`CausalSet` in a natural labelling (relations strictly upper triangular),
the same one for the same arguments.

- :func:`random_order`: the intersection of d uniformly random linear orders. A random 2-order
  has exactly the distribution of a sprinkling into a 2D diamond (its two orders are the
  light-cone coordinates); for d > 2 it is not manifold-like, with ordering fraction 2**(1-d).
- :func:`kleitman_rothschild_order`: three layers, the shape of almost every large partial
  order; every chain has at most 3 elements.
- :func:`transitive_percolation`: each pair i < j of a fixed labelling linked with probability
  p, then closed transitively.
- :func:`destroyed_sprinkling`: a sprinkling with a fraction of its pairs flipped (related to
  unrelated and back), then closed transitively;
- :func:`percolation_like`: transitive percolation tuned to a given ordering fraction.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .causal_set import CausalSet
from .orders import transitive_closure, transitive_reduction
from .sprinkling import check_sprinkle_arguments, sprinkle

#: The generators of causal sets, as the cset_type classes of the embedded data name them.
CSET_TYPES = ("sprinkling", "random_order", "kleitman_rothschild", "percolation", "destroyed")


def _count(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _probability(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


def _from_relations(relations: Tensor, coordinates: Tensor | None = None) -> CausalSet:
    relations = relations.bool()
    return CausalSet(
        relations=relations, links=transitive_reduction(relations), coordinates=coordinates
    )


def random_order(num_points: int, dimension: int, seed: int) -> CausalSet:
    """The intersection of ``dimension`` uniformly random linear orders of ``num_points``
    elements: i precedes j when it comes first in every one. Coordinates: each element's
    position in each order, scaled into (0, 1), sorted by the first."""
    n = _count(num_points, "num_points", 1)
    d = _count(dimension, "dimension", 1)
    rng = np.random.default_rng(seed)
    positions = np.stack([rng.permutation(n) for _ in range(d)], axis=1)  # [N, d]
    positions = positions[np.argsort(positions[:, 0])]
    p = torch.from_numpy(positions)
    relations = (p[:, None, :] < p[None, :, :]).all(-1)
    return _from_relations(relations, (p.double() + 0.5) / n)


def kleitman_rothschild_order(num_points: int, seed: int) -> CausalSet:
    """Each element in layer 1, 2 or 3 with probabilities 1/4, 1/2, 1/4; each pair in
    consecutive layers related with probability 1/2; then the transitive closure (a pair of
    layers 1 and 3 is related through any element of layer 2 above one and below the other)."""
    n = _count(num_points, "num_points", 1)
    rng = np.random.default_rng(seed)
    layer = np.sort(rng.choice(3, size=n, p=[0.25, 0.5, 0.25]))
    consecutive = layer[None, :] == layer[:, None] + 1
    bonds = consecutive & (rng.random((n, n)) < 0.5)
    return _from_relations(transitive_closure(torch.from_numpy(bonds)))


def transitive_percolation(num_points: int, p: float, seed: int) -> CausalSet:
    """Each pair i < j linked with probability ``p`` (independently), then closed
    transitively: the simplest classical sequential growth dynamics."""
    n = _count(num_points, "num_points", 1)
    p = _probability(p, "p")
    rng = np.random.default_rng(seed)
    bonds = np.triu(rng.random((n, n)) < p, k=1)
    return _from_relations(transitive_closure(torch.from_numpy(bonds)))


def destroyed_sprinkling(num_points: int, dimension: int, seed: int, fraction: float) -> CausalSet:
    """A sprinkling into the ``dimension``-dim diamond whose pairs i < j (in time order) are
    each flipped, related to unrelated and back, with probability ``fraction``; then closed
    transitively. It keeps the sprinkling's coordinates, no longer its light-cone order."""
    check_sprinkle_arguments(num_points, dimension)
    fraction = _probability(fraction, "fraction")
    base = sprinkle(num_points, dimension, seed)
    rng = np.random.default_rng([seed, 1])  # apart from the sprinkling's own stream
    flips = torch.from_numpy(np.triu(rng.random((num_points, num_points)) < fraction, k=1))
    relations = transitive_closure(base.relations ^ flips)
    return _from_relations(relations, base.coordinates)


def percolation_like(num_points: int, ordering_fraction: float, seed: int) -> CausalSet:
    """Transitive percolation whose ordering fraction is as close to ``ordering_fraction`` as
    its size allows: the bond probability is found by bisection with the same random numbers,
    under which the ordering fraction only grows with p (a non-manifold-like set that the
    ordering fraction, and so the Myrheim-Meyer estimator, cannot tell from a sprinkling)."""
    n = _count(num_points, "num_points", 1)
    target = _probability(ordering_fraction, "ordering_fraction")
    uniforms = torch.from_numpy(np.triu(np.random.default_rng(seed).random((n, n)), k=1))
    upper = torch.ones(n, n, dtype=torch.bool).triu(1)
    pairs = max(n * (n - 1) / 2, 1)

    def closed(p: float) -> Tensor:
        return transitive_closure((uniforms < p) & upper)

    lo, hi = 0.0, 1.0
    best, best_gap = closed(0.0), abs(target)
    for _ in range(30):
        mid = (lo + hi) / 2
        relations = closed(mid)
        fraction = float(relations.sum()) / pairs
        if abs(fraction - target) < best_gap:
            best, best_gap = relations, abs(fraction - target)
        if fraction < target:
            lo = mid
        else:
            hi = mid
        if best_gap * pairs < 0.5:  # as close as a whole number of relations gets
            break
    return _from_relations(best)
