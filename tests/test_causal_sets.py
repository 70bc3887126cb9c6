"""The sprinkling generator: order theory, determinism, and agreement with continuum results."""

import math

import numpy as np
import pytest
import torch

import QuantumGravPy as qg
from QuantumGravPy.physics import FEATURE_NAMES, diamond_coordinates

DIMENSIONS = range(2, 7)


def transitive_closure(r: torch.Tensor) -> torch.Tensor:
    closure = r.clone()
    while True:
        step = closure | ((closure.float() @ closure.float()) > 0)
        if torch.equal(step, closure):
            return closure
        closure = step


@pytest.mark.parametrize("d", DIMENSIONS)
def test_relations_are_a_strict_partial_order_ordered_by_time(d):
    c = qg.sprinkle(80, d, seed=d)
    r = c.relations
    assert r.dtype == torch.bool and r.shape == (80, 80)
    assert not r.diagonal().any()  # irreflexive
    assert torch.equal(r, r.triu(1))  # time-sorted: every relation points forwards
    assert torch.equal(transitive_closure(r), r)  # transitive
    assert torch.all(c.coordinates[1:, 0] >= c.coordinates[:-1, 0])


@pytest.mark.parametrize("d", [2, 4])
def test_relations_are_the_light_cone_order_of_the_points(d):
    c = qg.sprinkle(30, d, seed=1)
    x = c.coordinates
    for i in range(30):
        for j in range(30):
            dt = float(x[j, 0] - x[i, 0])
            dist = float(torch.linalg.norm(x[j, 1:] - x[i, 1:]))
            assert bool(c.relations[i, j]) == (dt > 0 and dt > dist)


@pytest.mark.parametrize("d", DIMENSIONS)
def test_links_are_the_transitive_reduction(d):
    c = qg.sprinkle(60, d, seed=10 + d)
    r, links = c.relations, c.links
    assert not (links & ~r).any()
    assert torch.equal(transitive_closure(links), r)
    n = c.num_points
    for i in range(n):
        for j in range(n):
            if r[i, j]:
                implied = bool((r[i] & r[:, j]).any())
                assert bool(links[i, j]) == (not implied)


def test_same_seed_same_causal_set_other_seed_other_set():
    a, b, other = qg.sprinkle(50, 3, 7), qg.sprinkle(50, 3, 7), qg.sprinkle(50, 3, 8)
    assert torch.equal(a.coordinates, b.coordinates)
    assert torch.equal(a.relations, b.relations) and torch.equal(a.links, b.links)
    assert not torch.equal(a.coordinates, other.coordinates)


@pytest.mark.parametrize("d", DIMENSIONS)
def test_points_lie_in_the_causal_diamond(d):
    x = qg.sprinkle(500, d, seed=3).coordinates
    assert x.shape == (500, d)
    assert torch.all(x[:, 0].abs() + torch.linalg.norm(x[:, 1:], dim=1) <= 1 + 1e-12)


@pytest.mark.parametrize("d", DIMENSIONS)
def test_density_is_uniform_in_spacetime_volume(d):
    """A diamond of half the size holds 2**-d of the volume, wherever it sits in the big one."""
    x = np.concatenate([diamond_coordinates(2000, d, np.random.default_rng(s)) for s in range(10)])
    t, r = x[:, 0], np.linalg.norm(x[:, 1:], axis=1)
    n = len(x)
    expected = 2.0**-d
    sigma = math.sqrt(expected * (1 - expected) / n)
    for centre in (-0.5, 0.5):  # the lower and the upper half-size diamonds
        inside = (np.abs(t - centre) + r <= 0.5).mean()
        assert abs(inside - expected) < 4.5 * sigma, (centre, inside, expected)
    # a half-size diamond centred on a spatial offset at t = 0
    offset = np.zeros(d - 1)
    offset[0] = 0.5
    inside = (np.abs(t) + np.linalg.norm(x[:, 1:] - offset, axis=1) <= 0.5).mean()
    assert abs(inside - expected) < 4.5 * sigma


@pytest.mark.parametrize("d", DIMENSIONS)
def test_ordering_fraction_matches_the_myrheim_meyer_function(d):
    fractions = np.array([qg.sprinkle(64, d, seed=s).ordering_fraction() for s in range(300)])
    expected = qg.ordering_fraction_expectation(d)
    stderr = fractions.std(ddof=1) / math.sqrt(len(fractions))
    assert abs(fractions.mean() - expected) < 4.5 * stderr, (fractions.mean(), expected)


def test_myrheim_meyer_function_known_values_and_inverse():
    assert qg.ordering_fraction_expectation(2) == pytest.approx(0.5)
    assert qg.ordering_fraction_expectation(4) == pytest.approx(0.1)
    for d in (2.0, 3.0, 3.7, 4.0, 6.0):
        assert qg.myrheim_meyer_dimension(qg.ordering_fraction_expectation(d)) == pytest.approx(d)
    with pytest.raises(ValueError):
        qg.myrheim_meyer_dimension(0.0)


def test_longest_chain_in_two_dimensions_follows_ulams_law():
    """In 2D the longest chain is a longest increasing subsequence: 2 sqrt(N) - 1.77 N**(1/6)."""
    n = 400
    mean = np.mean([qg.sprinkle(n, 2, seed=s).longest_chain() for s in range(20)])
    assert abs(mean - (2 * math.sqrt(n) - 1.7711 * n ** (1 / 6))) < 2.0


def test_node_features_match_their_definitions():
    c = qg.sprinkle(40, 3, seed=5)
    f = c.node_features()
    n = c.num_points
    assert f.shape == (n, len(FEATURE_NAMES))
    r, links = c.relations, c.links
    height = [0] * n
    for j in range(n):
        height[j] = max([height[i] + 1 for i in range(j) if r[i, j]], default=0)
    depth = [0] * n
    for i in reversed(range(n)):
        depth[i] = max([depth[j] + 1 for j in range(i + 1, n) if r[i, j]], default=0)
    expected = (
        torch.stack(
            [
                r.sum(0),
                r.sum(1),
                links.sum(0),
                links.sum(1),
                torch.tensor(height),
                torch.tensor(depth),
            ],
            dim=1,
        ).float()
        / n
    )
    assert torch.allclose(f, expected)
    assert c.longest_chain() == max(height) + 1


@pytest.mark.parametrize(
    "args", [(0, 3, 1), (10, 1, 1), (10, 7, 1), (10.5, 3, 1), (True, 3, 1), (10, "4", 1)]
)
def test_invalid_arguments_are_refused(args):
    with pytest.raises(ValueError):
        qg.sprinkle(*args)
