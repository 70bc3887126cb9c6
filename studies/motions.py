"""The diamond's conformal motions: maps of the diamond onto itself that keep the causal order,
under which a flat sprinkling's points crowd as a curved one's do to first order in h.

What the curvature studies build on (curvature_bound.py, order_bound.py, order_ceiling.py): a
model of the order alone cannot tell a curved sprinkling from a flat one moved by the motion
that imitates it best. tests/test_conformal_motions.py checks the maps against exact results.
"""

from __future__ import annotations

import numpy as np

# --- the diamond's conformal motions ----------------------------------------------------------
#
# The open diamond is conformal to R x H^(d-1): with u = t - r, v = t + r (r = |x|),
#     u = tanh((tau - rho) / 2),  v = tanh((tau + rho) / 2),
#     eta = Lambda**2 (-d tau**2 + d rho**2 + sinh(rho)**2 d Omega**2),
#     Lambda = sqrt((1 - u**2) (1 - v**2)) / 2.
# An isometry of R x H^(d-1) (a shift of tau, a boost of the hyperboloid) is then a conformal
# map of the diamond onto itself that keeps its tips and its causal order. The image of a flat
# sprinkling under one is again a causal set with the flat one's distribution, yet its points
# crowd towards a tip (a shift) or a side (a boost): what a curved spacetime's density does to
# first order in h. The order sees only what no such motion can imitate.


def _to_hyperbolic(points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(tau, rho, direction)`` of diamond points [N, d] (interior; time first)."""
    t, space = points[:, 0], points[:, 1:]
    r = np.linalg.norm(space, axis=1)
    direction = np.zeros_like(space)
    direction[:, 0] = 1.0  # at r = 0 any direction will do
    moving = r > 0
    direction[moving] = space[moving] / r[moving, None]
    a, b = np.arctanh(t - r), np.arctanh(t + r)
    return a + b, b - a, direction


def _hyperbolic_factor(points: np.ndarray) -> np.ndarray:
    """``Lambda`` at diamond points: ``eta = Lambda**2 g`` with g the metric of R x H^(d-1)."""
    t, r = points[:, 0], np.linalg.norm(points[:, 1:], axis=1)
    return np.sqrt((1.0 - (t - r) ** 2) * (1.0 - (t + r) ** 2)) / 2.0


def conformal_motion(points: np.ndarray, shift: float = 0.0, boost: float = 0.0) -> np.ndarray:
    """The images of diamond points [N, d] under a conformal map of the diamond onto itself.

    ``shift`` moves the time of R x H^(d-1) (towards the future tip for ``shift > 0``; on
    ``t +- r`` it is the Moebius map ``w -> (w + a) / (1 + a w)``, ``a = tanh(shift / 2)``);
    ``boost`` is a hyperbolic boost of rapidity ``boost`` along x_1 (towards ``x_1 > 0``). Both
    keep the tips and the causal order: ``x`` precedes ``y`` iff their images do.
    """
    tau, rho, direction = _to_hyperbolic(np.asarray(points, dtype=np.float64))
    y0, y1 = np.cosh(rho), np.sinh(rho)[:, None] * direction
    y1[:, 0], y0 = (
        np.sinh(boost) * y0 + np.cosh(boost) * y1[:, 0],
        np.cosh(boost) * y0 + np.sinh(boost) * y1[:, 0],
    )
    sinh_rho = np.linalg.norm(y1, axis=1)
    rho = np.arcsinh(sinh_rho)
    direction = np.divide(y1, sinh_rho[:, None], out=np.zeros_like(y1), where=sinh_rho[:, None] > 0)
    tau = tau + shift
    u, v = np.tanh((tau - rho) / 2.0), np.tanh((tau + rho) / 2.0)
    out = np.empty_like(y1, shape=(len(tau), y1.shape[1] + 1))
    out[:, 0] = (u + v) / 2.0
    out[:, 1:] = direction * ((v - u) / 2.0)[:, None]
    return out


def motion_density(points: np.ndarray, shift: float = 0.0, boost: float = 0.0) -> np.ndarray:
    """The density, relative to the uniform one, of the image of a flat sprinkling under
    :func:`conformal_motion` (``shift``, ``boost``) at diamond points [N, d]:
    ``(Lambda(preimage) / Lambda(point))**d``, the inverse of the map's volume change."""
    d = points.shape[1]
    before = conformal_motion(points, -shift, -boost)
    ratio = _hyperbolic_factor(before) / _hyperbolic_factor(points)
    return ratio**d
