"""One writer per run directory: a lock file in it, held by the process that writes the run.

The process that writes a run directory (the one process of a run, or global rank 0 of a job:
the ranks that do not write never lock) holds an ``flock`` on ``RUN/.qg-run.lock`` from opening
the directory to closing it, and writes its pid and host into the file. A second run started
on the directory meanwhile (a ``--resume`` or ``--overwrite`` while the first still trains,
even one whose launcher was killed and whose rank 0 trains on) is refused in one line naming
that process, before it touches a file. The kernel drops the lock when its process ends, however
it ends: a lock file left by a process that is gone is taken over. Within one process the lock
is shared (a notebook that opens the same run again while an earlier trainer holds it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import time
from pathlib import Path

from ..errors import RunDirectoryError
from ..logs import get_logger

LOCK = ".qg-run.lock"
GRACE_S = 5.0  # how long a lock held by a process that is ending is waited for
_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)

# This process's locks, by the run directory's real path: [file descriptor, holders].
_held: dict[str, list[int]] = {}


def _key(path: Path) -> str:
    return os.path.realpath(path)


def hold(path: Path) -> Path | None:
    """Lock the run directory ``path`` (made if missing) for this process; returns what
    :func:`release` takes, or None where the file system has no locks (a warning says so).
    RunDirectoryError naming the holder if another live process has it."""
    key = _key(path)
    if key in _held:
        _held[key][1] += 1
        return path
    path.mkdir(parents=True, exist_ok=True)
    fd = _locked(path)
    if fd is None:
        return None
    previous = _holder(fd)
    if previous != "a process":
        get_logger().info("%s: taking over the lock of %s, which is gone", path, previous)
    with contextlib.suppress(OSError):  # read-only (a colleague's file): locked, not named
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
    _held[key] = [fd, 1]
    return path


def release(held: Path | None, *, remove: bool = False) -> None:
    """Let go of a lock :func:`hold` returned (the last holder in this process unlocks);
    ``remove``: its file too, for a run that could not start and leaves nothing behind."""
    if held is None:
        return
    key = _key(held)
    entry = _held.get(key)
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] == 0:
        del _held[key]
        if remove:  # while still locked: no other process holds it meanwhile
            (held / LOCK).unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # a lock file naming a process: one it left
            os.ftruncate(entry[0], 0)
        # unlocked explicitly: a process forked meanwhile (a loader's worker) shares the file
        fcntl.flock(entry[0], fcntl.LOCK_UN)
        os.close(entry[0])


def check_free(path: Path) -> None:
    """Refuse, before any work, a run directory another process has locked (the launcher's
    early check; the process that writes the run takes the lock itself)."""
    if not path.is_dir() or _key(path) in _held or not (path / LOCK).exists():
        return
    fd = _locked(path)
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _locked(path: Path) -> int | None:
    """The lock file of ``path``, open and locked; None where the file system cannot lock."""
    lock = path / LOCK
    try:  # writable by whoever may write the run (the umask decides: a group's shared folder)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:  # a colleague's lock file: locked all the same, read-only
        fd = os.open(lock, os.O_RDONLY)
    try:
        _flock(fd)
    except OSError as e:
        holder = _holder(fd)
        os.close(fd)
        if e.errno in _BUSY:
            raise RunDirectoryError(
                f"{path} is in use by another run: {holder} holds its lock ({lock}); wait "
                "for that run to end, or stop it, before starting another there"
            ) from None
        get_logger().warning(
            "%s: the file system does not lock files (%s); nothing keeps a second run from "
            "writing this run directory at the same time",
            path,
            os.strerror(e.errno or 0),
        )
        return None
    return fd


def _flock(fd: int) -> None:
    """Lock ``fd``, waiting up to :data:`GRACE_S` for a holder that is ending: a job just
    killed (preempted, or its launcher killed, whose ranks then end) lets go of the lock only
    as its processes finish exiting, a moment after the kill returned."""
    ends = time.monotonic() + GRACE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as e:
            if e.errno not in _BUSY or time.monotonic() > ends:
                raise
        time.sleep(0.05)


def _holder(fd: int) -> str:
    """Who a lock file names: "process PID on HOST"."""
    try:
        pid, host = os.pread(fd, 256, 0).decode().split()
        return f"process {int(pid)} on {host}"
    except (OSError, ValueError, UnicodeDecodeError):
        return "a process"
