"""Causal sets sprinkled into a causal diamond of Minkowski space.

A sprinkling places points uniformly (with respect to the spacetime volume) into a region; the
causal set is the set of points with the causal order they inherit. We use the causal diamond
(Alexandrov interval) between the events (-1, 0, ..., 0) and (1, 0, ..., 0): the points with
``|t| + |x| <= 1``. The number of points is fixed (a Poisson process conditioned on its count).

Everything heavy works on a batch of causal sets of one size at once, so generating a dataset
costs a handful of tensor operations per size rather than a Python loop per graph.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

MIN_DIMENSION = 2
MAX_DIMENSION = 6

#: Names of the per-element features built by :func:`node_features`, in column order.
FEATURE_NAMES = (
    "past_size",  # elements in the causal past, / N
    "future_size",  # elements in the causal future, / N
    "past_links",  # links from the past (Hasse in-degree), / N
    "future_links",  # links to the future (Hasse out-degree), / N
    "height",  # longest chain ending at the element, in links, / N
    "depth",  # longest chain starting at the element, in links, / N
)
NUM_FEATURES = len(FEATURE_NAMES)


@dataclass(frozen=True, eq=False)
class CausalSet:
    """A sprinkled causal set. Elements are sorted by time coordinate."""

    coordinates: Tensor  # [N, d] float64, column 0 is time
    relations: Tensor  # [N, N] bool, [i, j] true iff i strictly precedes j
    links: Tensor  # [N, N] bool, the relations not implied by transitivity

    @property
    def num_points(self) -> int:
        return self.coordinates.shape[0]

    @property
    def dimension(self) -> int:
        return self.coordinates.shape[1]

    def ordering_fraction(self) -> float:
        """Related pairs divided by all pairs; its expectation depends only on the dimension."""
        n = self.num_points
        return int(self.relations.sum()) / (n * (n - 1) / 2) if n > 1 else 0.0

    def longest_chain(self) -> int:
        """Number of elements in the longest chain (totally ordered subset)."""
        height = _longest_chains(self.relations[None])[0]
        return int(height.max()) + 1 if self.num_points else 0

    def node_features(self) -> Tensor:
        return node_features(self.relations[None], self.links[None])[0]


def check_sprinkle_arguments(num_points: int, dimension: int) -> None:
    if isinstance(num_points, bool) or not isinstance(num_points, int) or num_points < 1:
        raise ValueError(f"num_points must be a positive integer, got {num_points!r}")
    if (
        isinstance(dimension, bool)
        or not isinstance(dimension, int)
        or not MIN_DIMENSION <= dimension <= MAX_DIMENSION
    ):
        raise ValueError(
            f"dimension must be an integer from {MIN_DIMENSION} to {MAX_DIMENSION}, "
            f"got {dimension!r}"
        )


def sprinkle(num_points: int, dimension: int, seed: int) -> CausalSet:
    """Sprinkle ``num_points`` points into the causal diamond of ``dimension``-dim Minkowski space.

    The same arguments always give the same causal set.
    """
    check_sprinkle_arguments(num_points, dimension)
    coords = torch.from_numpy(
        diamond_coordinates(num_points, dimension, np.random.default_rng(seed))
    )
    relations, links = causal_structure(coords[None])
    return CausalSet(coordinates=coords, relations=relations[0], links=links[0])


def diamond_coordinates(num_points: int, dimension: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform points in the diamond ``|t| + |x| <= 1``, sorted by time. Shape [N, d].

    Sampled directly, without rejection: the spatial slice at time t is a ball of radius
    ``r = 1 - |t|``, so ``r`` has density proportional to ``r**(d-1)`` on [0, 1], i.e.
    ``r = U**(1/d)``; the spatial point is then uniform in that ball.
    """
    d = dimension
    radius_at_t = rng.random(num_points) ** (1.0 / d)
    sign = np.where(rng.random(num_points) < 0.5, -1.0, 1.0)
    t = sign * (1.0 - radius_at_t)
    direction = rng.standard_normal((num_points, d - 1))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    r = radius_at_t * rng.random(num_points) ** (1.0 / (d - 1))
    coords = np.empty((num_points, d))
    coords[:, 0] = t
    coords[:, 1:] = direction * r[:, None]
    return coords[np.argsort(t, kind="stable")]


def causal_structure(coords: Tensor) -> tuple[Tensor, Tensor]:
    """Relations and links of a batch of time-sorted point sets. ``coords``: [B, N, d].

    Returns two bool tensors [B, N, N]: ``relations[b, i, j]`` iff i precedes j (timelike
    separated and earlier), and ``links``, the relations with no element in between.
    """
    dt = coords[:, None, :, 0] - coords[:, :, None, 0]  # [B, i, j] = t_j - t_i
    dx2 = (coords[:, None, :, 1:] - coords[:, :, None, 1:]).square().sum(-1)
    relations = (dt > 0) & (dt.square() > dx2)
    # Sorting by time makes every relation point forwards; the triangle mask only guards ties.
    relations &= torch.ones_like(relations[0]).triu(1)
    r = relations.float()
    between = torch.bmm(r, r)  # [b, i, j] = number of k with i < k < j
    links = relations & (between == 0)
    return relations, links


def _longest_chains(relations: Tensor) -> Tensor:
    """Longest chain (in links) ending at each element, for a batch [B, N, N] of sorted relations.

    One sweep in time order is exact: every predecessor of j comes before j.
    """
    b, n, _ = relations.shape
    height = torch.zeros(b, n, dtype=torch.float32)
    r = relations.float()
    for j in range(1, n):
        # -1 where unrelated so that an element with no past keeps height 0
        height[:, j] = (r[:, :j, j] * (height[:, :j] + 1) - (1 - r[:, :j, j])).amax(1).clamp(min=0)
    return height


def node_features(relations: Tensor, links: Tensor) -> Tensor:
    """The :data:`FEATURE_NAMES` features for a batch of causal sets: [B, N, NUM_FEATURES]."""
    n = relations.shape[-1]
    height = _longest_chains(relations)
    # The longest chain starting at i is the longest chain ending at i in the reversed order.
    depth = _longest_chains(relations.flip(1, 2).transpose(1, 2)).flip(1)
    columns = (
        relations.sum(1),
        relations.sum(2),
        links.sum(1),
        links.sum(2),
        height,
        depth,
    )
    return torch.stack([c.float() for c in columns], dim=-1) / n


def ordering_fraction_expectation(dimension: float) -> float:
    """Expected ordering fraction of a sprinkling into a d-dimensional diamond (Myrheim-Meyer).

    ``f(d) = Gamma(d + 1) Gamma(d / 2) / (2 Gamma(3d / 2))``: 1/2 in two dimensions, 1/10 in four.
    Exact for any number of points: it is the chance that two uniform points are related.
    """
    d = dimension
    return math.exp(math.lgamma(d + 1) + math.lgamma(d / 2) - math.lgamma(3 * d / 2)) / 2


def myrheim_meyer_dimension(ordering_fraction: float) -> float:
    """The dimension whose expected ordering fraction is the given one (inverse of the above)."""
    if not 0.0 < ordering_fraction < 1.0:
        raise ValueError(f"ordering fraction must be in (0, 1), got {ordering_fraction}")
    lo, hi = 0.5, 64.0  # f decreases monotonically in d
    for _ in range(100):
        mid = (lo + hi) / 2
        if ordering_fraction_expectation(mid) > ordering_fraction:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
