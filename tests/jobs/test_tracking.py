"""A job killed mid-run and resumed logs each epoch once, to TensorBoard, MLflow and Weights &
Biases (tracking from rank 0 in one job: tests/test_tracking.py)."""

import json
import signal

import pytest
import yaml
from resuming import kill_config, start_job
from test_tracking import events, logged, mlflow_runs, mlflow_steps, steps

from QuantumGravPy.compat.wandb import offline_history
from QuantumGravPy.runs import layout as rd
from QuantumGravPy.runs.layout import WANDB_FILES

pytestmark = pytest.mark.timeout(240)


def test_a_killed_and_resumed_job_has_each_epoch_once(tmp_path, data_root):
    path = kill_config(tmp_path, data_root, "cut", 1)
    raw = yaml.safe_load(path.read_text())
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    raw["tracking"] = {"tensorboard": True, "mlflow": uri, "wandb": "qg-tests"}
    raw["tracking"]["wandb_mode"] = "offline"
    path.write_text(yaml.safe_dump(raw))
    run = tmp_path / "cut"
    # killed while writing the third last.pt: epoch 3's events are written, its checkpoint not
    job = start_job(path, QG_TEST_KILL_IN_WRITE="3")
    _, err = job.communicate(timeout=120)
    assert job.returncode == -signal.SIGKILL, err
    assert [s for s, _ in steps(events(run), "val_loss")] == [1, 2, 3]
    job = start_job(path, "--resume")
    _, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    history = rd.read_history(run)
    assert steps(events(run), "val_loss") == [(r["epoch"], logged(r["val_loss"])) for r in history]
    assert [s for s, _ in steps(events(run), "val_loss")] == [1, 2, 3, 4, 5, 6]
    client, runs = mlflow_runs(uri, raw["name"])
    (mlrun,) = runs  # the resumed job went on with the killed job's MLflow run
    assert mlflow_steps(client, mlrun.info.run_id, "val_loss") == [
        (r["epoch"], round(r["val_loss"], 6)) for r in history
    ]
    assert mlrun.info.status == "FINISHED"
    # W&B: one run id over both jobs (a folder of records each); every epoch once, as trained
    run_id = json.loads((run / "wandb.json").read_text())["run_id"]
    assert len(list((run / "wandb").glob(f"offline-run-*-{run_id}"))) == 2
    epochs = [r for r in offline_history(run / WANDB_FILES, run_id) if "epoch" in r]
    assert [r["epoch"] for r in epochs] == [1, 2, 3, 4, 5, 6]
    assert [r["val_loss"] for r in epochs] == [r["val_loss"] for r in history]
