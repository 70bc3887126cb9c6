"""What torch's C++ code prints in a spawned rank: passed on, except c10d's stack dumps.

When a rank loses its peers, c10d logs each broken store connection as a warning with a C++
stack dump of twenty lines (``[W... TCPStore.cpp:125] [c10d] recvValue failed ... frame #0:
...``), printed before the job's own error line, which already says what happened. Each rank
sends what its C and C++ code write to stderr (file descriptor 2) into a file of its own
(:func:`capture`); Python's writes (log lines, bars, the error lines) still go straight to the
terminal. The process that started the ranks reads those files as they grow (:class:`Relay`)
and passes every line on to its stderr, except the records of torch's C++ logging (a header
such as ``[W1129 12:00:00.000 TCPStore.cpp:125]`` and the frames after it), which go to the
run's log instead. It reads the files to their end before the job's error is reported.
"""

from __future__ import annotations

import io
import os
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from ..logs import get_logger

# torch's C++ log records of information and warnings (an error, such as NCCL's watchdog
# timeout, is often the one line that explains a hang, and stays on the terminal; a fatal one
# ends the process and says why): time, file and line; on a process group's rank, [rankN]:
_RECORD = re.compile(r"^(\[rank\d+\]:)?\[[IW]\d{4} \d\d:\d\d:\d\d\.\d+ .*?\] ")
_CONTINUED = ("Exception raised from ", "frame #", "<omitting python frames>")
_POLL_S = 0.1

# where the lines that are kept from stderr go: the rank and its lines
Sink = Callable[[int, list[str]], None]


def capture(path: str | os.PathLike) -> None:
    """From now on, this process's file descriptor 2 writes into ``path``; ``sys.stderr``
    keeps writing where stderr went (a terminal stays one for progress bars)."""
    original = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 2)
    os.close(fd)
    encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
    sys.stderr = io.TextIOWrapper(
        io.FileIO(original, "w"), encoding=encoding, errors="backslashreplace", line_buffering=True
    )


class Relay:
    """Passes the ranks' captured output on as it grows: to ``stream``, or to ``sink`` for
    torch's C++ log records. ``close`` reads what is left and stops."""

    def __init__(self, paths: list[Path], sink: Sink, stream=None):
        self.paths, self.sink, self.stream = paths, sink, stream
        self.offsets = [0] * len(paths)
        self.partial = [""] * len(paths)
        self.in_record = [False] * len(paths)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="qg-relay", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(_POLL_S):
            self._read()

    def close(self) -> None:
        self.stopped.set()
        self.thread.join()
        self._read(final=True)

    def _read(self, *, final: bool = False) -> None:
        for rank, path in enumerate(self.paths):
            try:
                with open(path, "rb") as f:
                    f.seek(self.offsets[rank])
                    chunk = f.read()
            except FileNotFoundError:
                continue
            self.offsets[rank] += len(chunk)
            text = self.partial[rank] + chunk.decode("utf-8", "backslashreplace")
            lines = text.split("\n")
            rest = lines.pop()  # after the last newline: a line not yet whole
            if final and rest:
                lines.append(rest)
            self.partial[rank] = "" if final else rest
            self._pass_on(rank, lines)

    def _pass_on(self, rank: int, lines: list[str]) -> None:
        shown, kept = [], []
        for line in lines:
            if _RECORD.match(line):
                self.in_record[rank] = True
            elif self.in_record[rank] and not (line.startswith(_CONTINUED) or not line.strip()):
                self.in_record[rank] = False
            (kept if self.in_record[rank] else shown).append(line)
        if kept:
            self.sink(rank, kept)
        if shown:
            stream = self.stream or sys.stderr
            stream.write("".join(line + "\n" for line in shown))
            stream.flush()


def to_log(path: Path | None) -> Sink:
    """A sink that appends the lines to the log at ``path`` (marked with their rank), or, without
    one or while the run has not made it, logs them at DEBUG level."""

    def sink(rank: int, lines: list[str]) -> None:
        text = "".join(f"[RANK {rank}] {line}\n" for line in lines)
        if path is not None:
            try:  # only into a log the run has opened: never one of its own in a folder
                fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            except OSError:
                fd = None
            if fd is not None:
                with open(fd, "a", encoding="utf-8") as f:
                    f.write(text)
                return
        get_logger().debug("torch's C++ log on rank %d:\n%s", rank, text.rstrip("\n"))

    return sink
