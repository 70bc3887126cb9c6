"""Causal sets sprinkled into a causal diamond of Minkowski space or a conformally flat one.

A sprinkling places points uniformly (with respect to the spacetime volume) into a region; the
causal set is the set of points with the causal order they inherit. We use the causal diamond
(Alexandrov interval) between the events (-1, 0, ..., 0) and (1, 0, ..., 0): the points with
``|t| + |x| <= 1``. The number of points is fixed (a Poisson process conditioned on its count).

Everything heavy works on a batch of causal sets of one size at once, so generating a dataset
costs a handful of tensor operations per size rather than a Python loop per graph.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .causal_set import CausalSet
from .curvature import diamond_volume
from .curved import (
    PolynomialFactor,
    check_h,
    conformal_coordinates,
    curved_volume,
    log_conformal_factor,
    ricci_scalar,
)
from .orders import transitive_reduction

MIN_DIMENSION = 2
MAX_DIMENSION = 6


def check_sprinkle_arguments(num_points: int, dimension: int) -> None:
    if isinstance(num_points, bool) or not isinstance(num_points, int) or num_points < 1:
        raise ValueError(f"num_points must be a positive integer, got {num_points!r}")
    if (
        isinstance(dimension, bool)
        or not isinstance(dimension, int)
        or not MIN_DIMENSION <= dimension <= MAX_DIMENSION
    ):
        raise ValueError(
            f"dimension must be an integer from {MIN_DIMENSION} to {MAX_DIMENSION}, "
            f"got {dimension!r}"
        )


def sprinkle(
    num_points: int, dimension: int, seed: int, spacetime: str = "minkowski", h: float = 0.0
) -> CausalSet:
    """Sprinkle ``num_points`` points into the causal diamond of a ``dimension``-dim spacetime.

    ``spacetime``: ``minkowski``, ``de_sitter`` or ``anti_de_sitter`` with ``0 <= h < 1``
    (see :mod:`.curved`; ``h = 0`` is flat). The diamond is ``|t| + |x| <= 1`` in conformal
    coordinates, where the causal order is Minkowski's. The causal set carries its coordinates
    and the Ricci scalar at every element. The same arguments always give the same causal set.
    """
    check_sprinkle_arguments(num_points, dimension)
    check_h(spacetime, h)
    rng = np.random.default_rng(seed)
    if h == 0:
        coords = diamond_coordinates(num_points, dimension, rng)
    else:
        log_omega = log_conformal_factor(spacetime, h)
        coords = conformal_coordinates(num_points, dimension, rng, log_omega, 0.0, uniform_diamond)
    ricci = torch.full((num_points,), ricci_scalar(spacetime, h, dimension), dtype=torch.float64)
    volume = diamond_volume(dimension) if h == 0 else None
    if h != 0 and dimension == 2:
        volume = curved_volume(log_conformal_factor(spacetime, h))
    return _causal_set(coords, ricci, volume)


def conformal_sprinkling(
    num_points: int, seed: int, *, amplitude: float = 0.3, degree: int = 3
) -> CausalSet:
    """A sprinkling into the 2D diamond of ``Omega**2 eta`` with a random smooth ``Omega``.

    ``ln Omega`` is a polynomial in t and x of the given degree, with coefficients drawn from
    a normal distribution of standard deviation ``amplitude`` (``Omega = 1`` at the centre).
    The causal set carries the exact Ricci scalar at every element (``.ricci``).
    """
    check_sprinkle_arguments(num_points, 2)
    if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1:
        raise ValueError(f"degree must be a positive integer, got {degree!r}")
    if not amplitude >= 0:
        raise ValueError(f"amplitude must be >= 0, got {amplitude!r}")
    rng = np.random.default_rng(seed)
    factor = PolynomialFactor.random(rng, amplitude, degree)
    coords = conformal_coordinates(
        num_points, 2, rng, factor.log_omega, factor.upper_bound(), uniform_diamond
    )
    ricci = torch.from_numpy(factor.ricci(coords))
    return _causal_set(coords, ricci, curved_volume(factor.log_omega))


def _causal_set(coords: np.ndarray, ricci: Tensor, volume: float | None) -> CausalSet:
    points = torch.from_numpy(coords)
    relations, links = causal_structure(points[None])
    return CausalSet(
        relations=relations[0], links=links[0], coordinates=points, ricci=ricci, volume=volume
    )


def diamond_coordinates(num_points: int, dimension: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform points in the diamond ``|t| + |x| <= 1``, sorted by time. Shape [N, d]."""
    coords = uniform_diamond(num_points, dimension, rng)
    return coords[np.argsort(coords[:, 0], kind="stable")]


def uniform_diamond(num_points: int, dimension: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform points in the diamond ``|t| + |x| <= 1``, in the order drawn. Shape [N, d].

    Sampled directly, without rejection: the spatial slice at time t is a ball of radius
    ``r = 1 - |t|``, so ``r`` has density proportional to ``r**(d-1)`` on [0, 1], i.e.
    ``r = U**(1/d)``; the spatial point is then uniform in that ball.
    """
    d = dimension
    radius_at_t = rng.random(num_points) ** (1.0 / d)
    sign = np.where(rng.random(num_points) < 0.5, -1.0, 1.0)
    t = sign * (1.0 - radius_at_t)
    direction = rng.standard_normal((num_points, d - 1))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    r = radius_at_t * rng.random(num_points) ** (1.0 / (d - 1))
    coords = np.empty((num_points, d))
    coords[:, 0] = t
    coords[:, 1:] = direction * r[:, None]
    return coords


def causal_structure(coords: Tensor, sizes: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Relations and links of a batch of time-sorted point sets. ``coords``: [B, N, d].

    Returns two bool tensors [B, N, N]: ``relations[b, i, j]`` iff i precedes j (timelike
    separated and earlier), and ``links``, the relations with no element in between (one
    matrix product: the count of elements between i and j is ``(C C)[i, j]``).

    ``sizes``: the number of points of each set, for sets of different sizes padded to N;
    the points past a set's size are related to nothing (so no link passes through them).
    """
    b, n, d = coords.shape
    relations = torch.empty(b, n, n, dtype=torch.bool)
    # Rows in blocks of about 4 MB of float64, so the separations stay in cache; in float64,
    # so points close to each other's light cone are ordered as their coordinates say.
    rows = max(1, (1 << 19) // max(1, b * n))
    t = coords[..., 0]
    for start in range(0, n, rows):
        block = slice(start, min(n, start + rows))
        dt = t[:, None, :] - t[:, block, None]  # [B, rows, N] = t_j - t_i
        interval = dt * dt
        for k in range(1, d):
            dx = coords[:, None, :, k] - coords[:, block, None, k]
            interval -= dx.mul_(dx)
        relations[:, block] = (dt > 0) & (interval > 0)
    # Sorting by time makes every relation point forwards; the triangle mask only guards ties.
    relations &= torch.ones(n, n, dtype=torch.bool).triu(1)
    if sizes is not None:
        inside = torch.arange(n) < sizes.view(-1, 1)  # [B, N]
        relations &= inside[:, :, None] & inside[:, None, :]
    return relations, transitive_reduction(relations)
