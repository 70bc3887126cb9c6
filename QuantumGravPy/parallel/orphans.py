"""Ranks end when the process that started them dies.

:func:`~.spawn.spawn` ends every rank when one fails, and on Ctrl-C; but a launcher killed
outright (``kill -9``, the out-of-memory killer) cleans nothing up, and its ranks, which talk
only to each other, would train on unsupervised, writing into a run directory that a new job
may be using. Each rank therefore watches its launcher: it ends, with one line saying why, as
soon as the launcher has ended (well within ``parallel.timeout_s``).
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time

from .deadline import to_log_files

_POLL_S = 1.0  # where the system cannot tell at once (no pidfd): how often to look


def watch_launcher(pid: int, rank: int) -> None:
    """End this process (exit status 1) once process ``pid``, which started it, has ended."""
    threading.Thread(target=_watch, args=(pid, rank), name="qg-launcher", daemon=True).start()


def _watch(pid: int, rank: int) -> None:
    try:
        handle = os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux 5.3+, or the launcher is gone already
        handle = None
    if handle is not None:
        waiting = select.poll()  # (select.select fails for descriptors past 1024)
        waiting.register(handle, select.POLLIN)
        while not waiting.poll():  # readable once the process has ended
            pass
    else:
        parent = os.getppid()
        while _alive(pid) and os.getppid() == parent:
            time.sleep(_POLL_S)
    message = (
        f"[RANK {rank}] the process that started this job (pid {pid}) has ended; this rank ends too"
    )
    to_log_files(message)
    print(f"error: {message}", file=sys.stderr, flush=True)
    os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now holds the number: not the launcher
        return False
    return True
