"""Tracking from rank 0: TensorBoard event files, a local MLflow store and offline Weights &
Biases runs hold every epoch's columns once, also after a job killed mid-run is resumed, and
the hyperparameters, test metrics (and for MLflow and W&B the run's files) at the end."""

import json

import numpy as np
import pytest
import yaml
from conftest import run_ranks, train
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import QuantumGravPy as qg
from QuantumGravPy.compat.wandb import _records, offline_history
from QuantumGravPy.runs import layout as rd
from QuantumGravPy.runs.layout import WANDB_FILES

pytestmark = pytest.mark.timeout(240)


def events(run):
    accumulator = EventAccumulator(str(run / "tensorboard"))
    accumulator.Reload()
    return accumulator


def steps(accumulator, tag):
    return [(e.step, round(e.value, 6)) for e in accumulator.Scalars(tag)]


def logged(value: float) -> float:
    """``value`` as a TensorBoard event holds it (float32), rounded as :func:`steps` rounds:
    a float64 rounded directly may differ in the last digit (0.0079405 against 0.00794)."""
    return round(float(np.float32(value)), 6)


def test_every_column_of_every_epoch_and_the_results_reach_tensorboard(make_config, tmp_path):
    cfg = make_config(
        "tracking.tensorboard=true", "training.num_epochs=3", f"training.path={tmp_path}/run"
    )
    _, history, metrics = train(cfg)
    found = events(tmp_path / "run")
    for column in ("train_loss", "val_loss", "val_accuracy", "lr"):
        assert steps(found, column) == [(r["epoch"], logged(r[column])) for r in history]
    assert steps(found, "test_accuracy") == [(3, logged(metrics["test_accuracy"]))]
    assert found.PluginTagToContent("hparams")  # the config's keys, for the HParams tab


def test_a_run_without_the_key_writes_no_events(make_config, tmp_path):
    train(make_config("training.num_epochs=1", f"training.path={tmp_path}/run"))
    assert not (tmp_path / "run" / "tensorboard").exists()


def mlflow_runs(uri, experiment="test"):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    return client, client.search_runs([found.experiment_id], order_by=["attributes.run_name"])


def mlflow_steps(client, run_id, key):
    return sorted((m.step, round(m.value, 6)) for m in client.get_metric_history(run_id, key))


