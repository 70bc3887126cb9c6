"""qg tune's studies as users run them: killed and resumed, stopped with Ctrl-C, shared by
workers started at once, and a silent worker's trial run again (the rest: tests/test_tune.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, TESTS, run_main, start_forked
from test_tune import (
    LR,
    read_trials,
    seeded_lr_space,
    stored_trials,
    stored_trials_in,
    until,
    write_study_files,
)

from QuantumGravPy.tune.results import SURPLUS

optuna = pytest.importorskip("optuna")


@pytest.mark.timeout(240)
def test_a_killed_study_resumes_without_losing_or_repeating_trials(tmp_path, data_root, capsys):
    space = seeded_lr_space(2)
    # 4 epochs a trial: the kill lands within 50 ms of trial 1's first epoch, 3 epochs early
    config, space_file, study = write_study_files(tmp_path, data_root, space, num_epochs=4)
    # its own process group, killed as a scheduler would
    job = start_forked("tune", config, space_file, "--trials", "3")
    try:
        # kill while trial 1 is in the middle of its epochs, trial 0 finished
        deadline = time.monotonic() + 180
        while not (study / "trial_0001" / "history.csv").exists():
            assert job.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    before = {t.number: t for t in stored_trials(study)}
    assert before[0].state.name == "COMPLETE" and before[1].state.name == "RUNNING"

    done = run_main(capsys, "tune", config, space_file, "--trials", "3", "--resume")
    assert done.returncode == 0, done.stderr
    after = stored_trials(study)
    numbers = [t.number for t in after]
    assert numbers == sorted(set(numbers))  # each number once
    assert after[0].value == before[0].value and after[0].params == before[0].params
    killed = after[1]
    assert killed.state.name == "FAIL" and killed.user_attrs["interrupted"]
    rerun = [t for t in after if t.user_attrs.get("rerun_of") == 1]
    assert len(rerun) == 1 and rerun[0].params == killed.params
    assert rerun[0].state.name == "COMPLETE"
    # three trials count: 0, the rerun of 1, and 2
    counted = [t for t in after if not t.user_attrs.get("interrupted")]
    assert len(counted) == 3 and all(t.state.name == "COMPLETE" for t in counted)
    rows = read_trials(study)
    assert [r["state"] for r in rows] == [t.state.name for t in after]
    assert "interrupted" in rows[1]["error"]

    again = run_main(capsys, "tune", config, space_file, "--trials", "3", "--resume")
    assert again.returncode == 0 and len(stored_trials(study)) == len(after)


@pytest.mark.timeout(240)
def test_ctrl_c_stops_parallel_trials_and_queues_them_again(tmp_path, data_root):
    space = {
        "training.optimizer.kwargs.lr": LR,
        "objective": {"metric": "val_loss"},
        "pruner": {"type": "none"},
    }
    config, space_file, study = write_study_files(tmp_path, data_root, space, num_epochs=200)
    job = start_forked("tune", config, space_file, "--trials", "2", "--parallel", "2")
    deadline = time.monotonic() + 180
    while not all((study / f"trial_000{i}" / "history.csv").exists() for i in (0, 1)):
        assert job.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group
    _, err = job.communicate(timeout=60)
    assert job.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("interrupted; to continue: qg tune "), err
    assert err.strip().endswith(" --trials 2 --parallel 2 --resume"), err
    stopped = stored_trials(study)
    assert [t.state.name for t in stopped] == ["FAIL", "FAIL", "WAITING", "WAITING"], err
    assert all(t.user_attrs["interrupted"] for t in stopped[:2])
    assert [r["state"] for r in read_trials(study)] == ["FAIL", "FAIL"]

    # their values wait to run again, first in line when the study resumes (as after a kill)
    assert {t.user_attrs["rerun_of"]: t.system_attrs["fixed_params"] for t in stopped[2:]} == {
        t.number: t.params for t in stopped[:2]
    }


def start_worker(config, space_file, *args, hostname=None):
    """``qg tune ... --resume`` as one job of the documented job array (docs/tuning.md): its own process group, and
    with ``hostname`` its own host name (a UTS namespace: a worker on another machine)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]))
    if hostname is None:  # forked from this worker's server: see conftest.ForkedJob
        return start_forked("tune", config, space_file, *args, "--resume", env=env)
    command = [sys.executable, "-m", "QuantumGravPy", "tune", str(config), str(space_file)]
    command += [*map(str, args), "--resume"]
    if hostname is not None:
        command = [
            "unshare",
            "--uts",
            "sh",
            "-c",
            f'hostname {hostname} && exec "$@"',
            "-",
            *command,
        ]
    return subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("storage, workers", [("journal", 2), ("postgresql", 3)])
