"""Conformally flat spacetimes: the density of a sprinkling and the Ricci scalar at its points.

A metric ``g = Omega(x)**2 eta`` has Minkowski's light cones, so in conformal coordinates the
causal relations of points are those of flat space; only the volume element changes, by
``Omega**d``. A sprinkling into the diamond ``|t| + |x| <= 1`` of such a spacetime is then a
uniform sprinkling kept with probability ``(Omega / Omega_max)**d`` (rejection sampling, exact).

- de Sitter (conformal time): ``Omega(t) = (1 - h) / (1 - h t)``; its radius is ``(1 - h) / h``
  in these coordinates and the proper time between the tips is ``ln((1 + h) / (1 - h))`` radii;
- anti-de Sitter (Poincare patch, the radial coordinate along x_1):
  ``Omega(x_1) = (1 - h) / (1 + h x_1)``, of the same radius;
- a random smooth factor in two dimensions, ``ln Omega`` a polynomial in t and x with normal
  coefficients, whose Ricci scalar ``R = 2 Omega**-2 (d_t**2 - d_x**2) ln Omega`` is exact.

``h = 0`` is flat space. The radius ``ell`` gives ``R = d (d - 1) / ell**2`` for de Sitter and
minus that for anti-de Sitter (signature -+++).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SPACETIMES = ("minkowski", "de_sitter", "anti_de_sitter")


def check_h(spacetime: str, h: float) -> None:
    if spacetime not in SPACETIMES:
        raise ValueError(f"spacetime must be one of {', '.join(SPACETIMES)}, got {spacetime!r}")
    if isinstance(h, bool) or not isinstance(h, (int, float)) or not 0.0 <= h < 1.0:
        raise ValueError(f"h must be a number in [0, 1), got {h!r}")
    if spacetime == "minkowski" and h != 0:
        raise ValueError("h is the curvature of de_sitter and anti_de_sitter; minkowski has h = 0")


def curvature_radius(h: float) -> float:
    """The de Sitter / anti-de Sitter radius in the diamond's conformal coordinates."""
    return math.inf if h == 0 else (1.0 - h) / h


def proper_height(h: float) -> float:
    """Proper time between the tips of the de Sitter diamond, in de Sitter radii."""
    return math.log((1.0 + h) / (1.0 - h))


def h_for_proper_height(radii: float) -> float:
    """The h whose de Sitter diamond is ``radii`` de Sitter radii high (inverse of the above)."""
    return math.tanh(radii / 2.0)


def ricci_scalar(spacetime: str, h: float, dimension: int) -> float:
    """The (constant) Ricci scalar of the spacetime, in the diamond's coordinates."""
    if h == 0 or spacetime == "minkowski":
        return 0.0
    value = dimension * (dimension - 1) / curvature_radius(h) ** 2
    return value if spacetime == "de_sitter" else -value


def log_conformal_factor(spacetime: str, h: float) -> Callable[[np.ndarray], np.ndarray]:
    """``ln Omega`` at points [N, d] (time first); at most 0 in the diamond."""
    if spacetime == "de_sitter":
        return lambda x: math.log1p(-h) - np.log1p(-h * x[:, 0])
    if spacetime == "anti_de_sitter":
        return lambda x: math.log1p(-h) - np.log1p(h * x[:, 1])
    return lambda x: np.zeros(len(x))


