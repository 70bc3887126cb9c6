"""Jobs of TrainerDDP's ranks started as users start them: spawned, under torchrun and under
srun, Ctrl-C, and a data preparer that fails while the other ranks wait (TrainerDDP with real
processes in one test's job: tests/test_ddp.py)."""

import json
import os
import re
import subprocess
import sys
import time

import pytest
import yaml
from conftest import ROOT, TESTS, run_forked, save_graphs, small_raw_config, start_forked

from QuantumGravPy.parallel.distributed import free_port
from QuantumGravPy.runs import layout as rd

pytestmark = pytest.mark.timeout(180)


def launcher_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_"))}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(key, None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS)])
    env.update(extra)
    return env


def history_without_times(run):
    rows = rd.read_history(run)
    return [{k: v for k, v in row.items() if k != "epoch_seconds"} for row in rows]


def test_spawn_torchrun_and_srun_give_the_same_run(ddp_config_file, tmp_path):
    spawned = run_forked(
        "train",
        str(ddp_config_file),
        "parallel.world_size=2",
        f"training.path={tmp_path / 'spawn'}",
    )
    assert spawned.returncode == 0, spawned.stderr
    for rank in (0, 1):
        assert f"[RANK {rank}] INFO started: rank {rank} of 2" in spawned.stderr
        assert f"[RANK {rank}] INFO finished: 3 epochs" in spawned.stderr
    assert "[RANK 1] INFO epoch" not in spawned.stderr  # rank 1 logs at WARNING
    assert "[RANK 0] INFO epoch 3/3" in spawned.stderr
    assert "global batch 32 = 16 per process x 2 processes" in spawned.stderr
    log = (tmp_path / "spawn" / "train.log").read_text().splitlines()
    assert log and all("[RANK 0] " in line for line in log)  # only rank 0 writes the log file

    torchrun = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--master_port",
            str(free_port()),
            "-m",
            "QuantumGravPy",
            "train",
            str(ddp_config_file),
            f"training.path={tmp_path / 'torchrun'}",
        ],
        cwd=ROOT,
        env=launcher_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert torchrun.returncode == 0, torchrun.stderr

    port = str(free_port())
    tasks = [
        start_forked(
            "train",
            ddp_config_file,
            f"training.path={tmp_path / 'srun'}",
            env=launcher_env(
                SLURM_PROCID=str(rank),
                SLURM_LOCALID=str(rank),
                SLURM_NTASKS="2",
                SLURM_TASKS_PER_NODE="2",
                SLURM_JOB_NODELIST="127.0.0.1",
                SLURM_JOB_ID="42",
                MASTER_PORT=port,
            ),
        )  # two tasks of srun's, forked from this worker's server (conftest.ForkedJob)
        for rank in (0, 1)
    ]
    for task in tasks:
        _, err = task.communicate(timeout=300)
        assert task.returncode == 0, err

    runs = [tmp_path / name for name in ("spawn", "torchrun", "srun")]
    for run in runs:
        assert json.loads((run / "summary.json").read_text())["world_size"] == 2
    assert (
        history_without_times(runs[0])
        == history_without_times(runs[1])
        == history_without_times(runs[2])
    )


def test_ctrl_c_ends_every_rank(ddp_config_file):
    import signal

    # its own session and process group, like a job in a terminal, Ctrl-C handled as there
    job = start_forked(
        "train", ddp_config_file, "parallel.world_size=2", "training.num_epochs=100000",
        "early_stopping.enabled=false", env=launcher_env(),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not all(f"[RANK {r}] INFO started: rank" in job.stderr_so_far() for r in (0, 1)):
            assert job.poll() is None and time.monotonic() < deadline, job.stderr_so_far()
            time.sleep(0.1)
        os.killpg(job.pid, signal.SIGINT)  # what the terminal sends on Ctrl-C
        _, err = job.communicate(timeout=60)
    except BaseException:  # never leave a job of 100,000 epochs running for later tests
        os.killpg(job.pid, signal.SIGKILL)
        raise
    assert job.returncode == 130 and "interrupted" in err
    # and the one command that goes on from where it stopped
    again = f"to continue: qg train {ddp_config_file} parallel.world_size=2 "
    assert again + "training.num_epochs=100000 early_stopping.enabled=false --resume" in err, err
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # the group empties once every rank has exited
        try:
            os.killpg(job.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        pytest.fail("processes of the interrupted job are still running")


def fail_at_third_graph(graph):
    """A data.pre_transform whose process ends (as if killed) or raises at the third graph,
    as its environment says (QG_TEST_PREPARER)."""
    fail_at_third_graph.seen = getattr(fail_at_third_graph, "seen", 0) + 1
    if fail_at_third_graph.seen == 3:
        if os.environ.get("QG_TEST_PREPARER") == "dies":
            os._exit(3)
        raise ValueError("a graph it cannot take")
    return graph


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["raises", "dies"])
def test_a_preparer_that_fails_ends_the_ranks_waiting_for_it(tmp_path, data_root, how):
    """Two tasks of srun's on one host, no cache yet: rank 0 builds it while rank 1 waits
    (longer than parallel.timeout_s, if need be). When rank 0 raises, or its process ends, in
    the middle, rank 1 ends at once, saying which rank it waited for and why, if known."""
    save_graphs(tmp_path / "graphs.pt", 40)
    raw = small_raw_config(tmp_path, tmp_path / "data")
    raw["data"] = {"files": [str(tmp_path / "graphs.pt")], "root": str(tmp_path / "data"),
                   "pre_transform": "jobs.test_ddp.fail_at_third_graph"}  # fmt: skip
    raw["tasks"] = [{"name": "y", "target": "y"}]
    raw["log_level"] = "INFO"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    port = str(free_port())
    tasks = [
        start_forked("train", config, env=launcher_env(
            SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank), SLURM_NTASKS="2",
            SLURM_TASKS_PER_NODE="2", SLURM_JOB_NODELIST="127.0.0.1", SLURM_JOB_ID="42",
            MASTER_PORT=port, QG_TEST_PREPARER=how,
        ))
        for rank in (0, 1)
    ]  # fmt: skip
    start = time.monotonic()
    (code0, (_, err0)), (code1, (_, err1)) = (
        (task.communicate(timeout=90) and task.returncode, task.communicate()) for task in tasks
    )
    waited = time.monotonic() - start
    assert "[RANK 1] INFO waiting for rank 0 to prepare the data" in err1, err1
    errors1 = [line for line in err1.splitlines() if line.startswith("error:")]
    assert code1 == 1 and len(errors1) == 1, err1
    if how == "raises":
        assert code0 == 1 and "ValueError: a graph it cannot take" in err0, err0
        # rank 1 hears it from the exchange it waits in ("rank 0 failed: ...") or, when rank 0
        # told the job's store first, from there ("rank 0 (host): ..."): either names both
        assert re.search(r"rank 0( failed| \(.+\))?: ValueError: a graph it cannot take",
                         errors1[0]), errors1  # fmt: skip
    else:
        assert code0 == 3, err0
        assert "rank 0" in errors1[0], errors1
    assert waited < 60, waited  # not the patient wait's days, nor parallel.timeout_s (300 s)
