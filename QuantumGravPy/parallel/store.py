"""The job's key-value store, where the ranks meet: rank 0 holds it (or torchrun's agent
does), the others connect to it, retrying within the job's timeout, and the ranks that never
came are named with their hosts where SLURM says them.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import torch.distributed as dist

from .environment import hosts_of_ranks, restart_count


def never_joined(ranks: list[int], world_size: int) -> str:
    """``rank 1 (on node1)``, for ranks that never joined: their hosts where SLURM says them."""
    hosts = hosts_of_ranks(world_size)
    named = [f"rank {r}" + (f" (on {hosts[r]})" if hosts else "") for r in ranks]
    return ", ".join(named)


def job_store(
    addr: str, port: int, world_size: int | None, *, is_master: bool = False, timeout: timedelta
) -> dist.Store:
    """The job's key-value store: the process group meets through it, and ranks tell each
    other of failures in it (:mod:`.failures`). Rank 0 holds it, unless torchrun's agent does."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # torchrun's agent keeps its store across restarts (--max-restarts): the addresses the
        # ranks of a failed attempt published are still in it, so every attempt gets keys of
        # its own. Otherwise a restarted rank may dial a dead one.
        return dist.PrefixStore(
            f"QuantumGravPy/attempt_{restart_count()}", _client(addr, port, world_size, timeout)
        )
    if not is_master:
        return _client(addr, port, world_size, timeout)
    # the master does not wait for the others here: failures.meet does, and names who is missing
    return dist.TCPStore(
        addr, port, world_size, is_master=True, timeout=timeout, wait_for_workers=False
    )


def _client(addr: str, port: int, world_size: int | None, timeout: timedelta) -> dist.Store:
    """A client of the store at ``addr:port``, given up within about ``timeout``.

    torch's client tries twice, each try as long as its timeout, with a pause of up to as long
    between: three times the timeout in all, 28 s for 10 s measured. So it is made with short
    timeouts, again until ``timeout`` has passed, and then waits as long as ``timeout`` for
    each of the store's answers."""
    deadline = time.monotonic() + timeout.total_seconds()
    step = timedelta(seconds=min(timeout.total_seconds(), _CONNECT_STEP_S) / 3)
    while True:
        try:
            store = dist.TCPStore(addr, port, world_size, is_master=False, timeout=step)
            break
        except dist.DistNetworkError as e:
            if "timed out" not in str(e) or time.monotonic() >= deadline:
                raise
    store.set_timeout(timeout)
    return store


_CONNECT_STEP_S = 6.0  # the longest one of a client's attempts to connect lasts: 3 x a third
