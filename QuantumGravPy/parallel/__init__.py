"""The parallel layer: the only owner of ``torch.distributed`` and of starting processes.

- :mod:`.distributed`: the process group, who am I (rank, local rank, world size), and the
  collectives the trainers use, each a no-op in a single process;
- :mod:`.spawn`: starting ``fn(rank, world_size, ...)`` in fresh processes, or joining a job
  that torchrun or srun started, and ending all of them when one fails;
- :mod:`.shm_comm`: averaging CPU gradients through shared memory, a DDP communication hook.

Everything above asks here instead of importing ``torch.distributed``; a test keeps it so.
Imports ``config`` (for :func:`run_distributed`'s settings) and the ground floor.
"""

from .distributed import (
    DistributedError,
    PortInUseError,
    RankFailedError,
    RankTimeoutError,
    cleanup_ddp,
    initialize_ddp,
)
from .spawn import WorkerError, resolve_backend, run_distributed, spawn

__all__ = [
    "DistributedError",
    "PortInUseError",
    "RankFailedError",
    "RankTimeoutError",
    "WorkerError",
    "cleanup_ddp",
    "initialize_ddp",
    "resolve_backend",
    "run_distributed",
    "spawn",
]