def test_a_run_reaches_a_local_mlflow_store_with_its_files(make_config, tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    cfg = make_config(f"tracking.mlflow={uri}", "training.num_epochs=3", "training.plots=true")
    _, history, metrics = train(cfg)
    client, runs = mlflow_runs(uri)
    (run,) = runs
    assert run.info.run_name == "run" and run.info.status == "FINISHED"
    assert run.data.params["training.batch_size"] == "16"
    assert run.data.params["model.hidden_channels"] == "16"
    for column in ("train_loss", "val_loss", "val_accuracy", "lr"):
        expected = [(r["epoch"], round(r[column], 6)) for r in history]
        assert mlflow_steps(client, run.info.run_id, column) == expected
    assert mlflow_steps(client, run.info.run_id, "test_accuracy") == [
        (3, round(metrics["test_accuracy"], 6))
    ]
    timed = [(r["epoch"], round(r["epoch_s"], 6)) for r in rd.read_ranks(tmp_path / "run")]
    assert mlflow_steps(client, run.info.run_id, "ranks/0/epoch_s") == timed
    files = {f.path for f in client.list_artifacts(run.info.run_id)}
    assert {"curves.png", "summary.json", "history.csv", "config.yaml", "best.pt"} <= files
    assert (tmp_path / "mlartifacts").is_dir()  # beside the store, not in the working folder
    assert yaml.safe_load((tmp_path / "run" / "mlflow.json").read_text())["run_id"] == (
        run.info.run_id
    )


def test_a_bad_mlflow_uri_or_a_missing_extra_is_one_clear_error(make_config, tmp_path, monkeypatch):
    import sys

    cfg = make_config(f"tracking.mlflow={tmp_path}/mlruns", f"training.path={tmp_path}/run")
    with pytest.raises(
        qg.ConfigError, match=rf"^tracking.mlflow: cannot log to {tmp_path}/mlruns: "
    ):
        train(cfg)
    assert list((tmp_path / "run").iterdir()) == []  # no half-started run to refuse next time
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    cfg = make_config(f"tracking.mlflow=sqlite:///{tmp_path}/m.db", f"training.path={tmp_path}/r2")
    with pytest.raises(qg.ConfigError, match=r"the 'mlflow' extra: pip install"):
        train(cfg)


def test_without_tensorboard_the_error_names_the_extra(make_config, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if not installed
    cfg = make_config("tracking.tensorboard=true", f"training.path={tmp_path}/run")
    with pytest.raises(qg.ConfigError, match=r"the 'tracking' extra: pip install"):
        train(cfg)


def train_ranks(rank, world_size, cfg):
    trainer = qg.TrainerDDP(rank, cfg)
    history = trainer.run_training(*trainer.prepare_dataloaders()[:2])
    trainer.close()
    return history


def test_under_ddp_rank_0_alone_writes_the_events(make_config, tmp_path):
    cfg = make_config(
        "tracking.tensorboard=true", "training.num_epochs=2", f"training.path={tmp_path}/run"
    )
    history, _ = run_ranks(2, train_ranks, cfg)
    assert len(list((tmp_path / "run" / "tensorboard").glob("events.*"))) == 1  # one writer
    found = events(tmp_path / "run")
    assert steps(found, "val_loss") == [(r["epoch"], logged(r["val_loss"])) for r in history]
    # where each rank's time went, beside the curves: ranks/<rank>/<column of ranks.csv>
    for row in rd.read_ranks(tmp_path / "run"):
        for column in ("epoch_s", "data_s", "exchange_exposed_s"):
            tag = f"ranks/{row['rank']}/{column}"
            assert (row["epoch"], logged(row[column])) in steps(found, tag), tag


def wandb_records(run, kind):
    """The records of ``kind`` (run, summary, history, ...) of the run's offline W&B files."""
    from wandb.proto import wandb_internal_pb2

    found = []
    for path in sorted((run / "wandb").glob("offline-run-*/run-*.wandb")):
        for data in _records(path):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            if record.WhichOneof("record_type") == kind:
                found.append(getattr(record, kind))
    return found


def test_an_offline_wandb_run_holds_the_config_every_column_the_results_and_pictures(
    make_config, tmp_path, monkeypatch
):
    # WANDB_MODE is honoured: the config says online, the environment offline (no network)
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = make_config(
        "tracking.wandb=qg-tests", f"training.path={tmp_path}/run", "name=wb", "training.plots=true"
    )
    _, history, metrics = train(cfg)
    # W&B's service writes the offline file in blocks and closes it after finish() returns (a
    # file read at once under load held no record yet): ending the service waits for it
    import wandb

    wandb.teardown()
    run = tmp_path / "run"
    run_id = json.loads((run / "wandb.json").read_text())["run_id"]
    found = wandb_records(run, "run")
    files = {str(p.relative_to(run)): p.stat().st_size for p in run.rglob("*") if p.is_file()}
    assert len(found) == 1, (found, files)
    started = found[0]
    assert started.run_id == run_id and started.project == "qg-tests"
    assert started.display_name == "run" and started.run_group == ""
    config = {u.key: json.loads(u.value_json) for u in started.config.update}
    assert config["training"]["batch_size"] == 16 and config["name"] == "wb"
    rows = [r for r in offline_history(run / WANDB_FILES, run_id) if "epoch" in r]
    assert [r["epoch"] for r in rows] == [h["epoch"] for h in history]
    for row, expected in zip(rows, history, strict=True):
        for column in ("train_loss", "val_loss", "val_accuracy", "lr"):
            assert row[column] == expected[column], column
    for timing in rd.read_ranks(run):  # monitor.timing's per-rank times, beside the curves
        (row,) = [r for r in rows if r["epoch"] == timing["epoch"]]
        assert row[f"ranks/{timing['rank']}/epoch_s"] == timing["epoch_s"]
    summary = {
        u.key or "/".join(u.nested_key): json.loads(u.value_json)
        for s in wandb_records(run, "summary")
        for u in s.update
    }
    assert summary["test_accuracy"] == metrics["test_accuracy"]
    pictures = [r for r in offline_history(run / WANDB_FILES, run_id) if "plots/curves/_type" in r]
    assert len(pictures) == 1 and pictures[0]["plots/curves/_type"] == "image-file"
    assert "epoch" not in pictures[0]  # a row of its own: a resumed run counts no epoch in it
    assert (run / "wandb.json").exists() and rd.WANDB in rd.RUN_FILES


def test_without_wandb_the_error_names_the_extra(make_config, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    cfg = make_config("tracking.wandb=p", f"training.path={tmp_path}/run")
    with pytest.raises(qg.ConfigError, match=r"the 'wandb' extra: pip install"):
        train(cfg)
