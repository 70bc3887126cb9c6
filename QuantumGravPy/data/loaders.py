"""The seeded train/validation/test split and the data loaders built on it.

What each rank reads each epoch is decided here: the training loader's sampler (split between
ranks, keyed by seed and epoch) and its augmentation (keyed by sample and epoch, or by rank).
Graphs held in memory are batched by index arithmetic (:mod:`.batching`), a whole batch per
call; anything else (a per-graph transform, an augmentation, a dataset of its own kind) goes
through PyTorch Geometric's loader, one graph at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader as GraphLoader

from ..config import AugmentationSection, TrainingConfig
from ..errors import DataError
from .augment import AugmentedDataset, get_preset
from .batching import IndexBatcher, Unbatchable
from .disk import DiskBatcher, DiskDataset
from .samplers import build_sampler


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
    through a ``Subset``."""

    def __init__(self, dataset: Dataset, indices: Sequence[int], batcher: Any):
        super().__init__(dataset, indices)
        self.batcher = batcher
        self._index = np.asarray(list(indices), dtype=np.int64)

    def __getitems__(self, positions: list[int]) -> Batch:  # type: ignore[override]
        return self.batcher(self._index[positions])


def index_batches(dataset: Dataset | list[Data]) -> IndexBatches | None:
    """``dataset`` (an in-memory or on-disk dataset, or Subsets of one) as
    :class:`IndexBatches`; None when its graphs cannot be assembled without a ``Data`` each."""
    indices: list[int] | None = None
    while isinstance(dataset, Subset):
        outer = list(dataset.indices)
        indices = outer if indices is None else [outer[i] for i in indices]
        dataset = dataset.dataset
    try:
        on_disk = isinstance(dataset, DiskDataset)
        batcher = DiskBatcher(dataset) if on_disk else IndexBatcher(dataset)
    except Unbatchable:
        return None
    return IndexBatches(dataset, range(len(dataset)) if indices is None else indices, batcher)


def _as_is(batch: Batch) -> Batch:
    """The collate function of a loader whose dataset returns whole batches."""
    return batch


def make_loader(
    dataset: Dataset,
    *,
    batch_size: int,
    shuffle: bool = False,
    drop_last: bool = False,
    num_workers: int = 0,
    seed: int = 0,
    sampler: Any = None,
    persistent_workers: bool = True,
) -> DataLoader:
    """A loader of batches of graphs; a shuffling loader draws its order from its own seeded
    generator. Batches of graphs in memory are assembled by index, others by PyTorch
    Geometric's loader: the same batches either way."""
    if shuffle and sampler is not None:
        raise ValueError("shuffle and sampler exclude each other: the sampler decides the order")
    options = {
        "batch_size": batch_size,
        "shuffle": shuffle,
        "sampler": sampler,
        "drop_last": drop_last,
        "num_workers": num_workers,
        "persistent_workers": persistent_workers and num_workers > 0,
        "generator": torch.Generator().manual_seed(seed) if shuffle else None,
    }
    batches = index_batches(dataset)
    if batches is None:
        return GraphLoader(dataset, **options)
    return DataLoader(batches, collate_fn=_as_is, **options)


def make_train_loader(
    dataset: Dataset,
    training: TrainingConfig,
    augmentation: AugmentationSection,
    *,
    rank: int = 0,
    world_size: int = 1,
    label: str = "y",
) -> DataLoader:
    """The training loader of ``rank`` of ``world_size``: augmented, sampled, in batches.

    ``label``: the graph attribute whose classes a class-balancing sampler balances.

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
    return make_loader(
        dataset,
        batch_size=training.batch_size,
        sampler=build_sampler(training, dataset, num_replicas=world_size, rank=rank, label=label),
        drop_last=training.drop_last,
        num_workers=training.num_workers,
        seed=training.seed,
        # workers that outlive an epoch would keep augmenting with the old epoch's draws
        persistent_workers=augmentation.preset is None,
    )


def release_workers(loader: DataLoader) -> None:
    """Stop a loader's persistent worker processes now; it starts new ones if used again.

    Left to the garbage collector, torch stops them from a finaliser that, in a process that
    has run other loaders, can wait seconds for each worker at some unrelated later moment.
    """
    iterator = getattr(loader, "_iterator", None)  # torch keeps persistent workers here
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
    loader._iterator = None
