"""The kinds of embedded dataset (``data.kind``): which causal sets a graph is, and its labels.

- ``dimension``: flat sprinklings; ``y`` the index of the dimension in ``data.dimensions``;
- ``curvature``: sprinklings into flat, de Sitter and anti-de Sitter diamonds, a third each;
  ``y`` = ``spacetime`` (0, 1, 2) at ``data.h`` (a value, or ``[low, high]`` to draw h from);
- ``manifold_like``: half flat sprinklings (``y`` = 1), half transitive percolations tuned to
  the ordering fraction of a sprinkling of the same size and dimension (``y`` = 0), so that
  the ordering fraction, and the Myrheim-Meyer estimator, cannot tell them apart;
- ``cset_type``: one class per generator (:data:`CSET_TYPES`), a fifth each;
- ``ricci``: 2D sprinklings with a random smooth conformal factor; each element's Ricci
  scalar is the node attribute ``ricci`` (a node-level regression target).

Every graph carries every label, so any task can use them: ``y``, ``dimension`` (0 where a
set has none), ``spacetime``, ``h``, ``manifold_like``, ``cset_type`` per graph, ``ricci`` per
element (0 where unknown). Sprinklings of the kinds made only of them (dimension, curvature,
ricci) also carry ``pos`` (coordinates, float64, zero-padded) and ``time`` per element.
Graph i depends only on (seed, i).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from ..physics import (
    CSET_TYPES,
    CausalSet,
    conformal_sprinkling,
    destroyed_sprinkling,
    kleitman_rothschild_order,
    light_cone_ranks,
    node_features,
    percolation_like,
    random_order,
    sprinkle,
)

KINDS = ("dimension", "curvature", "manifold_like", "cset_type", "ricci")
SPACETIMES = ("minkowski", "de_sitter", "anti_de_sitter")
DESTROYED_FRACTION = 0.1  # of a destroyed sprinkling's pairs flipped
CONFORMAL_AMPLITUDE, CONFORMAL_DEGREE = 0.3, 3  # of the ricci kind's random ln Omega
WITH_COORDINATES = ("dimension", "curvature", "ricci")


def flat_sprinkling_labels(dimension: int) -> dict[str, Any]:
    """The labels of a flat sprinkling; the kinds change those where their sets differ."""
    return {
        "y": 0,
        "dimension": float(dimension),
        "spacetime": 0,
        "h": 0.0,
        "manifold_like": 1,
        "cset_type": 0,
    }


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
        return {
            "dimension": len(dimensions),
            "curvature": len(SPACETIMES),
            "manifold_like": 2,
            "cset_type": len(CSET_TYPES),
        }.get(kind)
    return per_label.get(name)


def draw(
    kind: str, rng: np.random.Generator, n: int, dimensions: Sequence[int], h: Sequence[float]
) -> tuple[CausalSet, dict[str, Any]]:
    """One causal set of ``kind`` with ``n`` elements from the graph's own ``rng``, and its
    labels."""
    seed = int(rng.integers(2**62))
    d_index = int(rng.integers(len(dimensions)))
    d = int(dimensions[d_index])
    labels = flat_sprinkling_labels(d)  # until told otherwise
    if kind == "curvature":
        spacetime = int(rng.integers(len(SPACETIMES)))
        value = 0.0 if spacetime == 0 else float(rng.uniform(h[0], h[1]) if h[0] < h[1] else h[0])
        labels.update(y=spacetime, spacetime=spacetime, h=value)
        return sprinkle(n, d, seed, SPACETIMES[spacetime], value), labels
    if kind == "manifold_like":
        flat = sprinkle(n, d, seed)
        if rng.random() < 0.5:
            labels["y"] = 1
            return flat, labels
        labels.update(y=0, manifold_like=0, cset_type=CSET_TYPES.index("percolation"))
        labels["dimension"] = 0.0
        return percolation_like(n, flat.ordering_fraction(), seed + 1), labels
    if kind == "cset_type":
        which = int(rng.integers(len(CSET_TYPES)))
        labels.update(y=which, cset_type=which, manifold_like=int(which == 0))
        if which == 0:
            return sprinkle(n, d, seed), labels
        if which == 1:
            return random_order(n, d, seed), labels
        if which == 4:
            return destroyed_sprinkling(n, d, seed, DESTROYED_FRACTION), labels
        labels["dimension"] = 0.0
        if which == 2:
            return kleitman_rothschild_order(n, seed), labels
        return percolation_like(n, sprinkle(n, d, seed).ordering_fraction(), seed + 1), labels
    if kind == "ricci":
        labels["dimension"] = 2.0
        return (
            conformal_sprinkling(n, seed, amplitude=CONFORMAL_AMPLITUDE, degree=CONFORMAL_DEGREE),
            labels,
        )
    raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")


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
) -> list[Data]:
    """The graphs of drawn causal sets (node features computed per size, in batches; with
    ``ranks``, :func:`with_light_cone_ranks`)."""
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
    return [
        to_graph(
            features[i],
            cset.links,
            labels,
            ricci=cset.ricci,
            coordinates=cset.coordinates if kind in WITH_COORDINATES else None,
            max_dimension=max_dimension,
        )
        for i, (cset, labels) in enumerate(drawn)
    ]
