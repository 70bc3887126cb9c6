"""The most any model of the causal order can reach on the ricci kind: R^2 of the best estimate
of each element's Ricci scalar, even given the elements' coordinates.

python bench/ricci_bound.py [--sizes N ...] [--samples S]

A causal set is its order, a function of its elements' coordinates, so no model of the order
estimates a quantity better (in mean squared error) than the posterior mean given the
coordinates. The ricci kind's spacetimes are known in form: ln Omega a cubic polynomial in t and
x with 9 normal coefficients of standard deviation 0.3 (``data/kinds.py``), and the N points are
independent with density proportional to Omega**2 on the diamond. So the posterior of the
coefficients given the points is exact up to a normalisation; it is found by Newton's method
and a Laplace approximation, then sampled by importance sampling from that Gaussian (covariance
widened by 1.5), and the posterior mean of R at every element is the weighted mean of the
sampled spacetimes' R there. Its R^2 on the test split of the curve's data (bench/baselines.py,
the same graphs) is the bound, with its standard error over the test graphs (a bootstrap of
200 resamplings of the graphs); the effective number of samples is printed with it.

Beside it, a model of the order that follows the same recipe: each element's ranks in the two
light-cone orders, found from the order alone (physics.light_cone_ranks), taken for its
coordinates ((rank + 1/2) / N in each light-cone direction) and given to the same posterior.
It is a function of the causal set, so what it reaches, any model of the order can: the best
model of the order lies between it and the bound.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.data import dataset_from_config  # noqa: E402
from QuantumGravPy.data.kinds import CONFORMAL_AMPLITUDE, CONFORMAL_DEGREE  # noqa: E402
from QuantumGravPy.physics import light_cone_ranks, transitive_closure  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from baselines import RICCI_CONFIG, RICCI_CURVE  # noqa: E402

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


def posterior_mean_ricci(pos: np.ndarray, rng: np.random.Generator, samples: int):
    """The posterior mean of R at each point, given the points; and the effective sample size."""
    nodes, weights = diamond_nodes()
    m = monomials(pos[:, 0], pos[:, 1])
    n, prior = len(pos), 1.0 / CONFORMAL_AMPLITUDE**2
    total = m.sum(axis=0)

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
    proposal = np.linalg.inv(-hess) * 1.5
    draws = rng.multivariate_normal(c, proposal, size=samples)
    diff = draws - c
    log_q = -0.5 * np.einsum("si,ij,sj->s", diff, np.linalg.inv(proposal), diff)
    log_w = log_post(draws) - log_q
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    phi = draws @ m.T  # [S, N]
    wave = draws @ wave_monomials(pos[:, 0], pos[:, 1]).T
    ricci = 2 * np.exp(-2 * phi) * wave
    return w @ ricci, 1.0 / np.sum(w * w)


def rank_coordinates(graph) -> np.ndarray:
    """(t, x) from each element's light-cone ranks, found from the graph's links alone."""
    n = graph.num_nodes
    forward = graph.edge_index[:, graph.edge_index[0] < graph.edge_index[1]]  # time-ordered
    links = torch.zeros(n, n, dtype=torch.bool)
    links[forward[0], forward[1]] = True
    ranks = light_cone_ranks(transitive_closure(links), links)
    u, v = ((ranks.double() + 0.5) / n).T.numpy()
    return np.stack([u + v - 1, u - v], axis=1)


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
    args = parser.parse_args()
    print("| elements | test elements | R^2 of the posterior mean given the coordinates "
          "(the bound) | a model of the order: the same posterior, light-cone ranks for "
          "coordinates | smallest effective sample of a graph |")  # fmt: skip
    print("|---|---|---|---|---|")
    for size in args.sizes:
        start = time.perf_counter()
        overrides = [f"data.num_points=[{size},{size}]", f"data.num_graphs={RICCI_CURVE[size]}"]
        config = qg.load_config(ROOT / "configs" / RICCI_CONFIG[size], overrides)
        dataset = dataset_from_config(config.data, progress=False)
        _, _, test = qg.split_dataset(dataset, config.data.split, config.data.seed)
        rng = np.random.default_rng(0)
        truth, guess, ranked, effective = [], [], [], []
        for g in test:
            mean, ess = posterior_mean_ricci(g.pos.double().numpy(), rng, args.samples)
            truth.append(g.ricci.numpy())
            guess.append(mean)
            ranked.append(posterior_mean_ricci(rank_coordinates(g), rng, args.samples)[0])
            effective.append(ess)
        (r2, spread), (order, order_spread) = (
            r2_with_error(truth, guess, rng),
            r2_with_error(truth, ranked, rng),
        )
        print(f"| {size} | {sum(map(len, truth))} | **{r2:.3f}** (standard error {spread:.3f}) | "
              f"{order:.3f} (standard error {order_spread:.3f}) | "
              f"{min(effective):.0f} of {args.samples} |", flush=True)  # fmt: skip
        print(f"{size}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
