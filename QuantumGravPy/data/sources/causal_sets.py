"""The embedded dataset: generated causal sets as graphs, of the kind ``data.kind`` names.

Generated on first use and cached, so the main job needs no download. Graph i is a pure
function of (seed, i), which lets any number of processes generate disjoint ranges of it.
The default kind, ``dimension`` (sprinklings into diamonds of several dimensions), is made a
batch of one size at a time; the others (:mod:`.kinds`) one causal set at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from torch_geometric.data import Data

from ... import logs
from ...embedded import data_kind, flat_sprinkling_labels
from ...physics import (
    causal_structure,
    check_sprinkle_arguments,
    diamond_coordinates,
    node_features,
)
from ..storage.cache import DigestCachedDataset
from . import kinds
from .pair_targets import embedded_pair_targets, embedded_pairs

# Bump when the generated graphs change for the same parameters, so old caches are not reused.
# 2: graphs carry their coordinates as pos; 3: dimension and time; 4: every kind's labels
GENERATOR_VERSION = 4
# Graphs of one size processed together: at most 512, and few enough that a batch's [B, N, N]
# matrices stay near 64 M entries (a few hundred MB as floats) for large causal sets.
_CHUNK = 512
_CHUNK_ENTRIES = 1 << 26


def _chunk(n: int) -> int:
    return max(1, min(_CHUNK, _CHUNK_ENTRIES // (n * n)))


# Graphs generated at a time when streaming into a cache on disk.
_BLOCK = 4096


def graph_parameters(index: int, num_points: Sequence[int], dimensions: Sequence[int], seed: int):
    """The random generator of graph ``index`` and its size and dimension class.

    Graph i depends only on (seed, i): its stream is seeded from the pair, never from a shared
    sequential generator, so any subset of graphs can be generated in any order or process.
    """
    rng = np.random.default_rng([seed, index])
    n = int(rng.integers(num_points[0], num_points[1] + 1))
    label = int(rng.integers(len(dimensions)))
    return rng, n, label


def generate_causal_set_graphs(
    start: int,
    end: int,
    *,
    num_points: Sequence[int],
    dimensions: Sequence[int],
    seed: int,
    progress: bool = True,
    kind: str = "dimension",
    h: Sequence[float] = (0.0, 0.0),
    light_cone_ranks: bool = False,
    pairs: str | None = None,
) -> list[Data]:
    """Graphs ``start`` to ``end - 1`` of the causal-set dataset with these parameters (with
    ``light_cone_ranks``, two more node features: :func:`.kinds.with_light_cone_ranks`; with
    ``pairs``, each set's relations or links and the targets at them:
    :func:`.pair_targets.embedded_pairs`)."""
    max_dim = max(dimensions)
    if not data_kind(kind).flat_diamonds:
        # The drawn sets' matrices are turned into graphs, and freed, every _CHUNK_ENTRIES
        # entries: 4,000 sets of 1,024 elements at once would need tens of GB.
        out: list[Data] = []
        drawn, entries = [], 0
        for i in logs.progress(range(start, end), desc=kind, unit="set", enabled=progress):
            rng, n, _ = graph_parameters(i, num_points, dimensions, seed)
            if drawn and entries + n * n > _CHUNK_ENTRIES:
                out += kinds.graphs_of(kind, drawn, max_dim, ranks=light_cone_ranks, pairs=pairs)
                drawn, entries = [], 0
            drawn.append(kinds.draw(kind, rng, n, dimensions, h))
            entries += n * n
        return out + kinds.graphs_of(kind, drawn, max_dim, ranks=light_cone_ranks, pairs=pairs)
    by_size: dict[int, list[tuple[int, int, np.ndarray]]] = {}
    for i in range(start, end):
        rng, n, label = graph_parameters(i, num_points, dimensions, seed)
        coords = diamond_coordinates(n, dimensions[label], rng)
        # Zero spatial columns leave every interval unchanged, so all dimensions share a batch.
        padded = np.zeros((n, max_dim))
        padded[:, : coords.shape[1]] = coords
        by_size.setdefault(n, []).append((i, label, padded))

    graphs: dict[int, Data] = {}
    chunks = [
        group[k : k + _chunk(n)]
        for n, group in by_size.items()
        for k in range(0, len(group), _chunk(n))
    ]
    for chunk in logs.progress(chunks, desc="causal sets", unit="chunk", enabled=progress):
        coords = torch.from_numpy(np.stack([c for _, _, c in chunk]))
        relations, links = causal_structure(coords)
        features = node_features(relations, links)
        for b, (i, label, _) in enumerate(chunk):
            labels = {**flat_sprinkling_labels(dimensions[label]), "y": label}
            x = features[b]
            if light_cone_ranks:
                x = kinds.with_light_cone_ranks(x, relations[b], links[b])
            graphs[i] = kinds.to_graph(
                x, links[b], labels, coordinates=coords[b], max_dimension=max_dim
            )
            if pairs is not None:
                graphs[i].update(embedded_pairs(pairs, relations[b], links[b]))
    return [graphs[i] for i in range(start, end)]


class GeneratedSource:
    """The embedded causal sets with these parameters, as a source of graphs for a cache.

    Checks the parameters; ``params`` is everything the graphs depend on.
    """

    prefix = "causal_sets"

    def __init__(
        self,
        *,
        num_graphs: int,
        num_points: Sequence[int] = (32, 64),
        dimensions: Sequence[int] = (2, 3, 4),
        seed: int = 0,
        kind: str = "dimension",
        h: float | Sequence[float] = 0.6,
        light_cone_ranks: bool = False,
        pairs: str | None = None,
    ):
        if kind not in kinds.kind_names():
            raise ValueError(f"kind must be one of {', '.join(kinds.kind_names())}, got {kind!r}")
        low, high = (h, h) if isinstance(h, (int, float)) else (float(h[0]), float(h[1]))
        if not 0.0 <= low <= high < 1.0:
            raise ValueError(f"h must be in [0, 1), or [low, high] within it; got {h!r}")
        if num_graphs < 1:
            raise ValueError(f"num_graphs must be positive, got {num_graphs}")
        lo, hi = num_points
        if not 1 <= lo <= hi:
            raise ValueError(
                f"num_points must be [min, max] with 1 <= min <= max, got {num_points}"
            )
        for d in dimensions:
            check_sprinkle_arguments(lo, d)
        self.params = {
            "num_graphs": int(num_graphs),
            "num_points": [int(lo), int(hi)],
            "dimensions": [int(d) for d in dimensions],
            "seed": int(seed),
            "version": GENERATOR_VERSION,
            "kind": kind,
        }
        if data_kind(kind).uses_h:
            self.params["h"] = [low, high]
        if light_cone_ranks:  # (absent otherwise: the caches made before it stay valid)
            if not data_kind(kind).two_d(dimensions):
                raise ValueError(
                    f"light_cone_ranks: only 2D causal sets have them; got kind {kind!r} "
                    f"with dimensions {list(dimensions)}"
                )
            self.params["light_cone_ranks"] = True
        if pairs is not None:  # (absent otherwise, as above)
            if pairs not in ("relations", "links"):
                raise ValueError(f"pairs must be relations or links, got {pairs!r}")
            self.params["pairs"] = pairs
        self.pair_keys = frozenset(embedded_pair_targets() if pairs else ())
        self.total = int(num_graphs)

    def graphs(self, start: int, end: int, *, progress: bool = True) -> Iterator[Data]:
        # In blocks, so that a large range never sits in memory whole.
        p = self.params
        for first in logs.progress(
            range(start, end, _BLOCK),
            desc="causal sets",
            unit="block",
            enabled=progress and end - start > _BLOCK,
        ):
            yield from generate_causal_set_graphs(
                first,
                min(first + _BLOCK, end),
                num_points=p["num_points"],
                dimensions=p["dimensions"],
                seed=p["seed"],
                progress=progress and end - start <= _BLOCK,
                kind=p["kind"],
                h=p.get("h", (0.0, 0.0)),
                light_cone_ranks=p.get("light_cone_ranks", False),
                pairs=p.get("pairs"),
            )

    def num_classes_of(self, name: str) -> int | None:
        """The classes of a label, known without reading the graphs (``y`` of the dimension
        kind has one per dimension, whether or not every dimension was drawn)."""
        return kinds.num_classes(self.params["kind"], name, self.params["dimensions"])

    def rejected_all(self) -> str:  # nothing filters generated graphs
        return "no causal set was generated"


class CausalSetDataset(DigestCachedDataset):
    """Generated causal sets of a ``kind`` (:mod:`.kinds`); by default sprinklings into causal
    diamonds of several dimensions.

    Every graph carries ``y`` (for the default kind the index of its dimension in
    ``dimensions``), ``dimension`` (a float, for regression), the other kinds' labels
    (``spacetime``, ``h``, ``manifold_like``, ``cset_type``, per element ``ricci``) and, for
    sprinklings, per element ``time`` (its time coordinate in the diamond, in (-1, 1)) and
    ``pos``. With ``pairs`` (relations or links) also the set's pairs, ``relations_index`` or
    ``links_index``, and per pair ``is_link`` and ``interval_size``, for edge-level tasks.

    Cached under ``root/processed`` in a file named by a digest of every generation parameter,
    so changing any of them generates a new cache instead of reusing a stale one. With
    ``world_size`` > 1 a missing cache is generated by that many processes, each a contiguous
    range (graph i depends on (seed, i) only, so the graphs are those of one process).
    """

    def __init__(
        self,
        root: str,
        *,
        num_graphs: int,
        num_points: Sequence[int] = (32, 64),
        dimensions: Sequence[int] = (2, 3, 4),
        seed: int = 0,
        kind: str = "dimension",
        h: float | Sequence[float] = 0.6,
        light_cone_ranks: bool = False,
        pairs: str | None = None,
        transform: Callable | None = None,
        progress: bool = True,
        world_size: int = 1,
    ):
        source = GeneratedSource(
            num_graphs=num_graphs,
            num_points=num_points,
            dimensions=dimensions,
            seed=seed,
            kind=kind,
            h=h,
            light_cone_ranks=light_cone_ranks,
            pairs=pairs,
        )
        super().__init__(
            root, source, transform=transform, progress=progress, world_size=world_size
        )

    @property
    def dimensions(self) -> list[int]:
        return self.params["dimensions"]
