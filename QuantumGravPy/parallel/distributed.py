"""The one module that talks to ``torch.distributed``.

Everything else asks here: who am I (:func:`get_rank`, :func:`is_main`), and the collectives the
trainers need (:func:`barrier`, :func:`broadcast_object`, :func:`all_reduce_sum`,
:func:`all_gather_object`). Each collective is a no-op in a single process, so code written for
many processes runs unchanged in one.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

# DDP's own gradient averaging as a communication hook (the same numbers as DDP without one),
# for a wrapper to time and check (training.monitor)
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import (
    allreduce_hook as allreduce_hook,
)

from . import failures

# the launcher's variables and the errors, long imported from here
from .environment import (  # noqa: F401
    ProcessEnv,
    first_slurm_host,
    hosts_of_ranks,
    process_env,
    restart_count,
)
from .errors import DistributedError, PortInUseError, RankFailedError, RankTimeoutError
from .store import job_store, never_joined

DEFAULT_TIMEOUT_S = 300.0


def free_port(addr: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def one_thread(device: torch.device) -> Iterator[None]:
    """Within the block, torch computes on one CPU thread in this process (restored after).

    For results that must not depend on how many processes share the machine. CPU kernels
    split some sums by the number of threads (MKL's matrix products on its compatible code
    path, torch's own reductions on its scalar one), so the last bits of a result depend on
    it, and each process's thread count is the cores divided among the processes: one thread
    is the only count that every number of processes can have. A no-op on a GPU.
    """
    if device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# --- the process group -------------------------------------------------------------------------


def resolve_backend(backend: str, device: str = "auto") -> str:
    """``backend`` (``parallel.backend``), with ``auto`` made concrete for processes that train
    on ``device`` (``training.device``): NCCL where they use GPUs (CUDA is available and the
    device is not ``cpu``), gloo otherwise. The one rule, for spawned ranks and joined jobs."""
    if backend != "auto":
        return backend
    return "nccl" if device != "cpu" and torch.cuda.is_available() else "gloo"


_LOCAL_RANK = 0
_LOCAL_WORLD_SIZE = 1
_TIMEOUT_S = DEFAULT_TIMEOUT_S


def initialize_ddp(
    rank: int,
    world_size: int,
    master_addr: str = "127.0.0.1",
    master_port: int | str | None = None,
    backend: str = "auto",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    local_rank: int | None = None,
    local_world_size: int | None = None,
) -> torch.device:
    """Join the process group as ``rank`` of ``world_size``; returns this process's device.

    ``backend="auto"`` is NCCL when CUDA is available and gloo otherwise. With CUDA the device is
    ``cuda:local_rank`` (the local rank defaults to the rank, right on one node). On the CPU each
    process gets ``cores // local_world_size`` threads, so ranks do not oversubscribe the machine.
    ``master_port`` may be an int or a string; without one, MASTER_PORT from the environment is
    used, or a free port when the group has one process.
    """
    global _LOCAL_RANK, _LOCAL_WORLD_SIZE, _TIMEOUT_S
    if not 0 <= rank < world_size:
        raise DistributedError(f"rank {rank} is outside [0, {world_size})")
    if dist.is_initialized():
        raise DistributedError("a process group is already initialised in this process")
    if master_port is None:
        master_port = os.environ.get("MASTER_PORT")
    if master_port is None:
        if world_size > 1:
            raise DistributedError(
                "master_port is needed when world_size > 1: every rank must use the same one"
            )
        master_port = free_port(master_addr)
    try:
        port = int(master_port)
    except ValueError:
        raise DistributedError(f"master_port must be a port number, got {master_port!r}") from None
    backend = resolve_backend(backend)
    if backend not in ("nccl", "gloo"):
        raise DistributedError(f"backend must be auto, nccl or gloo, got {backend!r}")
    local_rank = rank if local_rank is None else local_rank
    local_world_size = world_size if local_world_size is None else local_world_size

    if backend == "nccl":
        if local_rank >= torch.cuda.device_count():
            raise DistributedError(
                f"local rank {local_rank} needs cuda:{local_rank}, but only "
                f"{torch.cuda.device_count()} GPU(s) are visible"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, available_cores() // local_world_size))

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = master_addr, str(port)
    timeout = timedelta(seconds=timeout_s)
    try:
        store = job_store(master_addr, port, world_size, is_master=rank == 0, timeout=timeout)
        missing = failures.meet(store, rank, world_size, timeout_s) if world_size > 1 else []
        if missing:
            raise RankTimeoutError(
                f"not all {world_size} ranks met at {master_addr}:{port} within {timeout_s:g} s "
                f"(parallel.timeout_s): {never_joined(missing, world_size)} never joined"
            )
        dist.init_process_group(
            backend, store=store, rank=rank, world_size=world_size, timeout=timeout
        )
    except dist.DistNetworkError as e:
        if "EADDRINUSE" in str(e) or "address already in use" in str(e).lower():
            raise PortInUseError(master_addr, port) from None
        if rank != 0 and "timed out" in str(e):
            raise RankTimeoutError(
                f"not all {world_size} ranks met at {master_addr}:{port} within {timeout_s:g} s "
                f"(parallel.timeout_s): {never_joined([0], world_size)}, which holds the job's "
                "store, never answered"
            ) from e
        raise DistributedError(f"cannot reach rank 0 at {master_addr}:{port}: {e}") from e
    except dist.DistStoreError as e:
        raise RankTimeoutError(
            f"not all {world_size} ranks met at {master_addr}:{port} within {timeout_s:g} s "
            f"(parallel.timeout_s): {str(e).splitlines()[0]}"
        ) from e
    _LOCAL_RANK, _LOCAL_WORLD_SIZE, _TIMEOUT_S = local_rank, local_world_size, timeout_s
    failures.watch(
        lambda seconds: job_store(master_addr, port, None, timeout=timedelta(seconds=seconds)),
        rank,
        world_size,
    )
    return device


def cleanup_ddp() -> None:
    """Leave the process group (safe to call when there is none).

    Wrappers nobody refers to any more (DDP's reducer, with its communication hook) are
    collected first, while the group they use still exists: collected later, at interpreter
    exit, one occasionally aborted the process ("terminate called without an active exception").
    """
    global _PATIENT
    failures.stop_watching()
    _PATIENT = None
    if dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    return dist.get_rank() if is_initialized() else 0


def get_world_size() -> int:
    return dist.get_world_size() if is_initialized() else 1


def get_local_rank() -> int:
    return _LOCAL_RANK if is_initialized() else 0


def get_local_world_size() -> int:
    """The processes of this job on this machine."""
    return _LOCAL_WORLD_SIZE if is_initialized() else 1


def is_main() -> bool:
    return get_rank() == 0


def get_timeout_s() -> float:
    """The timeout the process group was started with (parallel.timeout_s)."""
    return _TIMEOUT_S


def backend() -> str | None:
    return dist.get_backend() if is_initialized() else None


def ddp_device_ids(device: torch.device) -> list[int] | None:
    """What DistributedDataParallel wants as ``device_ids``: ``[index]`` on a GPU, None on a CPU.

    Integers, never ``torch.device`` objects: DDP rejects the latter.
    """
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return [int(index)]
    return None


# --- collectives (no-ops in a single process) -------------------------------------------------


def _collective(name: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, a collective: a rank that stopped answering, or whose connection
    broke, is reported as such (with gloo's own error as the cause).

    gloo raises both as plain RuntimeErrors, told apart here by how long the call waited: the
    process group's whole timeout for a silent rank, less for a broken connection (which torch
    types as DistNetworkError, or gloo's transport raises). Any other error is not relabelled.
    """
    start = time.monotonic()
    try:
        return fn(*args, **kwargs)
    except RuntimeError as e:
        if time.monotonic() - start >= 0.9 * _TIMEOUT_S:
            raise RankTimeoutError(
                f"no answer from the other ranks within {_TIMEOUT_S:g} s "
                f"(parallel.timeout_s) in {name}; a rank has stopped answering"
            ) from e
        told = failures.seen()  # what the rank that failed said, if it could
        if told is not None:
            raise RankFailedError(told.message, users=told.users) from e
        lost = lost_contact(e, name)
        if lost is not None:
            raise lost from e
        raise


def lost_contact(error: BaseException, during: str) -> RankFailedError | None:
    """``error`` as the loss of another rank, naming it and its host where the job's store can
    tell (:func:`.failures.silent`), if it is one: a connection that broke (what torch types as
    DistNetworkError, or gloo's transport raises, in a collective or DDP's exchange)."""
    text = str(error)
    if not (isinstance(error, dist.DistNetworkError) or "gloo/transport" in text):
        return None
    gone = failures.silent()
    who = f"{gone}, which stopped answering" if gone else "another rank"
    line = next((x for x in text.splitlines() if "gloo" in x), text.splitlines()[0])
    line = re.sub(r"^.*?gloo/transport/\S+\] ", "", line).split(". ")[0]  # gloo's own words
    return RankFailedError(
        f"lost contact with {who} in {during}: its process ended or its host went down ({line})"
    )


def _object_device() -> torch.device | None:
    # NCCL moves pickled objects through GPU memory; gloo through the CPU.
    return torch.device("cuda", torch.cuda.current_device()) if backend() == "nccl" else None


def barrier() -> None:
    if is_initialized():
        _collective("barrier", dist.barrier)


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """``obj`` from rank ``src`` on every rank (via ``broadcast_object_list``)."""
    if not is_initialized():
        return obj
    holder = [obj]
    _collective("broadcast", dist.broadcast_object_list, holder, src=src, device=_object_device())
    return holder[0]


def all_reduce_max(tensor: torch.Tensor) -> torch.Tensor:
    """Element-wise maximum over ranks, in place (exact: no rounding); returns the tensor."""
    if is_initialized():
        _collective("all_reduce", dist.all_reduce, tensor, op=dist.ReduceOp.MAX)
    return tensor


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Element-wise sum over ranks, in place; returns the tensor."""
    if is_initialized():
        _collective("all_reduce", dist.all_reduce, tensor, op=dist.ReduceOp.SUM)
    return tensor


# torch 2.13 renamed all_gather_into_tensor (the old name warns on every call)
_gather_into = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def all_gather(tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's ``tensor`` (the same shape on each), stacked in rank order."""
    if not is_initialized():
        return tensor.unsqueeze(0)
    flat = tensor.contiguous().view(-1)
    out = torch.empty(get_world_size() * flat.numel(), dtype=flat.dtype, device=flat.device)
    _collective("all_gather", _gather_into, out, flat)
    return out.view(get_world_size(), *tensor.shape)


def all_gather_object(obj: Any, *, patient: bool = False) -> list[Any]:
    """Every rank's ``obj``, in rank order. ``patient``: wait for the others as long as it
    takes (a rank preparing the data for all), not ``parallel.timeout_s``; a rank that dies
    still ends the wait at once."""
    if not is_initialized():
        return [obj]
    result: list[Any] = [None] * get_world_size()
    group = _patient_group() if patient else None
    _collective("all_gather", dist.all_gather_object, result, obj, group=group)
    return result


_PATIENT: Any = None
_PATIENT_DAYS = 7


def _patient_group() -> Any:
    """Every rank again, in a gloo group whose collectives wait days: made at the first patient
    gather, which every rank reaches (creating a group is itself a collective)."""
    global _PATIENT
    if _PATIENT is None:
        _PATIENT = dist.new_group(backend="gloo", timeout=timedelta(days=_PATIENT_DAYS))
    return _PATIENT
