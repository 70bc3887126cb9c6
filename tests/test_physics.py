"""The generators against exact results, and the observables against definitions.

Each statistical check uses enough samples (fixed seeds) that a mistake of the size a wrong
coefficient, exponent or sampling rule makes lies many standard errors away.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import QuantumGravPy as qg
from QuantumGravPy.physics import causal_structure, diamond_coordinates, uniform_diamond
from QuantumGravPy.physics import observables as obs
from QuantumGravPy.physics.curved import PolynomialFactor, h_for_proper_height, proper_height


def flat_batch(n: int, d: int, count: int, seed: int) -> torch.Tensor:
    """Relations of ``count`` sprinklings into the flat diamond, in one batch."""
    rng = np.random.default_rng(seed)
    coords = torch.from_numpy(np.stack([diamond_coordinates(n, d, rng) for _ in range(count)]))
    return causal_structure(coords)[0]


def close_to(samples, exact: float, sigmas: float = 4.0) -> bool:
    samples = np.asarray(samples, dtype=np.float64)
    error = samples.std(ddof=1) / math.sqrt(len(samples))
    return abs(samples.mean() - exact) < sigmas * error


def harmonic(n: int) -> float:
    return sum(1.0 / k for k in range(1, n + 1))


# --- observables against their definitions ------------------------------------------------------


def test_observables_count_what_their_definitions_say():
    c = qg.sprinkle(40, 3, seed=2)
    r = c.relations
    n = c.num_points
    between = [[int((r[i] & r[:, j]).sum()) for j in range(n)] for i in range(n)]
    pairs = [(i, j) for i in range(n) for j in range(n) if r[i, j]]
    expected = [sum(1 for i, j in pairs if between[i][j] == k) for k in range(5)]
    assert obs.interval_abundances(r, 4).tolist() == expected
    assert int(obs.link_count(r)) == expected[0] == int(c.links.sum())
    assert float(obs.ordering_fraction(r)) == len(pairs) / (n * (n - 1) / 2)
    # the longest chain, by brute force over the links
    longest = [1] * n
    for j in range(n):
        for i in range(j):
            if r[i, j]:
                longest[j] = max(longest[j], longest[i] + 1)
    assert int(obs.longest_chain(r)) == max(longest) == c.longest_chain()
    n0, n1, n2, n3 = expected[:4]
    assert c.benincasa_dowker_action(2) == pytest.approx(2 * (n - 2 * n0 + 4 * n1 - 2 * n2))
    assert c.benincasa_dowker_action(4) == pytest.approx(
        4 / math.sqrt(6) * (n - n0 + 9 * n1 - 16 * n2 + 8 * n3)
    )
    # batched: one value per causal set, the same as one at a time
    batch = flat_batch(30, 2, 5, seed=0)
    assert obs.interval_abundances(batch, 3).tolist() == [
        obs.interval_abundances(b, 3).tolist() for b in batch
    ]


def test_dimension_estimators_recover_the_dimension_of_large_sprinklings():
    for d in (2, 3, 4):
        r = flat_batch(1024, d, 2, seed=d)
        mm = [qg.myrheim_meyer_dimension(float(f)) for f in obs.ordering_fraction(r)]
        assert np.allclose(mm, d, atol=0.15)
        assert np.allclose(obs.midpoint_dimension(r).numpy(), d, atol=0.35)


# --- flat sprinklings ----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [10, 40])
def test_2d_sprinklings_have_the_exact_expected_number_of_links(n):
    links = obs.link_count(flat_batch(n, 2, 3000, seed=n)).numpy()
    assert close_to(links, (n + 1) * harmonic(n) - 2 * n)
    # decisive: 3D sprinklings of the same size have clearly fewer links
    assert not close_to(obs.link_count(flat_batch(n, 3, 3000, seed=n)).numpy(), links.mean(), 8)


def test_the_2d_benincasa_dowker_action_has_mean_2_for_every_size():
    assert qg.sprinkle(1, 2, seed=0).benincasa_dowker_action(2) == 2.0
    # two points: related with probability 1/2, S = 4 or 0
    two = obs.benincasa_dowker_action(flat_batch(2, 2, 4000, seed=1), 2).numpy()
    assert set(np.unique(two)) == {0.0, 4.0} and close_to(two, 2.0)
    for n in (5, 12, 30):
        action = obs.benincasa_dowker_action(flat_batch(n, 2, 6000, seed=n), 2).numpy()
        assert close_to(action, 2.0), (n, action.mean())


# --- random orders ------------------------------------------------------------------------------


@pytest.mark.parametrize("d", [2, 3, 4])
def test_random_orders_have_ordering_fraction_2_to_the_1_minus_d(d):
    fractions = [qg.random_order(40, d, seed=s).ordering_fraction() for s in range(600)]
    assert close_to(fractions, 2.0 ** (1 - d))


def test_random_2_orders_have_the_statistics_of_2d_sprinklings():
    n = 20
    orders = [qg.random_order(n, 2, seed=s) for s in range(3000)]
    assert close_to([c.link_count() for c in orders], (n + 1) * harmonic(n) - 2 * n)
    assert close_to([c.benincasa_dowker_action(2) for c in orders], 2.0)
    sprinkled = obs.interval_abundances(flat_batch(n, 2, 3000, seed=5), 3).double().mean(0)
    ordered = torch.stack([c.interval_abundances(3) for c in orders]).double()
    spread = ordered.std(0) / math.sqrt(len(orders))
    assert torch.all((ordered.mean(0) - sprinkled).abs() < 5 * spread * math.sqrt(2))
    c = orders[0]
    assert torch.equal(c.relations, c.relations.triu(1))


def test_kleitman_rothschild_orders_have_three_layers_and_the_exact_ordering_fraction():
    for n in (6, 30):
        sets = [qg.kleitman_rothschild_order(n, seed=s) for s in range(1500)]
        assert close_to([c.ordering_fraction() for c in sets], (3 - (7 / 8) ** (n - 2)) / 8)
        chains = [c.longest_chain() for c in sets]
        assert max(chains) == 3
    assert np.mean(np.array(chains) == 3) > 0.99  # at 30 elements, almost always all layers


def test_percolation_and_destroyed_sprinklings_are_partial_orders():
    from QuantumGravPy.physics import order_violation

    p = qg.transitive_percolation(60, 0.1, seed=1)
    assert order_violation(p.relations) is None and torch.equal(p.relations, p.relations.triu(1))
    # at p = 1 every pair is related; at 0 none
    assert qg.transitive_percolation(10, 1.0, seed=0).ordering_fraction() == 1.0
    assert qg.transitive_percolation(10, 0.0, seed=0).ordering_fraction() == 0.0
    flat = qg.sprinkle(60, 4, seed=3)
    destroyed = qg.destroyed_sprinkling(60, 4, seed=3, fraction=0.05)
    assert order_violation(destroyed.relations) is None
    assert torch.equal(destroyed.coordinates, flat.coordinates)
    assert destroyed.ordering_fraction() > flat.ordering_fraction()
    assert torch.equal(qg.destroyed_sprinkling(60, 4, 3, 0.0).relations, flat.relations)
    for make in (
        lambda: qg.random_order(30, 3, 4),
        lambda: qg.kleitman_rothschild_order(30, 4),
        lambda: qg.destroyed_sprinkling(30, 3, 4, 0.1),
    ):
        a, b = make(), make()
        assert torch.equal(a.relations, b.relations)  # the same seed, the same set


# --- curved sprinklings -------------------------------------------------------------------------


def test_de_sitter_time_marginal_has_the_exact_density():
    d, h = 4, 0.6
    t = np.concatenate(
        [
            qg.sprinkle(500, d, seed=s, spacetime="de_sitter", h=h).coordinates[:, 0]
            for s in range(40)
        ]
    )
    grid = np.linspace(-1, 1, 20001)
    density = (1 - np.abs(grid)) ** (d - 1) * (1 - h * grid) ** (-d)
    cdf = np.concatenate([[0], np.cumsum((density[1:] + density[:-1]) / 2)])
    cdf /= cdf[-1]

    def ks_distance(values, cdf_grid):
        values = np.sort(values)
        model = np.interp(values, grid, cdf_grid)
        empirical = np.arange(1, len(values) + 1) / len(values)
        return np.max(np.abs(empirical - model))

    critical = 1.95 / math.sqrt(len(t))  # 0.1 % level
    assert ks_distance(t, cdf) < critical
    flat = (1 - np.abs(grid)) ** (d - 1)
    flat_cdf = np.concatenate([[0], np.cumsum((flat[1:] + flat[:-1]) / 2)])
    assert ks_distance(t, flat_cdf / flat_cdf[-1]) > 5 * critical  # decisive: not flat


def weighted_ordering_fraction(d: int, log_omega, points: int, seed: int) -> tuple[float, float]:
    """The ordering fraction of the definition, by Monte Carlo: uniform pairs in the diamond,
    each weighted by Omega(x)**d Omega(y)**d. Returns (estimate, standard error)."""
    rng = np.random.default_rng(seed)
    x, y = uniform_diamond(points, d, rng), uniform_diamond(points, d, rng)
    dt = y[:, 0] - x[:, 0]
    related = (dt**2 > ((y[:, 1:] - x[:, 1:]) ** 2).sum(1)).astype(float)
    w = np.exp(d * (log_omega(x) + log_omega(y)))
    estimate = (w * related).sum() / w.sum()
    error = np.sqrt(((w * (related - estimate)) ** 2).sum()) / w.sum()
    return estimate, error


@pytest.mark.parametrize("spacetime", ["de_sitter", "anti_de_sitter"])
def test_curved_ordering_fractions_match_a_monte_carlo_of_the_definition(spacetime):
    from QuantumGravPy.physics.curved import log_conformal_factor

    d, h, n = 4, 0.6, 64
    fractions = [
        qg.sprinkle(n, d, seed=s, spacetime=spacetime, h=h).ordering_fraction() for s in range(1500)
    ]
    expected, error = weighted_ordering_fraction(d, log_conformal_factor(spacetime, h), 400_000, 1)
    spread = np.std(fractions, ddof=1) / math.sqrt(len(fractions))
    assert abs(np.mean(fractions) - expected) < 4 * math.hypot(spread, error)
    flat = qg.ordering_fraction_expectation(d)
    if spacetime == "de_sitter":
        assert np.mean(fractions) > flat + 10 * spread
    else:
        assert np.mean(fractions) < flat - 10 * spread


def test_curvature_parameters_and_constant_ricci_scalars():
    h = h_for_proper_height(1.4)
    assert proper_height(h) == pytest.approx(1.4)
    ds = qg.sprinkle(50, 4, seed=0, spacetime="de_sitter", h=h)
    ads = qg.sprinkle(50, 4, seed=0, spacetime="anti_de_sitter", h=h)
    radius = (1 - h) / h
    assert torch.allclose(ds.ricci, torch.full((50,), 12 / radius**2, dtype=torch.float64))
    assert torch.allclose(ads.ricci, -ds.ricci)
    assert torch.equal(qg.sprinkle(50, 4, seed=0).ricci, torch.zeros(50, dtype=torch.float64))
    # h = 0 is flat space, the same sprinkling
    same = qg.sprinkle(50, 4, seed=0, spacetime="de_sitter", h=0.0)
    assert torch.equal(same.relations, qg.sprinkle(50, 4, seed=0).relations)
    for bad in [dict(spacetime="de_sitter", h=1.0), dict(spacetime="minkowski", h=0.2),
                dict(spacetime="sphere", h=0.1)]:  # fmt: skip
        with pytest.raises(ValueError):
            qg.sprinkle(10, 4, seed=0, **bad)


def finite_difference_ricci(metric, t: float, x: float, step: float = 1e-3) -> float:
    """The Ricci scalar of a 2D metric g(t, x) from its components alone: Christoffel symbols
    and their derivatives by central differences."""

    def g(p):
        return metric(p[0], p[1])

    def dg(p):  # [c, a, b] = d_c g_ab
        out = np.zeros((2, 2, 2))
        for c in range(2):
            e = np.zeros(2)
            e[c] = step
            out[c] = (g(p + e) - g(p - e)) / (2 * step)
        return out

    def christoffel(p):  # [a, b, c] = Gamma^a_bc = g^ad Gamma_dbc
        d = dg(p)
        # Gamma_dbc = 1/2 (d_b g_dc + d_c g_db - d_d g_bc)
        low = 0.5 * (d.transpose(1, 0, 2) + d.transpose(1, 2, 0) - d)
        return np.einsum("ad,dbc->abc", np.linalg.inv(g(p)), low)

    p = np.array([t, x])
    gamma = christoffel(p)
    d_gamma = np.zeros((2, 2, 2, 2))  # [e, a, b, c] = d_e Gamma^a_bc
    for e in range(2):
        shift = np.zeros(2)
        shift[e] = step
        d_gamma[e] = (christoffel(p + shift) - christoffel(p - shift)) / (2 * step)
    # R_bc = d_a Gamma^a_bc - d_c Gamma^a_ba + Gamma^a_ad Gamma^d_bc - Gamma^a_cd Gamma^d_ba
    ricci = (
        np.einsum("aabc->bc", d_gamma)
        - np.einsum("caba->bc", d_gamma)
        + np.einsum("aad,dbc->bc", gamma, gamma)
        - np.einsum("acd,dba->bc", gamma, gamma)
    )
    return float(np.einsum("bc,bc->", np.linalg.inv(g(p)), ricci))


def test_the_ricci_scalar_of_random_conformal_sprinklings_matches_the_metric():
    c = qg.conformal_sprinkling(40, seed=7, amplitude=0.4, degree=3)
    factor = PolynomialFactor.random(np.random.default_rng(7), 0.4, 3)  # the same draw

    def metric(t, x):
        omega2 = math.exp(2 * factor.log_omega(np.array([[t, x]]))[0])
        return omega2 * np.diag([-1.0, 1.0])

    assert c.ricci.abs().max() > 0.5  # curved enough to tell
    for i in range(0, 40, 5):
        t, x = c.coordinates[i].tolist()
        assert float(c.ricci[i]) == pytest.approx(finite_difference_ricci(metric, t, x), abs=1e-4)
    # the check itself: de Sitter's constant curvature from its metric
    h = 0.5
    ds = qg.sprinkle(5, 2, seed=0, spacetime="de_sitter", h=h)
    dsm = lambda t, x: ((1 - h) / (1 - h * t)) ** 2 * np.diag([-1.0, 1.0])
    assert finite_difference_ricci(dsm, 0.1, 0.2) == pytest.approx(float(ds.ricci[0]), rel=1e-5)


def test_random_conformal_sprinklings_follow_their_density():
    """Points of one random conformal spacetime, weighted back by Omega**-2, are uniform."""
    from QuantumGravPy.physics.curved import conformal_coordinates

    factor = PolynomialFactor.random(np.random.default_rng(3), 0.4, 3)
    bound = factor.upper_bound()
    grid = uniform_diamond(200_000, 2, np.random.default_rng(0))
    assert factor.log_omega(grid).max() <= bound  # the rejection bound holds
    points = np.concatenate(
        [
            conformal_coordinates(2000, 2, np.random.default_rng(s), factor.log_omega, bound,
                                  uniform_diamond)
            for s in range(10)
        ]
    )  # fmt: skip
    weights = np.exp(-2 * factor.log_omega(points))
    # uniform points in the diamond have mean t = 0 and mean x**2 = 1/6
    assert abs(np.average(points[:, 0], weights=weights)) < 0.02
    assert np.average(points[:, 1] ** 2, weights=weights) == pytest.approx(1 / 6, abs=0.01)
    # and unweighted they are not uniform (the test can tell)
    assert abs(np.mean(points[:, 0])) > 0.05 or abs(np.mean(points[:, 1] ** 2) - 1 / 6) > 0.02
