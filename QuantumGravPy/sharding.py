"""Contiguous, balanced ranges of work for the ranks of a job (generation, preprocessing)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any


def _count(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


class DistributedRangeSplitter:
    """Splits ``range(total_samples)`` into ``world_size`` contiguous ranges.

    Every index belongs to exactly one range, in order; sizes differ by at most one, the larger
    ranges first. With fewer samples than ranks, the last ranks get empty ranges.
    """

    def __init__(self, total_samples: int, world_size: int):
        self.total_samples = _count(total_samples, "total_samples", 0)
        self.world_size = _count(world_size, "world_size", 1)

    def get_rank_range(self, rank: int) -> tuple[int, int]:
        """``(start, end)`` of ``rank``'s range, end exclusive."""
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.world_size:
            raise ValueError(f"rank must be an integer in [0, {self.world_size}), got {rank!r}")
        base, extra = divmod(self.total_samples, self.world_size)
        start = rank * base + min(rank, extra)
        return start, start + base + (1 if rank < extra else 0)

    def get_all_ranges(self) -> list[tuple[int, int]]:
        return [self.get_rank_range(r) for r in range(self.world_size)]

    def validate_ranges(self) -> bool:
        """Whether the ranges are contiguous, cover everything once and are balanced."""
        ranges = self.get_all_ranges()
        sizes = [end - start for start, end in ranges]
        contiguous = all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        return (
            ranges[0][0] == 0
            and ranges[-1][1] == self.total_samples
            and contiguous
            and max(sizes) - min(sizes) <= 1
            and sizes == sorted(sizes, reverse=True)
        )


def stream_distributed_augmentation_chain(
    num_samples: int,
    rank: int,
    world_size: int,
    config: Any = None,
    chunk_size: int = 1000,
    base_seed: int = 0,
) -> Iterator[list[dict[str, Any]]]:
    """The augmentation parameters of ``rank``'s range, as lists of at most ``chunk_size`` dicts.

    Lazy: only one chunk exists at a time, whatever the range's size.
    """
    from .augment import gen_distributed_augmentation_params

    _count(chunk_size, "chunk_size", 1)
    start, end = DistributedRangeSplitter(num_samples, world_size).get_rank_range(rank)
    for chunk_start in range(start, end, chunk_size):
        yield [
            gen_distributed_augmentation_params(
                sample_id, rank, config, base_seed=base_seed, world_size=world_size
            )
            for sample_id in range(chunk_start, min(chunk_start + chunk_size, end))
        ]
