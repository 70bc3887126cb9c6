"""Exact expectations for N points sprinkled into a flat causal diamond (N fixed, not Poisson).

Two sprinkled points are related with a chance that depends on the dimension alone, so the
expected ordering fraction is the same at every N
(:func:`~.observables.ordering_fraction_expectation`). In two dimensions the interval
abundances are exact too. In light-cone coordinates a related pair spans a box of sides a and
b, each with density 2 (1 - t) on [0, 1]; the box's volume v = a b has density
4 (-(1 + v) ln v - 2 (1 - v)), and each of the other N - 2 points falls in the box with chance
v. Integrating the binomial count over that density gives, with H_n the harmonic numbers:

    <N_k> = N (H_{N-1} - H_k - 2) + (k + 1) (H_N - H_{k+1} + 2)

For k = 0 that is the link count (N + 1) H_N - 2N; the sum over k is N (N - 1) / 4, the
expected number of relations. ``tests/test_physics_exact.py`` checks all three against
sprinklings.
"""

from __future__ import annotations

import numpy as np

from .observables import ordering_fraction_expectation

__all__ = [
    "interval_abundance_expectation",
    "link_count_expectation",
    "ordering_fraction_expectation",
    "relation_count_expectation",
]


def _harmonic(n: int) -> np.ndarray:
    """H_0 .. H_n, float64."""
    return np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, n + 1))])


def _two_dimensional(dimension: float, what: str) -> None:
    if dimension != 2:
        raise ValueError(f"the exact {what} is known in two dimensions only, not {dimension}")


def interval_abundance_expectation(
    num_points: int, max_size: int, dimension: float = 2
) -> np.ndarray:
    """Expected ``N_k`` for k = 0 .. ``max_size`` (related pairs with exactly k elements
    between them) of ``num_points`` points sprinkled into a 2D diamond; float64 array."""
    _two_dimensional(dimension, "interval abundance")
    n = int(num_points)
    if n < 0 or max_size < 0:
        raise ValueError(f"expected num_points >= 0 and max_size >= 0, found {n}, {max_size}")
    out = np.zeros(max_size + 1)
    if n < 2:
        return out
    h = _harmonic(n)
    k = np.arange(min(max_size, n - 2) + 1)
    out[: len(k)] = n * (h[n - 1] - h[k] - 2) + (k + 1) * (h[n] - h[k + 1] + 2)
    return out


def link_count_expectation(num_points: int, dimension: float = 2) -> float:
    """Expected links of ``num_points`` points sprinkled into a 2D diamond: (N + 1) H_N - 2N."""
    _two_dimensional(dimension, "link count")
    return float(interval_abundance_expectation(num_points, 0, dimension)[0])


def relation_count_expectation(num_points: int, dimension: float) -> float:
    """Expected related pairs of ``num_points`` points sprinkled into a ``dimension``-dim
    diamond: the pairs times the chance that two are related."""
    n = int(num_points)
    return n * (n - 1) / 2 * ordering_fraction_expectation(dimension)
