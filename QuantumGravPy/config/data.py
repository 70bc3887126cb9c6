"""The ``data`` section of the configuration: where the graphs come from (generated causal
sets, the user's files or dataset), how they are read, split, stored and batched, each key's
default and documentation beside it, and the checks of several keys together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..embedded import data_kind
from ..errors import ConfigError
from .checks import POSITIVE
from .dotted import DottedPath


@dataclass(frozen=True)
class DataConfig:
    root: str = "data"  # where the generated dataset is cached
    num_graphs: int = field(default=3000, metadata=POSITIVE)  # causal sets to generate
    num_points: tuple[int, int] = (32, 64)  # [min, max] elements per causal set
    dimensions: tuple[int, ...] = (2, 3, 4)  # spacetime dimensions; y is the index in this list
    # the embedded data: the name of a kind ("The embedded data" in the docs: Data lists them,
    # from their classes in QuantumGravPy/embedded/), one of your own among them (Extending)
    kind: str = "dimension"
    # curvature: h of the de Sitter and anti-de Sitter classes, in [0, 1) (0.6: the de
    # Sitter diamond is 1.4 radii high), or [low, high] to draw each set's h from
    h: float | tuple[float, float] = 0.6
    seed: int = 0  # generation and the train/val/test split
    split: tuple[float, float, float] = (0.7, 0.15, 0.15)  # train, validation, test
    dataset: DottedPath | None = None  # a function returning your own Dataset or list of Data
    dataset_kwargs: dict[str, Any] = field(default_factory=dict)  # keyword arguments for it
    # paths or glob patterns of .zarr stores and .h5/.hdf5 files (causal sets as QuantumGrav.jl
    # writes them, or general graphs) and .pt files of saved PyG graphs; set: they replace the
    # generated data (see "Your own data")
    files: tuple[str, ...] = ()
    # groups: one group per causal set (cset_1, ...); stacked: arrays with the sample index
    # first; graphs: one group per general graph (edge_index, x, ...; .pt files always); auto:
    # graphs if the groups hold edge_index, else groups if there are cset_N groups, else stacked
    layout: Literal["auto", "groups", "stacked", "graphs"] = "auto"
    # the array of each causal matrix; null: adj, adjacency_matrix, causal_matrix or relations
    relations: str | None = None
    links: str | None = None  # the link matrix instead; null: linkmat, link_matrix or links
    size: str | None = None  # stacked: the array of valid sizes; null: cset_size, size or n
    # Data attribute -> array, e.g. {manifold_like: manifold_like}: a value per causal set
    # becomes a graph attribute, a vector per element a node attribute, and with data.pairs an
    # n x n matrix a value per pair (edge-level tasks)
    targets: dict[str, str] = field(default_factory=dict)
    # relations or links: every causal set's graph holds its related pairs (i before j) or its
    # links as relations_index or links_index, [2, P], the pairs of edge-level tasks. Each
    # n x n matrix of data.targets is read at them (one that is not zero off them is refused,
    # naming the sample); the generated sets get is_link and interval_size (the elements
    # between) at them. null: no pairs
    pairs: Literal["relations", "links"] | None = None
    # null: the features of the embedded causal sets, computed from the causal structure; or
    # a list of per-element arrays
    node_features: tuple[str, ...] | None = None
    # true: two more node features, each element's rank (over N) in the two linear orders
    # whose intersection a 2D causal set is: its place in the diamond in light-cone
    # coordinates, found from the order (physics.light_cone_ranks). 2D causal sets only: the
    # ricci kind, the dimension and curvature kinds with dimensions [2], or data.files
    light_cone_ranks: bool = False
    # auto: transpose a file's matrices when they are lower triangular (Julia writes arrays
    # column-major); true or false: always, never
    transpose: Literal["auto", "true", "false"] = "auto"
    reader: DottedPath | None = None  # f(file, index) -> Data, instead of the mapping above
    pre_filter: DottedPath | None = None  # f(Data) -> bool: keep the causal set (cached)
    pre_transform: DottedPath | None = None  # f(Data) -> Data before caching
    transform: DottedPath | None = None  # f(Data) -> Data each time a graph is read
    # memory: the processed graphs are loaded whole; disk: kept in an SQLite table and read a
    # batch at a time (datasets larger than memory); auto: memory when the dataset takes under
    # a quarter of the memory available, else disk (a cache already built is kept)
    storage: Literal["memory", "disk", "auto"] = "auto"
    # where batches are assembled when training runs on a GPU. cuda: the whole processed
    # dataset is copied to the GPU once and each batch is gathered there, with no copy of graph
    # data per step (memory storage, no worker processes, no augmentation or per-graph
    # transform); cpu: on the host, each batch copied over; auto: cuda when the dataset takes
    # under a quarter of the GPU's free memory and nothing above rules it out, else cpu.
    # Without a GPU every value means cpu. data.files are prepared on the GPU unless cpu
    device: Literal["auto", "cpu", "cuda"] = "auto"

    def validate(self) -> None:
        kind = data_kind(self.kind, key="data.kind")  # a registered kind (the generated data's)
        if self.files and self.dataset is not None:
            raise ConfigError(
                f"data.files: set data.files or data.dataset, not both (found {list(self.files)} "
                f"and {self.dataset!r})"
            )
        if self.relations is not None and self.links is not None:
            raise ConfigError(
                "data.relations: name the causal matrix or the link matrix, not both; the other "
                f"is derived (found {self.relations!r} and {self.links!r})"
            )
        if self.device == "cuda" and self.storage == "disk":
            raise ConfigError(
                "data.device: cuda holds the whole dataset on the GPU; data.storage: disk reads "
                "it a batch at a time (use data.storage: memory)"
            )
        if self.dataset is not None and self.storage == "disk":
            raise ConfigError(
                "data.storage: disk is for the generated causal sets and data.files; "
                f"data.dataset ({self.dataset}) returns its own dataset"
            )
        generated = not self.files and self.dataset is None
        two_d = kind.two_d(self.dimensions)
        if self.light_cone_ranks and self.dataset is not None:
            raise ConfigError(
                f"data.light_cone_ranks: data.dataset ({self.dataset}) returns its own graphs "
                "and features; add the ranks there (physics.light_cone_ranks)"
            )
        if self.pairs is not None and self.dataset is not None:
            raise ConfigError(
                f"data.pairs: data.dataset ({self.dataset}) returns its own graphs; give them "
                "their pairs (an attribute with index in its name) and name it in tasks[].pairs"
            )
        if self.light_cone_ranks and generated and not two_d:
            raise ConfigError(
                "data.light_cone_ranks: only 2D causal sets have them: the ricci kind, or the "
                f"dimension and curvature kinds with dimensions [2] (found kind {self.kind} "
                f"with dimensions {list(self.dimensions)}, not 2D)"
            )
        file_keys = ("reader", "pre_filter", "pre_transform", "transform", "targets")
        unused = [k for k in file_keys if getattr(self, k) and not self.files]
        if unused:
            raise ConfigError(f"data.{unused[0]}: only for data.files, which is not set")
        lo, hi = self.num_points
        if not 1 <= lo <= hi:
            raise ConfigError(
                f"data.num_points: expected [min, max] with 1 <= min <= max, found {[lo, hi]}"
            )
        if not self.dimensions or len(set(self.dimensions)) != len(self.dimensions):
            raise ConfigError(
                f"data.dimensions: expected a non-empty list of distinct dimensions, "
                f"found {list(self.dimensions)}"
            )
        low, high = (self.h, self.h) if isinstance(self.h, float) else self.h
        if not 0 <= low <= high < 1:
            raise ConfigError(
                f"data.h: expected a number in [0, 1) or [low, high] within it, found {self.h!r}"
            )
        bad = [d for d in self.dimensions if not 2 <= d <= 6]
        if bad:
            raise ConfigError(f"data.dimensions: expected dimensions from 2 to 6, found {bad}")
        if any(f < 0 for f in self.split) or abs(sum(self.split) - 1) > 1e-6:
            raise ConfigError(
                f"data.split: expected three fractions >= 0 summing to 1, found {list(self.split)}"
            )
