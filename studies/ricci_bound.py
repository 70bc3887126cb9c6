"""The most any model of the causal order can reach on the ricci kind: R^2 of the best estimate
of each element's Ricci scalar, given more than the order holds.

python studies/ricci_bound.py [--sizes N ...] [--samples S] [--order-samples S]

No model of the causal order estimates a quantity better (in mean squared error) than the
posterior mean given anything the order is a function of. Two such things are scored here: the
elements' coordinates, and each element's quantiles in its spacetime's two light-cone marginal
distributions (the order is the quantiles' ranks). The ricci kind's spacetimes are known in
form: ln Omega a cubic polynomial in t and x with 9 normal coefficients of standard deviation
0.3 (``data/sources/kinds.py``), and the N points are independent with density proportional to
Omega**2 on the diamond. Given the coordinates, the coefficients' posterior is exact up to a
normalisation: found by Newton's method and a Laplace approximation, then sampled by importance
sampling from that Gaussian (covariance widened by 1.5). Given the quantiles (of each test
graph's own spacetime, drawn again from its seed), their likelihood is exact too: the copula
density of Omega**2 at each element's quantiles, since the quantiles of independent points are
independent with that density; each sampled spacetime places the elements by its own inverse
marginal distributions (the mode found by BFGS, the Hessian by finite differences, the same
importance sampling). The posterior mean of R at every element is the weighted mean of the
sampled spacetimes' R there. Its R^2 on the test split of the curve's data (studies/baselines.py,
the same graphs), with its standard error over the test graphs (a bootstrap of 200 resamplings
of the graphs), is a bound; the quantiles' is the tighter for models of the order, and it is
the bound. The effective numbers of samples are printed with them. Beside them are two models
of the order alone (below): the best model of the order lies between the better of the two
and the bound.

The two models of the order start from each element's ranks in the two light-cone orders,
found from the order alone (physics.light_cone_ranks). The first takes the ranks for
coordinates ((rank + 1/2) / N in each light-cone direction) and gives them to the coordinates'
posterior. The second is the quantiles' posterior with the ranks in place of the quantiles (the
pseudo-likelihood of rank statistics). Both are functions of the causal set, so what they
reach, a model of the order can.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import minimize

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from baselines import RICCI_CONFIG, RICCI_CURVE  # noqa: E402

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.data import dataset_from_config  # noqa: E402
from QuantumGravPy.data.sources.causal_sets import graph_parameters  # noqa: E402
from QuantumGravPy.embedded.ricci import CONFORMAL_AMPLITUDE, CONFORMAL_DEGREE  # noqa: E402
from QuantumGravPy.physics import light_cone_ranks, transitive_closure  # noqa: E402
from QuantumGravPy.physics.curved import PolynomialFactor  # noqa: E402

POWERS = [(j, k) for j in range(CONFORMAL_DEGREE + 1) for k in range(CONFORMAL_DEGREE + 1)
          if 1 <= j + k <= CONFORMAL_DEGREE]  # fmt: skip


def monomials(t: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.stack([t**j * x**k for j, k in POWERS], axis=-1)


def wave_monomials(t: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(d_t^2 - d_x^2) of each monomial: R = 2 exp(-2 phi) (phi_tt - phi_xx)."""
    columns = []
    for j, k in POWERS:
        tt = j * (j - 1) * t ** max(j - 2, 0) * x**k if j >= 2 else np.zeros_like(t)
        xx = k * (k - 1) * x ** max(k - 2, 0) * t**j if k >= 2 else np.zeros_like(t)
        columns.append(tt - xx)
    return np.stack(columns, axis=-1)


