"""``cset_type``: one class per generator (``physics.CSET_TYPES``), a fifth each."""

from __future__ import annotations

from .base import DataKind

DESTROYED_FRACTION = 0.1  # of a destroyed sprinkling's pairs flipped


class CsetType(DataKind):
    """A fifth each: sprinklings, random d-orders, Kleitman-Rothschild orders, percolations (as
    manifold_like's), destroyed sprinklings (a tenth of the pairs flipped, then closed);
    ``y``: the generator."""

    name = "cset_type"

    def classes(self, dimensions):
        from ..physics import CSET_TYPES

        return len(CSET_TYPES)

    def draw(self, rng, n, d, seed, labels, h):
        from ..physics import (
            CSET_TYPES,
            destroyed_sprinkling,
            kleitman_rothschild_order,
            percolation_like,
            random_order,
            sprinkle,
        )

        which = int(rng.integers(len(CSET_TYPES)))
        labels.update(y=which, cset_type=which, manifold_like=int(which == 0))
        if which == 0:
            return sprinkle(n, d, seed)
        if which == 1:
            return random_order(n, d, seed)
        if which == 4:
            return destroyed_sprinkling(n, d, seed, DESTROYED_FRACTION)
        labels["dimension"] = 0.0
        if which == 2:
            return kleitman_rothschild_order(n, seed)
        return percolation_like(n, sprinkle(n, d, seed).ordering_fraction(), seed + 1)
