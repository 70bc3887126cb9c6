"""Jobs killed anywhere, by a batch system or torchrun, and requeued: resumed, they end with the
uninterrupted run's bits (checkpoints, --resume and its refusals: tests/test_resume.py)."""

import os
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT, TESTS, train
from resuming import (
    assert_same_weights,
    final_state,
    kill_config,
    killed,
    start_job,
    train_here,
    without_times,
)

import QuantumGravPy as qg
from QuantumGravPy.parallel.strategies import STRATEGIES
from QuantumGravPy.runs import layout as rd


def test_a_requeued_job_resumes_even_when_its_script_says_overwrite(make_config, tmp_path):
    cfg = make_config("training.num_epochs=1", "log_level=INFO")
    train(cfg)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(qg.config.config_to_dict(cfg)))
    requeued = subprocess.run(
        [
            sys.executable,
            "-m",
            "QuantumGravPy",
            "train",
            str(path),
            "--overwrite",
            "training.num_epochs=2",
        ],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), SLURM_RESTART_COUNT="1"),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert requeued.returncode == 0, requeued.stderr
    assert "resumed from" in (cfg.run_dir / "train.log").read_text()
    assert [row["epoch"] for row in rd.read_history(cfg.run_dir)] == [1, 2]


# --- killed jobs ---------------------------------------------------------------------------------


# The one-process job trains a model class of the user's (user_models.py): a checkpoint holds
# no code, so resuming must rebuild that class from the config.
CUSTOM_MODEL = {"type": "user_models.SmallGCN", "kwargs": {"hidden": 12}}
MODEL_OF = {1: CUSTOM_MODEL, 2: {}}


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory, data_root):
    """``uninterrupted(W)``: the run directory of kill_config's job, never killed, on W processes.

    Trained once per world size and shared by the tests that kill and resume that job.
    """
    runs = {}

    def run_dir(world_size):
        if world_size not in runs:
            where = tmp_path_factory.mktemp(f"uninterrupted{world_size}")
            config = kill_config(where, data_root, "whole", world_size, **MODEL_OF[world_size])
            if world_size == 2:
                train_here(config)
            else:
                job = start_job(config)
                _, err = job.communicate(timeout=240)
                assert job.returncode == 0, err
            runs[world_size] = where / "whole"
        return runs[world_size]

    return run_dir


# Tests that share the uninterrupted runs run on one worker (pytest -n: --dist loadgroup).
SHARES_UNINTERRUPTED = pytest.mark.xdist_group("uninterrupted")


KILL_IN_EPOCH = {1: "train:4:2", 2: "validate:4:1"}  # batch 2 of epoch 4; its validation


@SHARES_UNINTERRUPTED
@pytest.mark.timeout(400)
@pytest.mark.parametrize("world_size", [1, 2])
def test_a_job_killed_anywhere_resumes_to_the_uninterrupted_result(
    tmp_path, data_root, world_size, uninterrupted
):
    whole = uninterrupted(world_size)
    cut = kill_config(tmp_path, data_root, "cut", world_size, **MODEL_OF[world_size])
    run = tmp_path / "cut"
    # In the middle of writing last.pt after epoch 3: epoch 2's must survive the cut write.
    killed(cut, {"QG_TEST_KILL_IN_WRITE": "3"}, expect_epoch=2)
    # Then in the middle of an epoch's training pass (one process), or of its validation (two:
    # rank 0 validates while rank 1 waits): the epoch in progress is lost, and the history
    # rows written after last.pt are dropped on resuming.
    killed(cut, {"QG_TEST_KILL_AT": KILL_IN_EPOCH[world_size]}, expect_epoch=3)
    if world_size == 2:
        train_here(cut, "--resume")
    else:
        job = start_job(cut, "--resume")
        _, err = job.communicate(timeout=240)
        assert job.returncode == 0, err
    assert not list((run / "checkpoints").glob(".*tmp*"))  # the cut write was cleaned up
    assert (run / "train.log").read_text().count("resumed from") == 2

    # The same number of processes: exact, to the last bit.
    assert without_times(rd.read_history(run)) == without_times(rd.read_history(whole))
    a, b = final_state(run), final_state(whole)
    assert_same_weights(a["model"], b["model"])
    assert_same_weights(a["ema"]["model"], b["ema"]["model"])
    assert_same_weights(a["optimizer"]["state"][0], b["optimizer"]["state"][0])
    assert (run / "summary.json").read_text() == (whole / "summary.json").read_text()


@SHARES_UNINTERRUPTED
@pytest.mark.timeout(400)
@pytest.mark.parametrize("strategy", [name for name in STRATEGIES.names() if name != "ddp"])
def test_a_job_of_every_strategy_killed_in_an_epoch_resumes_to_the_uninterrupted_result(
    tmp_path, data_root, uninterrupted, strategy
):
    """Every strategy of the registry (ddp's own test is above), killed in a validation and
    resumed: the uninterrupted run's bits. For zero that run is ddp's: zero shards the optimizer
    state, not the arithmetic; the others add gradients in another order (fsdp) or cut batches
    their own way (invariant), so their own uninterrupted run is the measure."""
    cls = STRATEGIES.get(strategy)
    epochs = 6 if strategy == "zero" else 4  # (the others' uninterrupted run is this test's own)

    def config(name):
        path = kill_config(tmp_path, data_root, name, 2)
        raw = yaml.safe_load(path.read_text())
        raw["parallel"]["strategy"] = strategy
        raw["training"]["num_epochs"] = epochs
        if cls.cuts_batches:  # a global batch the strategy cuts: 24, a multiple of its default
            raw["training"]["global_batch_size"] = 24
        path.write_text(yaml.safe_dump(raw))
        return path

    whole = uninterrupted(2)
    if strategy != "zero":
        train_here(config("whole"))
        whole = tmp_path / "whole"
    cut = config("cut")
    killed(cut, {"QG_TEST_KILL_AT": f"validate:{epochs - 2}:1"}, expect_epoch=epochs - 3)
    train_here(cut, "--resume")
    run = tmp_path / "cut"
    assert without_times(rd.read_history(run)) == without_times(rd.read_history(whole))
    a, b = final_state(run), final_state(whole)
    assert_same_weights(a["model"], b["model"])
    assert_same_weights(a["ema"]["model"], b["ema"]["model"])
    for i in b["optimizer"]["state"]:
        assert_same_weights(a["optimizer"]["state"][i], b["optimizer"]["state"][i])


@SHARES_UNINTERRUPTED
@pytest.mark.timeout(300)
def test_torchrun_restarts_a_killed_worker_and_the_run_resumes(tmp_path, data_root, uninterrupted):
    from QuantumGravPy.parallel.distributed import free_port

    whole = uninterrupted(2)

    config = kill_config(tmp_path, data_root, "elastic", 2)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(TESTS / "kill_hooks"), str(ROOT), str(TESTS)]),
        QG_TEST_KILL_IN_WRITE="3",
        QG_TEST_KILL_SCOPE="process",
    )
    elastic = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--max-restarts=1",
            "--master_port",
            str(free_port()),
            "-m",
            "QuantumGravPy",
            "train",
            str(config),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert elastic.returncode == 0, elastic.stderr
    log = (tmp_path / "elastic" / "train.log").read_text()
    assert "resumed from" in log and "after epoch 2" in log
    assert without_times(rd.read_history(tmp_path / "elastic")) == without_times(
        rd.read_history(whole)
    )
    assert_same_weights(final_state(tmp_path / "elastic")["model"], final_state(whole)["model"])
