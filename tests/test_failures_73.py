"""Issue 73: a job ends, and says why, when a rank freezes, a callback never returns or the
launcher is killed; ranks hand their results over as data, never as pickles."""

from __future__ import annotations

import os

import pytest
from conftest import run_forked, run_main, start_forked

HANG = "training.callbacks=[{type: user_hangs.Hang, kwargs: {rank: %d}}]"


@pytest.mark.jobs
@pytest.mark.timeout(180)
def test_a_frozen_rank_on_the_shared_memory_path_is_named(config_file):
    # rank 1 stops in a callback; rank 0 waits for its gradients in the shared buffer, times
    # out and closes the buffer on its way out: the closing must not replace the timeout
    cfg = config_file(training={"batch_size": 4, "num_epochs": 3})
    result = run_forked(
        "train", cfg, "parallel.world_size=2", "parallel.shared_memory=true",
        "parallel.timeout_s=5", HANG % 1, timeout=150,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: rank 0: no gradients from rank(s) 1 within 5 s"), last
    assert "BufferError" not in result.stderr


@pytest.mark.timeout(120)
def test_a_callback_that_never_returns_ends_a_one_process_run(config_file, capsys, tmp_path):
    cfg = config_file(training={"batch_size": 4, "num_epochs": 3})
    result = run_main(capsys, "train", cfg, "parallel.timeout_s=2", HANG % 0)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: training.callbacks user_hangs.Hang.on_epoch_end did not return within 2 s "
        "(parallel.timeout_s)"
    ]
    assert "did not return within 2 s" in (tmp_path / "run" / "train.log").read_text()


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


@pytest.mark.jobs
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
        while job.poll() is None and not (history.exists() and len(ranks) == 2):
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
