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
using that "z right of x" is "x left of z", a sprinkling's incomparable pairs are oriented in
a dozen rounds at 1,024 to 2,048 elements (each a product with the sparse link matrix), but
for twins, which are ordered by label. The result is checked: its two orders must intersect to
the order, else the order is not two-dimensional and :class:`NotTwoDimensional` says so.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .orders import transitive_reduction


class NotTwoDimensional(ValueError):
    """The order is not the intersection of two linear orders."""


def light_cone_ranks(relations: Tensor, links: Tensor | None = None) -> Tensor:
    """Each element's rank (0 to N - 1) in the two linear orders of a 2D order given by its
    relations (``relations[i, j]`` true when i precedes j; transitively closed): int64 [N, 2],
    column 0 the order in which an element's incomparable elements on its left come first
    (``u = t + x`` for the coordinates of a sprinkling, or ``v``: which of the two is a choice
    the order cannot make). ``links``: its link matrix, if at hand (else derived). Raises
    :class:`NotTwoDimensional` for an order of higher dimension. (Given the transpose, the
    reversed order, it returns the reversed order's realiser: that order is 2D too.)
    """
    related = relations.bool().cpu().contiguous()
    n = related.shape[0]
    if related.shape != (n, n):
        raise ValueError(f"relations must be a square matrix, got shape {tuple(related.shape)}")
    apart = ~(related | related.T)
    apart.fill_diagonal_(False)
    linked = transitive_reduction(related) if links is None else links.bool().cpu()
    ranks = _ranks(_orient(linked, apart, related), related)
    _check(ranks, related)
    return ranks


def _orient(linked: Tensor, apart: Tensor, related: Tensor) -> Tensor:
    """``right[x, z]``: z is right of x (so x is left of z: "left of" is ``right.T``). Not
    checked here: an order that is not 2D gets an orientation that :func:`_check` refuses.

    One seed's propagation orients its whole class of pairs (a sprinkling's incomparable pairs
    are one class but for twins, elements every other element sees alike). What is left is
    first tried ordered by label; failing that, the next seed propagates through every pair
    decided so far (Golumbic's algorithm: a later class is one of the pairs still undecided),
    a dense product, which at 2,048 elements bounds the seeds that are worth the time."""
    n = linked.shape[0]
    first, second = torch.nonzero(linked, as_tuple=True)
    index = torch.cat([torch.stack([first, second]), torch.stack([second, first])], dim=1)
    with torch.sparse.check_sparse_tensor_invariants(False):
        through = torch.sparse_coo_tensor(index, torch.ones(index.shape[1]), (n, n)).coalesce()
    right = torch.zeros(n, n, dtype=torch.bool)
    unknown = apart.clone()  # the pairs neither way round yet
    for seeds in range(max(16, (1 << 26) // max(n, 1) ** 2) + 1):
        if n == 0 or not bool(unknown.any()):
            return right
        if seeds > 0:
            trial = right | torch.triu(unknown, diagonal=1)
            if _realises(_ranks(trial, related), related):
                return trial
            through = (~unknown).float()  # related, or oriented already
        pair = int(unknown.view(-1).to(torch.uint8).argmax())
        fresh = torch.zeros(n, n)
        fresh[pair // n, pair % n] = 1.0
        while True:
            found = fresh > 0
            right |= found
            unknown &= ~(found | found.T)
            # z right of x, x and y decided (related, or oriented): z right of y (a row of the
            # product); x right of z: y right of z (a column, from the transposed product)
            rows = _product(through, fresh) > 0
            columns = _product(through, fresh.T.contiguous()) > 0
            found = (rows | columns.T) & unknown
            if not bool(found.any()):
                break
            fresh = found.float()
    raise NotTwoDimensional(
        "the order has more parts whose left and right are independent of each other than "
        "light_cone_ranks orients at this size"
    )


def _product(a: Tensor, b: Tensor) -> Tensor:
    return torch.sparse.mm(a, b) if a.is_sparse else a @ b


def _ranks(right: Tensor, related: Tensor) -> Tensor:
    past = related.sum(0)
    return torch.stack([past + right.sum(0), past + right.sum(1)], dim=1)  # left, right of x


def _realises(ranks: Tensor, related: Tensor) -> bool:
    """Whether ``ranks`` are two linear orders (no ties) that intersect to the order."""
    order = torch.arange(len(ranks))
    if not all(torch.equal(torch.sort(column).values, order) for column in ranks.T):
        return False
    u, v = ranks[:, 0], ranks[:, 1]
    return torch.equal((u[:, None] < u[None, :]) & (v[:, None] < v[None, :]), related)


def _check(ranks: Tensor, related: Tensor) -> None:
    if _realises(ranks, related):
        return
    u, v = ranks[:, 0], ranks[:, 1]
    both = (u[:, None] < u[None, :]) & (v[:, None] < v[None, :])
    wrong = (both != related).nonzero()
    if not len(wrong):  # a tie: two elements in one place of a linear order
        raise NotTwoDimensional("the order is not two-dimensional: no realiser was found")
    x, y = (int(i) for i in wrong[0])
    raise NotTwoDimensional(
        f"the order is not two-dimensional: the two linear orders found put element {x} "
        f"{'before' if both[x, y] else 'not before'} element {y}, which the order does not"
    )
