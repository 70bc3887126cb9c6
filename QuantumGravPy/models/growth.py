"""A generative model of causal sets that grows them one element at a time:
:class:`CausalSetGrowth`.

As in classical sequential growth, element k is born to the future of, or unrelated to, the
k elements before it: it chooses its past. The choice is a sequence of yes-or-no decisions
over the earlier elements, from the latest back to the first, each asking "is j a link to k?"
(one of the maximal elements of k's past); an element below one already chosen is in k's past
already and is not asked. The past is the down-set of the chosen links, so every causal set
it grows is a partial order, transitive and acyclic by construction, in a natural labelling.

Each decision's probability is a small network of what element j and the set grown so far
look like at that moment: the set's progress ``k / N``, j's place ``j / k``, the sizes of j's
past and of its future so far, its links upwards so far, whether it is maximal, the number of
maximal elements, how many links of k were chosen above j already, how much of the set is in
k's past so far, how much of j's past is, and how much of j's future so far is also the future
of a chosen link (elements near a chosen one share its future). Trained by teacher
forcing: the data's causal sets (graphs whose links are their edges, in a natural labelling,
as the library's causal sets are) give every decision's answer, and the loss is each graph's
negative log-likelihood per element, a ``model_loss`` term (``nll``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.utils import to_dense_adj

from ..physics import CausalSet, transitive_closure

FEATURES = 12  # what a decision sees, see _teacher_features


class CausalSetGrowth(nn.Module):
    """Grows causal sets element by element, each new element choosing its links to the
    earlier ones; every sample is a valid order by construction.

    ``sizes``: [min, max] elements of the sets :meth:`generate` grows (each drawn uniformly,
    as the embedded data's ``data.num_points`` are); ``hidden``, ``layers``: the decision
    network's width and depth. ``forward(batch)`` returns ``{"nll": [graphs]}``, each graph's
    negative log-likelihood per element; train it as a ``model_loss`` task with that term.
    """

    def __init__(
        self,
        in_channels: int = 0,
        outputs: Any = None,
        *,
        sizes: Sequence[int] = (32, 64),
        hidden: int = 64,
        layers: int = 2,
    ):
        super().__init__()
        low, high = (int(s) for s in sizes)
        if not 1 <= low <= high:
            raise ValueError(f"sizes: expected [min, max] with 1 <= min <= max, found {sizes}")
        self.sizes = (low, high)
        widths = [FEATURES, *[hidden] * layers]
        parts: list[nn.Module] = []
        for a, b in itertools.pairwise(widths):
            parts += [nn.Linear(a, b), nn.SiLU()]
        self.decide = nn.Sequential(*parts, nn.Linear(widths[-1], 1))

    reads = ("x", "edge_index")  # what the training loader gathers (with batch and ptr)

    def forward(self, batch: Any) -> dict[str, Tensor]:
        links, sizes = _dense_links(batch)
        relations = transitive_closure(links)
        features, asked = _teacher_features(relations, links, sizes)
        logits = self.decide(features).squeeze(-1)
        # transposed: [graphs, j, k], as the features are laid out
        loss = F.binary_cross_entropy_with_logits(logits, links.to(logits.dtype), reduction="none")
        nll = (loss * asked).sum((1, 2)) / sizes.to(logits.dtype)
        return {"nll": nll}

    @torch.no_grad()
    def generate(
        self, num: int, generator: torch.Generator | None = None, *, device: Any = None
    ) -> list[CausalSet]:
        """``num`` causal sets grown from the model, each of a size drawn uniformly from
        ``sizes``; the same ``generator`` state gives the same sets."""
        device = torch.device(device or next(self.parameters()).device)
        low, high = self.sizes
        sizes = torch.randint(low, high + 1, (num,), generator=generator)
        n = int(sizes.max()) if num else 0
        relations = torch.zeros(num, n, n, dtype=torch.bool, device=device)
        links = torch.zeros_like(relations)
        sizes_d = sizes.to(device)
        for k in range(1, n):
            growing = sizes_d > k  # [num]
            u = torch.rand(num, k, generator=generator).to(device)
            chosen = torch.zeros(num, k, dtype=torch.bool, device=device)
            past = torch.zeros_like(chosen)
            state = _step_state(relations[:, :k, :k], links[:, :k, :k], k, sizes_d)
            futures = torch.zeros_like(chosen)  # of the links chosen so far
            for j in range(k - 1, -1, -1):
                forced = past[:, j]  # below a chosen link: in the past already
                above = chosen.sum(1, keepdim=True)  # links of k chosen so far (all above j)
                features = _decision(
                    state, j, above, k, past, relations[:, :k, j], relations[:, j, :k] & futures
                )
                p = torch.sigmoid(self.decide(features).squeeze(-1))
                pick = ~forced & (u[:, j] < p) & growing
                chosen[:, j] = pick
                futures |= pick[:, None] & relations[:, j, :k]
                # j and everything below it join k's past
                past[:, : j + 1] |= pick[:, None] & torch.cat(
                    [relations[:, :j, j], torch.ones_like(pick[:, None])], dim=1
                )
            links[:, :k, k] = chosen
            relations[:, :k, k] = past
        return [
            CausalSet(relations=relations[i, :s, :s].cpu(), links=links[i, :s, :s].cpu())
            for i, s in enumerate(sizes.tolist())
        ]


def _dense_links(batch: Any) -> tuple[Tensor, Tensor]:
    """Each graph's links ``[graphs, n, n]`` (bool; ``[i, j]`` for i before j, from its edges
    in a natural labelling) and its number of elements."""
    index = batch.batch if getattr(batch, "batch", None) is not None else None
    if index is None:
        index = torch.zeros(batch.num_nodes, dtype=torch.long, device=batch.edge_index.device)
    num_graphs = int(batch.num_graphs) if hasattr(batch, "num_graphs") else 1
    sizes = torch.bincount(index, minlength=num_graphs)
    adjacency = to_dense_adj(batch.edge_index, index, batch_size=num_graphs) > 0
    return adjacency.triu(1), sizes


def _teacher_features(relations: Tensor, links: Tensor, sizes: Tensor) -> tuple[Tensor, Tensor]:
    """Every decision's features ``[graphs, j, k, FEATURES]`` as :meth:`generate` computes them
    one step at a time, and where a decision is asked (j < k < size, j not forced)."""
    r, lk = relations.float(), links.float()
    g, n = r.shape[0], r.shape[-1]
    k = torch.arange(n, dtype=r.dtype, device=r.device)
    j = k[:, None]
    above = torch.cumsum(r, -1) - r  # [g, j, k]: elements i < k after j
    links_up = torch.cumsum(lk, -1) - lk
    past = r.sum(1)[:, :, None].expand(g, n, n)  # [g, j, k]: j's past (all before j)
    maximal = (above == 0).to(r.dtype)
    earlier = (j < k).to(r.dtype)  # [j, k]
    maxima = (maximal * earlier).sum(1, keepdim=True).expand(g, n, n)
    # links of k chosen above j: the links to k from elements after j
    chosen = torch.flip(torch.cumsum(torch.flip(lk, [1]), 1), [1]) - lk
    # k's past so far, when j is asked: the elements at or below a link of k after j. Each
    # element's latest link of k at or above it, then which of those come after j
    at_or_below = r + torch.eye(n, dtype=r.dtype, device=r.device)  # [g, i, l]
    latest = (at_or_below[:, :, :, None] * lk[:, None, :, :] * (k[:, None] + 1)).amax(2) - 1
    so_far = latest[:, :, None, :] > j[None, None]  # [g, i, j, k]
    in_past = so_far.to(r.dtype).sum(1)  # [g, j, k]
    shared = (r[:, :, :, None] * so_far).sum(1)  # of j's past
    # and j's future so far that is the future of a link of k after j
    latest_below = (r[:, :, :, None] * lk[:, :, None, :] * (k[:, None, None] + 1)).amax(1) - 1
    after = latest_below[:, :, None, :] > j[None, None]  # [g, i, j, k]: i above such a link
    before_k = (k[:, None] < k[None, :]).to(r.dtype)  # [i, k]: i < k
    common = (r.transpose(1, 2)[:, :, :, None] * after * before_k[None, :, None, :]).sum(1)
    total = sizes.to(r.dtype)[:, None, None]
    kk = k.clamp(min=1).expand(n, n)
    features = torch.stack(
        [
            (k / total).expand(g, n, n),
            (j / kk).expand(g, n, n),
            past / kk,
            above / kk,
            links_up / kk,
            maximal,
            maxima / kk,
            chosen / kk,
            (1.0 / kk).expand(g, n, n),
            in_past / kk,
            shared / past.clamp(min=1),
            common / above.clamp(min=1),
        ],
        dim=-1,
    )
    inside = (k < total) & (j < k)
    asked = inside & ~(relations & ~links)
    return features, asked.to(r.dtype)


def _step_state(relations: Tensor, links: Tensor, k: int, sizes: Tensor) -> dict[str, Tensor]:
    """What the decisions of step k see of the set grown so far (``[num, k, k]``)."""
    r = relations.float()
    return {
        "progress": k / sizes.float(),
        "past": r.sum(1),  # [num, k]
        "above": r.sum(2),
        "links_up": links.float().sum(2),
        "maxima": (r.sum(2) == 0).float().sum(1),
    }


def _decision(
    state: dict[str, Tensor],
    j: int,
    chosen: Tensor,
    k: int,
    past: Tensor,
    below_j: Tensor,
    common: Tensor,
) -> Tensor:
    """The features of the decision "is j a link to k?" (see :func:`_teacher_features`);
    ``past``: k's past so far, ``below_j``: j's past, ``common``: j's future that is a chosen
    link's (each ``[num, k]``, bool)."""
    num = chosen.shape[0]
    above = state["above"][:, j]
    j_past = state["past"][:, j]
    ones = torch.ones(num, device=chosen.device)
    return torch.stack(
        [
            state["progress"],
            ones * (j / k),
            state["past"][:, j] / k,
            above / k,
            state["links_up"][:, j] / k,
            (above == 0).float(),
            state["maxima"] / k,
            chosen.squeeze(1).float() / k,
            ones / k,
            past.sum(1).float() / k,
            (below_j & past).sum(1).float() / j_past.clamp(min=1),
            common.sum(1).float() / above.clamp(min=1),
        ],
        dim=-1,
    )
