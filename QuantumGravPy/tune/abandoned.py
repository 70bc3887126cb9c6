"""Trials left running by a job that ended (SIGKILL, preemption, a lost node), found and run
again.

Each running trial names its owner (host, process id and that process's start time) and carries
a heartbeat the owner renews (:func:`heartbeat`); :func:`fail_abandoned` marks a trial failed,
as interrupted, when its owner on this machine is gone or its heartbeat is older than
``stale_after_s``, and puts its parameters back in the queue, so it is run again under a new
number.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..compat.optuna import trial_id as storage_id

STALE_AFTER_S = 300.0  # a running trial without a heartbeat for this long was abandoned
HEARTBEATS_PER_STALE = 10  # heartbeats sent within that time (one each 30 s by default)
OWNER, HEARTBEAT = "qg_owner", "qg_heartbeat"


def fail_abandoned(study: Any, storage: Any, stale_after_s: float) -> list[int]:
    """Mark running trials whose job is gone as failed (interrupted) and queue their
    parameters again; returns their numbers."""
    from optuna.trial import TrialState

    now = time.time()
    abandoned = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if is_abandoned(t, now, stale_after_s):
            if interrupt(study, storage, t, "interrupted: the job running it ended"):
                abandoned.append(t.number)
    return abandoned


def interrupt(study: Any, storage: Any, trial: Any, why: str) -> bool:
    """Fail ``trial`` as interrupted and queue its parameters; False if it had ended."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    trial_id = storage_id(trial)
    try:
        storage.set_trial_user_attr(trial_id, "error", why)
        storage.set_trial_user_attr(trial_id, "interrupted", True)
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
    except UpdateFinishedTrialError:
        return False  # another job saw it first
    params = storage.get_trial(trial_id).params
    study.enqueue_trial(params, user_attrs={"rerun_of": trial.number})
    return True


@contextlib.contextmanager
def heartbeat(storage: Any, running: dict[int, Any], stale_after_s: float) -> Iterator[None]:
    """Renew the heartbeat of the ``running`` trials (by trial id) while the block runs."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(stale_after_s / HEARTBEATS_PER_STALE):
            for trial_id in list(running):
                with contextlib.suppress(Exception):  # it may have just ended
                    storage.set_trial_system_attr(trial_id, HEARTBEAT, time.time())

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def owner() -> str:
    """This process, as a running trial names its owner: host, process id and start time."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot), so a reused id is told apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def is_abandoned(trial: Any, now: float, stale_after_s: float) -> bool:
    """Whether a running trial's owner on this machine is gone, or its heartbeat (its start,
    without one) is older than ``stale_after_s``."""
    owner = trial.system_attrs.get(OWNER)
    if owner is not None:
        host, pid, started = owner.rsplit(":", 2)
        if host == socket.gethostname() and started:
            return _start_time(int(pid)) != started
    beat = trial.system_attrs.get(HEARTBEAT)
    if beat is None:
        beat = trial.datetime_start.timestamp() if trial.datetime_start else 0.0
    return now - beat > stale_after_s
