"""The parallel layer: the only owner of ``torch.distributed`` and of starting processes.

- :mod:`.distributed`: the process group, who am I (rank, local rank, world size), and the
  collectives the trainers use, each a no-op in a single process;
- :mod:`.processes`: what a run's processes do together (rank-0 work, barriers, broadcasts,
  gathers), the identity in one process;
- :mod:`.devices`: where a process computes, and in which precision (training and prediction);
- :mod:`.spawn`: starting ``fn(rank, world_size, ...)`` in fresh processes, or joining a job
  that torchrun or srun started, and ending all of them when one fails;
- :mod:`.shm_comm`: averaging CPU gradients through shared memory, a DDP communication hook;
- :mod:`.handover`: the ranks' results handed to the launcher as data (nothing read runs code);
- :mod:`.orphans`, :mod:`.deadline`: ranks end with their launcher, and a single process ends
  code of the user's that never returns, after ``parallel.timeout_s``;
- :mod:`.native_output`: torch's C++ log records (c10d's stack dumps) kept out of the terminal.

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
