"""Starting the processes of a job: spawn them with torch.multiprocessing, or join torchrun/srun.

:func:`spawn` starts ``fn(rank, world_size, *args)`` in fresh processes (start method
``spawn``, with an importable entry point, so it works from Jupyter), joins them in a process
group, waits for them and returns their results. If any rank fails, the others are ended at once
and the failure is raised here naming the rank; if a rank stops answering, the others give up
after ``parallel.timeout_s`` and the job ends the same way. Ctrl-C ends every rank. No process
outlives the call (except, with ``forkserver``, the idle server the ranks are forked from, which
ends with the program). :func:`run_distributed` does the same from a config, forking the ranks
from that server (one import of torch and this package instead of one per rank), or joins the
job that torchrun or srun started. What the ranks run is up to the caller: a training job
(:func:`QuantumGravPy.training.launching.launch`), dataset generation, a test.
"""

from __future__ import annotations

import gc
import json
import logging
import multiprocessing
import os
import re
import tempfile
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.multiprocessing as mp
import tqdm
from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException

from ..config import Config, ParallelConfig
from ..config.dotted import EXTENSIONS, reimport_extensions
from ..errors import (
    COMMAND_LINE_ENV,
    DiskFullError,
    OutageError,
    QGError,
    RunError,
    on_command_line,
)
from ..logs import get_logger
from . import distributed, failures, handover, native_output, network, orphans
from .distributed import PortInUseError

# Seconds a rank gets to exit by itself once another has failed, before it is terminated.
_GRACE_S = 3.0
_PORT_ATTEMPTS = 3
START_METHODS = ("spawn", "forkserver")


class WorkerError(QGError):
    """A rank of a spawned job failed. ``traceback`` holds its traceback for unexpected errors."""

    def __init__(self, message: str, *, rank: int, traceback: str | None = None):
        super().__init__(message)
        self.rank = rank
        self.traceback = traceback


def run_distributed(
    fn: Callable[..., Any],
    config: Config,
    *args: Any,
    world_size: int | None = None,
    log: Path | None = None,
) -> Any:
    """Run ``fn(rank, world_size, *args)`` as every rank of a job, with ``config.parallel``.

    Started by torchrun or srun: this process joins their job as one rank and returns its own
    result. Otherwise ``world_size`` processes (default ``parallel.world_size``) are spawned and
    rank 0's result is returned; torch's C++ log records go to ``log`` (see :func:`spawn`).
    """
    p = config.parallel
    backend = resolve_backend(p, config.training.device)
    env = distributed.process_env()
    if env is None:
        return spawn(
            fn,
            world_size or p.world_size,
            *args,
            master_addr=p.master_addr,
            master_port=p.master_port,
            backend=backend,
            timeout_s=p.timeout_s,
            # One import for all ranks instead of one each: seconds off every job's start.
            start_method="forkserver",
            log=log,
        )[0]
    _thread_lock_for_bars()
    network.use_interface(p.interface)
    network.check_reachable(env, backend)
    port = env.master_port if env.master_port is not None else p.master_port
    get_logger().info(
        "rank %d of %d (%s): meeting the others at %s:%s, for up to %g s (parallel.timeout_s)",
        env.rank,
        env.world_size,
        env.launcher,
        env.master_addr,
        port,
        p.timeout_s,
    )
    distributed.initialize_ddp(
        env.rank,
        env.world_size,
        env.master_addr,
        port,
        backend,
        p.timeout_s,
        local_rank=env.local_rank,
        local_world_size=env.local_world_size,
    )
    try:
        result = fn(env.rank, env.world_size, *args)
    except BaseException as e:
        told = failures.seen()  # this rank stops because another failed: say what that was
        lost = None
        if told is None and not isinstance(e, distributed.DistributedError):  # else told
            lost = distributed.lost_contact(e, "training")  # DDP's own exchange, say
        # it ends by itself now (its own liveness counted until the others have asked)
        failures.stop_watching()
        if told is not None and not isinstance(e, KeyboardInterrupt):
            raise distributed.RankFailedError(told.message, users=told.users) from e
        if lost is not None:
            raise lost from e
        message = _tell(env.rank, e)
        if message is not None and not isinstance(e, (QGError, RunError, KeyboardInterrupt)):
            raise WorkerError(message, rank=env.rank, traceback=traceback.format_exc()) from e
        raise
    distributed.cleanup_ddp()
    return result


def _tell(rank: int, error: BaseException) -> str | None:
    """Tell the ranks on every host why this one stops (:mod:`.failures`): its rank, host and
    error, which they report instead of a broken connection; returns what it told. A rank
    stopping because another failed or went silent tells nothing: the first failure is the one
    to report."""
    if isinstance(error, (distributed.RankFailedError, distributed.RankTimeoutError)):
        return None
    where = f"rank {rank} ({failures.host()})"
    if isinstance(error, KeyboardInterrupt):
        message, users = f"{where} was interrupted", True
    elif isinstance(error, (QGError, RunError)):
        message, users = f"{where}: {error}", isinstance(error, QGError)
    else:
        first = (str(error).strip().splitlines() or [""])[0]
        message, users = f"{where} failed: {type(error).__name__}: {first}", False
    failures.announce(rank, message, users=users)
    return message


