"""The diamond's conformal motions against exact results.

They carry the argument of studies/curvature_bound.py (how well any model can tell curved
sprinklings from flat ones), so each property it uses is checked here: the causal order is
kept exactly, the density formula is the map's volume change, and de Sitter's and anti-de
Sitter's densities are motions of the flat one up to terms of second order in h.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from motions import conformal_motion, motion_density

from QuantumGravPy.physics import causal_structure, uniform_diamond

MOTIONS = [(0.3, 0.0), (0.0, 0.5), (0.7, -0.4), (-1.1, 0.9)]


def relations(points: np.ndarray) -> torch.Tensor:
    order = np.argsort(points[:, 0], kind="stable")
    related = causal_structure(torch.from_numpy(points[order])[None])[0][0]
    back = np.argsort(order)
    return related[back][:, back]  # in the points' own order


@pytest.mark.parametrize("dimension", [2, 4])
@pytest.mark.parametrize(("shift", "boost"), MOTIONS)
def test_motions_keep_the_causal_order_the_diamond_and_its_tips(dimension, shift, boost):
    points = uniform_diamond(400, dimension, np.random.default_rng(1))
    image = conformal_motion(points, shift, boost)
    before, after = relations(points), relations(image)
    assert before.sum() > 1000  # enough related pairs to tell
    assert torch.equal(before, after)
    assert (np.abs(image[:, 0]) + np.linalg.norm(image[:, 1:], axis=1)).max() < 1.0
    assert np.abs(image - points).max() > 0.1  # and the points did move
    np.testing.assert_allclose(conformal_motion(image, -shift, -boost), points, atol=1e-9)
    tips = np.zeros((2, dimension))
    tips[:, 0] = [-1 + 1e-9, 1 - 1e-9]
    np.testing.assert_allclose(conformal_motion(tips, shift, boost), tips, atol=1e-6)


def test_a_shift_is_the_moebius_map_on_both_null_coordinates():
    points = uniform_diamond(1000, 4, np.random.default_rng(2))
    shift = 0.8
    a = np.tanh(shift / 2)
    t, r = points[:, 0], np.linalg.norm(points[:, 1:], axis=1)
    u, v = [(w + a) / (1 + a * w) for w in (t - r, t + r)]
    image = conformal_motion(points, shift)
    np.testing.assert_allclose(image[:, 0], (u + v) / 2, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(image[:, 1:], axis=1), (v - u) / 2, atol=1e-12)


@pytest.mark.parametrize(("shift", "boost"), MOTIONS)
def test_the_image_density_is_the_inverse_volume_change_of_the_map(shift, boost):
    """density(image of x) * |det of the map's Jacobian at x| = 1, the Jacobian by central
    differences at random points."""
    d, step = 4, 1e-6
    points = 0.8 * uniform_diamond(30, d, np.random.default_rng(3))  # away from the boundary
    jacobian = np.empty((len(points), d, d))
    for k in range(d):
        e = np.zeros(d)
        e[k] = step
        forward = conformal_motion(points + e, shift, boost)
        backward = conformal_motion(points - e, shift, boost)
        jacobian[:, :, k] = (forward - backward) / (2 * step)
    volume_change = np.abs(np.linalg.det(jacobian))
    density = motion_density(conformal_motion(points, shift, boost), shift, boost)
    np.testing.assert_allclose(density * volume_change, 1.0, rtol=1e-6)


def test_curved_densities_are_motions_of_the_flat_one_to_first_order_in_h():
    """de Sitter's density (1 - h t)**-4 is a shift by h of the flat one, anti-de Sitter's
    (1 + h x_1)**-4 a boost by -h, up to O(h**2): the log-ratio of the densities varies over
    the diamond by a quarter when h halves. Without the motion it varies by O(h)."""
    points = uniform_diamond(20_000, 4, np.random.default_rng(4))
    t, x1 = points[:, 0], points[:, 1]

    def spread(h: float) -> tuple[float, float, float]:
        de_sitter = -4 * np.log1p(-h * t) - np.log(motion_density(points, shift=h))
        anti = -4 * np.log1p(h * x1) - np.log(motion_density(points, boost=-h))
        return np.ptp(de_sitter), np.ptp(anti), np.ptp(-4 * np.log1p(-h * t))

    (ds_2h, ads_2h, flat_2h), (ds_h, ads_h, flat_h) = spread(0.04), spread(0.02)
    assert ds_2h / ds_h == pytest.approx(4, rel=0.05)
    assert ads_2h / ads_h == pytest.approx(4, rel=0.05)
    assert flat_2h / flat_h == pytest.approx(2, rel=0.05)
    assert ds_h < flat_h / 100 and ads_h < flat_h / 100
