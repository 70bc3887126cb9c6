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
of a chosen link (elements near a chosen one share its future); and, on a log scale, these
counts, the size N, the longest chain ending at j and in the set, and the set's relations so
far, whose growth with N is what the set's dimension sets. Trained by teacher
forcing: the data's causal sets (graphs whose links are their edges, in a natural labelling,
as the library's causal sets are) give every decision's answer, and the loss is each graph's
negative log-likelihood per element, a ``model_loss`` term (``nll``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.utils import to_dense_adj

from ..physics import CausalSet, transitive_closure

FEATURES = 23  # what a decision sees, see _features
EARLIER = (12, 19)  # the first FEATURES that growth models of earlier versions read alone
LOG_SCALE = 8.0  # counts are fed as log(1 + count) / 8: about 1 at 3,000 elements


class CausalSetGrowth(nn.Module):
    """Grows causal sets element by element, each new element choosing its links to the
    earlier ones; every sample is a valid order by construction.

    ``sizes``: [min, max] elements of the sets :meth:`generate` grows (each drawn uniformly,
    as the embedded data's ``data.num_points`` are); ``hidden``, ``layers``: the decision
    network's width and depth. ``dimensions``: the data's ``data.dimensions``, to condition
    every decision on the set's dimension (the graphs' label ``y`` is its index there, as the
    ``dimension`` data kind gives it); :meth:`generate` is then asked for one. ``forward(batch)``
    returns ``{"nll": [graphs]}``, each graph's negative log-likelihood per element; train it
    as a ``model_loss`` task with that term.
    """

    def __init__(
        self,
        in_channels: int = 0,
        outputs: Any = None,
        *,
        sizes: Sequence[int] = (32, 64),
        hidden: int = 64,
        layers: int = 2,
        dimensions: Sequence[int] | None = None,
    ):
        super().__init__()
        low, high = (int(s) for s in sizes)
        if not 1 <= low <= high:
            raise ValueError(f"sizes: expected [min, max] with 1 <= min <= max, found {sizes}")
        self.sizes = (low, high)
        self.dimensions = tuple(int(d) for d in dimensions) if dimensions else ()
        self.inputs = FEATURES  # SHARES: the weights of an earlier version (see loading)
        widths = [FEATURES + len(self.dimensions), *[hidden] * layers]
        parts: list[nn.Module] = []
        for a, b in itertools.pairwise(widths):
            parts += [nn.Linear(a, b), nn.SiLU()]
        self.decide = nn.Sequential(*parts, nn.Linear(widths[-1], 1))
        # what the training loader gathers (with batch and ptr): y is the dimension's index
        self.reads = ("x", "edge_index", "y") if self.dimensions else ("x", "edge_index")
        self.register_load_state_dict_pre_hook(_earlier_weights)

    def _decide(self, features: Tensor, condition: Tensor | None) -> Tensor:
        """The logits of decisions with ``features`` ``[rows, FEATURES]``, of sets of the
        dimensions ``condition`` (``[rows, len(dimensions)]`` one-hot)."""
        features = features[:, : self.inputs]
        if condition is not None:
            features = torch.cat([features, condition], 1)
        return self.decide(features).squeeze(-1)

    def _condition(self, index: Tensor) -> Tensor | None:
        if not self.dimensions:
            return None
        return F.one_hot(index.long(), len(self.dimensions)).float()

    def forward(self, batch: Any) -> dict[str, Tensor]:
        links, sizes = _dense_links(batch)
        relations = transitive_closure(links)
        features, asked = _teacher_features(relations, links, sizes)
        label = getattr(batch, "y", None) if self.dimensions else None
        if self.dimensions and label is None:
            raise ValueError(
                "CausalSetGrowth(dimensions=...) reads each graph's dimension from its label "
                "y (data.kind: dimension gives it); these graphs have none"
            )
        # only the decisions asked: a forced one (below a chosen link) has no say
        graph, j, k = asked.nonzero(as_tuple=True)
        condition = self._condition(label.view(-1)[graph]) if label is not None else None
        logits = self._decide(features[graph, j, k].to(links.device), condition)
        target = links[graph, j, k].to(logits.dtype)
        loss = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
        nll = logits.new_zeros(len(sizes)).index_add(0, graph, loss)
        return {"nll": nll / sizes.to(logits.dtype)}

    @torch.no_grad()
    def generate(
        self,
        num: int,
        generator: torch.Generator | None = None,
        *,
        device: Any = None,
        dimension: int | None = None,
    ) -> list[CausalSet]:
        """``num`` causal sets grown from the model, each of a size drawn uniformly from
        ``sizes``; the same ``generator`` state gives the same sets. ``dimension``: the one
        to grow, for a model conditioned on it (one of its ``dimensions``; by default each
        set's is drawn uniformly from them)."""
        device = torch.device(device or next(self.parameters()).device)
        condition = self._asked(num, dimension, generator)
        low, high = self.sizes
        sizes = torch.randint(low, high + 1, (num,), generator=generator)
        n = int(sizes.max()) if num else 0
        relations = torch.zeros(num, n, n, dtype=torch.bool, device=device)
        links = torch.zeros_like(relations)
        heights = torch.ones(num, n, device=device)  # of the longest chain ending at each
        sizes_d = sizes.to(device)
        condition = condition.to(device) if condition is not None else None
        for k in range(1, n):
            growing = sizes_d > k  # [num]
            u = torch.rand(num, k, generator=generator).to(device)
            chosen = torch.zeros(num, k, dtype=torch.bool, device=device)
            past = torch.zeros_like(chosen)
            state = _step_state(relations[:, :k, :k], links[:, :k, :k], heights[:, :k], sizes_d)
            futures = torch.zeros_like(chosen)  # of the links chosen so far
            for j in range(k - 1, -1, -1):
                forced = past[:, j]  # below a chosen link: in the past already
                above = chosen.sum(1, keepdim=True)  # links of k chosen so far (all above j)
                features = _decision(
                    state, j, above, k, past, relations[:, :k, j], relations[:, j, :k] & futures
                )
                p = torch.sigmoid(self._decide(features, condition))
                pick = ~forced & (u[:, j] < p) & growing
                chosen[:, j] = pick
                futures |= pick[:, None] & relations[:, j, :k]
                # j and everything below it join k's past
                past[:, : j + 1] |= pick[:, None] & torch.cat(
                    [relations[:, :j, j], torch.ones_like(pick[:, None])], dim=1
                )
            links[:, :k, k] = chosen
            relations[:, :k, k] = past
            heights[:, k] = 1 + (past * heights[:, :k]).amax(1)
        return [
            CausalSet(relations=relations[i, :s, :s].cpu(), links=links[i, :s, :s].cpu())
            for i, s in enumerate(sizes.tolist())
        ]

    def _asked(
        self, num: int, dimension: int | None, generator: torch.Generator | None
    ) -> Tensor | None:
        """The condition of each of ``num`` sets: ``dimension``'s, or one drawn for each."""
        if not self.dimensions:
            if dimension is not None:
                raise ValueError(
                    f"dimension: this model is not conditioned on one (asked for {dimension})"
                )
            return None
        if dimension is None:
            index = torch.randint(len(self.dimensions), (num,), generator=generator)
        elif int(dimension) in self.dimensions:
            index = torch.full((num,), self.dimensions.index(int(dimension)))
        else:
            known = ", ".join(map(str, self.dimensions))
            raise ValueError(f"dimension: the model knows {known}, not {dimension}")
        return self._condition(index)


def _earlier_weights(model: CausalSetGrowth, state_dict: dict, prefix: str, *args: Any) -> None:
    """Weights of an earlier version read the first features alone (as many as that version
    had, :data:`EARLIER`): the first layer is made that narrow, and the model feeds it those
    (a hook torch calls before the weights are loaded)."""
    first = state_dict.get(f"{prefix}decide.0.weight")
    inputs = first.shape[1] - len(model.dimensions) if first is not None else FEATURES
    if inputs in EARLIER:
        old = model.decide[0]
        model.decide[0] = nn.Linear(first.shape[1], old.out_features, device=old.weight.device)
        model.inputs = inputs


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
    one step at a time, and where a decision is asked (j < k < size, j not forced).

    Computed step by step: step k's decisions need only ``[graphs, k, k]`` numbers, so the
    memory is graphs x N^2 (the features themselves), never N^3.
    """
    g, n = relations.shape[0], relations.shape[-1]
    features = relations.new_zeros((g, n, n, FEATURES), dtype=torch.float32)
    r_all, lk_all = relations.float(), links.float()
    heights = r_all.new_ones(g, n)  # of the longest chain ending at each element
    total = sizes.float()
    for k in range(1, n):
        r, lk, mine = r_all[:, :k, :k], lk_all[:, :k, :k], lk_all[:, :k, k]  # [g, k(, k)]
        place = torch.arange(k, dtype=r.dtype, device=r.device)
        # the latest link of k at or above each element (-1: none), and below each element
        at_or_below = r + torch.eye(k, dtype=r.dtype, device=r.device)
        latest = (at_or_below * (mine * (place + 1))[:, None, :]).amax(2) - 1  # [g, i]
        latest_below = (r * (mine * (place + 1))[:, :, None]).amax(1) - 1  # [g, i]
        later = latest[:, :, None] > place  # [g, i, j]: i in k's past when j is asked
        above_links = latest_below[:, :, None] > place  # [g, i, j]: i above a link after j
        state = _step_state(r, lk, heights[:, :k], total)
        chosen = mine.flip(1).cumsum(1).flip(1) - mine  # [g, j]: links of k after j
        in_past = later.float().sum(1)  # [g, j]
        shared = (r * later).sum(1)  # [g, j]: of j's past
        common = (r * above_links.transpose(1, 2)).sum(2)  # [g, j]: of j's future
        features[:, :k, k] = _features(state, place, chosen, k, in_past, shared, common)
        heights[:, k] = 1 + (r_all[:, :k, k] * heights[:, :k]).amax(1)
    k = torch.arange(n, device=relations.device)
    inside = (k < sizes[:, None, None]) & (k[:, None] < k)
    asked = inside & ~(relations & ~links)
    return features, asked


def _step_state(
    relations: Tensor, links: Tensor, heights: Tensor, sizes: Tensor
) -> dict[str, Tensor]:
    """What the decisions of step k see of the set grown so far: its relations and links
    (``[num, k, k]``) and the longest chain ending at each element (``[num, k]``)."""
    r = relations.float()
    k = r.shape[-1]
    past, above = r.sum(1), r.sum(2)
    return {  # per element [num, k], or of the whole set [num]
        "progress": k / sizes.float(),
        "past": past,
        "above": above,
        "links_up": links.float().sum(2),
        "height": heights,
        "maxima": (above == 0).float().sum(1),
        "relations": past.sum(1),
        "tallest": heights.amax(1),
        "total": sizes.float(),
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
    """The features of the decision "is j a link to k?" (see :func:`_features`); ``past``:
    k's past so far, ``below_j``: j's past, ``common``: j's future that is a chosen link's
    (each ``[num, k]``, bool)."""
    one = {name: v[:, j : j + 1] if v.dim() == 2 else v for name, v in state.items()}
    place = torch.full((1,), float(j), device=chosen.device)
    return _features(
        one,
        place,
        chosen.float(),
        k,
        past.sum(1, keepdim=True).float(),
        (below_j & past).sum(1, keepdim=True).float(),
        common.sum(1, keepdim=True).float(),
    )[:, 0]


def _features(
    state: dict[str, Tensor],
    j: Tensor,
    chosen: Tensor,
    k: int,
    in_past: Tensor,
    shared: Tensor,
    common: Tensor,
) -> Tensor:
    """The :data:`FEATURES` numbers of decisions "is j a link to k?" for the elements ``j``
    (``[J]``) of each set (``[num, J, FEATURES]``): the shares the network has always seen,
    then the same counts on a log scale and the size the set grows to, so that a decision can
    tell a set of 40 elements from one of 400 (:data:`LOG_SCALE`); last, the longest chain
    ending at j and in the whole set, the maximal elements and the relations so far, whose
    growth with the set's size is what its dimension sets."""
    past, above, links_up = state["past"], state["above"], state["links_up"]
    num, width = past.shape
    ones = past.new_ones(num, width)
    per = 1.0 / k

    def log(x: Tensor) -> Tensor:
        return torch.log1p(x) / LOG_SCALE

    return torch.stack(
        [
            state["progress"][:, None] * ones,
            j / k * ones,
            past * per,
            above * per,
            links_up * per,
            (above == 0).float(),
            (state["maxima"] * per)[:, None] * ones,
            chosen * per,
            per * ones,
            in_past * per,
            shared / past.clamp(min=1),
            common / above.clamp(min=1),
            log(state["total"])[:, None] * ones,
            math.log1p(k) / LOG_SCALE * ones,
            log(past),
            log(above),
            log(links_up),
            log(chosen),
            log(in_past),
            log(state["height"]),
            log(state["tallest"])[:, None] * ones,
            log(state["maxima"])[:, None] * ones,
            log(state["relations"])[:, None] * ones,
        ],
        dim=-1,
    )
