"""A small job's checkpoints compared, and the job started, killed and resumed as a batch system
does it: for the tests of resuming (test_resume.py, jobs/) and of what a resumed job keeps."""

import os
import signal

import torch
import yaml
from conftest import ROOT, TESTS, small_raw_config, start_forked

import QuantumGravPy as qg
from QuantumGravPy.runs import layout as rd


def without_times(history):
    return [{k: v for k, v in row.items() if k != "epoch_seconds"} for row in history]


def final_state(run):
    return qg.load_checkpoint(run / rd.CHECKPOINTS / rd.LAST)


def assert_same_weights(a, b, tol=0.0):
    assert a.keys() == b.keys()
    for key in a:
        assert torch.allclose(a[key].double(), b[key].double(), rtol=0, atol=tol), key


def kill_config(tmp_path, data_root, name, world_size, **model):
    raw = small_raw_config(tmp_path, data_root)
    raw["log_level"] = "INFO"
    raw["training"].update(path=str(tmp_path / name), batch_size=16 // world_size, num_epochs=6)
    raw["model"]["dropout"] = 0.2
    if "type" in model:  # your own model: the built-in model's keys would be refused
        raw["model"] = {}
    raw["model"].update(model)
    raw["augmentation"] = {"preset": "mild"}
    raw["training"]["ema_decay"] = 0.8
    raw["parallel"] = {"world_size": world_size}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def start_job(config, *args, **env):
    """``qg train`` in a new process group, as a batch system starts a job (forked from this
    worker's server: see conftest.ForkedJob), with the kill hooks in reach."""
    hooks = os.pathsep.join([str(TESTS / "kill_hooks"), str(ROOT), str(TESTS)])
    return start_forked("train", config, *args, env=dict(os.environ, PYTHONPATH=hooks, **env))


def train_here(config, *args):
    """``qg train CONFIG ARGS`` of a 2-process job that is not killed, in this process: the
    command's own code, its ranks forked from this worker's server instead of a fresh
    interpreter importing everything again (seconds per job). One-process jobs stay
    subprocesses: their training would run in this process, with this worker's threads."""
    from QuantumGravPy.cli import main

    assert yaml.safe_load(config.read_text())["parallel"]["world_size"] == 2
    assert main(["train", str(config), *args]) == 0


def killed(config, at, *, expect_epoch, **env):
    """``qg train CONFIG --resume`` killed at ``at`` (a kill hook's setting); fails unless the
    kill landed and left ``last.pt`` of ``expect_epoch``."""
    job = start_job(config, "--resume", **env, **at)
    _, err = job.communicate(timeout=240)
    assert job.returncode == -signal.SIGKILL, f"not killed at {at}: exit {job.returncode}\n{err}"
    assert final_state(config.parent / config.stem)["epoch"] == expect_epoch, at
