"""The causal set: a finite partial order, stored as its relation and link matrices."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from .observables import longest_chains, node_features


@dataclass(frozen=True, eq=False)
class CausalSet:
    """A causal set in a natural labelling: every relation points to a later element.

    A sprinkling's elements are sorted by their time coordinate, which gives such a labelling.
    """

    coordinates: Tensor  # [N, d] float64, column 0 is time
    relations: Tensor  # [N, N] bool, [i, j] true iff i strictly precedes j
    links: Tensor  # [N, N] bool, the relations not implied by transitivity

    @property
    def num_points(self) -> int:
        return self.coordinates.shape[0]

    @property
    def dimension(self) -> int:
        return self.coordinates.shape[1]

    def ordering_fraction(self) -> float:
        """Related pairs divided by all pairs; its expectation depends only on the dimension."""
        n = self.num_points
        return int(self.relations.sum()) / (n * (n - 1) / 2) if n > 1 else 0.0

    def longest_chain(self) -> int:
        """Number of elements in the longest chain (totally ordered subset)."""
        height = longest_chains(self.relations[None])[0]
        return int(height.max()) + 1 if self.num_points else 0

    def node_features(self) -> Tensor:
        return node_features(self.relations[None], self.links[None])[0]
