"""A deadline for the user's code that one process waits on (a callback): ``parallel.timeout_s``.

In a job of several processes a rank that never returns from such code is found by the others,
whose collectives give up after ``parallel.timeout_s``. A single process has nobody to notice,
so it watches itself: a thread interrupts the main thread with a signal whose handler raises
:class:`HungError` inside the code that hangs (the run then ends as any failure does, its state
saved and its log told). If that code does not give control back (a C call that retries through
signals, an ``except`` that swallows everything), or the main thread cannot be interrupted (no
signal free for it, the code runs in another thread), the thread ends the process
:data:`GRACE_S` seconds later with the same line.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import sys
import threading
from collections.abc import Iterator

from ..errors import RunError
from ..logs import get_logger
from . import distributed

GRACE_S = 10.0  # after the interruption, the hung code has this long to unwind
# Signals a deadline may borrow while nobody else handles them (pytest-timeout holds SIGALRM)
_SIGNALS = (signal.SIGALRM, signal.SIGUSR2)


class HungError(RunError):
    """Code of the user's did not return within ``parallel.timeout_s`` (exit status 1)."""


@contextlib.contextmanager
def deadline(what: str, timeout_s: float) -> Iterator[None]:
    """Within the block, ``what`` (named in the error) must return within ``timeout_s``.

    Only in a process of its own: with several, the other ranks' collectives already end a
    job whose rank hangs (and name that rank)."""
    if distributed.get_world_size() > 1 or not math.isfinite(timeout_s) or timeout_s <= 0:
        yield
        return
    message = f"{what} did not return within {timeout_s:g} s (parallel.timeout_s)"
    main = threading.current_thread() is threading.main_thread()
    borrowed = next((s for s in _SIGNALS if signal.getsignal(s) == signal.SIG_DFL), None)
    borrowed = borrowed if main else None
    done, lock = threading.Event(), threading.Lock()
    target = threading.get_ident()

    def watch() -> None:
        if done.wait(timeout_s):
            return
        with lock:  # the block ends while this holds it: no signal arrives after it ended
            if done.is_set():
                return
            if borrowed is not None:
                signal.pthread_kill(target, borrowed)
        if borrowed is not None and done.wait(GRACE_S):
            return
        to_log_files(f"{message}; the process is ended")
        print(f"error: {message}", file=sys.stderr, flush=True)
        os._exit(1)

    def interrupt(signum, frame) -> None:
        raise HungError(message)

    if borrowed is not None:
        signal.signal(borrowed, interrupt)
    threading.Thread(target=watch, name="qg-deadline", daemon=True).start()
    try:
        yield
    finally:
        while True:
            try:
                with lock:
                    done.set()
                    if borrowed is not None:
                        signal.signal(borrowed, signal.SIG_IGN)  # drops one not yet delivered
                        signal.signal(borrowed, signal.SIG_DFL)
                break
            except HungError:  # sent as the block returned: it did return, so it is no hang
                continue


def to_log_files(message: str) -> None:
    """``message`` in the run's log (train.log), not on stderr, which gets the one error line."""
    logger = get_logger()
    record = logger.makeRecord(logger.name, logging.ERROR, __file__, 0, message, None, None)
    for handler in logger.handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
