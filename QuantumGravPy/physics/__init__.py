"""The physics layer: causal sets, how they are generated, and what is measured on them.

- :mod:`.causal_set`: :class:`CausalSet`, a partial order as relation and link matrices;
- :mod:`.orders`: closing, reducing, checking and labelling partial orders given as matrices;
- :mod:`.sprinkling`: Poisson sprinklings into a causal diamond of Minkowski space;
- :mod:`.observables`: per-element features, chain lengths, the Myrheim-Meyer estimator.

It knows nothing of training and imports nothing else of the package: the lowest floor above
``errors`` and ``logs``, usable on its own (``from QuantumGravPy.physics import sprinkle``).
"""

from .causal_set import CausalSet
from .observables import (
    FEATURE_NAMES,
    NUM_FEATURES,
    longest_chains,
    myrheim_meyer_dimension,
    node_features,
    ordering_fraction_expectation,
)
from .orders import (
    is_naturally_labelled,
    natural_labelling,
    order_violation,
    transitive_closure,
    transitive_reduction,
)
from .sprinkling import (
    MAX_DIMENSION,
    MIN_DIMENSION,
    causal_structure,
    check_sprinkle_arguments,
    diamond_coordinates,
    sprinkle,
)

__all__ = [
    "FEATURE_NAMES",
    "MAX_DIMENSION",
    "MIN_DIMENSION",
    "NUM_FEATURES",
    "CausalSet",
    "causal_structure",
    "check_sprinkle_arguments",
    "diamond_coordinates",
    "is_naturally_labelled",
    "longest_chains",
    "myrheim_meyer_dimension",
    "natural_labelling",
    "node_features",
    "order_violation",
    "ordering_fraction_expectation",
    "sprinkle",
    "transitive_closure",
    "transitive_reduction",
]
