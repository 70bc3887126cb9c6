"""The graphs of the embedded datasets (``data.kind``): each kind's causal sets (its class in
``QuantumGravPy/embedded/``) as graphs with every label.

Every graph carries every label, so any task can use them: ``y``, ``dimension`` (0 where a
set has none), ``spacetime``, ``h``, ``manifold_like``, ``cset_type`` per graph, ``ricci`` per
element (0 where unknown). Sprinklings of the kinds made only of them (those whose class says
``coordinates``) also carry ``pos`` (coordinates, float64, zero-padded) and ``time`` per
element. Graph i depends only on (seed, i).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from ...embedded import DATA_KINDS, data_kind, flat_sprinkling_labels
from ...embedded.curvature import SPACETIMES
from ...physics import (
    CSET_TYPES,
    CausalSet,
    light_cone_ranks,
    node_features,
)
from .pair_targets import embedded_pairs


def kind_names() -> tuple[str, ...]:
    """The names ``data.kind`` takes: every registered kind's."""
    return tuple(cls.name for cls in DATA_KINDS)


def to_graph(
    x: torch.Tensor,
    links: torch.Tensor,
    labels: dict[str, Any],
    *,
    ricci: torch.Tensor | None = None,
    coordinates: torch.Tensor | None = None,
    max_dimension: int = 0,
) -> Data:
    """One graph of the embedded data: features ``x``, the links as edges (both directions),
    every label, per element ``ricci`` (0 where unknown) and, given ``coordinates``, ``pos``
    (float64, zero-padded to ``max_dimension`` columns) and ``time``."""
    n = links.shape[0]
    edges = links.nonzero().t()
    graph = Data(
        x=x,
        edge_index=torch.cat([edges, edges.flip(0)], dim=1),
        y=torch.tensor([labels["y"]]),
        dimension=torch.tensor([labels["dimension"]]),  # d, as a regression target
        spacetime=torch.tensor([labels["spacetime"]]),
        h=torch.tensor([labels["h"]]),
        manifold_like=torch.tensor([labels["manifold_like"]]),
        cset_type=torch.tensor([labels["cset_type"]]),
        ricci=torch.zeros(n) if ricci is None else ricci.float(),
    )
    if coordinates is not None:
        pos = torch.zeros(n, max(max_dimension, coordinates.shape[1]), dtype=torch.float64)
        pos[:, : coordinates.shape[1]] = coordinates
        graph.pos = pos  # time first: for exact sub-sprinklings
        graph.time = coordinates[:, 0].float()  # each element's time coordinate, in (-1, 1)
    return graph


def num_classes(kind: str, name: str, dimensions: Sequence[int]) -> int | None:
    """Classes of the label ``name`` of a kind, known without generating anything."""
    per_label = {"spacetime": len(SPACETIMES), "manifold_like": 2, "cset_type": len(CSET_TYPES)}
    if name == "y":
        return data_kind(kind).classes(dimensions)
    return per_label.get(name)


def draw(
    kind: str, rng: np.random.Generator, n: int, dimensions: Sequence[int], h: Sequence[float]
) -> tuple[CausalSet, dict[str, Any]]:
    """One causal set of ``kind`` with ``n`` elements from the graph's own ``rng``, and its
    labels."""
    seed = int(rng.integers(2**62))
    d_index = int(rng.integers(len(dimensions)))
    d = int(dimensions[d_index])
    labels = flat_sprinkling_labels(d)  # until the kind says otherwise
    return data_kind(kind).draw(rng, n, d, seed, labels, h), labels


def with_light_cone_ranks(
    x: torch.Tensor, relations: torch.Tensor, links: torch.Tensor
) -> torch.Tensor:
    """Node features ``x`` and two more columns: each element's ranks in the two linear orders
    of its 2D causal set (:func:`~QuantumGravPy.physics.light_cone_ranks`), over N, in (0, 1).
    Which order comes first is a choice the order cannot make; it is made for each set alone,
    so a model learns what does not depend on it (as a reflection x -> -x leaves R)."""
    n = relations.shape[-1]
    ranks = light_cone_ranks(relations, links).to(x.dtype)
    return torch.cat([x, (ranks + 0.5) / n], dim=1)


def graphs_of(
    kind: str,
    drawn: list[tuple[CausalSet, dict[str, Any]]],
    max_dimension: int,
    *,
    ranks: bool = False,
    pairs: str | None = None,
) -> list[Data]:
    """The graphs of drawn causal sets (node features computed per size, in batches; with
    ``ranks``, :func:`with_light_cone_ranks`; with ``pairs``, the set's pairs and the targets at
    them, :func:`.pair_targets.embedded_pairs`)."""
    coordinates = data_kind(kind).coordinates
    by_size: dict[int, list[int]] = {}
    for i, (cset, _) in enumerate(drawn):
        by_size.setdefault(cset.num_points, []).append(i)
    features: dict[int, torch.Tensor] = {}
    for members in by_size.values():
        relations = torch.stack([drawn[i][0].relations for i in members])
        links = torch.stack([drawn[i][0].links for i in members])
        for i, x in zip(members, node_features(relations, links), strict=True):
            cset = drawn[i][0]
            features[i] = with_light_cone_ranks(x, cset.relations, cset.links) if ranks else x
    graphs = [
        to_graph(
            features[i],
            cset.links,
            labels,
            ricci=cset.ricci,
            coordinates=cset.coordinates if coordinates else None,
            max_dimension=max_dimension,
        )
        for i, (cset, labels) in enumerate(drawn)
    ]
    if pairs is not None:
        for graph, (cset, _) in zip(graphs, drawn, strict=True):
            graph.update(embedded_pairs(pairs, cset.relations, cset.links))
    return graphs
