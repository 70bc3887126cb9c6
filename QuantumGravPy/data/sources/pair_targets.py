"""Targets per pair of elements of a causal set (``data.pairs``): the set's relations or links
become the graph's ``relations_index`` or ``links_index`` ([2, P], in the natural labelling its
nodes have), the pairs of edge-level tasks. A file's n x n matrix of ``data.targets`` is read
at them; a generated set gets two targets of its own there, ``is_link`` and
``interval_size``."""

from __future__ import annotations

import torch

from ...errors import DataError
from ...physics import OrderStructure
from ...physics.observables import between_counts


def order_pairs(kind: str, related: torch.Tensor, structure: OrderStructure) -> torch.Tensor:
    """The pairs (i, j), i before j, of ``data.pairs`` in the natural labelling, [2, P] int64
    sorted by i, then j: the links, or every relation (``related`` as the file orders it)."""
    if kind == "links":
        return structure.links
    order = structure.labelling
    related = related.cpu().bool()
    if order is not None:
        related = related[order][:, order]
    return related.nonzero().t().contiguous()


def values_at_pairs(
    value: torch.Tensor,
    pairs: torch.Tensor,
    transpose: bool,
    order: torch.Tensor | None,
    n: int,
    where: str,
    kind: str,
) -> torch.Tensor:
    """A matrix target's values at ``pairs`` (one per pair), refused, naming ``where`` (the
    file, sample and array), if it holds a value off them, or in the columns of a stacked
    file's padding beyond ``n`` (its rows there are cut off as it is read). ``value`` is as
    stored (transposed where ``transpose``, in the file's labelling, which ``order`` turns into
    the natural one); ``kind`` is ``data.pairs``."""
    if value[:, n:].any():
        raise DataError(f"{where} holds values beyond the causal set's {n} elements")
    value = value[:, :n]
    value = value.t() if transpose else value
    if order is not None:
        value = value[order][:, order]
    picked = value[pairs[0], pairs[1]]
    off = value.ne(0)
    off[pairs[0], pairs[1]] = False
    if bool(off.any()):
        i, j = (int(k) for k in off.nonzero()[0])
        if order is not None:
            i, j = int(order[i]), int(order[j])
        what = "relation" if kind == "relations" else "link"
        raise DataError(
            f"{where} is not zero at {int(off.sum())} pair(s) that are not a {what} of the "
            f"causal set (elements {i} and {j}, as the file numbers them); a matrix target is "
            f"read at the set's {kind} (data.pairs)"
        )
    return picked


def embedded_pair_targets() -> tuple[str, ...]:
    """The targets a generated set holds at its pairs (see :func:`embedded_pairs`)."""
    return ("is_link", "interval_size")


def embedded_pairs(kind: str, relations: torch.Tensor, links: torch.Tensor) -> dict:
    """A generated causal set's pairs of ``data.pairs`` (its ``relations`` and ``links`` in a
    natural labelling, bool ``[n, n]``) and its targets at them: ``is_link`` (1 for a link)
    and ``interval_size`` (the elements strictly between the two; exact counts in float32 for
    any n below 2^24)."""
    pairs = (links if kind == "links" else relations).nonzero().t().contiguous()
    first, second = pairs
    return {
        f"{kind}_index": pairs,
        "is_link": links[first, second].float(),
        "interval_size": between_counts(relations)[first, second].float(),
    }