def diamond_nodes(count: int = 48) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre monomials and weights over the diamond (light-cone coordinates)."""
    z, w = np.polynomial.legendre.leggauss(count)
    a, b = np.meshgrid((z + 1) / 2, (z + 1) / 2, indexing="ij")
    t, x = (a + b - 1).ravel(), (a - b).ravel()
    return monomials(t, x), 2.0 * np.outer(w, w).ravel() / 4


def coordinate_mode(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, object]:
    """The posterior's mode and Hessian given the points, and its log density."""
    nodes, weights = diamond_nodes()
    n, prior = len(pos), 1.0 / CONFORMAL_AMPLITUDE**2
    total = monomials(pos[:, 0], pos[:, 1]).sum(axis=0)

    def log_post(c: np.ndarray) -> np.ndarray:  # c: [S, 9]
        log_z = np.log(np.exp(2 * c @ nodes.T) @ weights)
        return 2 * c @ total - n * log_z - 0.5 * prior * (c * c).sum(-1)

    c = np.zeros(len(POWERS))
    for _ in range(50):  # Newton: the log posterior is concave
        p = weights * np.exp(2 * nodes @ c)
        p /= p.sum()
        mean = p @ nodes
        cov = (nodes * p[:, None]).T @ nodes - np.outer(mean, mean)
        grad = 2 * total - 2 * n * mean - prior * c
        hess = -4 * n * cov - prior * np.eye(len(c))
        step = np.linalg.solve(hess, grad)
        c = c - step
        if np.abs(step).max() < 1e-10:
            break
    return c, hess, log_post


def laplace_draws(mode: np.ndarray, hess: np.ndarray, rng: np.random.Generator, samples: int):
    """Draws from the Laplace approximation, its covariance widened by 1.5, and the log of
    their proposal density (up to a constant): for importance sampling."""
    proposal = np.linalg.inv(-hess) * 1.5
    draws = rng.multivariate_normal(mode, proposal, size=samples)
    diff = draws - mode
    return draws, -0.5 * np.einsum("si,ij,sj->s", diff, np.linalg.inv(proposal), diff)


def weights(log_w: np.ndarray) -> np.ndarray:
    w = np.exp(log_w - log_w.max())
    return w / w.sum()


def posterior_mean_ricci(pos: np.ndarray, rng: np.random.Generator, samples: int):
    """The posterior mean of R at each point, given the points; and the effective sample size."""
    mode, hess, log_post = coordinate_mode(pos)
    draws, log_q = laplace_draws(mode, hess, rng, samples)
    w = weights(log_post(draws) - log_q)
    phi = draws @ monomials(pos[:, 0], pos[:, 1]).T  # [S, N]
    wave = draws @ wave_monomials(pos[:, 0], pos[:, 1]).T
    ricci = 2 * np.exp(-2 * phi) * wave
    return w @ ricci, 1.0 / np.sum(w * w)


CELLS = 128  # cells of each light-cone marginal, two Gauss-Legendre nodes apiece
_ACROSS = np.polynomial.legendre.leggauss(20)
ACROSS, ACROSS_W = (_ACROSS[0] + 1) / 2, _ACROSS[1] / 2  # nodes and weights on [0, 1]
EDGES = np.arange(CELLS + 1) / CELLS
_PAIR = np.polynomial.legendre.leggauss(2)
ALONG = (EDGES[:-1, None] + (_PAIR[0] + 1) / (2 * CELLS)).ravel()
ALONG_W = np.tile(_PAIR[1] / (2 * CELLS), CELLS)


