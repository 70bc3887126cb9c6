"""Deterministic augmentation of graphs and causal sets.

Every random choice comes from a seed derived by hashing what identifies the draw, never from a
shared generator, so results are reproducible and independent of the order in which samples are
visited. Two seedings:

- :func:`gen_augmentation_params` (``seeding: per_sample``, the default) keys on the sample and
  the epoch only, so augmentation does not depend on the number of processes;
- :func:`gen_distributed_augmentation_params` (``seeding: per_rank``) also keys on the rank and
  the world size, so ranks never repeat each other's random parameters for the same sample.

For a causal set with coordinates (``pos``), removing elements recomputes the relations, the
links and the features of the remaining points: a random sub-causal-set of a sprinkling is again
a sprinkling, at lower density. Other graphs lose the nodes and their edges.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from ...physics import causal_structure, node_features
from ..storage.ranges import DistributedRangeSplitter, checked_count

OPERATIONS = ("remove_elements", "link_dropout", "feature_noise", "feature_scale")


@dataclass(frozen=True)
class AugmentationConfig:
    """Ranges the parameters are drawn from, uniformly, and how many operations apply."""

    remove_fraction: tuple[float, float] = (0.0, 0.1)  # fraction of elements removed
    link_dropout: tuple[float, float] = (0.0, 0.05)  # fraction of links removed
    feature_noise: tuple[float, float] = (0.0, 0.01)  # std of Gaussian noise on node features
    feature_scale: tuple[float, float] = (0.95, 1.05)  # factor on node features
    augmentation_depth: int = 2  # how many of the four operations apply to a sample

    def __post_init__(self) -> None:
        for name in ("remove_fraction", "link_dropout"):
            lo, hi = getattr(self, name)
            if not 0 <= lo <= hi < 1:
                raise ValueError(f"{name} must be a range [lo, hi] with 0 <= lo <= hi < 1")
        lo, hi = self.feature_noise
        if not 0 <= lo <= hi:
            raise ValueError("feature_noise must be a range [lo, hi] with 0 <= lo <= hi")
        lo, hi = self.feature_scale
        if not 0 < lo <= hi:
            raise ValueError("feature_scale must be a range [lo, hi] with 0 < lo <= hi")
        if not 0 <= self.augmentation_depth <= len(OPERATIONS):
            raise ValueError(
                f"augmentation_depth must be from 0 to {len(OPERATIONS)}, "
                f"got {self.augmentation_depth}"
            )


PRESETS = {
    "mild": AugmentationConfig(
        remove_fraction=(0.0, 0.05),
        link_dropout=(0.0, 0.02),
        feature_noise=(0.0, 0.005),
        feature_scale=(0.98, 1.02),
        augmentation_depth=1,
    ),
    "moderate": AugmentationConfig(),
    "aggressive": AugmentationConfig(
        remove_fraction=(0.05, 0.25),
        link_dropout=(0.0, 0.1),
        feature_noise=(0.0, 0.02),
        feature_scale=(0.9, 1.1),
        augmentation_depth=4,
    ),
}


def get_preset(name: str) -> AugmentationConfig:
    """The settings of the preset ``mild``, ``moderate`` or ``aggressive``; a ValueError naming
    the presets for any other name."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(
            f"unknown augmentation preset {name!r}; choose one of {', '.join(PRESETS)}"
        ) from None


def _hex_seed(*parts: Any) -> str:
    text = "|".join(["qg-augment", *map(str, parts)])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class RankAwareSeedGenerator:
    """Seeds (hex strings) from the base seed, the sample id, the rank and the world size."""

    def __init__(self, base_seed: int, world_size: int):
        if world_size < 1:
            raise ValueError(f"world_size must be at least 1, got {world_size}")
        self.base_seed = int(base_seed)
        self.world_size = int(world_size)

    def generate_seed(self, sample_id: int, rank: int) -> str:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank must be in [0, {self.world_size}), got {rank}")
        return _hex_seed(self.base_seed, "rank", self.world_size, rank, int(sample_id))


def params_from_seed(seed: str, config: AugmentationConfig | None = None) -> dict[str, Any]:
    """The parameter dict a hex seed stands for, under ``config`` (default: moderate)."""
    config = config or PRESETS["moderate"]
    rng = np.random.default_rng(int(seed, 16))
    chosen = set(rng.choice(len(OPERATIONS), size=config.augmentation_depth, replace=False))
    # Every parameter is always drawn, so the stream does not depend on which operations apply.
    return {
        "seed": seed,
        "operations": [op for k, op in enumerate(OPERATIONS) if k in chosen],
        "remove_fraction": float(rng.uniform(*config.remove_fraction)),
        "link_dropout": float(rng.uniform(*config.link_dropout)),
        "feature_noise": float(rng.uniform(*config.feature_noise)),
        "feature_scale": float(rng.uniform(*config.feature_scale)),
    }


