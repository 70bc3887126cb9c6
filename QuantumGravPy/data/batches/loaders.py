"""The seeded train/validation/test split and the data loaders built on it.

What each rank reads each epoch is decided here: the training loader's sampler (split between
ranks, keyed by seed and epoch) and its augmentation (keyed by sample and epoch, or by rank).
Graphs held in memory or on disk are batched by index arithmetic (:mod:`.batching`,
:mod:`.row_batches`), a whole batch per call; anything else (a per-graph transform, an augmentation,
a dataset of its own kind) through PyTorch Geometric's collation, one graph at a time. Either
way the loader is a :class:`~.transfer.BatchLoader`.
"""

from __future__ import annotations

import collections
import itertools
import logging
from collections.abc import Collection, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset
from torch_geometric.data import Batch, Data
from torch_geometric.loader.dataloader import Collater

from ...compat import pyg
from ...compat import torch as compat_torch
from ...config import AugmentationSection, DataConfig, TrainingConfig
from ...errors import ConfigError, DataError
from ..sources.datasets import graph_sizes
from ..storage.disk import DiskDataset
from .assembly import Unbatchable
from .augment import AugmentedDataset, get_preset
from .batching import IndexBatcher
from .node_batches import NodeBudgetBatches
from .prefetch import ahead
from .row_batches import DiskBatcher
from .samplers import build_sampler
from .transfer import BatchLoader

log = logging.getLogger(__name__)

READ_AHEAD = 8  # batches assembled in a row, at most (measured in bench/data_path.py)
READ_AHEAD_BYTES = 4 << 20  # and at most this much of them at once (on disk)
# Batches in memory are gathered an epoch at a time, in passes of at most this much.
PASS_BYTES = 256 << 20
# Batches staged in pinned memory for a GPU, in passes of at most this much: two at a time
# (one copied and trained on, the next being gathered), each copied in a few milliseconds.
STAGED_BYTES = 32 << 20


def split_sizes(n: int, fractions: Sequence[float]) -> tuple[int, int, int]:
    n_val = round(n * fractions[1])
    n_test = round(n * fractions[2])
    return n - n_val - n_test, n_val, n_test


def split_dataset(
    dataset: Dataset | list[Data], fractions: Sequence[float], seed: int
) -> tuple[Subset, Subset, Subset]:
    """Seeded random split into train, validation and test subsets.

    Uses its own generator, so it is identical in every process that calls it with the same seed,
    whatever else those processes have drawn from the global random state.
    """
    n_train, n_val, n_test = split_sizes(len(dataset), fractions)
    for name, size in (("train", n_train), ("validation", n_val), ("test", n_test)):
        if size < 1:
            raise DataError(
                f"data.split: {list(fractions)} of {len(dataset)} graphs leaves the {name} "
                "set empty; use more graphs or a larger fraction"
            )
    perm = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed)).tolist()
    return (
        Subset(dataset, perm[:n_train]),
        Subset(dataset, perm[n_train : n_train + n_val]),
        Subset(dataset, perm[n_train + n_val :]),
    )


