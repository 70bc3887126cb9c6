"""Where each element of a two-dimensional causal set lies: its ranks in the order's realiser.

A 2D order is the intersection of two linear orders, and for a sprinkling into a 2D spacetime
they are the orders of the light-cone coordinates ``u = t + x`` and ``v = t - x``: x precedes y
exactly when both of x's coordinates are smaller. Each element's ranks in the two orders place
it in the diamond as the causal set alone can (up to exchanging u and v, a reflection no order
tells apart), where its past and future sizes leave a left-right ambiguity. In a curved
spacetime the ranks are the coordinates in which each light-cone direction holds its elements
evenly, and the way the elements crowd in them is the conformal factor, whose second
derivatives are the curvature.

:func:`light_cone_ranks` finds the two orders from the order alone. Two incomparable elements
are left and right of each other, and the relation propagates: if z is incomparable to both
ends of a link x -> y, z is on the same side of y as of x (the region right of x, outside x's
future, is right of y too). Starting from one pair, spreading along the links both ways and
using that "z right of x" is "x left of z", every incomparable pair is oriented in a dozen
rounds at 1,024 to 2,048 elements; each round is a product with the sparse link matrix. The
result is checked: its two orders must intersect to the order, else the order is not
two-dimensional and :class:`NotTwoDimensional` says which pair fails.
"""

from __future__ import annotations

import torch
from torch import Tensor


class NotTwoDimensional(ValueError):
    """The order is not the intersection of two linear orders."""


def light_cone_ranks(relations: Tensor, links: Tensor | None = None) -> Tensor:
    """Each element's rank (0 to N - 1) in the two linear orders of a 2D order given by its
    relations (``relations[i, j]`` true when i precedes j; transitively closed): int64 [N, 2],
    column 0 the order in which an element's incomparable elements on its left come first
    (``u = t + x`` for the coordinates of a sprinkling, or ``v``: which of the two is a choice
    the order cannot make). ``links``: its link matrix, if at hand (else derived). Raises
    :class:`NotTwoDimensional` for an order of higher dimension.
    """
    related = relations.bool().cpu().contiguous()
    n = related.shape[0]
    if related.shape != (n, n):
        raise ValueError(f"relations must be a square matrix, got shape {tuple(related.shape)}")
    apart = ~(related | related.T)
    apart.fill_diagonal_(False)
    linked = _links(related) if links is None else links.bool().cpu()
    right = _orient(linked, apart)
    past = related.sum(0)
    ranks = torch.stack([past + right.sum(0), past + right.sum(1)], dim=1)  # left, right of x
    _check(ranks, related)
    return ranks


def _orient(linked: Tensor, apart: Tensor) -> Tensor:
    """``right[x, z]``: z is right of x (so x is left of z: "left of" is ``right.T``). Not
    checked here: an order that is not 2D gets an orientation that :func:`_check` refuses."""
    n = linked.shape[0]
    first, second = torch.nonzero(linked, as_tuple=True)
    index = torch.cat([torch.stack([first, second]), torch.stack([second, first])], dim=1)
    with torch.sparse.check_sparse_tensor_invariants(False):
        links = torch.sparse_coo_tensor(index, torch.ones(index.shape[1]), (n, n)).coalesce()
    right = torch.zeros(n, n, dtype=torch.bool)
    unknown = apart.clone()  # the pairs neither way round yet
    seeds = 0
    while True:
        pair = int(unknown.view(-1).to(torch.uint8).argmax())
        if not unknown.view(-1)[pair]:
            return right
        if seeds == 1:
            # What the first seed leaves are pairs of elements that everything else sees alike
            # (twins): ordering them by label is a realiser unless they nest; the check says.
            trial = right | torch.triu(unknown, diagonal=1)
            if _transitive(trial, apart):
                return trial
        seeds += 1
        fresh = torch.zeros(n, n)
        fresh[pair // n, pair % n] = 1.0
        while True:
            found = fresh > 0
            right |= found
            unknown &= ~(found | found.T)
            # z right of x and x linked to y: z right of y (a row of the product); x right
            # of z and x linked to y: y right of z (a column, from the transposed product)
            rows = torch.sparse.mm(links, fresh) > 0
            columns = torch.sparse.mm(links, fresh.T.contiguous()) > 0
            found = (rows | columns.T) & unknown
            if not bool(found.any()):
                break
            fresh = found.float()


def _transitive(right: Tensor, apart: Tensor) -> bool:
    """Whether every incomparable pair is oriented once and "right of" is transitive on them:
    each element's count of elements left of it then grows along "right of"."""
    if bool((right & right.T).any()) or not torch.equal(right | right.T, apart):
        return False
    count = right.sum(0)
    return bool((count[None, :] > count[:, None])[right].all())


def _links(related: Tensor) -> Tensor:
    """The pairs with nothing between them (the transitive reduction)."""
    between = (related.float() @ related.float()) > 0
    return related & ~between


def _check(ranks: Tensor, related: Tensor) -> None:
    n = related.shape[0]
    for column in ranks.T:
        if not torch.equal(torch.sort(column).values, torch.arange(n)):
            raise NotTwoDimensional("the order is not two-dimensional: no realiser was found")
    u, v = ranks[:, 0], ranks[:, 1]
    both = (u[:, None] < u[None, :]) & (v[:, None] < v[None, :])
    wrong = (both != related).nonzero()
    if len(wrong):
        x, y = (int(i) for i in wrong[0])
        raise NotTwoDimensional(
            f"the order is not two-dimensional: the two linear orders found put element {x} "
            f"{'before' if both[x, y] else 'not before'} element {y}, which the order does not"
        )
