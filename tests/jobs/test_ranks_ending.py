"""A job ends, and says why, when a rank freezes (on every path a rank waits on) or its launcher
is killed (a callback that never returns, results handed over as data:
tests/test_ranks_ending.py)."""

from __future__ import annotations

import os

import pytest
from conftest import run_forked, start_forked
from test_ranks_ending import HANG


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("sharing", "waits_in"),
    [
        # rank 0 waits for rank 1's gradients in the shared buffer, times out and closes the
        # buffer on its way out: the closing must not replace the timeout
        ("parallel.shared_memory=true", "no gradients from rank(s) 1 within 5 s"),
        # one batch an epoch: rank 0 waits in a gloo collective
        ("training.batch_size=64", "no answer from rank(s) 1 within 5 s"),
    ],
)
def test_a_frozen_rank_is_named_on_every_path(config_file, sharing, waits_in):
    # rank 1 stops in a callback at the end of its first epoch
    cfg = config_file(training={"batch_size": 4, "num_epochs": 3})
    result = run_forked(
        "train", cfg, "parallel.world_size=2", "parallel.timeout_s=5", sharing, HANG % 1,
        timeout=200,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr  # not the user's mistake
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: rank 0: {waits_in}"), last
    assert "BufferError" not in result.stderr
    # c10d's C++ stack dumps (the other rank's store connections breaking) are not shown
    assert "frame #" not in result.stderr and "TCPStore.cpp" not in result.stderr
    assert "Terminating process" not in result.stderr


def _ranks_of(pid: int) -> list:
    """The ranks a launcher started: forked by its fork server (a child of its own), or
    spawned interpreters."""
    import psutil

    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.ppid() != pid or "spawn_main" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def _running(process) -> bool:
    """Not ended (a zombie has ended: only its exit status waits for a parent to read it)."""
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.timeout(240)
def test_ranks_end_when_their_launcher_is_killed(config_file, tmp_path):
    import signal
    import time

    import psutil

    cfg = config_file(training={"batch_size": 4, "num_epochs": 10_000})
    job = start_forked("train", cfg, "parallel.world_size=2", "parallel.timeout_s=5")
    history = tmp_path / "run" / "history.csv"
    ranks = []
    try:
        # both ranks training, until an epoch is written (or the job failed)
        while job.poll() is None and not (history.exists() and len(ranks) >= 2):
            time.sleep(0.2)
            ranks = _ranks_of(job.pid)
        assert job.poll() is None, job.stderr_so_far()
        os.kill(job.pid, signal.SIGKILL)  # the launcher only, as `kill -9 PID` does
        # the promise: gone within parallel.timeout_s + 15 s of the launcher's death
        deadline = time.monotonic() + 5 + 15
        while (alive := [p.pid for p in ranks if _running(p)]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert alive == []
        assert "the process that started this job" in job.stderr_so_far()
    finally:
        for process in ranks:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