def test_workers_started_at_once_share_a_study_to_exactly_n_distinct_trials(
    tmp_path, data_root, request, storage, workers
):
    """The job array of docs/tuning.md: workers of one new study start together, on a journal file or
    on a new database of a real PostgreSQL server; every one joins, none repeats another's
    suggestion, and the study ends with exactly N trials."""
    space = seeded_lr_space(0)  # the same seed in every worker
    config, space_file, study = write_study_files(tmp_path, data_root, space, num_epochs=1)
    if storage == "journal":
        url = tmp_path / "shared" / "studies.journal"  # --storage elsewhere: it must be used
        url.parent.mkdir()
    else:
        url = request.getfixturevalue("postgres")()
    args = ("--trials", 4, "--study", "dimension", "--storage", url)
    jobs = [start_worker(config, space_file, *args) for _ in range(workers)]
    for job in jobs:
        _, err = job.communicate(timeout=180)
        assert job.returncode == 0, err
        assert "\r" not in err  # output to a file (a SLURM log): no progress bar, plain lines
    if storage == "journal":
        everything = stored_trials_in(url, "dimension")
    else:
        everything = optuna.load_study(study_name="dimension", storage=url).get_trials()
    # A trial asked for past N by two workers at the same moment is failed at once as surplus
    # and counts nowhere (see test_a_trial_asked_for_past_n_by_a_second_job_at_once_is_surplus);
    # which race produces one depends on timing, so one may be there or not.
    trials = [t for t in everything if not t.user_attrs.get(SURPLUS)]
    surplus = [t for t in everything if t.user_attrs.get(SURPLUS)]
    assert all(t.state.name == "FAIL" for t in surplus) and len(surplus) <= workers - 1
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4, [t.state.name for t in trials]
    owners = {t.system_attrs["qg_owner"] for t in trials}
    assert len(owners) >= 2  # the workers shared the trials
    values = [t.params["training.optimizer.kwargs.lr"] for t in trials]
    assert len(set(values)) == 4  # no worker repeated another's suggestion
    assert not (study / "study.journal").exists()
    assert {int(r["number"]) for r in read_trials(study)} == {t.number for t in trials}


@pytest.mark.timeout(300)
def test_a_live_workers_trial_is_left_alone_and_a_silent_ones_run_again_after_the_stated_time(
    tmp_path, data_root, capsys
):
    space = seeded_lr_space(1)
    config, space_file, study = write_study_files(tmp_path, data_root, space, num_epochs=300)
    here = ("tune", config, space_file, "--resume", "--stale-after", "3")  # workers on this host
    # a worker on another machine (its own host name), whose one trial trains for long (and
    # idly: its model waits instead of computing, so it takes no core from the other tests)
    far = start_worker(
        config, space_file, "--trials", 1, "--stale-after", 3, "model={type: user_models.Unhurried}",
        hostname="node-a",
    )  # fmt: skip
    try:
        until(
            lambda: (study / "trial_0000" / "history.csv").exists() or far.poll() is not None, 120
        )
        assert far.poll() is None, far.communicate()[1]
        # a worker here: it looks for abandoned trials before and after its own, the last time
        # more than the stale time after the far trial began; only heartbeats keep it alive
        near = run_main(capsys, *here, "--trials", "2", "training.num_epochs=6")
        assert near.returncode == 0, near.stderr
        running, own = stored_trials(study)
        assert running.system_attrs["qg_owner"].startswith("node-a:")
        assert running.state.name == "RUNNING" and own.state.name == "COMPLETE"
        assert (own.datetime_complete - running.datetime_start).total_seconds() > 3
    finally:
        os.killpg(far.pid, signal.SIGKILL)
        far.wait()
    # the far job is gone: once its last heartbeat is older than the stated time (waited out
    # here, as it is what is tested), the next worker fails the trial and runs its values again
    last_beat = stored_trials(study)[0].system_attrs["qg_heartbeat"]
    until(lambda: time.time() > last_beat + 3.2, 30)
    last = run_main(capsys, *here, "--trials", "2", "training.num_epochs=1", "log_level=INFO")
    assert last.returncode == 0, last.stderr
    killed, own, rerun = stored_trials(study)
    assert killed.state.name == "FAIL" and killed.user_attrs["interrupted"]
    assert rerun.user_attrs["rerun_of"] == 0 and rerun.params == killed.params
    assert rerun.state.name == "COMPLETE" and own.state.name == "COMPLETE"
    assert "trial(s) 0 were left running by a job that ended" in (study / "tune.log").read_text()
