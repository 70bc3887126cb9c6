"""``dimension``: flat sprinklings; ``y`` the index of the dimension in ``data.dimensions``."""

from __future__ import annotations

from .base import DataKind


class Dimension(DataKind):
    """Flat sprinklings into diamonds of each of ``data.dimensions``; ``y``: the index of the
    dimension."""

    name = "dimension"
    coordinates = True
    flat_diamonds = True

    def classes(self, dimensions):
        return len(dimensions)

    def classes_shown(self):
        return "one per dimension of `data.dimensions`"

    def draw(self, rng, n, d, seed, labels, h):
        from ..physics import sprinkle

        return sprinkle(n, d, seed)
