"""The Benincasa-Dowker estimate of the scalar curvature at each element of a causal set.

The Benincasa-Dowker operator B approximates ``box - R / 2`` on causal sets sprinkled into a
curved spacetime; on the constant field 1 it gives ``-R / 2``, so the curvature at an element x
is estimated from the sizes of the intervals in x's past alone:

    R(x) ~ 2 ell**-2 * s(x),   s(x) = prefactor (c + sum_k c_k N_k(x)),

with ``N_k(x)`` the elements y preceding x with exactly k elements between them, ``ell`` the
discreteness length (``density**(-1 / d)``) and ``(prefactor, c, c_k)`` the action's
coefficients (:data:`~.observables.BD_COEFFICIENTS`: in 2D ``2 (1 - 2 N_0 + 4 N_1 - 2 N_2)``).
``s(x)`` is the local action: summed over the elements it is the global action of
:func:`~.observables.benincasa_dowker_action`, exactly.

The unsmeared estimate fluctuates more as the density grows. The smeared one (Benincasa and
Dowker's nonlocality scale ``ell_k``, ``epsilon = (ell / ell_k)**d``) is the unsmeared estimate
averaged over the thinnings of the causal set that keep each element but x with probability
``epsilon``: at density ``epsilon * density``, with ``N_k(x)`` replaced by its mean over the
thinnings, ``epsilon * sum_y Binomial(k; n(x, y), epsilon)``. ``epsilon = 1`` is unsmeared.

:func:`flat_expectation` is the exact mean of the estimate at an element of a sprinkling of N
points into a flat 2D diamond: zero wherever the element's past holds many elements, as the
continuum limit has it, and computable exactly near the diamond's lower tip, where it is not.
:func:`conformal_expectation` is the same for a conformally flat 2D diamond given its interval
volumes (de Sitter's: :func:`~.curved.de_sitter_interval_volume`). There the mean tends to R
as the density grows, and for de Sitter (constant R) the expansion of the past-cone integral
gives the rate: ``E[R_est] = R - (R**2 / 2) ln(rho) / rho + O(1 / rho)`` at density
``rho = epsilon N / V``. The interval's volume element per unit volume and boost,
``exp(V R / 4)`` in 2D de Sitter, meets the logarithm of the boost range: its first order gives
R and its second the ``ln(rho) / rho``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from .curved import gauss_legendre
from .observables import BD_COEFFICIENTS, between_counts


def _check(dimension: int, epsilon: float) -> tuple[float, float, tuple[float, ...]]:
    if dimension not in BD_COEFFICIENTS:
        raise ValueError(f"the estimate is defined for dimension 2 or 4, got {dimension!r}")
    if not 0.0 < epsilon <= 1.0:
        raise ValueError(f"epsilon must be in (0, 1], got {epsilon!r}")
    prefactor, (c, *ck) = BD_COEFFICIENTS[dimension]
    return prefactor, c, tuple(ck)


def layer_weights(max_between: int, coefficients: tuple[float, ...], epsilon: float) -> Tensor:
    """``w[n] = sum_k c_k Binomial(k; n, epsilon)`` for n = 0 .. ``max_between`` (float64): what
    a past element with n elements between it and x adds to the local action, on average over
    the thinnings (``epsilon = 1``: ``c_n``, and 0 beyond the layers)."""
    n = torch.arange(max_between + 1, dtype=torch.float64)
    weights = torch.zeros_like(n)
    for k, c in enumerate(coefficients):
        if epsilon == 1.0:
            weights += c * (n == k)
            continue
        log_choose = (
            torch.lgamma(n + 1) - math.lgamma(k + 1) - torch.lgamma((n - k).clamp(min=0) + 1)
        )
        log_p = log_choose + k * math.log(epsilon) + (n - k) * math.log1p(-epsilon)
        weights += c * torch.where(n >= k, log_p.exp(), torch.zeros_like(n))
    return weights


def local_action(relations: Tensor, dimension: int = 2, *, epsilon: float = 1.0) -> Tensor:
    """Each element's share of the Benincasa-Dowker action (float64, [N] or [B, N]): summed
    over the elements, the global action (``epsilon = 1``). ``relations``: [.., N, N] bool,
    ``[y, x]`` true iff y precedes x."""
    prefactor, c, ck = _check(dimension, epsilon)
    single = relations.dim() == 2
    r = relations[None] if single else relations
    between = between_counts(r).long()  # [B, y, x]: elements strictly between y and x
    weights = layer_weights(r.shape[-1], ck, epsilon)
    past = torch.where(r, weights[between], torch.zeros((), dtype=torch.float64)).sum(dim=1)
    values = prefactor * (c + epsilon * past)
    return values[0] if single else values


def ricci_estimate(
    relations: Tensor, density: float, dimension: int = 2, *, epsilon: float = 1.0
) -> Tensor:
    """The Benincasa-Dowker estimate of the Ricci scalar at each element (float64, [N] or
    [B, N]) of a causal set sprinkled at ``density`` (elements per unit volume), smeared with
    ``epsilon`` (see the module's description): ``2 (epsilon * density)**(2 / d)`` times the
    (smeared) local action."""
    if not density > 0:
        raise ValueError(f"density must be positive, got {density!r}")
    scale = 2.0 * (epsilon * density) ** (2.0 / dimension)
    return scale * local_action(relations, dimension, epsilon=epsilon)


def diamond_volume(dimension: int) -> float:
    """The volume of the flat diamond ``|t| + |x| <= 1`` (where :func:`~.sprinkle` sprinkles)."""
    ball = math.pi ** ((dimension - 1) / 2) / math.gamma((dimension + 1) / 2)  # unit (d-1)-ball
    return 2.0 * ball / dimension


def past_fraction(coordinates: Tensor) -> Tensor:
    """The fraction of the flat 2D diamond ``|t| + |x| <= 1`` that lies in each point's past."""
    t, x = coordinates[:, 0], coordinates[:, 1]
    return ((1 + t + x) / 2) * ((1 + t - x) / 2)


# Gauss-Legendre nodes and weights for int_0^40 f(u) du: the integrands below are smooth in u
# (bumps of width about 1 where r = q e^-u meets the binomials' mass) and fall as u e^-u beyond
# them, so 400 nodes give about 12 digits (checked against 800). Made at first use, not at
# import: an eigenvalue problem of 400 that a process importing the package need not solve.
def _u_nodes() -> tuple[np.ndarray, np.ndarray]:
    nodes, weights = gauss_legendre(400)
    return 20.0 * (nodes + 1.0), 20.0 * weights


def flat_expectation(
    fraction: np.ndarray | float, num_points: int, *, epsilon: float = 1.0
) -> np.ndarray:
    """The exact mean local action (2D) at an element of a sprinkling of ``num_points`` points
    into a flat diamond, whose past holds the ``fraction`` of the diamond's volume.

    The other N - 1 points are uniform; one lies in x's past with an interval to x of volume
    fraction r with density ``ln(fraction / r) dr``, and the N - 2 others put Binomial(N - 2, r)
    elements in that interval, of which a thinning keeps Binomial(N - 2, epsilon r). So
    ``E[s] = prefactor (c + epsilon (N - 1) int_0^q ln(q / r) sum_k c_k Binomial(k; N - 2,
    epsilon r) dr)``. It tends to 0 as ``epsilon (N - 1) q`` grows: the flat continuum's
    curvature, approached exponentially fast.
    """
    prefactor, c, ck = _check(2, epsilon)
    q = np.atleast_1d(np.asarray(fraction, dtype=np.float64))
    u, w = _u_nodes()
    r = epsilon * q[:, None] * np.exp(-u)[None, :]  # [elements, nodes]: epsilon r
    total = _layers(r, num_points - 2, ck)
    # int_0^q ln(q/r) h(r) dr with r = q e^-u: q int_0^inf u e^-u h(q e^-u) du
    integral = q * (total * (u * np.exp(-u) * w)[None, :]).sum(axis=1)
    values = prefactor * (c + epsilon * (num_points - 1) * integral)
    return values if np.ndim(fraction) else values[0]


def _layers(r: np.ndarray, m: int, coefficients: tuple[float, ...]) -> np.ndarray:
    """``sum_k c_k Binomial(k; m, r)``, with ``m choose k`` as a short product (``lgamma`` of a
    large m loses the digits that the cancellation between the layers needs)."""
    log_r, log_rest = np.log(np.maximum(r, 1e-300)), np.log1p(-np.minimum(r, 1.0 - 1e-16))
    total = np.zeros_like(r)
    for k, coefficient in enumerate(coefficients):
        if k > m:
            break
        log_choose = sum(math.log(m - j) for j in range(k)) - math.lgamma(k + 1)
        total += coefficient * np.exp(log_choose + k * log_r + (m - k) * log_rest)
    return total


IntervalVolume = Callable[[np.ndarray, np.ndarray], np.ndarray]
VolumeElement = Callable[[np.ndarray], np.ndarray]


def conformal_expectation(
    points: np.ndarray,
    num_points: int,
    interval_volume: IntervalVolume,
    volume_element: VolumeElement,
    total_volume: float,
    *,
    epsilon: float = 1.0,
    nodes: int = 400,
) -> np.ndarray:
    """The exact mean local action (2D) at points [M, 2] (t, x) of the diamond of a conformally
    flat spacetime ``Omega**2 eta``, for an element there among ``num_points`` sprinkled ones.

    As :func:`flat_expectation` with the curved volumes: ``E[s] = prefactor (c + epsilon (N - 1)
    int_past dV(y) / V sum_k c_k Binomial(k; N - 2, epsilon V(y, x) / V))``, with
    ``interval_volume(y, x)`` the volume between y [.., 2] and x [2], ``volume_element(y)`` =
    ``Omega(y)**2`` and V the diamond's volume. The past of x is a rectangle in the light-cone
    coordinates ``a = (1 + t + x) / 2``, ``b = (1 + t - x) / 2`` (``dt dx = 2 da db``); its
    sides from x, ``a_x - a_y = a_x e^-p`` and ``b_x - b_y = b_x e^-q``, are integrated by
    Gauss-Legendre in p and q on [0, 40]: the integrand is smooth there, with its mass where
    the interval holds about one element (p + q near ln N), and falls as e^-p, e^-q beyond."""
    prefactor, c, ck = _check(2, epsilon)
    z, w = gauss_legendre(nodes)
    p, wp = 20.0 * (z + 1.0), 20.0 * w
    shrink = np.exp(-p)
    out = np.empty(len(points))
    for i, x in enumerate(np.asarray(points, dtype=np.float64)):
        a, b = (1 + x[0] + x[1]) / 2, (1 + x[0] - x[1]) / 2
        da, db = np.meshgrid(a * shrink, b * shrink, indexing="ij")  # sides of the interval
        y = np.stack([(a - da) + (b - db) - 1, (a - da) - (b - db)], axis=-1)
        r = epsilon * interval_volume(y, x) / total_volume
        density = 2.0 * volume_element(y.reshape(-1, 2)).reshape(r.shape) / total_volume
        integrand = _layers(r, num_points - 2, ck) * density * da * db
        out[i] = prefactor * (c + epsilon * (num_points - 1) * (wp @ integrand @ wp))
    return out
