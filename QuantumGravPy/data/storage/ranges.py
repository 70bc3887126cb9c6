"""Contiguous, balanced ranges of work for the ranks of a job (generation, preprocessing)."""

from __future__ import annotations

import itertools
import logging
from typing import Any

from ... import logs
from ...logs import configure_logging, get_logger
from ...parallel import spawn
from . import columns


def in_parallel(fn: Any, world_size: int, *args: Any) -> list[Any]:
    """``fn(rank, world_size, *args)`` in ``world_size`` new processes; their results in order.

    Forked from a server that imported the package once, so the processes start in a
    fraction of the seconds a fresh interpreter each takes (which cost more than the work on
    a few thousand causal sets). They log as this process does, if it logs: each line of rank
    r marked ``[RANK r]`` (rank 0 reports progress). A list of graphs comes back as columns
    (:mod:`.columns`): a few tensors read as data, not graph by graph.
    """
    logger = get_logger()
    level = logger.level if logger.handlers else None
    how = (level, logs.PROGRESS_EVERY_S)
    parts = spawn(_logging, world_size, how, fn, *args, backend="gloo", start_method="forkserver")
    show = level is not None and level <= logging.INFO
    return [columns.unpack(p, show=show) if columns.is_packed(p) else p for p in parts]


def _logging(rank: int, world_size: int, how: tuple, fn: Any, *args: Any) -> Any:
    level, logs.PROGRESS_EVERY_S = how
    if level is not None:
        configure_logging(level, prefix=f"[RANK {rank}] ")
    result = fn(rank, world_size, *args)
    return columns.pack(result) if columns.packable(result) else result


def checked_count(value: Any, name: str, minimum: int) -> int:
    """``value``, an integer of at least ``minimum``; a ValueError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


class DistributedRangeSplitter:
    """Splits ``range(total_samples)`` into ``world_size`` contiguous ranges.

    Every index belongs to exactly one range, in order; sizes differ by at most one, the larger
    ranges first. With fewer samples than ranks, the last ranks get empty ranges.
    """

    def __init__(self, total_samples: int, world_size: int):
        self.total_samples = checked_count(total_samples, "total_samples", 0)
        self.world_size = checked_count(world_size, "world_size", 1)

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
