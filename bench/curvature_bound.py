"""An upper bound on the test accuracy of any model on the curvature kind, at each size.

python bench/curvature_bound.py [--h H] [--samples S]

A causal set is its order, and the order of a sprinkling does not change under a conformal
map of the diamond onto itself (`physics.curved.conformal_motion`). So the order of a flat
sprinkling has the same distribution as the order of its image under such a motion, whose
points crowd towards a tip or a side much as de Sitter's and anti-de Sitter's do. Whatever
tells a curved sprinkling's order from a flat one's tells its points from the moved flat
points too, so no model of the order does better than the best test on N points drawn from
those two densities. With H^2 the squared Hellinger distance of one point's densities
(estimated by Monte Carlo, taken 3 standard errors high), N points are at total variation at
most sqrt(1 - (1 - H^2)^(2N)); two classes are told apart with accuracy at most (1 + TV) / 2
and the three classes (flat the middle one) with at most (1 + TV_dS + TV_AdS) / 3.

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

SIZES = (32, 48, 64, 96, 128, 160, 192, 224, 256, 512)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    config = qg.load_config(ROOT / "configs" / "curvature.yaml")
    parser.add_argument("--h", type=float, default=config.data.h, help="curvature (the config's)")
    parser.add_argument("--samples", type=int, default=2_000_000, help="Monte Carlo points")
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
    distances = {}
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
        print(
            f"| {spacetime} | {direct:.4f} | ({best[0]:+.3f}, {best[1]:+.3f}) | "
            f"{after:.5f} (standard error {error:.0e}) |"
        )
    print(
        "\nThe most any model of the order can reach (the best baseline must stay below the "
        "bound minus 0.15 for a 15-point lead to be possible):\n"
    )
    print("| elements | flat vs de Sitter | flat vs anti-de Sitter | three classes |")
    print("|---|---|---|---|")

    def row(sizes) -> tuple[float, float, float]:
        ds = np.mean([accuracy_bound(distances["de_sitter"], n) for n in sizes])
        ads = np.mean([accuracy_bound(distances["anti_de_sitter"], n) for n in sizes])
        return (1 + ds) / 2, (1 + ads) / 2, (1 + ds + ads) / 3

    low, high = config.data.num_points
    labels = [*(str(n) for n in SIZES), f"{low}-{high} (the config, uniform sizes)"]
    for label, sizes in zip(labels, [*([n] for n in SIZES), range(low, high + 1)], strict=True):
        ds, ads, three = row(sizes)
        print(f"| {label} | {ds:.3f} | {ads:.3f} | **{three:.3f}** |")


if __name__ == "__main__":
    main()