def log_omega(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ln Omega of each draw c [S, 9] at light-cone coordinates a, b in [0, 1] ([S, ...])."""
    return np.einsum("s...i,si->s...", monomials(a + b - 1, a - b), c)


def _grid(first: bool) -> np.ndarray:
    """The monomials at the marginal's nodes [M, K, 9]: ALONG a (first) or b, ACROSS the other."""
    along, across = np.meshgrid(ALONG, ACROSS, indexing="ij")
    a, b = (along, across) if first else (across, along)
    return monomials(a + b - 1, a - b)


GRID = {first: _grid(first) for first in (True, False)}  # the same for every draw: made once


def _cdf(c: np.ndarray, first: bool) -> tuple[np.ndarray, np.ndarray]:
    """Each draw's [S, 9] marginal density, integrated across the diamond, at ALONG (along a if
    ``first``, else b), and its unnormalised distribution function at EDGES."""
    density = np.exp(2 * np.einsum("mki,si->smk", GRID[first], c)) @ ACROSS_W
    cells = (density * ALONG_W).reshape(len(c), CELLS, 2).sum(-1)
    return density, np.concatenate([np.zeros((len(c), 1)), np.cumsum(cells, axis=1)], axis=1)


def quantiles(c: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Each point's quantiles in spacetime c's [9] two light-cone marginals, as (t, x) the way
    rank_coordinates gives ranks: the map that placed() inverts, through the same tables."""
    a, b = (1 + pos[:, 0] + pos[:, 1]) / 2, (1 + pos[:, 0] - pos[:, 1]) / 2
    p, q = (np.interp(s, EDGES, f[0]) / f[0, -1]
            for s, f in ((a, _cdf(c[None], True)[1]), (b, _cdf(c[None], False)[1])))  # fmt: skip
    return np.stack([p + q - 1, p - q], axis=1)


def placed(c: np.ndarray, p: np.ndarray, q: np.ndarray):
    """Where each draw c [S, 9] puts the elements of light-cone quantiles p, q (its inverse
    marginal distributions), and the log of its copula density there: the density of the ranks.
    """
    out = []
    for first, quantile in ((True, p), (False, q)):
        density, cdf = _cdf(c, first)
        at = np.stack([np.interp(quantile * f[-1], f, EDGES) for f in cdf])
        there = np.stack([np.interp(s, ALONG, d) for s, d in zip(at, density, strict=True)])
        out.append((at, there, cdf[:, -1]))
    (a, f, total), (b, g, _) = out
    phi = log_omega(c, a, b)
    return a, b, phi, 2 * phi + np.log(total)[:, None] - np.log(f) - np.log(g)


def order_posterior_ricci(coords: np.ndarray, rng: np.random.Generator, samples: int):
    """The posterior mean of R at each element given its light-cone quantiles (coords as
    quantiles() gives them), or its ranks in their place (as rank_coordinates gives them), and
    the effective sample size.

    Given the coefficients c, the elements' quantiles are independent with the copula density
    of Omega**2: the density of the points after each light-cone coordinate is mapped through
    its own marginal distribution, which no relabelling of u or v alone can change. Given the
    quantiles, that is the likelihood; given the ranks, it is the rank (or pseudo-) likelihood
    of copula models. Each draw of c places the elements by its inverse marginals and gives R
    there. The same Laplace approximation and importance sampling as the coordinates'
    posterior, the mode found by BFGS and the Hessian by finite differences."""
    p, q = (1 + coords[:, 0] + coords[:, 1]) / 2, (1 + coords[:, 0] - coords[:, 1]) / 2
    prior, dim = 1.0 / CONFORMAL_AMPLITUDE**2, len(POWERS)

    def log_post(c: np.ndarray) -> np.ndarray:
        c = np.atleast_2d(c)
        return placed(c, p, q)[3].sum(-1) - 0.5 * prior * (c * c).sum(-1)

    eye = np.eye(dim)

    def gradient(c: np.ndarray, h: float = 1e-4) -> np.ndarray:  # central differences, batched
        return -(log_post(c + h * eye) - log_post(c - h * eye)) / (2 * h)

    start = coordinate_mode(coords)[0]  # the ranks taken for coordinates: near
    mode = minimize(lambda c: -log_post(c)[0], start, method="BFGS", jac=gradient).x
    h = 1e-2  # wider: the likelihood's interpolation is smooth at this scale, not below
    pairs = [(i, j) for i in range(dim) for j in range(i, dim)]
    steps = np.array([[si * eye[i] + sj * eye[j] for si, sj in ((1, 1), (1, -1), (-1, 1), (-1, -1))]
                      for i, j in pairs])  # fmt: skip
    values = log_post((mode + h * steps).reshape(-1, dim)).reshape(len(pairs), 4)
    hess = np.zeros((dim, dim))
    for (i, j), (pp, pm, mp, mm) in zip(pairs, values, strict=True):
        hess[i, j] = hess[j, i] = (pp - pm - mp + mm) / (4 * h * h)
    values, vectors = np.linalg.eigh(-hess)
    if values.min() <= 0:  # the likelihood is not concave everywhere: lean on the prior there
        hess = -(vectors * np.maximum(values, prior)) @ vectors.T
    draws, log_q = laplace_draws(mode, hess, rng, samples)
    a, b, phi, log_copula = placed(draws, p, q)
    w = weights(log_copula.sum(-1) - 0.5 * prior * (draws * draws).sum(-1) - log_q)
    t, x = a + b - 1, a - b
    wave = np.einsum("si,sni->sn", draws, wave_monomials(t, x))
    return w @ (2 * np.exp(-2 * phi) * wave), 1.0 / np.sum(w * w)


def rank_coordinates(graph) -> np.ndarray:
    """(t, x) from each element's light-cone ranks, found from the graph's links alone."""
    n = graph.num_nodes
    forward = graph.edge_index[:, graph.edge_index[0] < graph.edge_index[1]]  # time-ordered
    links = torch.zeros(n, n, dtype=torch.bool)
    links[forward[0], forward[1]] = True
    ranks = light_cone_ranks(transitive_closure(links), links)
    u, v = ((ranks.double() + 0.5) / n).T.numpy()
    return np.stack([u + v - 1, u - v], axis=1)


def true_spacetime(data, index: int, graph) -> np.ndarray:
    """The coefficients [9] of graph ``index``'s ln Omega, drawn again as data/sources/kinds.py drew
    them (graph i depends only on the seed and i), and checked against the graph's own R."""
    rng = graph_parameters(index, data.num_points, data.dimensions, data.seed)[0]
    seed = int(rng.integers(2**62))  # kinds.draw's first draw: physics.conformal_sprinkling's
    factor = PolynomialFactor.random(np.random.default_rng(seed), CONFORMAL_AMPLITUDE,
                                     CONFORMAL_DEGREE)  # fmt: skip
    ricci = graph.ricci.double().numpy()
    if not np.allclose(factor.ricci(graph.pos.double().numpy()), ricci, rtol=1e-5, atol=1e-5):
        raise RuntimeError(f"graph {index}: its spacetime is not the one drawn for it again")
    return np.array([factor.coefficients[j, k] for j, k in POWERS])


def r2_with_error(truth, guess, rng) -> tuple[float, float]:
    """R^2 over all the elements, and its bootstrap standard error over the graphs."""
    from sklearn.metrics import r2_score

    spread = np.std([r2_score(np.concatenate([truth[i] for i in pick]),
                              np.concatenate([guess[i] for i in pick]))
                     for pick in rng.integers(len(truth), size=(200, len(truth)))])  # fmt: skip
    return r2_score(np.concatenate(truth), np.concatenate(guess)), spread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="*", type=int, default=list(RICCI_CURVE))
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--order-samples", type=int, default=1000)
    args = parser.parse_args()
    print("| elements | test elements | R^2 of the posterior mean given the coordinates "
          "(a bound) | a model of the order: the same posterior, light-cone ranks for "
          "coordinates | a model of the order: the posterior given the ranks' likelihood | "
          "R^2 of the posterior mean given each element's light-cone quantiles (the bound) | "
          "smallest effective sample of a graph |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for size in args.sizes:
        start = time.perf_counter()
        overrides = [f"data.num_points=[{size},{size}]", f"data.num_graphs={RICCI_CURVE[size]}"]
        config = qg.load_config(ROOT / "configs" / RICCI_CONFIG[size], overrides)
        dataset = dataset_from_config(config.data, progress=False)
        _, _, test = qg.split_dataset(dataset, config.data.split, config.data.seed)
        rng = np.random.default_rng(0)
        truth, guesses, effective = [], ([], [], [], []), ([], [], [])
        for i, (index, g) in enumerate(zip(test.indices, test, strict=True)):
            pos = g.pos.double().numpy()
            mean, ess = posterior_mean_ricci(pos, rng, args.samples)
            ranks = rank_coordinates(g)
            likelihood, order_ess = order_posterior_ricci(ranks, rng, args.order_samples)
            quantile = quantiles(true_spacetime(config.data, index, g), pos)
            oracle, oracle_ess = order_posterior_ricci(quantile, rng, args.order_samples)
            truth.append(g.ricci.numpy())
            same = posterior_mean_ricci(ranks, rng, args.samples)[0]
            for guess, value in zip(guesses, (mean, same, likelihood, oracle), strict=True):
                guess.append(value)
            for kept, value in zip(effective, (ess, order_ess, oracle_ess), strict=True):
                kept.append(value)
            if (i + 1) % 20 == 0:
                took = time.perf_counter() - start
                print(f"{size}: {i + 1} of {len(test)} graphs, {took:.0f} s", file=sys.stderr)
        scores = [r2_with_error(truth, guess, rng) for guess in guesses]
        cells = [f"{r2:.3f} (standard error {se:.3f})" for r2, se in scores]
        cells[3] = f"**{scores[3][0]:.3f}** (standard error {scores[3][1]:.3f})"  # the bound
        print(f"| {size} | {sum(map(len, truth))} | {' | '.join(cells)} | "
              f"{min(effective[0]):.0f} of {args.samples}; ranks' likelihood "
              f"{min(effective[1]):.0f}, quantiles' {min(effective[2]):.0f} of "
              f"{args.order_samples} |", flush=True)  # fmt: skip
        print(f"{size}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
