"""The exact expectations of sprinklings the sample report sets samples against, checked
against sprinklings and by enumeration; and the width (largest antichain) checked against an
independent exact route."""

import itertools
import math

import numpy as np
import pytest
import torch

from QuantumGravPy.physics import (
    interval_abundances,
    largest_antichain,
    longest_chain,
    ordering_fraction,
    sprinkle,
)
from QuantumGravPy.physics.exact import (
    interval_abundance_expectation,
    link_count_expectation,
    relation_count_expectation,
)


def test_two_points_are_a_link_half_the_time_and_the_counts_add_up_to_the_relations():
    # two points in a 2D diamond are related with chance 1/2, and then they are a link
    assert link_count_expectation(2) == pytest.approx(0.5, rel=1e-12)
    # three points: each of the 3 pairs is related with chance 1/2 (3/2 relations in all); the
    # third point lies inside a related pair's interval with the chance E[v] = 1/9 of its box
    # (each side has mean 1/3), so <N_1> = 3 * 1/2 * 1/9 = 1/6 and the links are 3/2 - 1/6
    assert interval_abundance_expectation(3, 1) == pytest.approx([4 / 3, 1 / 6], rel=1e-12)
    for n in (5, 64, 1024, 2048):
        every = interval_abundance_expectation(n, n - 2)
        assert every.sum() == pytest.approx(relation_count_expectation(n, 2), rel=1e-10)
        assert every.min() >= 0
        h = sum(1 / i for i in range(1, n + 1))
        assert link_count_expectation(n) == pytest.approx((n + 1) * h - 2 * n, rel=1e-12)


def test_the_exact_counts_agree_with_sprinklings_at_the_fields_sizes():
    """400 sprinklings of 48 elements, and 40 of 1,024: each mean within 4 standard errors
    of the exact value (the counts' spread measured on the same sprinklings)."""
    for n, sets in ((48, 400), (1024, 40)):
        counts = torch.stack(
            [interval_abundances(sprinkle(n, 2, seed).relations, 4) for seed in range(sets)]
        ).double()
        mean, error = counts.mean(0).numpy(), counts.std(0).numpy() / math.sqrt(sets)
        expected = interval_abundance_expectation(n, 4)
        assert np.all(np.abs(mean - expected) < 4 * error), (n, mean, expected)


@pytest.mark.parametrize("dimension", [2, 3, 4])
def test_the_relations_expected_in_each_dimension_agree_with_sprinklings(dimension):
    n, sets = 64, 200
    fractions = np.array(
        [float(ordering_fraction(sprinkle(n, dimension, s).relations)) for s in range(sets)]
    )
    expected = relation_count_expectation(n, dimension) / (n * (n - 1) / 2)
    assert abs(fractions.mean() - expected) < 4 * fractions.std() / math.sqrt(sets)


def test_no_exact_count_is_claimed_outside_two_dimensions():
    with pytest.raises(ValueError, match="two dimensions only"):
        link_count_expectation(64, dimension=4)


def _brute_width(relations: torch.Tensor) -> int:
    n = relations.shape[0]
    for size in range(n, 0, -1):
        for subset in itertools.combinations(range(n), size):
            index = torch.tensor(subset)
            if not relations[index][:, index].any():
                return size
    return 0


def test_the_width_is_the_largest_antichain_found_by_trying_every_subset():
    rng = np.random.default_rng(0)
    for _ in range(30):
        n = int(rng.integers(1, 10))
        # a random order: a random DAG on a random labelling, transitively closed
        links = torch.from_numpy(np.triu(rng.random((n, n)) < 0.3, 1))
        relations = links.clone()
        for k in range(n):
            relations |= relations[:, k : k + 1] & relations[k : k + 1, :]
        assert largest_antichain(relations) == _brute_width(relations)


def test_a_2d_sprinklings_width_is_its_longest_spacelike_chain():
    """In light-cone coordinates (u, v) two points are related when both grow; a set of points
    is an antichain exactly when v falls as u grows, so the width is the longest such chain:
    the longest chain of the order with v reversed. Checked at 1,024 elements."""
    for seed in range(3):
        c = sprinkle(1024, 2, seed)
        t, x = c.coordinates[:, 0], c.coordinates[:, 1]
        order = torch.argsort(t + x)  # a natural labelling of the spacelike order
        u, v = (t + x)[order], (t - x)[order]
        spacelike = (u[:, None] < u[None, :]) & (v[:, None] > v[None, :])
        assert largest_antichain(c.relations) == int(longest_chain(spacelike))