class IndexBatches(Subset):
    """Graphs ``indices`` of ``dataset``, whose batches ``batcher`` (an :class:`IndexBatcher`
    or a :class:`DiskBatcher`) assembles: a loader fetches a whole batch in one call
    (``__getitems__``). One graph at a time (``dataset[i]``) they are the dataset's own, as
    through a ``Subset``. ``staged``: the batches go to a GPU from the host: each pass is
    gathered into pinned memory, by a thread of its own a pass ahead (see :meth:`read_ahead`)."""

    def __init__(
        self, dataset: Dataset, indices: Sequence[int], batcher: Any, *, staged: bool = False
    ):
        super().__init__(dataset, indices)
        self.batcher = batcher
        self.staged = staged
        self._index = np.asarray(list(indices), dtype=np.int64)

    def __getitems__(self, positions: list[int]) -> Batch:  # type: ignore[override]
        return self.batcher(self._index[positions])

    def read_ahead(self, batches: Iterator[list[int]]) -> Iterator[Batch]:
        """The batches of the positions ``batches`` yields, in order, gathered several at once.

        Batches in memory (an :class:`IndexBatcher`): the epoch's in one pass at its start
        (the sampler's order is a function of the seed and the epoch), or in passes of at most
        :data:`PASS_BYTES` when it is larger; each step gets views of them. Staged for a GPU,
        in passes of at most :data:`STAGED_BYTES`, each in one pinned buffer, a pass made by a
        thread while the steps use the one before (:func:`~.prefetch.ahead`), and copied to
        the GPU in one copy (:class:`~.prefetch.DevicePrefetcher`). Batches on disk:
        up to :data:`READ_AHEAD` at a time (their rows in one query), as long as they take at
        most :data:`READ_AHEAD_BYTES` (judged by the last batch made). Between two training
        steps the stored graphs and this code have left the processor's caches, and
        assembling a batch there took 3x its time in a loop."""
        bytes_of = getattr(self.batcher, "bytes_of", None)
        if bytes_of is not None:
            plan = [self._index[p] for p in batches]
            limit, pin = (STAGED_BYTES, True) if self.staged else (PASS_BYTES, False)
            made = (self.batcher.many(c, pin=pin) for c in passes(plan, bytes_of, limit))
            for each in ahead(made) if self.staged else made:
                yield from each
            return
        count = 1  # the first batch alone: it comes sooner, and tells the size of a batch
        while chunk := list(itertools.islice(batches, count)):
            made = collections.deque(self.batcher.many([self._index[p] for p in chunk]))
            size = sum(v.nbytes for v in made[-1].to_dict().values() if torch.is_tensor(v))
            count = max(1, min(READ_AHEAD, READ_AHEAD_BYTES // max(size, 1)))
            while made:
                yield made.popleft()


def passes(plan: list[np.ndarray], bytes_of: Any, limit: int) -> Iterator[list[np.ndarray]]:
    """``plan`` (batches of graph indices) in runs of whole batches of at most ``limit`` bytes
    each (``bytes_of(index)``: each graph's bytes), a batch larger than that alone."""
    if not plan:
        return
    sizes = np.fromiter((int(bytes_of(b).sum()) for b in plan), dtype=np.int64, count=len(plan))
    ends = np.cumsum(sizes)
    start, spent = 0, 0
    while start < len(plan):
        stop = int(np.searchsorted(ends, spent + limit, side="right"))
        stop = max(stop, start + 1)
        yield plan[start:stop]
        spent, start = int(ends[stop - 1]), stop


def _unwrap(dataset: Dataset | list[Data]) -> tuple[Any, list[int] | None]:
    """The dataset under any Subsets, and which of its graphs they select (None: all)."""
    indices: list[int] | None = None
    while isinstance(dataset, Subset):
        outer = list(dataset.indices)
        indices = outer if indices is None else [outer[i] for i in indices]
        dataset = dataset.dataset
    return dataset, indices


def index_batches(
    dataset: Dataset | list[Data],
    device: torch.device | None = None,
    reads: Collection[str] | None = None,
    stage: torch.device | None = None,
) -> IndexBatches | None:
    """``dataset`` (an in-memory or on-disk dataset, or Subsets of one) as
    :class:`IndexBatches`, assembled on ``device`` (None: the host), of the attributes ``reads``
    (None: all); None when its graphs cannot be assembled without a ``Data`` each. ``stage``:
    the GPU that batches assembled on the host go to (staged in pinned memory)."""
    dataset, indices = _unwrap(dataset)
    try:
        on_disk = isinstance(dataset, DiskDataset)
        batcher = DiskBatcher(dataset, reads) if on_disk else IndexBatcher(dataset, device, reads)
    except Unbatchable:
        return None
    staged = stage is not None and stage.type == "cuda" and device is None and not on_disk
    chosen = range(len(dataset)) if indices is None else indices
    return IndexBatches(dataset, chosen, batcher, staged=staged)


def batch_device(
    data: DataConfig,
    training: TrainingConfig,
    augmentation: AugmentationSection,
    device: torch.device,
    dataset: Dataset,
) -> torch.device | None:
    """Where ``data.device`` has batches of ``dataset`` assembled when training runs on
    ``device``: that GPU, with the whole dataset copied there once, or None (the host). The
    ``training:`` and ``augmentation:`` sections say what may rule it out.

    Raises :class:`~QuantumGravPy.errors.ConfigError` for ``data.device: cuda`` with what rules
    it out (worker processes, augmentation, storage on disk, a per-graph transform), and
    :class:`~QuantumGravPy.errors.DataError` when the dataset does not fit the GPU's memory.
    """
    choice, workers = data.device, training.num_workers
    if choice == "cpu" or device.type != "cuda":
        return None  # without a GPU every value means cpu
    inner, _ = _unwrap(dataset)
    against = None
    if workers > 0:
        against = f"training.num_workers: {workers} (worker processes cannot hand GPU tensors on)"
    elif augmentation.preset is not None:
        against = "augmentation.preset (each graph is augmented on the host)"
    elif isinstance(inner, DiskDataset):
        against = "data.storage: disk (the graphs are read a batch at a time)"
    else:
        try:
            IndexBatcher(inner)
        except Unbatchable as e:
            against = f"this dataset's graphs are made one at a time ({e})"
    if against is not None:
        if choice == "cuda":
            raise ConfigError(f"data.device: cuda cannot hold the batches with {against}")
        return None
    size = sum(v.numel() * v.element_size() for v in pyg.storage(inner)[0].to_dict().values())
    free = torch.cuda.mem_get_info(device)[0]
    if choice == "auto" and size >= free / 4:
        return None
    if size > free:
        raise DataError(
            f"data.device: cuda: the processed dataset takes {size / 1e6:.0f} MB and {device} "
            f"has {free / 1e6:.0f} MB free (use data.device: auto or cpu)"
        )
    log.info(
        "data.device: the dataset (%.0f MB) is held on %s, batches made there", size / 1e6, device
    )
    return device


def _as_is(batch: Batch) -> Batch:
    """The collate function of a loader whose dataset returns whole batches."""
    return batch


def epoch_sampler(loader: DataLoader) -> Any:
    """The sampler that draws ``loader``'s indices (its own, or its micro-batches')."""
    return getattr(loader.batch_sampler, "sampler", loader.sampler)


class MicroBatches:
    """The batches of the invariant strategy: each of ``batches`` batches of ``batch_size``
    indices from ``sampler`` (a rank's share of a global batch), cut into ``micro`` micro-batches
    (``batch[m::micro]``).

    Rank r of W holds the elements r, r + W, ... of the epoch's sequence, so its micro-batch m
    holds, of global batch k of size B, the elements kB + j + S*t with j = r + W*m: micro-batch
    j of S, the same graphs for any number of processes W dividing S.
    """

    def __init__(self, sampler: Any, *, batch_size: int, micro: int, batches: int):
        self.sampler, self.batch_size = sampler, batch_size
        self.micro, self.batches = micro, batches

    def __len__(self) -> int:
        return self.batches * self.micro

    def __iter__(self) -> Iterator[list[int]]:
        indices = iter(self.sampler)
        for _ in range(self.batches):
            batch = list(itertools.islice(indices, self.batch_size))
            for m in range(self.micro):
                yield batch[m :: self.micro]


def make_loader(
    dataset: Dataset,
    *,
    batch_size: int,
    shuffle: bool = False,
    drop_last: bool = False,
    num_workers: int = 0,
    seed: int = 0,
    sampler: Any = None,
    device: torch.device | None = None,
    micro: tuple[int, int] | None = None,
    batch_sampler: Any = None,
    reads: Collection[str] | None = None,
    stage: torch.device | None = None,
) -> DataLoader:
    """A loader of batches of graphs; a shuffling loader draws its order from its own seeded
    generator, and its worker processes, if any, last from one epoch to the next. Batches of
    graphs in memory or on disk are assembled by index, others by PyTorch Geometric's
    collation: the same batches either way. ``device``: where batches in memory are assembled
    (see :func:`batch_device`; None: the host). ``micro`` (micro-batches per batch, batches per
    epoch): the sampler's batches cut into micro-batches (:class:`MicroBatches`).
    ``batch_sampler``: one that makes the batches itself (``batch_size``, ``sampler`` and
    ``drop_last`` then unused). ``reads``: the attributes a batch assembled by index holds
    (None: all). ``stage``: the device the batches train on (a GPU: those made on the host are
    staged in pinned memory, a pass at a time)."""
    if shuffle and sampler is not None:
        raise ValueError("shuffle and sampler exclude each other: the sampler decides the order")
    options = {
        "batch_size": batch_size,
        "shuffle": shuffle,
        "sampler": sampler,
        "drop_last": drop_last,
        "num_workers": num_workers,
        "persistent_workers": num_workers > 0,
        "generator": torch.Generator().manual_seed(seed) if shuffle else None,
    }
    if micro is not None:
        batch_sampler = MicroBatches(
            sampler, batch_size=batch_size, micro=micro[0], batches=micro[1]
        )
    if batch_sampler is not None:
        del options["batch_size"], options["drop_last"], options["sampler"]
        options["batch_sampler"] = batch_sampler  # torch: it excludes the three above
    batches = index_batches(dataset, device, reads, stage if num_workers == 0 else None)
    if batches is None:  # PyTorch Geometric's collation, graph by graph
        loader = BatchLoader(dataset, collate_fn=Collater(dataset), **options)
    else:
        loader = BatchLoader(batches, collate_fn=_as_is, **options)
    loader.graphs = dataset  # the graphs its batches are made of, by position
    return loader


def make_train_loader(
    dataset: Dataset,
    training: TrainingConfig,
    augmentation: AugmentationSection,
    *,
    rank: int = 0,
    world_size: int = 1,
    label: str = "y",
    device: torch.device | None = None,
    micro_batches: int | None = None,
    reads: Collection[str] | None = None,
    stage: torch.device | None = None,
) -> DataLoader:
    """The training loader of ``rank`` of ``world_size``: augmented, sampled, in batches.

    ``label``: the graph attribute whose classes a class-balancing sampler balances.
    ``reads``: the attributes the model and the tasks read, what the batches hold (None: all).
    ``stage``: the device the batches train on (see :func:`make_loader`).
    ``micro_batches`` (the strategy's cut, if it cuts batches): this rank's micro-batches of each
    global batch, in a row (the strategy decides how many); an epoch is the whole global batches
    of the sequence one process would draw (the last, partial one left out).

    Call ``set_epoch(epoch)`` on its ``sampler`` and ``dataset`` before each epoch.
    """
    if augmentation.preset is not None:
        dataset = AugmentedDataset(
            dataset,
            get_preset(augmentation.preset),
            seeding=augmentation.seeding,
            base_seed=training.seed,
            rank=rank,
            world_size=world_size,
        )
    if training.batch_nodes is not None:  # batches of equal work (see .node_batches)
        one = build_sampler(training, dataset, num_replicas=1, rank=0, label=label)
        batches = NodeBudgetBatches(
            one,
            graph_sizes(dataset),
            budget=training.batch_nodes,
            rank=rank,
            world_size=world_size,
            drop_last=training.drop_last,
        )
        return make_loader(
            dataset,
            batch_size=1,
            batch_sampler=batches,
            num_workers=training.num_workers,
            device=device,
            reads=reads,
            stage=stage,
        )
    micro = None
    if micro_batches is not None:
        whole = len(build_sampler(training, dataset, num_replicas=1, rank=0, label=label))
        micro = (micro_batches, whole // (training.batch_size * world_size))
    return make_loader(
        dataset,
        batch_size=training.batch_size,
        sampler=build_sampler(training, dataset, num_replicas=world_size, rank=rank, label=label),
        drop_last=training.drop_last,
        num_workers=training.num_workers,
        seed=training.seed,
        device=device,
        micro=micro,
        reads=reads,
        stage=stage,
    )


def release_workers(loader: DataLoader) -> None:
    """Stop a loader's persistent worker processes now; it starts new ones if used again.

    Left to the garbage collector, torch stops them from a finaliser that, in a process that
    has run other loaders, can wait seconds for each worker at some unrelated later moment.
    """
    compat_torch.stop_workers(loader)