def gen_distributed_augmentation_params(
    sample_id: int,
    rank: int,
    config: AugmentationConfig | None = None,
    base_seed: int = 0,
    world_size: int = 1,
) -> dict[str, Any]:
    """Parameters for ``sample_id`` on ``rank``: the same for the same arguments, apart by rank."""
    seed = RankAwareSeedGenerator(base_seed, world_size).generate_seed(sample_id, rank)
    return {"sample_id": int(sample_id), **params_from_seed(seed, config)}


def stream_distributed_augmentation_chain(
    num_samples: int,
    rank: int,
    world_size: int,
    config: AugmentationConfig | None = None,
    chunk_size: int = 1000,
    base_seed: int = 0,
) -> Generator[dict[str, Any], None, None]:
    """Augmentation parameters for ``rank``'s range of ``range(num_samples)``, one dict a sample.

    Over all ranks the streams yield ``num_samples`` dicts in total, each sample's exactly once.
    ``chunk_size`` dicts are computed at a time (a batch, not a unit of the stream), so memory
    stays bounded whatever the range's size. Arguments are checked when the generator is made,
    not when it is first read.
    """
    checked_count(chunk_size, "chunk_size", 1)
    start, end = DistributedRangeSplitter(num_samples, world_size).get_rank_range(rank)
    return _stream(range(start, end), rank, world_size, config, chunk_size, base_seed)


def _stream(
    samples: range,
    rank: int,
    world_size: int,
    config: AugmentationConfig | None,
    chunk_size: int,
    base_seed: int,
) -> Generator[dict[str, Any], None, None]:
    for chunk_start in range(samples.start, samples.stop, chunk_size):
        chunk = [
            gen_distributed_augmentation_params(
                sample_id, rank, config, base_seed=base_seed, world_size=world_size
            )
            for sample_id in range(chunk_start, min(chunk_start + chunk_size, samples.stop))
        ]
        yield from chunk


def gen_augmentation_params(
    sample_id: int, epoch: int, config: AugmentationConfig | None = None, base_seed: int = 0
) -> dict[str, Any]:
    """Parameters keyed by sample and epoch only: the same whatever the number of processes."""
    seed = _hex_seed(int(base_seed), "epoch", int(epoch), int(sample_id))
    return {"sample_id": int(sample_id), **params_from_seed(seed, config)}


def apply_augmentation(data: Data, params: dict[str, Any]) -> Data:
    """A new Data object with the operations of ``params`` applied; ``data`` is left as it is."""
    return augment_graphs([data], [params])[0]


def augment_graphs(graphs: list[Data], params: list[dict[str, Any]]) -> list[Data]:
    """:func:`apply_augmentation` of each graph with its parameters, the same draws and the
    same results, with the causal structure of every sub-sprinkling (the costly part: its
    relations, links and features anew) worked out for all of them in one batched pass.

    Each graph's own generator makes its draws in the same order as one graph alone: which
    elements stay, then (after the batched pass) which links drop and the feature noise.
    """
    rngs = [np.random.default_rng(int(p["seed"], 16) ^ 0x5EED) for p in params]  # apart from
    out = [graph.clone() for graph in graphs]  # the parameters' own stream
    sprinklings = []  # graphs that lost elements and need their structure anew
    for i, (graph, p) in enumerate(zip(out, params, strict=True)):
        if "remove_elements" in p["operations"] and p["remove_fraction"] > 0:
            if _remove_elements(graph, p["remove_fraction"], rngs[i]):
                sprinklings.append(graph)
    _recompute_structure(sprinklings)
    for graph, p, rng in zip(out, params, rngs, strict=True):
        ops = p["operations"]
        if "link_dropout" in ops and p["link_dropout"] > 0:
            graph.edge_index = _drop_links(
                graph.edge_index, graph.num_nodes, p["link_dropout"], rng
            )
        if "feature_noise" in ops and p["feature_noise"] > 0:
            noise = rng.normal(0.0, p["feature_noise"], tuple(graph.x.shape))
            graph.x = graph.x + torch.from_numpy(noise).to(graph.x.dtype)
        if "feature_scale" in ops:
            graph.x = graph.x * p["feature_scale"]
    return out


