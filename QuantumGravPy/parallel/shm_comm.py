"""Gradient averaging through shared memory, for DDP jobs whose CPU ranks share one machine.

gloo's all-reduce is cheap on an idle machine (well under a millisecond for this project's
models), but when every core is busy training, each call waits milliseconds for the peers' I/O
threads to be scheduled; with hundreds of small steps per epoch that wait costs more than the
second process gains. Ranks on one machine can instead exchange gradients through a shared
buffer and wait for each other by watching counters, which costs microseconds.

Installed as a DDP communication hook (:meth:`DistributedDataParallel.register_comm_hook`), so
DDP keeps doing everything else. Every rank sums the same rows in the same order, so the
averaged gradients are bitwise identical on every rank, as DDP requires.

The protocol, per call k (DDP calls the hook for its buckets in the same order on every rank):
rank r copies its gradients into row r of buffer k % 2, then sets its counter to k + 1, and
waits until every counter is at least k + 1; then all rows of that buffer are complete, and it
sums them. Buffer k % 2 is written again only at call k + 2, by which time every rank has
passed call k + 1 and so has finished reading call k. Counters are written by their own rank
only, so no atomic operations are needed; x86's ordering of stores makes the data visible
before the counter that announces it, which is why this is used only on x86-64.
"""

import mmap
import os
import platform
import sys
import time
import uuid

import numpy as np
import torch

from . import distributed, sharing
from .distributed import RankTimeoutError

_COUNTER_BYTES = 8
_SHM_DIR = "/dev/shm"
# Spin this many polls before yielding the core, so an oversubscribed machine still progresses.
_SPINS_BEFORE_YIELD = 200


def supported(device: torch.device, params: list[torch.nn.Parameter]) -> bool:
    """Whether this job can use it: float32 CPU ranks, all sharing this machine's memory, on
    x86-64.

    Whether the ranks share memory is found by sharing some (:mod:`.sharing`: a token in
    ``/dev/shm``). Host names are no proof: two containers, or two nodes configured alike, can
    have the same one, and a buffer each maps from its own memory would leave every rank
    averaging with nobody. A collective: every rank must call it.
    """
    local = (
        device.type == "cpu"
        and sys.platform.startswith("linux")  # /dev/shm
        and os.path.isdir(_SHM_DIR)
        and platform.machine().lower() in ("x86_64", "amd64")
        and all(p.dtype == torch.float32 for p in params)
    )
    return distributed.get_world_size() > 1 and sharing.everyone_sees(_SHM_DIR, here=local)


def _map(name: str, size: int, *, create: bool) -> mmap.mmap:
    """Map the segment ``name`` of ``size`` bytes (``create``: make it, zero-filled).

    A plain file in /dev/shm rather than multiprocessing's SharedMemory, whose resource
    tracker, shared between spawned processes but not between torchrun's, either warns about
    segments that rank 0 already removed or fails to find them.
    """
    path = os.path.join(_SHM_DIR, name)
    flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if create:
            os.ftruncate(fd, size)
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


class SharedMemoryAllReduce:
    """The shared buffer and counters of one job; ``hook`` is the DDP communication hook."""

    def __init__(self, numel: int, *, timeout_s: float) -> None:
        self.rank = distributed.get_rank()
        self.world_size = distributed.get_world_size()
        self.numel = numel
        self.timeout_s = timeout_s
        self.calls = 0
        size = self.world_size * (_COUNTER_BYTES + 2 * numel * 4)
        name = f"qg_{uuid.uuid4().hex[:16]}" if self.rank == 0 else None
        if self.rank == 0:
            self._mmap = _map(name, size, create=True)  # a new file is zero-filled
        name = self.name = distributed.broadcast_object(name)
        if self.rank != 0:
            self._mmap = _map(name, size, create=False)
        distributed.barrier()
        if self.rank == 0:
            # Every rank has it mapped; removing the name now means no file is left behind,
            # whatever happens to the job later. The memory lives on until the last rank unmaps.
            os.unlink(os.path.join(_SHM_DIR, name))
        w = self.world_size
        # numpy's view: waiting polls it thousands of times a step, and every torch operation
        # would be an event in a profiler's trace (a trace of hundreds of MB of polls)
        self._counters = np.frombuffer(self._mmap, dtype=np.int64, count=w)
        self._data = torch.frombuffer(
            self._mmap, dtype=torch.float32, offset=w * _COUNTER_BYTES, count=2 * w * numel
        ).view(2, w, numel)

    def allreduce_mean(self, tensor: torch.Tensor) -> torch.Tensor:
        """Average ``tensor`` (float32, on the CPU) over the ranks, in place (as gloo's
        all-reduce does); the same bits on every rank. Returns ``tensor``."""
        flat = tensor.view(-1)
        n = flat.numel()
        if n > self.numel:
            raise ValueError(f"bucket of {n} values exceeds the shared buffer of {self.numel}")
        rows = self._data[self.calls % 2, :, :n]
        rows[self.rank].copy_(flat)
        self.calls += 1
        self._counters[self.rank] = self.calls
        self._wait_for(self.calls)
        flat.copy_(rows[0])  # its own row is safe in the shared buffer now
        for r in range(1, self.world_size):
            flat += rows[r]
        flat.div_(self.world_size)
        return tensor

    def _wait_for(self, target: int) -> None:
        spins = 0
        deadline = None
        counters = self._counters
        while int(counters.min()) < target:
            spins += 1
            if spins % _SPINS_BEFORE_YIELD == 0:
                os.sched_yield()
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.timeout_s
                elif now > deadline:
                    late = [str(r) for r in range(self.world_size) if int(counters[r]) < target]
                    raise RankTimeoutError(
                        f"no gradients from rank(s) {', '.join(late)} within {self.timeout_s:g} s "
                        "(parallel.timeout_s); they stopped answering"
                    )

    # DDP checks this annotation literally, so this module does not use postponed annotations.
    def hook(self, state, bucket) -> torch.futures.Future[torch.Tensor]:
        future: torch.futures.Future = torch.futures.Future()
        future.set_result(self.allreduce_mean(bucket.buffer()))
        return future

    def close(self) -> None:
        """Unmap the buffer; never raises, so closing on the way out of a failure (a rank that
        timed out here) cannot mask that failure."""
        self._counters = self._data = None
        try:
            self._mmap.close()
        except BufferError:
            # Views of the buffer are still alive (in the frames of the error being raised, or
            # a bucket DDP still holds): the mapping is released with the last of them, and its
            # file was unlinked at the start, so nothing is left behind either way.
            pass
