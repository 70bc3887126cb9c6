"""``manifold_like``: half flat sprinklings (``y`` = 1), half transitive percolations tuned to
the ordering fraction of a sprinkling of the same size and dimension (``y`` = 0), so that the
ordering fraction, and the Myrheim-Meyer estimator, cannot tell them apart."""

from __future__ import annotations

from .base import DataKind


class ManifoldLike(DataKind):
    """Half flat sprinklings, half transitive percolations whose bond probability is tuned
    (bisection, same random numbers) to the ordering fraction of a sprinkling of the same size
    and dimension: the ordering fraction, and so the Myrheim-Meyer estimator, cannot tell them
    apart; ``y``: 1 sprinkling, 0 not."""

    name = "manifold_like"

    def classes(self, dimensions):
        return 2

    def draw(self, rng, n, d, seed, labels, h):
        from ..physics import CSET_TYPES, percolation_like, sprinkle

        flat = sprinkle(n, d, seed)
        if rng.random() < 0.5:
            labels["y"] = 1
            return flat
        labels.update(y=0, manifold_like=0, cset_type=CSET_TYPES.index("percolation"))
        labels["dimension"] = 0.0
        return percolation_like(n, flat.ordering_fraction(), seed + 1)
