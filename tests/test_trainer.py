"""The base Trainer: its loop, history, early stopping, checkpoints and the run directory."""

import csv
import json
import pickle

import pytest
import torch
from conftest import train, write_config

import QuantumGravPy as qg
from QuantumGravPy.data import make_loader
from QuantumGravPy.runs.checkpoint import save_checkpoint
from QuantumGravPy.training import TrainingDivergedError

HISTORY_KEYS = {"epoch", "train_loss", "val_loss", "val_accuracy", "lr", "epoch_seconds"}


def test_a_run_leaves_history_summary_config_log_and_checkpoints(make_config):
    cfg = make_config("training.num_epochs=4", "training.checkpoint_every=2", "log_level=INFO")
    trainer, history, metrics = train(cfg)
    run = cfg.run_dir
    assert [row["epoch"] for row in history] == [1, 2, 3, 4] and trainer.epoch == 4
    assert all(HISTORY_KEYS <= set(row) for row in history)
    assert all(row["epoch_seconds"] > 0 for row in history)
    with open(run / "history.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["val_loss"]) for r in rows] == pytest.approx([r["val_loss"] for r in history])
    summary = json.loads((run / "summary.json").read_text())
    assert {"test_loss", "test_accuracy", "test_f1_macro", "test_y_accuracy"} <= set(metrics)
    assert metrics["test_confusion_matrix"] == metrics["test_y_confusion_matrix"]
    assert summary == {
        **metrics,
        "best_epoch": trainer.early_stopping.best_epoch,
        "epochs_run": 4,
        "stopped_early": False,
        "world_size": 1,
    }
    assert qg.load_config(run / "config.yaml") == cfg
    assert "epoch 4/4" in (run / "train.log").read_text()
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["best.pt", "epoch_0002.pt", "epoch_0004.pt", "last.pt"]
    last = qg.load_checkpoint(run / "checkpoints" / "last.pt")
    assert last["epoch"] == 4 and len(last["history"]) == 4
    for key, value in trainer.model.state_dict().items():
        assert torch.equal(last["model"][key], value)
    best = qg.load_checkpoint(run / "checkpoints" / "best.pt")
    assert best["epoch"] == summary["best_epoch"]


def test_run_test_evaluates_the_best_checkpoint_not_the_last_model(make_config):
    cfg = make_config("training.num_epochs=5", "training.optimizer.kwargs={lr: 0.05}")
    trainer = qg.Trainer(cfg)
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    best = qg.load_checkpoint(cfg.run_dir / "checkpoints" / "best.pt")
    model = qg.GNNModel.from_config(cfg.model, trainer.in_channels, trainer.tasks[0].num_outputs)
    model.load_state_dict(best["model"])
    tester = qg.Tester(trainer.tasks, "cpu")
    expected = tester.evaluate(model, test_loader)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    assert trainer.run_test(test_loader) == expected
    after = trainer.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # trainer's model untouched


def test_early_stopping_ends_the_loop_and_is_recorded(make_config):
    # lr 0: the validation loss never improves after the first epoch
    cfg = make_config(
        "training.num_epochs=20",
        "training.optimizer.kwargs={lr: 0.0}",
        "early_stopping.patience=2",
        "early_stopping.grace_period=4",
    )
    _, history, _ = train(cfg)
    assert len(history) == 5  # the grace period outlasts the patience
    summary = json.loads((cfg.run_dir / "summary.json").read_text())
    assert summary["stopped_early"] and summary["epochs_run"] == 5 and summary["best_epoch"] == 1


def test_disabled_early_stopping_runs_every_epoch(make_config):
    cfg = make_config(
        "training.num_epochs=4",
        "training.optimizer.kwargs={lr: 0.0}",
        "early_stopping.patience=1",
        "early_stopping.enabled=false",
    )
    _, history, _ = train(cfg)
    assert len(history) == 4


def test_same_config_same_history(make_config, tmp_path):
    a = train(make_config(f"training.path={tmp_path / 'a'}"))[1]
    b = train(make_config(f"training.path={tmp_path / 'b'}"))[1]
    strip = [{k: v for k, v in row.items() if k != "epoch_seconds"} for row in a]
    assert strip == [{k: v for k, v in row.items() if k != "epoch_seconds"} for row in b]


def test_lr_scheduler_is_stepped_once_per_epoch(make_config):
    cfg = make_config(
        "training.lr_scheduler={type: torch.optim.lr_scheduler.StepLR, kwargs: {step_size: 1, gamma: 0.5}}",
        "training.optimizer.kwargs={lr: 0.008}",
    )
    _, history, _ = train(cfg)
    assert [row["lr"] for row in history] == pytest.approx([0.008, 0.004, 0.002])


def one_cycle(extra: str = "") -> str:
    return (
        "training.lr_scheduler={type: torch.optim.lr_scheduler.OneCycleLR, "
        f"kwargs: {{max_lr: 0.01{extra}}}, interval: step}}"
    )


def test_a_per_step_schedule_is_stepped_each_optimizer_step_and_resumes(make_config, tmp_path):
    """interval: step: OneCycleLR over the run's optimizer steps (its length left out: 4 epochs
    of 6 steps, 84 training graphs in batches of 16), each epoch's rate torch's own schedule
    after the steps before it; a run stopped after 2 epochs and resumed equals the whole one.
    ReduceLROnPlateau, a schedule of epochs' metrics, is refused per step."""
    cfg = make_config(one_cycle(), "training.num_epochs=4", f"training.path={tmp_path / 'a'}")
    _, history, _ = train(cfg)
    reference = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(reference, max_lr=0.01, total_steps=24)
    expected = []
    for _ in range(4):
        expected.append(reference.param_groups[0]["lr"])
        for _ in range(6):
            reference.step()
            schedule.step()
    assert [row["lr"] for row in history] == pytest.approx(expected, rel=1e-12)

    def run(path, epochs, **kwargs):  # its length given: the same schedule when resumed longer
        config = make_config(
            one_cycle(", total_steps: 24"), f"training.num_epochs={epochs}",
            f"training.path={path}", "early_stopping.enabled=false",
        )  # fmt: skip
        _, rows, _ = train(config, **kwargs)
        return [{k: v for k, v in row.items() if k != "epoch_seconds"} for row in rows]

    whole = run(tmp_path / "whole", 4)
    run(tmp_path / "part", 2)
    assert run(tmp_path / "part", 4, resume=True) == whole
    # its length left out (built when training starts): stopped after epoch 2, resumed
    stop = (
        f"training.callbacks=[{{type: user_data.StopOnce, kwargs: {{marker: '{tmp_path / 'm'}'}}}}]"
    )
    stopped = make_config(
        one_cycle(), "training.num_epochs=4", f"training.path={tmp_path / 's'}", stop
    )
    with pytest.raises(qg.RunError, match="stopped after epoch 2"):
        train(stopped)
    _, resumed, _ = train(stopped, resume=True)
    assert [row["lr"] for row in resumed] == [row["lr"] for row in history]
    assert [row["train_loss"] for row in resumed] == [row["train_loss"] for row in history]
    with pytest.raises(qg.ConfigError, match="interval: step, but ReduceLROnPlateau"):
        qg.Trainer(make_config(PLATEAU[:-1] + ", interval: step}", "training.num_epochs=1"))


PLATEAU = (
    "training.lr_scheduler={type: torch.optim.lr_scheduler.ReduceLROnPlateau, "
    "kwargs: {patience: 0, factor: 0.5, threshold: 0}}"
)


@pytest.mark.parametrize("metric, mode", [("val_loss", "min"), ("val_accuracy", "max")])
def test_reduce_on_plateau_cuts_the_rate_when_the_stopping_metric_stops_improving(
    make_config, metric, mode
):
    """Patience 0: the rate halves after each epoch whose metric is not the best so far (in the
    metric's own direction), and only then."""
    cfg = make_config(
        PLATEAU,
        "model.pooling=[mean, max, scaled_add]",  # (a metric that stops improving within 6 epochs)
        "training.optimizer.kwargs={lr: 0.05}",
        "training.num_epochs=6",
        f"early_stopping.metric={metric}",
        f"early_stopping.mode={mode}",
    )
    _, history, _ = train(cfg)
    better = min if mode == "min" else max
    expected, best = [0.05], history[0][metric]
    for row in history[1:-1]:
        improved = better(row[metric], best) == row[metric] and row[metric] != best
        best = better(best, row[metric])
        expected.append(expected[-1] * (1 if improved else 0.5))
    assert [row["lr"] for row in history[1:]] == pytest.approx(expected)
    assert len(set(expected)) > 1  # the metric did stop improving: the rate was cut


def test_a_plateau_scheduler_against_the_metrics_direction_is_refused(make_config, capsys):
    cfg = make_config(
        "training.lr_scheduler={type: torch.optim.lr_scheduler.ReduceLROnPlateau, "
        "kwargs: {mode: min}}",
        "early_stopping.metric=val_accuracy",
        "early_stopping.mode=max",
    )
    with pytest.raises(qg.ConfigError, match="training.lr_scheduler.kwargs.mode: 'min', but the "
                       "scheduler follows early_stopping.metric val_accuracy, which improves "
                       "towards 'max'"):  # fmt: skip
        qg.Trainer(cfg)
    assert not cfg.run_dir.exists()


def test_a_run_directory_holding_a_run_is_refused_unless_overwrite(make_config):
    cfg = make_config("training.num_epochs=1")
    train(cfg)
    history = (cfg.run_dir / "history.csv").read_text()
    (cfg.run_dir / "notes.txt").write_text("mine")
    with pytest.raises(qg.RunDirectoryError, match=str(cfg.run_dir)):
        train(cfg)
    assert (cfg.run_dir / "history.csv").read_text() == history
    cfg2 = make_config("training.num_epochs=2")
    _, rows, _ = train(cfg2, overwrite=True)
    assert len(rows) == 2 and len((cfg.run_dir / "history.csv").read_text().splitlines()) == 3
    assert (cfg.run_dir / "notes.txt").read_text() == "mine"  # not ours to delete


def test_criterion_may_be_a_function_of_outputs_and_batch(make_config):
    _, history, _ = train(make_config("criterion=user_data.mean_cross_entropy"))
    assert history[-1]["train_loss"] < history[0]["train_loss"]


def test_a_diverging_loss_stops_training_with_a_clear_error(make_config):
    trainer = qg.Trainer(make_config("criterion=user_data.nan_loss"))
    loaders = trainer.prepare_dataloaders()
    with pytest.raises(TrainingDivergedError, match=r"step 1 \(epoch 1\).*training loss is nan"):
        trainer.run_training(loaders[0], loaders[1])
    trainer.close()


def test_trains_on_a_user_dataset(make_config):
    cfg = make_config(
        "data.dataset=user_data.ring_graphs",
        "data.dataset_kwargs={num_graphs: 60}",
        "training.num_epochs=2",
    )
    trainer, _, metrics = train(cfg)
    # rings and paths apart (chance 1/2): the path's two ends of degree one give it away
    assert trainer.tasks[0].num_outputs == 2 and metrics["test_accuracy"] >= 0.9


def test_validator_weights_by_graphs_not_by_batches(make_config):
    trainer = qg.Trainer(make_config())
    _, val_loader, _ = trainer.prepare_dataloaders()
    dataset = val_loader.dataset
    by_one = trainer.validator.evaluate(trainer.model, make_loader(dataset, batch_size=1))
    by_seven = trainer.validator.evaluate(trainer.model, make_loader(dataset, batch_size=7))
    assert by_seven["val_loss"] == pytest.approx(by_one["val_loss"], rel=1e-6)
    assert by_seven["val_accuracy"] == by_one["val_accuracy"]
    sums = trainer.validator.accumulate(trainer.model, make_loader(dataset, batch_size=7))
    assert sums.sums[0, 1] == len(dataset)  # rows of the one task: every graph once


# --- checkpoint files --------------------------------------------------------------------------


def test_missing_truncated_and_foreign_checkpoints_are_refused(tmp_path):
    with pytest.raises(qg.CheckpointError, match="checkpoint not found: .*none.pt"):
        qg.load_checkpoint(tmp_path / "none.pt")
    good = tmp_path / "good.pt"
    save_checkpoint({"model": {"w": torch.ones(2)}, "epoch": 1}, good)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:100])
    with pytest.raises(qg.CheckpointError, match="truncated.pt: corrupt or truncated"):
        qg.load_checkpoint(truncated)
    garbage = tmp_path / "garbage.pt"
    garbage.write_text("not a checkpoint")
    with pytest.raises(qg.CheckpointError, match="garbage.pt"):
        qg.load_checkpoint(garbage)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.ones(1)}, foreign)
    with pytest.raises(qg.CheckpointError, match="foreign.pt: not a QuantumGravPy checkpoint"):
        qg.load_checkpoint(foreign)