def _thread_lock_for_bars() -> None:
    """tqdm guards its bars with a multiprocessing lock: a named semaphore, which
    multiprocessing's resource tracker reports as leaked (after the job's error line) when a
    rank is terminated because another failed. Only rank 0 draws bars: a thread lock does."""
    tqdm.tqdm.set_lock(threading.RLock())


def resolve_backend(parallel: ParallelConfig, device: str) -> str:
    """The ``parallel:`` section's backend for ``training.device`` ``device``, ``auto`` made
    concrete (:func:`distributed.resolve_backend`)."""
    return distributed.resolve_backend(parallel.backend, device)


def spawn(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    backend: str = "auto",
    timeout_s: float = distributed.DEFAULT_TIMEOUT_S,
    start_method: str = "spawn",
    log: Path | None = None,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` fresh processes joined in a group.

    ``fn`` must be importable (defined at the top level of a module). Returns every rank's
    result in rank order, or raises :class:`WorkerError` for the first rank that failed. Without
    ``master_port`` a free port is chosen, and chosen again if another program takes it first.

    ``start_method="spawn"`` starts each rank as a new interpreter, which imports torch and this
    package anew (seconds per rank). ``"forkserver"`` forks the ranks from a server process that
    imported the package once and never computes anything itself, so later ranks start in a
    fraction of a second: worth it for many short jobs from one program (a test suite, a sweep).
    The server is started at the first such call and keeps the environment and the standard
    output of that moment for all ranks it forks.

    The ranks' Python output goes to this process's stderr as it is written; what their C++
    code prints too, except torch's C++ log records (c10d's stack dumps when a rank is lost),
    which go to ``log`` (a run's train.log; without one, this process's log at DEBUG level).
    """
    if world_size < 1:
        raise QGError(f"world_size must be at least 1, got {world_size}")
    if start_method not in START_METHODS:
        raise QGError(
            f"start_method must be one of {', '.join(START_METHODS)}, got {start_method!r}"
        )
    if start_method == "forkserver":
        # Imported once, in the server; it has no effect once the server runs.
        preload = [f"{__package__.split('.')[0]}.forkserver"]
        if fn.__module__ != "__main__":  # a script's own module is not importable by name
            preload.append(fn.__module__)
        multiprocessing.set_forkserver_preload(preload)
    attempts = 1 if master_port is not None else _PORT_ATTEMPTS
    for attempt in range(attempts):
        port = master_port if master_port is not None else distributed.free_port(master_addr)
        try:
            return _spawn_once(
                fn, world_size, args, master_addr, port, backend, timeout_s, start_method, log
            )
        except _PortTaken:
            if attempt == attempts - 1:
                raise PortInUseError(master_addr, port) from None
    raise AssertionError("unreachable")


class _PortTaken(Exception):
    pass


def _spawn_once(
    fn, world_size, args, master_addr, port, backend, timeout_s, start_method, log
) -> list[Any]:
    with tempfile.TemporaryDirectory(prefix="qg-spawn-") as tmp:
        out = Path(tmp)
        relay = native_output.Relay(
            [out / f"stderr{r}" for r in range(world_size)], native_output.to_log(log)
        )
        context = mp.start_processes(
            _entry,
            args=(
                world_size,
                fn,
                args,
                master_addr,
                port,
                backend,
                timeout_s,
                str(out),
                on_command_line(),  # the forkserver's environment may predate the command's
                dict(EXTENSIONS),  # the user's modules this process imported: theirs too
                os.getpid(),  # killed outright, it can end nobody: the ranks watch it
            ),
            nprocs=world_size,
            join=False,
            start_method=start_method,
        )
        try:
            while not context.join(grace_period=_GRACE_S):
                pass
        except ProcessRaisedException as e:
            raise _failure(out, e.error_index, e.msg, context, timeout_s) from e
        except ProcessExitedException as e:
            how = f"signal {e.signal_name}" if e.signal_name else f"exit code {e.exit_code}"
            raise _failure(out, e.error_index, f"it ended with {how}", context, timeout_s) from e
        finally:
            _terminate(context)  # Ctrl-C, or anything else unexpected: no rank is left behind
            relay.close()  # all they printed, before this process says why the job ended
        results = []
        for rank in range(world_size):
            path = out / f"result{rank}.pt"
            if not path.exists():  # torch's wrapper ends a rank hit by Ctrl-C with status 0
                raise WorkerError(f"rank {rank} ended without a result (interrupted)", rank=rank)
            results.append(handover.read(path))
        return results


class _NoTerminatingNotice(logging.Filter):
    """torch logs a warning for each rank it ends after another failed, just before this
    module reports the failure in one line (naming the rank that stopped answering, if one
    did): the warning would only come first, with a process id nobody asked for."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Terminating process")


logging.getLogger("torch.multiprocessing.spawn").addFilter(_NoTerminatingNotice())

_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b.*")


def _record(out: Path, rank: int, error: QGError | RunError) -> None:
    """What a rank's error was, for the process that started the job: its message, whether it
    was a mistake of the user's, its class among the library's errors, and whether it only
    followed another rank's failure (then that rank's is the job's)."""
    record = {
        "message": str(error),
        "library": isinstance(error, QGError),  # one of the library's errors of what it met
        "users": isinstance(error, QGError) and getattr(error, "users", True),
        "class": type(error).__name__,
        "followed": isinstance(error, distributed.RankFailedError),
    }
    (out / f"error{rank}.json").write_text(json.dumps(record))


def _recorded(out: Path, rank: int, detail: str) -> Exception | None:
    """The job's error as a rank recorded it: the first failure's (a rank that only followed
    another's defers to it), as its class, with the rank's traceback for --debug."""
    records = {}
    for path in out.glob("error*.json"):
        records[int(path.stem.removeprefix("error"))] = json.loads(path.read_text())
    if not records:
        return None
    first = [r for r, found in sorted(records.items()) if not found["followed"]]
    rank = rank if rank in first or not first else first[0]
    if rank not in records:
        return None
    found = records[rank]
    message = f"rank {rank}: {found['message']}"
    if found["library"]:  # the user's mistake (exit 2), or a rank that timed out or failed (1)
        error = WorkerError(message, rank=rank)
        error.users = found["users"]
        return error
    kinds = {"DiskFullError": DiskFullError, "OutageError": OutageError}
    return kinds.get(found["class"], RunError)(message, traceback=detail)


def _failure(out: Path, rank: int, detail: str, context, timeout_s: float) -> Exception:
    if (out / "port_in_use").exists():
        return _PortTaken()
    recorded = _recorded(out, rank, detail)
    if recorded is not None:
        return recorded
    lines = [line for line in detail.strip().splitlines() if line.strip()]
    # the error's own line: the last one naming an exception (an error inside a callback, such
    # as a communication hook's, is followed by the place it was raised)
    errors = [line for line in lines if _ERROR_LINE.match(line)]
    last = errors[-1] if errors else lines[-1] if lines else detail
    if "timed out" in last.lower() or "timeout" in last.lower():
        # The rank that raised is the one that waited; the culprits are the ones that were
        # still running and had to be terminated.
        silent = [r for r, p in enumerate(context.processes) if r != rank and (p.exitcode or 0) < 0]
        who = f"rank(s) {', '.join(map(str, silent))}" if silent else "the other ranks"
        error = WorkerError(
            f"rank {rank}: no answer from {who} within {timeout_s:g} s (parallel.timeout_s); "
            f"they stopped answering ({last})",
            rank=rank,
        )
        error.users = False  # a rank that fell silent: not a mistake in what was passed (exit 1)
        return error
    return WorkerError(f"rank {rank} failed: {last}", rank=rank, traceback=detail)


def _terminate(context) -> None:
    for process in context.processes:
        if process.is_alive():
            process.terminate()
    for process in context.processes:
        process.join(_GRACE_S)
        if process.is_alive():
            process.kill()
            process.join()


def _entry(
    rank,
    world_size,
    fn,
    args,
    master_addr,
    port,
    backend,
    timeout_s,
    out,
    command_line=False,
    extensions=None,
    launcher=None,
) -> None:
    # The objects the rank starts with (the libraries it inherited from the forkserver or
    # imported while it started) leave the collector's sight: every full collection in the rank
    # (cleanup_ddp's among them) then walks what the rank made, not the half a million objects
    # of torch and its kin (0.3 s a collection, and pages copied from the server's).
    gc.freeze()
    out = Path(out)
    native_output.capture(out / f"stderr{rank}")
    if launcher is not None:
        orphans.watch_launcher(launcher, rank)
    _thread_lock_for_bars()
    if command_line:  # errors name options as the user passed them
        os.environ[COMMAND_LINE_ENV] = "1"
    try:
        reimport_extensions(extensions or {})
        distributed.initialize_ddp(rank, world_size, master_addr, port, backend, timeout_s)
        result = fn(rank, world_size, *args)
        handover.write(out / f"result{rank}.pt", result)
    except PortInUseError:
        (out / "port_in_use").touch()
        raise
    except (QGError, RunError) as e:  # told as it is, in one line; its traceback goes with it
        _record(out, rank, e)
        raise
    distributed.cleanup_ddp()
    gc.freeze()  # a quick exit: see QuantumGravPy/forkserver.py
