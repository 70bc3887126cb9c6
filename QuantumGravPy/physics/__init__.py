"""The physics layer: causal sets, how they are generated, and what is measured on them.

- :mod:`.causal_set`: :class:`CausalSet`, a partial order as relation and link matrices;
- :mod:`.orders`: closing, reducing, checking and labelling partial orders given as matrices;
- :mod:`.structure`: a causal matrix's links, sizes of pasts and futures and natural labelling,
  checked, in less than one matrix product;
- :mod:`.chains`: the longest chain ending and starting at each element, from the links;
- :mod:`.sprinkling`: sprinklings into a causal diamond of Minkowski, de Sitter, anti-de Sitter
  space, or a 2D spacetime with a random conformal factor (:mod:`.curved`: the factors,
  their Ricci scalars, and the diamond's conformal motions);
- :mod:`.random_orders`: random d-orders, Kleitman-Rothschild orders, transitive percolation,
  destroyed sprinklings: causal sets that are not manifold-like;
- :mod:`.observables`: counts (ordering fraction, links, interval abundances), chains, the
  Benincasa-Dowker action, dimension estimators, per-element features (from the matrices, or
  from an order's links and sizes of pasts and futures);
- :mod:`.exact`: the exact expectations of sprinklings at fixed N: relations in any dimension,
  interval abundances and links in 2D;
- :mod:`.realisers`: each element's ranks in the two linear orders of a 2D causal set (its
  place in the diamond in light-cone coordinates), found from the order alone;
- :mod:`.curvature`: the Benincasa-Dowker estimate of the scalar curvature at each element
  (unsmeared or smeared), and its exact mean in a flat or conformally flat 2D diamond.

It knows nothing of training and imports nothing else of the package: the lowest floor above
``errors`` and ``logs``, usable on its own (``from QuantumGravPy.physics import sprinkle``).
"""

from . import exact, observables
from .causal_set import CausalSet
from .curvature import (
    conformal_expectation,
    diamond_volume,
    flat_expectation,
    local_action,
    ricci_estimate,
)
from .curved import (
    SPACETIMES,
    curvature_radius,
    de_sitter_interval_volume,
    h_for_proper_height,
    proper_height,
)
from .observables import (
    FEATURE_NAMES,
    NUM_FEATURES,
    benincasa_dowker_action,
    interval_abundances,
    largest_antichain,
    link_count,
    longest_chain,
    longest_chains,
    midpoint_dimension,
    myrheim_meyer_dimension,
    node_features,
    ordering_fraction,
    ordering_fraction_expectation,
    structure_features,
)
from .orders import (
    is_naturally_labelled,
    natural_labelling,
    order_violation,
    transitive_closure,
    transitive_reduction,
)
from .random_orders import (
    CSET_TYPES,
    destroyed_sprinkling,
    kleitman_rothschild_order,
    percolation_like,
    random_order,
    transitive_percolation,
)
from .realisers import NotTwoDimensional, light_cone_ranks
from .sprinkling import (
    MAX_DIMENSION,
    MIN_DIMENSION,
    causal_structure,
    check_sprinkle_arguments,
    conformal_sprinkling,
    diamond_coordinates,
    sprinkle,
    uniform_diamond,
)
from .structure import NotAnOrder, OrderStructure, order_structure

__all__ = [
    "CSET_TYPES",
    "FEATURE_NAMES",
    "MAX_DIMENSION",
    "MIN_DIMENSION",
    "NUM_FEATURES",
    "SPACETIMES",
    "CausalSet",
    "NotAnOrder",
    "NotTwoDimensional",
    "OrderStructure",
    "benincasa_dowker_action",
    "causal_structure",
    "check_sprinkle_arguments",
    "conformal_expectation",
    "conformal_sprinkling",
    "curvature_radius",
    "de_sitter_interval_volume",
    "destroyed_sprinkling",
    "diamond_coordinates",
    "diamond_volume",
    "exact",
    "flat_expectation",
    "h_for_proper_height",
    "interval_abundances",
    "is_naturally_labelled",
    "kleitman_rothschild_order",
    "largest_antichain",
    "light_cone_ranks",
    "link_count",
    "local_action",
    "longest_chain",
    "longest_chains",
    "midpoint_dimension",
    "myrheim_meyer_dimension",
    "natural_labelling",
    "node_features",
    "observables",
    "order_structure",
    "order_violation",
    "ordering_fraction",
    "ordering_fraction_expectation",
    "percolation_like",
    "proper_height",
    "random_order",
    "ricci_estimate",
    "sprinkle",
    "structure_features",
    "transitive_closure",
    "transitive_percolation",
    "transitive_reduction",
    "uniform_diamond",
]