class _Exploit:
    def __reduce__(self):
        return (print, ("code ran",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_a_checkpoint_that_would_run_code_is_refused(tmp_path, capsys):
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "epoch": 0, "payload": _Exploit()}, path)
    with pytest.raises(qg.CheckpointError, match="evil.pt: refused"):
        qg.load_checkpoint(path)
    assert "code ran" not in capsys.readouterr().out
    with open(tmp_path / "plain.pkl", "wb") as f:
        pickle.dump({"model": {}, "epoch": 0}, f)
    with pytest.raises(qg.CheckpointError):
        qg.load_checkpoint(tmp_path / "plain.pkl")


def test_prefixed_state_dicts_load_into_a_bare_model(tmp_path):
    """A state dict saved from a wrapped model (DDP's module., torch.compile's _orig_mod.)
    loads into the bare model; a model whose own attribute is called module keeps its names."""
    from QuantumGravPy.runs import load_model_state

    model = torch.nn.Linear(2, 2)
    prefixed = {f"module._orig_mod.{k}": v for k, v in model.state_dict().items()}
    save_checkpoint({"model": prefixed, "epoch": 3}, tmp_path / "ddp.pt")
    state = qg.load_checkpoint(tmp_path / "ddp.pt")
    assert state["epoch"] == 3
    bare = torch.nn.Linear(2, 2)
    load_model_state(bare, state["model"], tmp_path / "ddp.pt")
    assert torch.equal(bare.weight, model.weight)
    adapter = torch.nn.Module()
    adapter.module = torch.nn.Linear(2, 2)
    own = {f"module.{k}": v for k, v in model.state_dict().items()}
    load_model_state(adapter, own, tmp_path / "own.pt")
    assert torch.equal(adapter.module.weight, model.weight)