def _remove_elements(data: Data, fraction: float, rng: np.random.Generator) -> bool:
    """Remove a ``fraction`` of the elements in place; True for a sprinkling (coordinates in
    float64), whose relations, links and features must then be recomputed from the points
    left: a random sub-causal-set of a sprinkling is again a sprinkling, at lower density."""
    n = data.num_nodes
    keep_count = max(2, n - math.floor(n * fraction))
    if keep_count >= n:
        return False
    keep = torch.from_numpy(np.sort(rng.choice(n, size=keep_count, replace=False)))
    for key in list(data.keys()):  # per-element targets follow their elements
        value = data[key]
        if key not in ("x", "pos", "edge_index") and torch.is_tensor(value):
            if data.is_node_attr(key):
                data[key] = value[keep]
    if getattr(data, "pos", None) is not None and data.pos.dtype == torch.float64:
        data.pos = data.pos[keep]  # x and edge_index follow in _recompute_structure
        return True
    edge_index, _ = subgraph(keep, data.edge_index, relabel_nodes=True, num_nodes=n)
    data.x, data.edge_index = data.x[keep], edge_index
    return False


def _recompute_structure(graphs: list[Data]) -> None:
    """Links (as edges both ways) and node features of sprinklings from their points, in
    place; the sets padded to the largest, a batch per number of coordinates."""
    by_width: dict[int, list[Data]] = {}
    for graph in graphs:
        by_width.setdefault(graph.pos.shape[1], []).append(graph)
    for width, group in by_width.items():
        sizes = torch.tensor([graph.pos.shape[0] for graph in group])
        coords = torch.zeros(len(group), int(sizes.max()), width, dtype=torch.float64)
        for b, graph in enumerate(group):
            coords[b, : len(graph.pos)] = graph.pos
        relations, links = causal_structure(coords, sizes)
        features = node_features(relations, links, sizes)
        for b, graph in enumerate(group):
            n = int(sizes[b])
            edges = links[b, :n, :n].nonzero().t()
            # num_nodes follows from x; setting it would add a key other graphs lack
            graph.x = features[b, :n].to(graph.x.dtype)
            graph.edge_index = torch.cat([edges, edges.flip(0)], dim=1)


def _drop_links(edge_index: torch.Tensor, n: int, p: float, rng) -> torch.Tensor:
    """Drop a fraction ``p`` of the undirected links, both directions of a link together."""
    lo = torch.minimum(edge_index[0], edge_index[1])
    hi = torch.maximum(edge_index[0], edge_index[1])
    pair, which = torch.unique(lo * n + hi, return_inverse=True)
    keep_pair = torch.from_numpy(rng.random(pair.numel()) >= p)
    return edge_index[:, keep_pair[which]]


class AugmentedDataset(Dataset):
    """Training data with deterministic augmentation; ``set_epoch`` picks the epoch's draws.

    ``seeding="per_sample"`` keys each draw on (base seed, epoch, index); ``"per_rank"`` on
    (base seed, world size, rank, epoch and index).
    """

    def __init__(
        self,
        dataset: Any,
        config: AugmentationConfig,
        *,
        seeding: str = "per_sample",
        base_seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ):
        if seeding not in ("per_sample", "per_rank"):
            raise ValueError(f"seeding must be per_sample or per_rank, got {seeding!r}")
        self.unaugmented = dataset
        self.config = config
        self.seeding = seeding
        self.base_seed = base_seed
        self.rank = rank
        self.world_size = world_size
        # In shared memory: a loader's persistent worker processes hold copies of this
        # dataset, and read the epoch the main process sets here.
        self._epoch = torch.zeros(1, dtype=torch.long).share_memory_()

    @property
    def epoch(self) -> int:
        return int(self._epoch[0])

    def set_epoch(self, epoch: int) -> None:
        self._epoch[0] = int(epoch)

    def __len__(self) -> int:
        return len(self.unaugmented)

    def params(self, index: int) -> dict[str, Any]:
        if self.seeding == "per_sample":
            return gen_augmentation_params(index, self.epoch, self.config, self.base_seed)
        sample_id = self.epoch * len(self) + index
        return gen_distributed_augmentation_params(
            sample_id, self.rank, self.config, self.base_seed, self.world_size
        )

    def __getitem__(self, index: int) -> Data:
        return apply_augmentation(self.unaugmented[index], self.params(index))

    def __getitems__(self, indices: list[int]) -> list[Data]:
        """A batch's graphs, as one at a time would make them (a loader asks for a batch at
        once): the structure of the sub-sprinklings is recomputed in one batched pass."""
        return augment_graphs(
            [self.unaugmented[i] for i in indices], [self.params(i) for i in indices]
        )
