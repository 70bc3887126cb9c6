"""An upper bound on the test accuracy of any model on the curvature kind, at each size.

python bench/curvature_bound.py [--h H] [--samples S] [--sets M] [--sizes N ...]

A causal set is its order, and the order of a sprinkling does not change under a conformal
map of the diamond onto itself (`physics.curved.conformal_motion`). So the order of a flat
sprinkling has the same distribution as the order of its image under such a motion, whose
points crowd towards a tip or a side much as de Sitter's and anti-de Sitter's do. Whatever
tells a curved sprinkling's order from a flat one's tells its points from the moved flat
points too, so no model of the order does better than the best test on N points drawn from
those two densities: two classes are told apart with accuracy at most (1 + TV) / 2, TV the
total variation of the two distributions of N points, and the three classes (flat the middle
one) with at most (1 + TV_dS + TV_AdS) / 3. TV is estimated by Monte Carlo of its definition,
E[max(0, 1 - exp(-L))] over sets of N curved points, L their log-likelihood ratio (both
densities exact, the curved one normalised by quadrature), and taken 3 standard errors high.
The squared Hellinger distance H^2 of one point's densities gives a looser bound with no sets
to draw, TV <= sqrt(1 - (1 - H^2)^(2N)); the table prints both.

Flat against curved directly, the densities are far apart; after the motion that imitates each
curved one best (found by Nelder-Mead), only the second-order part of the curvature is left,
and the bound is what the table prints. Compare it with the best baseline of bench/baselines.py
at the same size.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.physics import proper_height, uniform_diamond  # noqa: E402
from QuantumGravPy.physics.curved import log_conformal_factor, motion_density  # noqa: E402

SIZES = (32, 48, 64, 96, 128, 160, 192, 224, 256, 512, 1024, 2048)
START = {"de_sitter": (1.0, 0.0), "anti_de_sitter": (0.0, -1.0)}  # first-order motion, times h


def hellinger(points: np.ndarray, curved: np.ndarray, motion: tuple[float, float]):
    """Squared Hellinger distance of the curved density and the moved flat one, with its
    standard error; both densities are given relative to the uniform one on ``points``."""
    moved = motion_density(points, *motion)
    terms = 0.5 * (np.sqrt(curved / curved.mean()) - np.sqrt(moved / moved.mean())) ** 2
    return terms.mean(), terms.std() / math.sqrt(len(terms))


def accuracy_bound(distance: float, n: int) -> float:
    """The most a test on n points can tell two densities at squared Hellinger ``distance``,
    as the total variation of the n-point distributions."""
    return math.sqrt(1.0 - (1.0 - distance) ** (2 * n))


def marginal_mean(f, d: int, axis: int, nodes: int = 400) -> float:
    """The mean of ``f(coordinate)`` over the uniform diamond, for a function of time
    (``axis`` 0) or of x_1 (``axis`` 1) alone: a quadrature against that coordinate's marginal
    density, the volume of the diamond's slice (exact, where a Monte Carlo normaliser would
    shift every point's log-likelihood ratio by its error, and n points' by n times it)."""
    z, w = np.polynomial.legendre.leggauss(nodes)
    if axis == 0 or d == 2:  # slices |x| <= 1 - |t|: a (d-1)-ball, or in 2D both alike
        slice_ = (1.0 - np.abs(z)) ** (d - 1)
    else:  # |t| <= 1 - sqrt(x_1^2 + rho^2), rho over the other d - 2 space directions
        rho_z = (z + 1) / 2
        radius = np.sqrt(1.0 - z**2)[:, None]
        rho = radius * rho_z[None]
        thickness = 1.0 - np.sqrt(z[:, None] ** 2 + rho**2)
        slice_ = (radius * rho ** (d - 3) * thickness * w[None] / 2).sum(axis=1)
    return float((w * slice_ * f(z)).sum() / (w * slice_).sum())


def curved_points(n: int, d: int, log_omega, rng: np.random.Generator) -> np.ndarray:
    """n independent points of the curved density (exact rejection: ln Omega <= 0)."""
    out, have = [], 0
    while have < n:
        points = uniform_diamond(2 * (n - have) + 1000, d, rng)
        keep = points[rng.random(len(points)) < np.exp(d * log_omega(points))]
        out.append(keep)
        have += len(keep)
    return np.concatenate(out)[:n]


def total_variation(n: int, sets: int, d: int, spacetime: str, h: float, motion, rng):
    """The total variation between n points of the curved density and n moved flat points,
    by Monte Carlo of its definition: ``E_curved[max(0, 1 - exp(-L))]``, L the n points'
    log-likelihood ratio (both densities exact). Its value and standard error."""
    log_omega = log_conformal_factor(spacetime, h)
    axis = 0 if spacetime == "de_sitter" else 1
    norm = marginal_mean(lambda c: np.exp(d * log_omega(_on_axis(c, d, axis))), d, axis)
    points = curved_points(n * sets, d, log_omega, rng)
    ratio = d * log_omega(points) - math.log(norm) - np.log(motion_density(points, *motion))
    terms = np.maximum(0.0, 1.0 - np.exp(-ratio.reshape(sets, n).sum(axis=1)))
    return terms.mean(), terms.std() / math.sqrt(sets)


def _on_axis(c: np.ndarray, d: int, axis: int) -> np.ndarray:
    points = np.zeros((len(c), d))
    points[:, axis] = c
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    config = qg.load_config(ROOT / "configs" / "curvature.yaml")
    parser.add_argument("--h", type=float, default=config.data.h, help="curvature (the config's)")
    parser.add_argument("--samples", type=int, default=2_000_000, help="Monte Carlo points")
    parser.add_argument("--sets", type=int, default=4000, help="Monte Carlo sets of n points")
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    args = parser.parse_args()
    d = config.data.dimensions[0]
    rng = np.random.default_rng(0)
    points = uniform_diamond(args.samples, d, rng)
    search = points[: args.samples // 10]
    print(
        f"{d}D diamond, h = {args.h} (de Sitter height {proper_height(args.h):.2f} radii); "
        f"{args.samples:,} Monte Carlo points.\n"
    )
    print("| spacetime | H^2 to flat | best motion of flat (shift, boost) | H^2 after it |")
    print("|---|---|---|---|")
    distances, motions = {}, {}
    for spacetime in ("de_sitter", "anti_de_sitter"):
        log_omega = log_conformal_factor(spacetime, args.h)
        curved, curved_search = (np.exp(d * log_omega(p)) for p in (points, search))
        best = minimize(
            lambda m, curved_search=curved_search: hellinger(search, curved_search, tuple(m))[0],
            np.array(START[spacetime]) * args.h,
            method="Nelder-Mead",
            options={"xatol": 1e-4, "fatol": 1e-9},
        ).x
        direct, _ = hellinger(points, curved, (0.0, 0.0))
        after, error = hellinger(points, curved, tuple(best))
        distances[spacetime] = after + 3 * error
        motions[spacetime] = tuple(best)
        print(
            f"| {spacetime} | {direct:.4f} | ({best[0]:+.3f}, {best[1]:+.3f}) | "
            f"{after:.5f} (standard error {error:.0e}) |"
        )
    print(
        "\nThe most any model of the order can reach: from the exact total variation of the n "
        f"points (Monte Carlo of its definition over {args.sets:,} sets of n, taken 3 standard "
        "errors high), and, looser, from H^2 alone:\n"
    )
    print("| elements | flat vs de Sitter | flat vs anti-de Sitter | three classes | "
          "three classes, from H^2 |")  # fmt: skip
    print("|---|---|---|---|---|")

    def tv(spacetime: str, n: int) -> float:
        value, error = total_variation(n, args.sets, d, spacetime, args.h, motions[spacetime],
                                       rng)  # fmt: skip
        return min(1.0, value + 3 * error)

    def row(sizes) -> tuple[float, float, float, float]:
        ds = np.mean([tv("de_sitter", n) for n in sizes])
        ads = np.mean([tv("anti_de_sitter", n) for n in sizes])
        loose = [np.mean([accuracy_bound(distances[s], n) for n in sizes]) for s in distances]
        return (1 + ds) / 2, (1 + ads) / 2, (1 + ds + ads) / 3, (1 + sum(loose)) / 3

    low, high = config.data.num_points
    labels = [*(str(n) for n in args.sizes), f"{low}-{high} (the config, uniform sizes)"]
    config_sizes = range(low, high + 1, max(1, (high - low) // 8))
    for label, sizes in zip(labels, [*([n] for n in args.sizes), config_sizes], strict=True):
        ds, ads, three, loose = row(sizes)
        print(f"| {label} | {ds:.3f} | {ads:.3f} | **{three:.3f}** | {loose:.3f} |", flush=True)


if __name__ == "__main__":
    main()