def de_sitter_interval_volume(h: float) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The volume of the interval between y [.., 2] and x [2] (points (t, x) of the 2D de
    Sitter diamond, y before x), in closed form: in the light-cone coordinates ``a = (1 + t +
    x) / 2``, ``b = (1 + t - x) / 2`` it is ``2 (1 - h)**2 / h**2 ln(1 + h**2 da db / (A(x)
    A(y)))`` with ``A = 1 + h - h (a + b)`` and da, db the interval's sides (flat: ``2 da
    db``)."""
    if h == 0:
        return lambda y, x: 2.0 * np.prod(_sides(y, x), axis=0)

    def volume(y: np.ndarray, x: np.ndarray) -> np.ndarray:
        (da, db), (ay, by), (ax, bx) = _sides(y, x), _light_cone(y), _light_cone(x)
        corners = (1 + h - h * (ax + bx)) * (1 + h - h * (ay + by))
        return 2.0 * (1.0 - h) ** 2 / h**2 * np.log1p(h * h * da * db / corners)

    return volume


def _light_cone(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    points = np.asarray(points)
    t, x = points[..., 0], points[..., 1]
    return (1 + t + x) / 2, (1 + t - x) / 2


def _sides(y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    (ay, by), (ax, bx) = _light_cone(y), _light_cone(x)
    return ax - ay, bx - by


@dataclass(frozen=True)
class PolynomialFactor:
    """``ln Omega(t, x) = sum c[j, k] t**j x**k`` over 1 <= j + k <= degree (2D)."""

    coefficients: np.ndarray  # [degree + 1, degree + 1], zero where j + k = 0 or > degree

    @classmethod
    def random(cls, rng: np.random.Generator, amplitude: float, degree: int) -> PolynomialFactor:
        c = rng.normal(0.0, amplitude, (degree + 1, degree + 1))
        j, k = np.indices(c.shape)
        c[(j + k == 0) | (j + k > degree)] = 0.0  # Omega = 1 at the centre
        return cls(c)

    def _eval(self, c: np.ndarray, t: np.ndarray, x: np.ndarray) -> np.ndarray:
        return np.polynomial.polynomial.polyval2d(t, x, c)

    def log_omega(self, points: np.ndarray) -> np.ndarray:
        return self._eval(self.coefficients, points[:, 0], points[:, 1])

    def ricci(self, points: np.ndarray) -> np.ndarray:
        """``R = 2 exp(-2 phi) (phi_tt - phi_xx)`` with ``phi = ln Omega``."""
        c = self.coefficients
        phi_tt = np.polynomial.polynomial.polyder(c, 2, axis=0)
        phi_xx = np.polynomial.polynomial.polyder(c, 2, axis=1)
        t, x = points[:, 0], points[:, 1]
        wave = self._eval(phi_tt, t, x) - self._eval(phi_xx, t, x)
        return 2.0 * np.exp(-2.0 * self.log_omega(points)) * wave

    def upper_bound(self) -> float:
        """A bound on ``ln Omega`` over the diamond: its maximum on a grid plus the largest
        change between a point and its grid neighbour."""
        step = 0.01
        grid = np.arange(-1.0, 1.0 + step / 2, step)
        t, x = np.meshgrid(grid, grid, indexing="ij")
        inside = np.abs(t) + np.abs(x) <= 1.0 + step
        top = self._eval(self.coefficients, t[inside], x[inside]).max()
        j, k = np.indices(self.coefficients.shape)
        slope = np.sum(
            np.abs(self.coefficients) * (j + k)
        )  # bounds |grad ln Omega| on |t|,|x| <= 1
        return float(top + slope * step)


@functools.cache
def gauss_legendre(nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [-1, 1], made once per number of nodes (an
    eigenvalue problem of that size) and read-only, as they are shared."""
    points, weights = np.polynomial.legendre.leggauss(nodes)
    points.flags.writeable = weights.flags.writeable = False
    return points, weights


def curved_volume(log_omega: Callable[[np.ndarray], np.ndarray], nodes: int = 200) -> float:
    """The volume ``int Omega**2`` of the 2D diamond ``|t| + |x| <= 1`` (Gauss-Legendre in the
    light-cone coordinates ``a = (1 + t + x) / 2``, ``b = (1 + t - x) / 2``, which make the diamond
    the unit square and ``dt dx = 2 da db``): 12 digits or more for the smooth factors here."""
    points, weights = gauss_legendre(nodes)
    a, b = np.meshgrid((points + 1) / 2, (points + 1) / 2, indexing="ij")
    t, x = a + b - 1, a - b
    omega2 = np.exp(2.0 * log_omega(np.stack([t.ravel(), x.ravel()], axis=1)))
    w = np.outer(weights, weights).ravel() / 4  # the two maps onto [0, 1]
    return float(2.0 * np.sum(w * omega2))


def conformal_coordinates(
    num_points: int,
    dimension: int,
    rng: np.random.Generator,
    log_omega: Callable[[np.ndarray], np.ndarray],
    log_bound: float,
    uniform: Callable[[int, int, np.random.Generator], np.ndarray],
) -> np.ndarray:
    """``num_points`` points with density proportional to ``Omega**d`` in the diamond, sorted
    by time; ``uniform(m, d, rng)`` gives m uniform (unsorted) diamond points."""
    kept: list[np.ndarray] = []
    have, rate = 0, 0.5
    while have < num_points:
        m = max(64, int(1.3 * (num_points - have) / rate))
        points = uniform(m, dimension, rng)
        accept = rng.random(m) < np.exp(dimension * (log_omega(points) - log_bound))
        rate = max(accept.mean(), 1e-3)
        kept.append(points[accept])
        have += int(accept.sum())
    coords = np.concatenate(kept)[:num_points]  # i.i.d. draws: the first ones are as good as any
    return coords[np.argsort(coords[:, 0], kind="stable")]
