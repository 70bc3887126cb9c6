"""Observables of causal sets: counts, chains, actions and dimension estimators.

They take the relations (and links) as boolean matrices, [N, N] for one causal set or
[B, N, N] for a batch of one size, with elements in a natural labelling (every relation points
to a later index), and return one value per causal set. Counts are exact integers: the number
of elements between two others is an entry of the matrix product C C, computed in float32,
exact below 2**24 elements.

- :func:`ordering_fraction`, :func:`link_count`, :func:`interval_abundances` (N_k: related
  pairs with exactly k elements between them), :func:`longest_chain` (the height),
  :func:`largest_antichain` (the width);
- :func:`benincasa_dowker_action` in 2 and 4 dimensions (unsmeared, in units of the
  discreteness scale);
- dimension estimators: :func:`myrheim_meyer_dimension` (from the ordering fraction) and
  :func:`midpoint_dimension` (from the size of the largest half-interval);
- :func:`node_features`: the per-element features of the embedded graphs.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .chains import chain_lengths
from .orders import transitive_reduction
from .structure import OrderStructure

#: Names of the per-element features built by :func:`node_features`, in column order.
FEATURE_NAMES = (
    "past_size",  # elements in the causal past, / N
    "future_size",  # elements in the causal future, / N
    "past_links",  # links from the past (Hasse in-degree), / N
    "future_links",  # links to the future (Hasse out-degree), / N
    "height",  # longest chain ending at the element, in links, / N
    "depth",  # longest chain starting at the element, in links, / N
)
NUM_FEATURES = len(FEATURE_NAMES)


def longest_chains(order: Tensor, *, towards_past: bool = False) -> Tensor:
    """Longest chain (in links) ending at each element, for a batch [B, N, N] of causal sets
    given by their links (or relations: the same answer, from many more pairs); with
    ``towards_past``, the longest chain starting at each element. float32 [B, N]."""
    height, depth = _batch_chains(order)
    return depth if towards_past else height


def _batch_chains(order: Tensor) -> tuple[Tensor, Tensor]:
    """Heights and depths [B, N] of a batch of one size, as one disjoint union of B * N
    elements (one nonzero over the batch and one sweep)."""
    b, n, _ = order.shape
    batch, first, second = order.nonzero(as_tuple=True)
    union = torch.stack([batch * n + first, batch * n + second])
    ((height, depth),) = chain_lengths([union], [b * n])
    return height.view(b, n), depth.view(b, n)


def node_features(relations: Tensor, links: Tensor, sizes: Tensor | None = None) -> Tensor:
    """The :data:`FEATURE_NAMES` features for a batch of causal sets: [B, N, NUM_FEATURES].

    ``sizes``: each set's number of elements, for sets padded to N (with elements related to
    nothing); the features are per element of a set of that size.
    """
    n = relations.shape[-1]
    scale = n if sizes is None else sizes.view(-1, 1, 1).float()
    # sums of floats are several times faster than sums of booleans
    related, linked = relations.float(), links.float()
    height, depth = _batch_chains(links)
    columns = (related.sum(1), related.sum(2), linked.sum(1), linked.sum(2), height, depth)
    return torch.stack(columns, dim=-1) / scale


def structure_features(structures: list[OrderStructure]) -> list[Tensor]:
    """:func:`node_features` of causal sets given by their :func:`~.orders.order_structure`
    ([N, NUM_FEATURES] each, on the CPU): the same numbers, from the links and the sizes of
    pasts and futures alone, the longest chains of all the sets in one sweep."""
    sizes = [len(s.past) for s in structures]
    lengths = chain_lengths([s.links for s in structures], sizes)
    out = []
    for s, n, (height, depth) in zip(structures, sizes, lengths, strict=True):
        links = s.links.cpu()
        columns = (
            s.past.cpu().float(),
            s.future.cpu().float(),
            torch.bincount(links[1], minlength=n).float(),
            torch.bincount(links[0], minlength=n).float(),
            height,
            depth,
        )
        out.append(torch.stack(columns, dim=-1) / n)
    return out


def ordering_fraction_expectation(dimension: float) -> float:
    """Expected ordering fraction of a sprinkling into a d-dimensional diamond (Myrheim-Meyer).

    ``f(d) = Gamma(d + 1) Gamma(d / 2) / (2 Gamma(3d / 2))``: 1/2 in two dimensions, 1/10 in four.
    Exact for any number of points: it is the chance that two uniform points are related.
    """
    d = dimension
    return math.exp(math.lgamma(d + 1) + math.lgamma(d / 2) - math.lgamma(3 * d / 2)) / 2


def myrheim_meyer_dimension(ordering_fraction: float) -> float:
    """The dimension whose expected ordering fraction is the given one (inverse of the above)."""
    if not 0.0 < ordering_fraction < 1.0:
        raise ValueError(f"ordering fraction must be in (0, 1), got {ordering_fraction}")
    lo, hi = 0.5, 64.0  # f decreases monotonically in d
    for _ in range(100):
        mid = (lo + hi) / 2
        if ordering_fraction_expectation(mid) > ordering_fraction:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


# --- counts ---------------------------------------------------------------------------------


def _batch(relations: Tensor) -> tuple[Tensor, bool]:
    relations = torch.as_tensor(relations).bool()
    single = relations.dim() == 2
    return (relations[None] if single else relations), single


def _out(values: Tensor, single: bool) -> Tensor:
    return values[0] if single else values


def between_counts(relations: Tensor) -> Tensor:
    """``[.., i, j]``: the number of elements strictly between i and j (for related pairs; any
    other pair's entry counts common elements of i's future and j's past, which is 0)."""
    r = relations.float()
    return torch.matmul(r, r)


def ordering_fraction(relations: Tensor) -> Tensor:
    """Related pairs divided by all pairs (float64), one value per causal set."""
    r, single = _batch(relations)
    n = r.shape[-1]
    pairs = n * (n - 1) / 2
    values = r.sum((1, 2)).double() / pairs if n > 1 else torch.zeros(len(r), dtype=torch.float64)
    return _out(values, single)


def link_count(relations: Tensor) -> Tensor:
    """Links (relations with nothing in between), int64, one per causal set."""
    return interval_abundances(relations, 0)[..., 0]


def interval_abundances(relations: Tensor, max_size: int) -> Tensor:
    """``N_k`` for k = 0 .. ``max_size``: related pairs with exactly k elements between them
    (N_0 is the number of links). int64, [max_size + 1] or [B, max_size + 1]."""
    r, single = _batch(relations)
    between = between_counts(r).long()
    b = len(r)
    keep = r & (between <= max_size)
    batch_index = torch.arange(b)[:, None, None].expand_as(r)[keep]
    flat = batch_index * (max_size + 1) + between[keep]
    counts = torch.bincount(flat, minlength=b * (max_size + 1)).view(b, max_size + 1)
    return _out(counts, single)


def longest_chain(relations: Tensor) -> Tensor:
    """Elements in the longest chain, int64, one per causal set (0 for an empty set)."""
    r, single = _batch(relations)
    if r.shape[-1] == 0:
        return _out(torch.zeros(len(r), dtype=torch.long), single)
    return _out(longest_chains(transitive_reduction(r)).amax(1).long() + 1, single)


def largest_antichain(relations: Tensor) -> int:
    """Elements in the largest antichain (the width) of one causal set, exactly.

    By Dilworth's theorem the width is the fewest chains that cover the set, which is N less a
    maximum matching of the bipartite graph "i before j" (Hopcroft-Karp, in scipy). The
    relations must be transitive (a partial order, as :func:`~.orders.transitive_closure`
    gives); a relation matrix that is not would count paths as chains no longer.
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_bipartite_matching

    r = torch.as_tensor(relations).bool()
    n = r.shape[-1]
    if n == 0:
        return 0
    # matched from the later element's side: from the earlier one's, the search meets a
    # natural labelling's worst case (some hundred times slower on a dense order of 300)
    matched = maximum_bipartite_matching(csr_matrix(r.numpy().T), perm_type="column")
    return int(n - (matched >= 0).sum())


# --- actions and dimension estimators -------------------------------------------------------

#: Coefficients (c, c_0, c_1, ...) of the unsmeared Benincasa-Dowker action
#: ``S = prefactor * (c N + sum_k c_k N_k)`` in 2 and 4 dimensions.
BD_COEFFICIENTS = {
    2: (2.0, (1.0, -2.0, 4.0, -2.0)),
    4: (4.0 / math.sqrt(6.0), (1.0, -1.0, 9.0, -16.0, 8.0)),
}


def benincasa_dowker_action(relations: Tensor, dimension: int) -> Tensor:
    """The Benincasa-Dowker action (float64; the discreteness length and hbar are 1).

    d = 2: ``2 (N - 2 N_0 + 4 N_1 - 2 N_2)``; d = 4: ``(4 / sqrt 6)(N - N_0 + 9 N_1 - 16 N_2 +
    8 N_3)``, with N_k the :func:`interval_abundances`. For sprinklings into a flat 2D diamond
    its mean is 2 for every N (the boundary term of the diamond).
    """
    if dimension not in BD_COEFFICIENTS:
        raise ValueError(f"the action is defined here for dimension 2 or 4, got {dimension!r}")
    prefactor, (c, *ck) = BD_COEFFICIENTS[dimension]
    r, single = _batch(relations)
    counts = interval_abundances(r, len(ck) - 1).double()
    values = prefactor * (c * r.shape[-1] + counts @ torch.tensor(ck, dtype=torch.float64))
    return _out(values, single)


def midpoint_dimension(relations: Tensor) -> Tensor:
    """The midpoint-scaling dimension estimate, float64, one per causal set.

    The element whose smaller side (past or future) is largest splits the set most evenly;
    in a d-dimensional diamond of N elements each side of that midpoint is a diamond of half
    the height, so it holds about N / 2**d elements: ``d = log2(N / that size)``.
    """
    r, single = _batch(relations)
    n = r.shape[-1]
    sides = torch.minimum(r.sum(1), r.sum(2)).amax(1).double()
    values = torch.log2(n / sides.clamp(min=1))
    return _out(values, single)
