"""Failures told across the ranks of a job, on any number of hosts.

A rank whose work raised writes what happened (its rank, host and error) into the job's store
before it ends (:func:`announce`). The others read it (:func:`seen`) when a collective breaks
because that rank is gone, and end with its message instead of a broken connection. A watcher
thread in every rank also reads the store every second: a rank that would otherwise wait (in
an NCCL collective, which waits out the whole timeout, or computing alone) ends with the same
line :data:`GRACE_S` seconds after the failure was told, if its own code has not ended it by
then.

The first failure told is the one every rank reports (a rank that fails because another did
tells nothing). A rank that dies without a word (killed, its host gone) is found by the
collectives' own errors and timeouts, as before.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_FIRST = "QuantumGravPy/failed/first"
_SEEN = "QuantumGravPy/failed/seen"
_ALIVE = "QuantumGravPy/alive/"  # + rank: a counter each rank's watcher raises every second
_HOST = "QuantumGravPy/host/"  # + rank: its host's name
_MISSING = "QuantumGravPy/missing"  # the ranks that never joined, as rank 0 found them
_MISSING_SEEN = "QuantumGravPy/missing/seen"
_MEET_POLL_S = 0.05
_POLL_S = 1.0
GRACE_S = 10.0  # after a failure is told, the rank's own code has this long to end by itself
_TOLD_WAIT_S = 3.0  # how long a failing rank waits for the others to have read it
_CONNECT_S = 5.0  # connecting to the store while failing: not the whole collective timeout


@dataclass(frozen=True)
class Failure:
    rank: int
    message: str
    users: bool  # a mistake of the user's (exit status 2), or not (1)


# connect(timeout_s) -> a new client of the job's store
Connect = Callable[[float], Any]


class _Watch:
    def __init__(self, connect: Connect, rank: int):
        self.connect, self.rank = connect, rank
        self.found: Failure | None = None
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="qg-failures", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            store = self.connect(_CONNECT_S)
        except Exception:  # no store to read (the job is ending): nothing to watch
            return
        try:
            store.set(f"{_HOST}{self.rank}", host())
        except Exception:
            return
        while not self.stopped.wait(_POLL_S):
            try:
                store.add(f"{_ALIVE}{self.rank}", 1)
                found = _read(store, self.rank)
            except Exception:  # the store's host has ended: the collectives say the rest
                return
            if found is not None:
                self.found = found
                try:
                    store.add(_SEEN, 1)
                except Exception:
                    pass
                break
        if self.found is None or self.stopped.wait(GRACE_S):
            return  # no failure, or this rank ended by itself
        print(f"error: [RANK {self.rank}] {self.found.message}", file=sys.stderr, flush=True)
        os._exit(2 if self.found.users else 1)


_WATCH: _Watch | None = None
_CONNECT: Connect | None = None  # the job's store, kept after the watcher stops
_RANK = 0
_WORLD_SIZE = 1
_FOUND: Failure | None = None  # what the watcher read, kept after it stops


def watch(connect: Connect, rank: int, world_size: int) -> None:
    """Start this rank's watcher (in :func:`~.distributed.initialize_ddp`)."""
    global _WATCH, _CONNECT, _RANK, _WORLD_SIZE, _FOUND
    stop_watching()
    _CONNECT, _RANK, _WORLD_SIZE, _FOUND = connect, rank, world_size, None
    if world_size > 1:
        _WATCH = _Watch(connect, rank)


def stop_watching() -> None:
    """The rank ends by itself now (in :func:`~.distributed.cleanup_ddp`, or handling a
    failure): its watcher must not end the process. Telling and asking still work."""
    global _WATCH, _FOUND
    if _WATCH is not None:
        _WATCH.stopped.set()
        _FOUND = _FOUND or _WATCH.found
        _WATCH = None


def announce(rank: int, message: str, *, users: bool) -> None:
    """Tell the other ranks that this one failed, with ``message`` (which names it), and wait
    a moment for them to have read it: this rank may hold the store."""
    if _CONNECT is None or _WORLD_SIZE < 2:
        return
    try:
        store = _CONNECT(_CONNECT_S)
        told = json.dumps({"rank": rank, "message": message, "users": users})
        store.compare_set(_FIRST, "", told)  # the first failure told is the one reported
        deadline = time.monotonic() + _TOLD_WAIT_S
        while store.add(_SEEN, 0) < _WORLD_SIZE - 1 and time.monotonic() < deadline:
            time.sleep(0.1)
    except Exception:  # the store is gone: the others find out from the collectives
        pass


def seen() -> Failure | None:
    """The failure another rank told, if any (read now when the watcher has not yet)."""
    global _FOUND
    if _CONNECT is None or _WORLD_SIZE < 2:
        return None
    _FOUND = _FOUND or (_WATCH.found if _WATCH is not None else None)
    if _FOUND is None:
        try:
            _FOUND = _read(_CONNECT(_CONNECT_S), _RANK)
        except Exception:
            return None
    return _FOUND


def silent() -> str | None:
    """Which ranks stopped answering (their processes ended, or their hosts went down), with
    their hosts, found by whose counters in the store stopped rising; None if it cannot be
    told."""
    if _CONNECT is None or _WORLD_SIZE < 2:
        return None
    try:
        store = _CONNECT(_CONNECT_S)
    except Exception:  # the store itself is gone, and rank 0 held it
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            return None
        return "rank 0 (which held the job's store)"
    try:
        others = [r for r in range(_WORLD_SIZE) if r != _RANK]
        before = [store.add(f"{_ALIVE}{r}", 0) for r in others]
        time.sleep(2.5 * _POLL_S)
        after = [store.add(f"{_ALIVE}{r}", 0) for r in others]
        gone = [r for r, b, a in zip(others, before, after, strict=True) if a == b]
        named = []
        for r in gone:
            held = store.check([f"{_HOST}{r}"])
            named.append(f"rank {r} ({store.get(f'{_HOST}{r}').decode()})" if held else f"rank {r}")
        return ", ".join(named) or None
    except Exception:
        return None


def _read(store: Any, me: int) -> Failure | None:
    if not store.check([_FIRST]):
        return None
    told = json.loads(store.get(_FIRST))
    if told["rank"] == me:
        return None
    return Failure(told["rank"], told["message"], told["users"])


def host() -> str:
    return socket.gethostname()


def meet(store: Any, rank: int, world_size: int, timeout_s: float) -> list[int]:
    """Say in the job's store that ``rank`` has joined (and on which host), and wait up to
    ``timeout_s`` for every other rank to say so: the ranks that never did (none if all came).

    Rank 0, which holds the store and started waiting first, gives up first: it writes who is
    missing into the store and waits a moment for the ranks that joined to read it, so that
    every one of them names the same ranks instead of finding the store gone."""
    keys = [f"{_HOST}{r}" for r in range(world_size)]
    store.set(keys[rank], host())
    deadline = time.monotonic() + timeout_s
    while not store.check(keys):
        if rank != 0 and store.check([_MISSING]):
            missing = json.loads(store.get(_MISSING))
            store.add(_MISSING_SEEN, 1)
            return missing
        if time.monotonic() > deadline:
            break
        time.sleep(_MEET_POLL_S)
    else:
        return []
    missing = [r for r in range(world_size) if not store.check([keys[r]])]
    if rank == 0:
        store.set(_MISSING, json.dumps(missing))
        joined = world_size - len(missing) - 1
        told = time.monotonic() + _TOLD_WAIT_S
        while store.add(_MISSING_SEEN, 0) < joined and time.monotonic() < told:
            time.sleep(_MEET_POLL_S)
    return missing
