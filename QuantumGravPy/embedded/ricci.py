"""``ricci``: 2D sprinklings with a random smooth conformal factor; each element's Ricci scalar
is the node attribute ``ricci`` (a node-level regression target)."""

from __future__ import annotations

from .base import DataKind

CONFORMAL_AMPLITUDE, CONFORMAL_DEGREE = 0.3, 3  # of the random ln Omega


class Ricci(DataKind):
    """2D sprinklings into a spacetime with a random smooth conformal factor (ln Omega a cubic in
    t and x, 9 normal coefficients of standard deviation 0.3); no ``y``: learn the node
    attribute ``ricci``, each element's Ricci scalar."""

    name = "ricci"
    coordinates = True
    example_task = "{name: ricci, type: regression, level: node} (see configs/ricci.yaml)"

    def two_d(self, dimensions):
        return True

    def draw(self, rng, n, d, seed, labels, h):
        from ..physics import conformal_sprinkling

        labels["dimension"] = 2.0
        return conformal_sprinkling(n, seed, amplitude=CONFORMAL_AMPLITUDE, degree=CONFORMAL_DEGREE)