def test_an_interrupted_checkpoint_write_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    save_checkpoint({"model": {"w": torch.zeros(1)}, "epoch": 1}, path)

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError):
        save_checkpoint({"model": {"w": torch.ones(1)}, "epoch": 2}, path)
    assert qg.load_checkpoint(path)["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temporary left behind


def test_declared_input_width_must_match_the_data(make_config):
    with pytest.raises(qg.ConfigError, match="model.in_channels: the data has 6 node features"):
        qg.Trainer(make_config("model.in_channels=4"))


def test_configured_samplers_are_used_in_one_process(make_config):
    for spec, expected in [
        ("class_balanced", "DistributedClassBalancedSampler"),
        ("progressive", "ProgressiveClassBalancedSampler"),
        ("weighted", "DistributedWeightedRandomSampler"),
        # wrapped in one process too, so its order is keyed by (seed, epoch) as under DDP
        ("user_data.ReverseSampler", "DistributedSamplerWrapper"),
    ]:
        cfg = make_config(
            "data.dataset=user_data.imbalanced_rings",
            "data.dataset_kwargs={num_graphs: 100}",
            f"training.sampler={spec}",
            "training.num_epochs=1",
        )
        trainer, history, _ = train(cfg, overwrite=True)
        sampler = trainer.prepare_dataloaders()[0].sampler
        assert type(sampler).__name__ == expected and len(history) == 1
        if spec == "user_data.ReverseSampler":
            assert list(sampler) == list(range(len(sampler) - 1, -1, -1))


def test_sampler_kwargs_mistakes_are_config_errors(make_config):
    trainer = qg.Trainer(
        make_config("training.sampler=class_balanced", "training.sampler_kwargs={bogus: 1}")
    )
    with pytest.raises(qg.ConfigError, match="training.sampler_kwargs: class_balanced got an "
                       "unexpected keyword argument 'bogus' .it takes num_samples.$"):  # fmt: skip
        trainer.prepare_dataloaders()


def test_keep_best_keeps_the_k_best_epochs_checkpoints_and_no_other(make_config, tmp_path):
    """training.keep_best: 3 over 6 epochs: exactly the 3 best epochs by val_loss (ties: the
    earlier) remain as best_epoch_NNNN.pt, each holding that epoch's weights; a run stopped
    after 3 epochs and resumed keeps the same files as the whole run."""

    def run(path, epochs, **kwargs):
        config = make_config(
            "training.keep_best=3", f"training.num_epochs={epochs}", f"training.path={path}",
            "early_stopping.enabled=false", "training.optimizer.kwargs={lr: 0.05}",
        )  # fmt: skip
        _, history, _ = train(config, **kwargs)
        return config, history

    config, history = run(tmp_path / "whole", 6)
    ranked = sorted(history, key=lambda r: (r["val_loss"], r["epoch"]))
    best = sorted(r["epoch"] for r in ranked[:3])
    folder = config.run_dir / "checkpoints"
    kept = sorted(int(p.stem.removeprefix("best_epoch_")) for p in folder.glob("best_epoch_*.pt"))
    assert kept == best
    for epoch in best:  # each holds its epoch: the validation loss it had
        state = torch.load(folder / f"best_epoch_{epoch:04d}.pt", weights_only=True)
        assert state["history"][-1]["epoch"] == epoch
    run(tmp_path / "part", 3)
    resumed, _ = run(tmp_path / "part", 6, resume=True)
    assert sorted(p.name for p in (resumed.run_dir / "checkpoints").glob("best_epoch_*.pt")) == [
        f"best_epoch_{e:04d}.pt" for e in best
    ]


def recorded(path):
    import json
    from pathlib import Path

    found = {}
    for file in sorted(Path(path).parent.glob(Path(path).name + ".*")):
        found[int(file.suffix[1:])] = [json.loads(line) for line in file.read_text().splitlines()]
    return found


@pytest.mark.timeout(240)
def test_callbacks_are_told_of_each_point_of_a_run_on_the_ranks_they_ask_for(
    make_config, tmp_path, capsys
):
    """training.callbacks: a user's object hears the run start, each epoch's row, each
    checkpoint written, the end of training and the test, in that order, on the first process
    (or every one, with every_rank); a failing callback is one line naming it and its method;
    a class with none of the methods is refused when the trainer is built."""
    from conftest import assert_refused, run_main

    log = tmp_path / "calls"
    config = make_config(
        "training.num_epochs=2", "early_stopping.enabled=false",
        f"training.callbacks=[{{type: user_data.Recorder, kwargs: {{path: '{log}'}}}}]",
    )  # fmt: skip
    _, history, metrics = train(config)
    calls = recorded(log)[0]
    points = [c["point"] for c in calls]
    assert points[0] == "on_train_start" and points[-2:] == ["on_train_end", "on_test_end"]
    epochs = [c for c in calls if c["point"] == "on_epoch_end"]
    assert [(c["epoch"], c["val_loss"]) for c in epochs] == [
        (r["epoch"], r["val_loss"]) for r in history
    ]
    saved = [c["name"] for c in calls if c["point"] == "on_checkpoint"]
    assert saved.count("last.pt") == 2 and "best.pt" in saved
    assert calls[-1]["test_loss"] == metrics["test_loss"]
    # two processes: the first only, or every rank with every_rank
    for every, ranks in ((False, [0]), (True, [0, 1])):
        path = tmp_path / f"ddp-{every}"
        hooks = f"[{{type: user_data.Recorder, kwargs: {{path: '{path}', every_rank: {str(every).lower()}}}}}]"
        cfg = write_config(config, tmp_path / f"c-{every}.yaml")
        result = run_main(
            capsys, "train", cfg, "parallel.world_size=2", f"training.callbacks={hooks}",
            f"training.path={tmp_path / f'run-{every}'}",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        found = recorded(path)
        assert sorted(found) == ranks
        assert all(c["point"] != "on_checkpoint" for c in found.get(1, []))  # the writer's only
    failing = f"[{{type: user_data.Recorder, kwargs: {{path: '{log}2', fail_at: on_epoch_end}}}}]"
    result = run_main(capsys, "train", cfg, f"training.callbacks={failing}",
                      f"training.path={tmp_path / 'failing'}")  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "on_epoch_end failed on purpose" in line and "user_data.Recorder.on_epoch_end" in line
    refused = run_main(capsys, "train", cfg, "training.callbacks=[{type: user_data.NoHooks}]",
                       f"training.path={tmp_path / 'refused'}")  # fmt: skip
    assert_refused(refused, "training.callbacks[0]", "none of the methods")
