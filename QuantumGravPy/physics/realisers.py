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
    right, left = _orient(linked, apart)
    past = related.sum(0)
    ranks = torch.stack([past + left.sum(1), past + right.sum(1)], dim=1)
    _check(ranks, related)
    return ranks


def _orient(linked: Tensor, apart: Tensor) -> tuple[Tensor, Tensor]:
    """``(right, left)``: ``right[x, z]`` when z is right of x, ``left[x, z]`` when left. Not
    checked here: an order that is not 2D gets an orientation that :func:`_check` refuses."""
    n = linked.shape[0]
    first, second = torch.nonzero(linked, as_tuple=True)
    index = torch.cat([torch.stack([first, second]), torch.stack([second, first])], dim=1)
    with torch.sparse.check_sparse_tensor_invariants(False):
        links = torch.sparse_coo_tensor(index, torch.ones(index.shape[1]), (n, n)).coalesce()
    right = torch.zeros(n, n, dtype=torch.bool)
    left = torch.zeros(n, n, dtype=torch.bool)
    unknown = apart.clone()
    seeds = 0
    while True:
        pair = int(unknown.view(-1).to(torch.uint8).argmax())
        if not unknown.view(-1)[pair]:
            return right, left
        if seeds == 1:
            # What the first seed leaves are pairs of elements that everything else sees alike
            # (twins): ordering them by label is a realiser unless they nest; the check says.
            trial = _upper(unknown)
            if _transitive(right | trial, left | trial.T, apart):
                return right | trial, left | trial.T
        seeds += 1
        fresh_right = torch.zeros_like(right)
        fresh_left = torch.zeros_like(left)
        fresh_right[pair // n, pair % n] = fresh_left[pair % n, pair // n] = True
        while True:
            right |= fresh_right
            left |= fresh_left
            unknown &= ~(fresh_right | fresh_left)
            # z is right (left) of y if it is of an element linked to y: from what is new
            to_right = torch.sparse.mm(links, fresh_right.float()) > 0
            to_left = torch.sparse.mm(links, fresh_left.float()) > 0
            fresh_right, fresh_left = to_right & unknown, to_left & unknown
            # z right of x is x left of z
            swapped_right = fresh_left.t().contiguous()
            fresh_left |= fresh_right.t().contiguous()
            fresh_right |= swapped_right
            if not bool(fresh_right.any()):  # (fresh_left is its transpose)
                break


def _upper(mask: Tensor) -> Tensor:
    return torch.triu(mask, diagonal=1)


def _transitive(right: Tensor, left: Tensor, apart: Tensor) -> bool:
    """Whether every incomparable pair is oriented once and "right of" is transitive on them:
    each element's count of elements left of it then grows along "right of"."""
    if bool((right & left).any()) or not torch.equal(right | left, apart):
        return False
    count = left.sum(1)
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
