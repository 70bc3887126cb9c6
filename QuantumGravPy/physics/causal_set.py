"""The causal set: a finite partial order, stored as its relation and link matrices."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from . import curvature
from . import observables as obs
from .observables import node_features


@dataclass(frozen=True, eq=False)
class CausalSet:
    """A causal set in a natural labelling: every relation points to a later element.

    A sprinkling's elements are sorted by their time coordinate, which gives such a labelling;
    other orders are sorted by a linear extension. ``coordinates`` are those of a sprinkling
    (the conformal coordinates of a curved one), or the positions of a random order's elements
    in its linear orders; ``ricci`` the Ricci scalar at each element where it is known.
    """

    relations: Tensor  # [N, N] bool, [i, j] true iff i strictly precedes j
    links: Tensor  # [N, N] bool, the relations not implied by transitivity
    coordinates: Tensor | None = None  # [N, d] float64, column 0 is time
    ricci: Tensor | None = None  # [N] float64
    volume: float | None = None  # the spacetime volume sprinkled into, where it is known

    @property
    def num_points(self) -> int:
        return self.relations.shape[0]

    @property
    def dimension(self) -> int | None:
        """Of the coordinates; None without them."""
        return None if self.coordinates is None else self.coordinates.shape[1]

    def ordering_fraction(self) -> float:
        """Related pairs divided by all pairs; its expectation depends only on the dimension."""
        return float(obs.ordering_fraction(self.relations))

    def longest_chain(self) -> int:
        """Number of elements in the longest chain (totally ordered subset)."""
        return int(obs.longest_chain(self.relations))

    def link_count(self) -> int:
        return int(self.links.sum())

    def interval_abundances(self, max_size: int) -> Tensor:
        """N_0 .. N_max_size: related pairs with exactly k elements between them."""
        return obs.interval_abundances(self.relations, max_size)

    def benincasa_dowker_action(self, dimension: int) -> float:
        return float(obs.benincasa_dowker_action(self.relations, dimension))

    def ricci_estimate(self, *, epsilon: float = 1.0) -> Tensor:
        """The Benincasa-Dowker estimate of the Ricci scalar at each element (float64, [N]),
        smeared with ``epsilon`` (:mod:`.curvature`), at the density ``N / volume``."""
        if self.volume is None or self.dimension not in (2, 4):
            raise ValueError(
                "the estimate needs a sprinkling's volume (for its density) in 2 or 4 "
                f"dimensions; this causal set has volume {self.volume} and dimension "
                f"{self.dimension}"
            )
        density = self.num_points / self.volume
        return curvature.ricci_estimate(self.relations, density, self.dimension, epsilon=epsilon)

    def node_features(self) -> Tensor:
        return node_features(self.relations[None], self.links[None])[0]
