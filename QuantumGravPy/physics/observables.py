"""Observables of causal sets: per-element features, chain lengths and the dimension estimator.

They take the relations (and links) as boolean matrices, [B, N, N] for a batch of causal sets of
one size, with elements in a natural labelling (every relation points to a later index), so
that one sweep in index order is exact.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

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


def longest_chains(relations: Tensor) -> Tensor:
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
    height = longest_chains(relations)
    # The longest chain starting at i is the longest chain ending at i in the reversed order.
    depth = longest_chains(relations.flip(1, 2).transpose(1, 2)).flip(1)
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
