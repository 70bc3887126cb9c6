"""What a run's processes do together: one home for the trainer's cross-process acts.

:class:`OneProcess` is a run of one process: each act is the identity (``fn()`` run here, sums
as they are, one record). :class:`ProcessGroup` is one process of a DDP job: the same acts over
the process group. The trainer asks its ``processes`` and never ``torch.distributed``::

    on_main(fn)           fn on rank 0 after a barrier; its result, or its failure, on every rank
    everywhere(fn)        fn on every rank (or those with run_here); any failure on every rank
    reduce_sums(t)        per-process sums added up over the ranks
    gather(record)        every rank's record, in rank order

``wait`` (the monitor's "wait" phase, once there is one) times what each rank spends waiting
for the others.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from ..errors import QGError, RunError
from . import distributed
from .distributed import RankFailedError

T = TypeVar("T")


class OneProcess:
    """The acts of a run of one process: nothing to wait for, nothing to combine."""

    rank = 0
    world_size = 1
    local_rank = 0
    local_processes = 1  # of this job on this machine

    def __init__(self) -> None:
        self.wait: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext

    @property
    def is_main(self) -> bool:
        """Whether this process writes files and shows progress."""
        return self.rank == 0

    def on_main(self, fn: Callable[[], T]) -> T:
        return fn()

    def everywhere(
        self, fn: Callable[[], T], *, run_here: bool = True, patient: bool = False
    ) -> T | None:
        return fn() if run_here else None

    def reduce_sums(self, sums: torch.Tensor) -> torch.Tensor:
        return sums

    def gather(self, record: Any) -> list[Any]:
        return [record]


class ProcessGroup(OneProcess):
    """The acts of one process of a DDP job (a process group must exist)."""

    def __init__(self) -> None:
        super().__init__()
        self.rank = distributed.get_rank()
        self.world_size = distributed.get_world_size()
        self.local_rank = distributed.get_local_rank()
        self.local_processes = distributed.get_local_world_size()

    def on_main(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on rank 0, then give its result (or its failure) to every rank.

        The others wait at a barrier meanwhile. A failure on rank 0 is caught and broadcast, so
        the other ranks raise too rather than wait for a rank that will never arrive.
        """
        result, error = None, None
        if self.is_main:
            try:
                result = fn()
            except Exception as e:
                error = e
        failure = None if error is None else f"{type(error).__name__}: {error}"
        with self.wait():
            distributed.barrier()
            result, failure = distributed.broadcast_object((result, failure))
        if error is not None:
            raise error
        if failure is not None:
            raise RankFailedError(f"rank 0 failed: {failure}")
        return result

    def everywhere(
        self, fn: Callable[[], T], *, run_here: bool = True, patient: bool = False
    ) -> T | None:
        """Run ``fn`` on the ranks with ``run_here``; any failure is raised on every rank.
        ``patient``: the ranks wait for each other as long as ``fn`` takes (preparing data),
        not ``parallel.timeout_s``."""
        result, error = None, None
        if run_here:
            try:
                result = fn()
            except Exception as e:
                error = e
        failures = distributed.all_gather_object(
            None if error is None else described(error), patient=patient
        )
        if error is not None:
            raise error
        for rank, failure in enumerate(failures):
            if failure is not None:
                raise RankFailedError(f"rank {rank} failed: {failure}")
        return result

    def reduce_sums(self, sums: torch.Tensor) -> torch.Tensor:
        with self.wait():
            return distributed.all_reduce_sum(sums)

    def gather(self, record: Any) -> list[Any]:
        return distributed.all_gather_object(record)


def described(error: Exception) -> str:
    """An error as another rank reports it: the library's own errors by their message (which
    says what happened, and in whose code), others with their type."""
    if isinstance(error, (QGError, RunError)):
        return str(error)
    return f"{type(error).__name__}: {error}"
