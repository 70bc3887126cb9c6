"""``curvature``: sprinklings into flat, de Sitter and anti-de Sitter diamonds, a third each;
``y`` = ``spacetime`` (0, 1, 2) at ``data.h`` (a value, or ``[low, high]`` to draw h from)."""

from __future__ import annotations

from .base import DataKind

SPACETIMES = ("minkowski", "de_sitter", "anti_de_sitter")


class Curvature(DataKind):
    """Sprinklings into flat, de Sitter and anti-de Sitter diamonds, a third each, at ``data.h``
    (a value, or ``[low, high]`` to draw each set's h); ``y``: 0 flat, 1 de Sitter, 2 anti-de
    Sitter."""

    name = "curvature"
    coordinates = True
    uses_h = True

    def classes(self, dimensions):
        return len(SPACETIMES)

    def draw(self, rng, n, d, seed, labels, h):
        from ..physics import sprinkle

        spacetime = int(rng.integers(len(SPACETIMES)))
        value = 0.0 if spacetime == 0 else float(rng.uniform(h[0], h[1]) if h[0] < h[1] else h[0])
        labels.update(y=spacetime, spacetime=spacetime, h=value)
        return sprinkle(n, d, seed, SPACETIMES[spacetime], value)
