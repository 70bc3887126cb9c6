"""Logging for the package: one stderr handler, plus the run directory's ``train.log``; and
progress of long phases, as bars on a terminal and as lines in a log."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

LOGGER_NAME = "QuantumGravPy"
_FORMAT = "%(asctime)s {prefix}%(levelname)s %(message)s"
_DATEFMT = "%H:%M:%S"
_STDERR_HANDLER: logging.Handler | None = None


def get_logger() -> logging.Logger:
    return logging.getLogger(LOGGER_NAME)


def configure_logging(level: str | int = "INFO", *, prefix: str = "") -> logging.Logger:
    """Send the package's records to stderr at ``level``; calling again replaces the handler."""
    global _STDERR_HANDLER
    logger = get_logger()
    if _STDERR_HANDLER is not None:
        logger.removeHandler(_STDERR_HANDLER)
    _STDERR_HANDLER = logging.StreamHandler()
    _STDERR_HANDLER.setFormatter(logging.Formatter(_FORMAT.format(prefix=prefix), _DATEFMT))
    logger.addHandler(_STDERR_HANDLER)
    logger.setLevel(level)
    logger.propagate = False  # the root logger's handlers would print every line twice
    return logger


def add_file_handler(path: Path, *, prefix: str = "") -> logging.Handler:
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(_FORMAT.format(prefix=prefix), "%Y-%m-%d %H:%M:%S"))
    get_logger().addHandler(handler)
    return handler


def append_to_log(path: Path, message: str, *, level: int = logging.ERROR) -> None:
    """Add one record to the log file ``path``, if there is one, and nowhere else."""
    if not path.is_file():
        return
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(_FORMAT.format(prefix=""), "%Y-%m-%d %H:%M:%S"))
    try:
        handler.handle(get_logger().makeRecord(LOGGER_NAME, level, __file__, 0, message, (), None))
    finally:
        handler.close()


def set_terminal_level(level: str | int) -> None:
    """Show only records of ``level`` and above on stderr (files keep the logger's level)."""
    if _STDERR_HANDLER is not None:
        _STDERR_HANDLER.setLevel(level)


# --- progress --------------------------------------------------------------------------------

#: Seconds between two progress lines in a log (see :func:`progress`).
PROGRESS_EVERY_S = 30.0


def progress(
    iterable: Iterable | None = None,
    *,
    total: int | None = None,
    desc: str,
    unit: str,
    enabled: bool = True,
    initial: int = 0,
) -> Any:
    """Progress of a long phase: a tqdm bar on a terminal; elsewhere, as in
    a SLURM job's log, a line on the package's logger every :data:`PROGRESS_EVERY_S` seconds
    with what is done, the rate and the time left (a bar there would show nothing until it
    ends, or glue carriage returns onto the log's lines). Iterate over it, or ``update(n)``
    it; ``close()`` it (or use it as a context manager) when the phase ends. Disabled: a
    bar that shows nothing (ranks other than 0)."""
    if not enabled or sys.stderr.isatty():
        from tqdm.auto import tqdm  # (imported when needed: a quick start for the command line)

        bar = tqdm(
            iterable,
            total=total,
            desc=desc,
            unit=unit,
            initial=initial,
            leave=False,
            disable=not enabled,
        )
        return bar
    return LogProgress(iterable, total=total, desc=desc, unit=unit, initial=initial)


class LogProgress:
    """Progress as log lines (see :func:`progress`): ``desc: done/total units (p%), rate,
    time left``, the first after :data:`PROGRESS_EVERY_S` seconds, so a phase shorter than that
    adds no line; a phase that logged says when it ended."""

    def __init__(
        self,
        iterable: Iterable | None = None,
        *,
        total: int | None,
        desc: str,
        unit: str,
        initial: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ):
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.n = self.initial = initial
        self.clock = clock
        self.start = self.last = clock()
        self.lines = 0

    def __iter__(self) -> Iterator:
        for item in self.iterable:
            yield item
            self.update()

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.lines += 1
            get_logger().info("%s", self.line(now))

    def line(self, now: float) -> str:
        done, seconds = self.n - self.initial, max(now - self.start, 1e-9)
        rate = done / seconds
        text = f"{self.desc}: {self.n:,}"
        if self.total:
            text += f"/{self.total:,} {_plural(self.unit)} ({100 * self.n / self.total:.0f}%)"
        else:
            text += f" {_plural(self.unit)}"
        text += f", {_rate(rate, self.unit)}"
        if self.total and rate > 0:
            text += f", {_duration((self.total - self.n) / rate)} left"
        return text

    def close(self) -> None:
        if self.lines:  # only a phase long enough to have reported says that it ended
            self.lines = 0
            elapsed = self.clock() - self.start
            get_logger().info(
                "%s: %s %s in %s", self.desc, f"{self.n:,}", _plural(self.unit), _duration(elapsed)
            )


def _plural(unit: str) -> str:
    return unit + ("es" if unit.endswith(("s", "ch", "sh", "x")) else "s")


def _rate(rate: float, unit: str) -> str:
    if rate >= 100:  # whole numbers, never 1.01e+03
        return f"{rate:,.0f} {_plural(unit)}/s"
    if rate >= 1 or rate == 0:
        return f"{rate:.3g} {_plural(unit)}/s"
    return f"{_duration(1 / rate)} per {unit}"


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


@contextlib.contextmanager
def waiting(logger: logging.Logger, what: str, *, every_s: float = 30.0) -> Iterator[None]:
    """Within the block, ``logger`` says every ``every_s`` seconds that this process is still
    waiting for ``what`` and for how long (a rank waiting for another's long work)."""
    done = threading.Event()
    start = time.monotonic()

    def note() -> None:
        while not done.wait(every_s):
            logger.info("waiting for %s (%s so far)", what, _duration(time.monotonic() - start))

    logger.info("waiting for %s", what)
    thread = threading.Thread(target=note, name="qg-waiting", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
