"""The causal set: a finite partial order, stored as its relation and link matrices."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

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

    def node_features(self) -> Tensor:
        return node_features(self.relations[None], self.links[None])[0]
