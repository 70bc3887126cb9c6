"""An upper bound on the test accuracy of any model on the curvature kind, at each size.

python studies/curvature_bound.py [--h H] [--samples S] [--sets M] [--sizes N ...]

A causal set is its order, and the order of a sprinkling does not change under a conformal
map of the diamond onto itself (`motions.conformal_motion`). So the order of a flat
sprinkling has the same distribution as the order of its image under such a motion, whose
points crowd towards a tip or a side much as de Sitter's and anti-de Sitter's do. Whatever
tells a curved sprinkling's order from a flat one's tells its points from the moved flat
points too, so no model of the order does better than the best test on N points drawn from
those two densities: two classes are told apart with accuracy at most (1 + TV) / 2, TV the
total variation of the two distributions of N points, and the three classes (flat the middle
one) with at most (1 + TV_dS + TV_AdS) / 3. TV is estimated by Monte Carlo of its definition,
E[max(0, 1 - exp(-L))] over sets of N curved points, L their log-likelihood ratio (both
densities exact, the curved one normalised by quadrature), and taken 3 standard errors high:
a ceiling no model passes. A model's distance to the bound is measured from the estimate
without that margin, which the table gives beside it with its standard error.
The squared Hellinger distance H^2 of one point's densities gives a looser bound with no sets
to draw, TV <= sqrt(1 - (1 - H^2)^(2N)); the table prints both.

Flat against curved directly, the densities are far apart; after the motion that imitates each
curved one best (found by Nelder-Mead), only the second-order part of the curvature is left,
and the bound is what the table prints. Compare it with the best baseline of studies/baselines.py
at the same size.

--invariant N: whether the bound gives anything away by fixing the motion. The order is a
function of what no shift and no boost changes, the n points' orbit under that (abelian) group,
whose density under each class is, up to a factor the classes share, the class's likelihood
integrated over the group (Wijsman's representation). The exact three-class Bayes accuracy of
that orbit is estimated at N points (each class's likelihood integrated on a grid of shifts and
boosts around its peak), beside the same accuracy with the motions fixed, on the same sets.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from motions import conformal_motion, motion_density  # noqa: E402

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.physics import proper_height, uniform_diamond  # noqa: E402
from QuantumGravPy.physics.curved import log_conformal_factor  # noqa: E402

SIZES = (32, 48, 64, 96, 128, 160, 192, 224, 256, 512, 1024, 2048)
START = {"de_sitter": (1.0, 0.0), "anti_de_sitter": (0.0, -1.0)}  # first-order motion, times h


def hellinger(points: np.ndarray, curved: np.ndarray, motion: tuple[float, float]):
    """Squared Hellinger distance of the curved density and the moved flat one, with its
    standard error; both densities are given relative to the uniform one on ``points``."""
    moved = motion_density(points, *motion)
    terms = 0.5 * (np.sqrt(curved / curved.mean()) - np.sqrt(moved / moved.mean())) ** 2
    return terms.mean(), terms.std() / math.sqrt(len(terms))


def best_motion(spacetime: str, h: float, points: np.ndarray) -> np.ndarray:
    """The (shift, boost) whose image of a flat sprinkling is nearest the curved one (least
    squared Hellinger distance over uniform ``points``, by Nelder-Mead from first order in h)."""
    curved = np.exp(points.shape[1] * log_conformal_factor(spacetime, h)(points))
    return minimize(
        lambda m: hellinger(points, curved, tuple(m))[0],
        np.array(START[spacetime]) * h,
        method="Nelder-Mead",
        options={"xatol": 1e-4, "fatol": 1e-9},
    ).x


def accuracy_bound(distance: float, n: int) -> float:
    """The most a test on n points can tell two densities at squared Hellinger ``distance``,
    as the total variation of the n-point distributions."""
    return math.sqrt(1.0 - (1.0 - distance) ** (2 * n))


def three_class_bounds(ds: list, ads: list) -> tuple[float, float, float, float, float]:
    """The bounds over a spread of sizes from each curved class's total variation to flat
    (``(value, standard error)`` at each size, the sets of every size and class independent;
    a spread's bound is the mean of its sizes'): the two classes' and the three's ceilings
    (each total variation 3 standard errors high), and the three's best estimate with its
    standard error."""
    ceiling = [np.mean([min(1.0, v + 3 * e) for v, e in tvs]) for tvs in (ds, ads)]
    estimate = sum(np.mean([v for v, _ in tvs]) for tvs in (ds, ads))
    error = math.sqrt(sum(e**2 for tvs in (ds, ads) for _, e in tvs)) / len(ds)
    return ((1 + ceiling[0]) / 2, (1 + ceiling[1]) / 2, (1 + sum(ceiling)) / 3,
            (1 + estimate) / 3, error / 3)  # fmt: skip


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


@functools.cache  # a quadrature each time otherwise, most of a small total variation's cost
def log_norm(spacetime: str, d: int, h: float) -> float:
    """ln of the mean of Omega**d over the uniform diamond: the curved density relative to the
    uniform one is Omega**d over it (de Sitter's Omega varies with time, anti-de Sitter's with
    x_1, so one coordinate's marginal is integrated)."""
    log_omega = log_conformal_factor(spacetime, h)
    axis = 0 if spacetime == "de_sitter" else 1
    return math.log(marginal_mean(lambda c: np.exp(d * log_omega(_on_axis(c, d, axis))), d, axis))


def total_variation(n: int, sets: int, d: int, spacetime: str, h: float, motion, rng):
    """The total variation between n points of the curved density and n moved flat points,
    by Monte Carlo of its definition: ``E_curved[max(0, 1 - exp(-L))]``, L the n points'
    log-likelihood ratio (both densities exact). Its value and standard error."""
    log_omega = log_conformal_factor(spacetime, h)
    norm = log_norm(spacetime, d, h)
    terms = []
    block = max(1, 1_000_000 // n)  # sets at a time: a million points, under 300 MB at once
    for start in range(0, sets, block):
        count = min(block, sets - start)
        points = curved_points(n * count, d, log_omega, rng)
        ratio = d * log_omega(points) - norm - np.log(motion_density(points, *motion))
        terms.append(np.maximum(0.0, 1.0 - np.exp(-ratio.reshape(count, n).sum(axis=1))))
    terms = np.concatenate(terms)
    return terms.mean(), terms.std() / math.sqrt(sets)


def _on_axis(c: np.ndarray, d: int, axis: int) -> np.ndarray:
    points = np.zeros((len(c), d))
    points[:, axis] = c
    return points


def pulled_back(points: np.ndarray, shifts: np.ndarray, boosts: np.ndarray):
    """The points moved by every (shift, boost) of a grid: their time, radius and x_1, and the
    log of the motion's volume change at each point (shapes [S, B, n]); the densities of the
    classes pulled back by a motion are their densities there times the volume change.
    :func:`conformal_motion` for a grid of motions at once."""
    t, space = points[:, 0], points[:, 1:]
    r = np.linalg.norm(space, axis=1)
    a, b = np.arctanh(t - r), np.arctanh(t + r)
    tau, rho, cos1 = a + b, b - a, space[:, 0] / r
    log_factor = 0.5 * np.log((1.0 - (t - r) ** 2) * (1.0 - (t + r) ** 2))
    sinh_b, cosh_b = np.sinh(boosts)[:, None], np.cosh(boosts)[:, None]
    y1 = sinh_b * np.cosh(rho) + cosh_b * np.sinh(rho) * cos1  # [B, n]
    moved_rho = np.arccosh(cosh_b * np.cosh(rho) + sinh_b * np.sinh(rho) * cos1)
    moved_cos1 = y1 / np.sinh(moved_rho)
    moved_tau = tau + shifts[:, None, None]
    u, v = np.tanh((moved_tau - moved_rho) / 2.0), np.tanh((moved_tau + moved_rho) / 2.0)
    radius = (v - u) / 2.0
    log_jacobian = points.shape[1] * (0.5 * np.log((1.0 - u**2) * (1.0 - v**2)) - log_factor)
    return (u + v) / 2.0, radius, moved_cos1 * radius, log_jacobian


def orbit_log_likelihoods(points: np.ndarray, log_densities) -> np.ndarray:
    """Each class's log-likelihood of the points integrated over all shifts and boosts
    (``log_densities(t, r, x_1)``: [classes, ...], relative to the uniform density): a coarse
    grid finds each class's peak, a fine one around it integrates (its edges checked)."""
    n = len(points)
    coarse = np.linspace(-3.0, 3.0, 41)
    t, r, x1, log_j = pulled_back(points, coarse, coarse)
    peaks = (log_densities(t, r, x1) + log_j).sum(-1)
    half, steps = min(1.5, 8.0 / math.sqrt(n)), 41
    out = []
    for k, peak in enumerate(peaks):
        i, j = np.unravel_index(np.argmax(peak), peak.shape)
        shifts = coarse[i] + np.linspace(-half, half, steps)
        boosts = coarse[j] + np.linspace(-half, half, steps)
        t, r, x1, log_j = pulled_back(points, shifts, boosts)
        grid = (log_densities(t, r, x1)[k] + log_j).sum(-1)
        top = grid.max()
        edge = max(grid[[0, -1]].max(), grid[:, [0, -1]].max()) - top
        if edge > math.log(1e-6):
            raise RuntimeError(f"class {k}'s likelihood is not inside its grid (edge {edge:.1f})")
        step = 2.0 * half / (steps - 1)
        out.append(top + math.log(np.exp(grid - top).sum() * step**2))
    return np.array(out)


def class_log_densities(d: int, h: float):
    """The three classes' log densities at (t, r, x_1), relative to the uniform one."""
    curved = ("de_sitter", "anti_de_sitter")
    factors = [log_conformal_factor(s, h) for s in curved]
    norms = [log_norm(s, d, h) for s in curved]

    def log_densities(t, r, x1):
        flat = np.stack([t.ravel(), x1.ravel()], axis=1)  # what the factors read
        curved = [d * f(flat).reshape(t.shape) - c for f, c in zip(factors, norms, strict=True)]
        return np.stack([np.zeros_like(t), *curved])

    return log_densities


def invariant_accuracy(n: int, sets: int, d: int, h: float, motions: dict, rng) -> dict:
    """The three classes' Bayes accuracy on n points: with each curved class compared through
    its fixed best motion (``fixed``), and of the points' orbit under shifts and boosts
    (``orbit``), on the same sets; per class, as fractions of ``sets``."""
    log_densities = class_log_densities(d, h)
    spacetimes = (None, "de_sitter", "anti_de_sitter")
    right = {"fixed": np.zeros(3), "orbit": np.zeros(3)}
    for _ in range(sets):
        for c, spacetime in enumerate(spacetimes):
            if spacetime is None:
                x = uniform_diamond(n, d, rng)
            else:
                x = curved_points(n, d, log_conformal_factor(spacetime, h), rng)
            orbit = orbit_log_likelihoods(x, log_densities)
            right["orbit"][c] += np.argmax(orbit) == c
            # fixed: flat as it is, each curved class through its best motion, in the frame
            # where the points of class c were moved back by theirs
            y = x if c == 0 else conformal_motion(x, *(-m for m in motions[spacetime]))
            fixed = [0.0]
            for k in (1, 2):
                t, r, x1, log_j = pulled_back(y, *(np.array([m]) for m in motions[spacetimes[k]]))
                fixed.append(float((log_densities(t, r, x1)[k] + log_j).sum()))
            right["fixed"][c] += np.argmax(fixed) == c
    return {key: value / sets for key, value in right.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    config = qg.load_config(ROOT / "configs" / "curvature.yaml")
    parser.add_argument("--h", type=float, default=config.data.h, help="curvature (the config's)")
    parser.add_argument("--samples", type=int, default=2_000_000, help="Monte Carlo points")
    parser.add_argument("--sets", type=int, default=16000, help="Monte Carlo sets of n points")
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    parser.add_argument(
        "--invariant", type=int, nargs="*", default=[256], metavar="N",
        help="sizes at which the Bayes accuracy of the orbit is estimated (none: skip it)",
    )  # fmt: skip
    parser.add_argument("--invariant-sets", type=int, default=1500, help="sets of each class")
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
        curved = np.exp(d * log_omega(points))
        best = best_motion(spacetime, args.h, search)
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
        "errors high: a ceiling no model passes), the same without the margin (the best estimate "
        "of that bound, with its standard error: what a model's distance to the bound is "
        "measured from), and, looser, from H^2 alone:\n"
    )
    print("| elements | flat vs de Sitter | flat vs anti-de Sitter | three classes | "
          "three classes, best estimate | three classes, from H^2 |")  # fmt: skip
    print("|---|---|---|---|---|---|")

    def tv(spacetime: str, n: int) -> tuple[float, float]:
        return total_variation(n, args.sets, d, spacetime, args.h, motions[spacetime], rng)

    def row(sizes) -> tuple[float, ...]:
        ds, ads = ([tv(s, n) for n in sizes] for s in ("de_sitter", "anti_de_sitter"))
        loose = [np.mean([accuracy_bound(distances[s], n) for n in sizes]) for s in distances]
        return (*three_class_bounds(ds, ads), (1 + sum(loose)) / 3)

    low, high = config.data.num_points
    labels = [*(str(n) for n in args.sizes), f"{low}-{high} (the config, uniform sizes)"]
    config_sizes = range(low, high + 1, max(1, (high - low) // 8))
    for label, sizes in zip(labels, [*([n] for n in args.sizes), config_sizes], strict=True):
        ds, ads, three, estimate, error, loose = row(sizes)
        print(
            f"| {label} | {ds:.3f} | {ads:.3f} | **{three:.3f}** | {estimate:.3f} "
            f"(standard error {error:.3f}) | {loose:.3f} |",
            flush=True,
        )
    if not args.invariant:
        return
    print(
        "\nDoes fixing the motion give anything away? The order is a function of what no shift "
        "and no boost changes: the orbit of the n points under those motions (an abelian group). "
        "The density of the orbit under each class is, up to a factor the classes share, the "
        "class's likelihood of the points integrated over the group (Wijsman's representation; "
        "here on a grid of shifts and boosts around each class's peak). The three classes' exact "
        "Bayes accuracy, on the same sets of n points of each class "
        f"({args.invariant_sets:,} each), with the motions fixed and of the orbit:\n"
    )
    print("| elements | motions fixed | the orbit | orbit - fixed |")
    print("|---|---|---|---|")
    for n in args.invariant:
        right = invariant_accuracy(n, args.invariant_sets, d, args.h, motions, rng)
        fixed, orbit = right["fixed"].mean(), right["orbit"].mean()
        # each class's fraction is binomial over its sets; the mean of three averages them
        error = math.sqrt(sum(p * (1 - p) for p in right["orbit"]) / args.invariant_sets) / 3
        print(
            f"| {n} | {fixed:.3f} | {orbit:.3f} (standard error {error:.3f}) | "
            f"{orbit - fixed:+.3f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
