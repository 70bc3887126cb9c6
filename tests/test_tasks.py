"""Tasks: regression, binary, node-level and several at once, in one process and two; their
columns, standardised targets, predictions and pictures, early stopping on their metrics, and
the errors a wrong task gets."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import ROOT, assert_refused, run_main, run_ranks, train, write_config
from sklearn import metrics as skm
from test_early_stopping import replayed, replayed_stop

import QuantumGravPy as qg
from QuantumGravPy.config import history_columns
from QuantumGravPy.tasks.base import KINDS

# Three tasks on the embedded causal sets: the dimension as a class and as a number, and each
# element's time coordinate.
THREE = (
    "tasks=[{name: dim, target: y}, "
    "{name: d, type: regression, target: dimension, weight: 0.5, "
    "metrics: [mse, rmse, mae, r2, max_error]}, "
    "{name: time, type: regression, level: node}]",
)
# Rings against paths, as a binary task with every binary metric.
RINGS = (
    "data.dataset=user_data.ring_graphs",
    "data.dataset_kwargs={num_graphs: 60}",
    "tasks=[{name: ring, type: binary, target: y, "
    "metrics: [accuracy, f1, precision, recall, auroc, average_precision, confusion_matrix]}]",
)
F1_STOP = (
    "early_stopping.metric=val_ring_f1",
    "early_stopping.mode=max",
    "early_stopping.patience=2",
    "training.num_epochs=12",
    "training.optimizer.kwargs={lr: 0.02}",
)


def columns_of(history):
    every_run = ("epoch", "lr", "epoch_seconds", "grad_norm_mean", "grad_norm_max", "skipped_steps")
    return [k for k in history[0] if k not in every_run]


def test_the_shipped_three_task_config_trains_with_its_columns_predictions_and_pictures(
    drawn, tmp_path, data_root, capsys
):
    cfg = qg.load_config(
        ROOT / "configs" / "multitask.yaml",
        [
            f"data.root={data_root}",
            "data.num_graphs=160",
            "data.num_points=[16, 32]",
            # read-outs that learn the regressions within 4 epochs of these small sets
            "model={hidden_channels: 16, num_layers: 2, head_channels: [16], "
            "pooling: [mean, max, scaled_add]}",
            f"training.path={tmp_path / 'run'}",
            "training.device=cpu",
            "training.num_epochs=4",
            "training.lr_scheduler=null",
            "log_level=WARNING",
        ],
    )
    trainer, history, metrics = train(cfg)
    run = cfg.run_dir
    assert sorted(columns_of(history)) == sorted(history_columns(cfg))
    assert "val_dim_f1_macro" in history[0] and "val_accuracy" not in history[0]  # no unprefixed
    for row in history:  # the total is the weighted sum of the task losses
        total = row["val_dim_loss"] + 0.5 * row["val_d_loss"] + row["val_time_loss"]
        assert row["val_loss"] == pytest.approx(total)
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert history[-1]["val_time_r2"] > 0.2 and history[-1]["val_d_r2"] > 0.2  # it learns

    # the model has one head per task, a node head for time
    out = trainer.model(next(iter(trainer.prepare_dataloaders()[2])))
    assert set(out) == {"dim", "d", "time"} and out["time"].shape[1] == 1

    # standardisation: the training split's mean and spread, kept in the checkpoint
    train_split = trainer.prepare_dataloaders()[0].dataset
    dims = torch.cat([g.dimension for g in train_split]).double()
    scaling = qg.load_checkpoint(run / "checkpoints" / "best.pt")["target_scaling"]
    assert scaling["dim"] is None and scaling["d"]["mean"] == pytest.approx([dims.mean().item()])
    assert scaling["d"]["std"] == pytest.approx([dims.std(unbiased=False).item()])

    # test predictions in the targets' units, in the test set's order; metrics = scikit-learn's
    kept = np.load(run / "test_predictions.npz")
    assert set(np.unique(kept["d.true"])) <= {2.0, 3.0, 4.0}
    true, predicted = kept["d.true"].ravel(), kept["d.predicted"].ravel()
    assert metrics["test_d_mse"] == pytest.approx(skm.mean_squared_error(true, predicted))
    assert metrics["test_d_r2"] == pytest.approx(skm.r2_score(true, predicted))
    assert metrics["test_d_max_error"] == pytest.approx(skm.max_error(true, predicted))
    test_set = trainer.prepare_dataloaders()[2].dataset
    times = torch.cat([g.time for g in test_set]).numpy()
    assert np.array_equal(kept["time.true"].ravel(), times)  # every node once, in order
    assert metrics["test_time_mae"] == pytest.approx(
        skm.mean_absolute_error(times, kept["time.predicted"].ravel())
    )
    right = kept["dim.predicted"].argmax(1) == kept["dim.true"]
    assert metrics["test_dim_accuracy"] == pytest.approx(right.mean())
    matrix = np.array(metrics["test_dim_confusion_matrix"])
    assert matrix.sum() == len(test_set)
    for name in ("confusion_matrix_dim", "regression_d", "regression_time", "curves"):
        assert (run / f"{name}.png").read_bytes()[:4] == b"\x89PNG", name
    # each regression picture: predicted against true, and the residuals, of every test row
    for name in ("d", "time"):
        scatter, residuals = drawn.figure(f"regression_{name}.png").axes
        true, predicted = kept[f"{name}.true"].ravel(), kept[f"{name}.predicted"].ravel()
        assert np.allclose(scatter.collections[0].get_offsets(), np.c_[true, predicted])
        assert np.allclose(residuals.collections[0].get_offsets(), np.c_[true, predicted - true])
    confusion = drawn.figure("confusion_matrix_dim.png").axes[0]
    assert np.array_equal(confusion.images[0].get_array(), matrix)

    # qg test evaluates the checkpoint with its own scaling and gives the same numbers
    path = write_config(cfg, run.parent / "three.yaml")
    result = run_main(capsys, "test", path, "--checkpoint", run / "checkpoints" / "best.pt")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["test_d_mse"] == pytest.approx(metrics["test_d_mse"])


def test_a_single_regression_task_has_unprefixed_columns_and_original_units(make_config):
    cfg = make_config(
        "tasks=[{name: d, type: regression, target: dimension}]",
        "early_stopping.metric=val_r2",
        "early_stopping.mode=max",
        "training.num_epochs=3",
    )
    _, history, metrics = train(cfg)
    assert {"val_d_mse", "val_mse", "val_r2", "train_loss"} <= set(history[0])
    assert "train_accuracy" not in history[0]
    assert metrics["test_mse"] == metrics["test_d_mse"]
    # the loss is on standardised targets, the metric in the original units
    assert history[-1]["val_loss"] != pytest.approx(history[-1]["val_mse"])


def test_a_binary_task_scores_like_scikit_learn_and_draws_its_roc(make_config, drawn):
    cfg = make_config(*RINGS, "training.num_epochs=4", "training.plots=true")
    _, history, metrics = train(cfg)
    assert {"val_f1", "val_ring_auroc", "train_ring_accuracy", "train_accuracy"} <= set(history[0])
    kept = np.load(cfg.run_dir / "test_predictions.npz")
    true, p = kept["ring.true"], kept["ring.predicted"]
    assert metrics["test_ring_auroc"] == pytest.approx(skm.roc_auc_score(true, p))
    assert metrics["test_f1"] == pytest.approx(skm.f1_score(true, p > 0.5))
    assert metrics["test_average_precision"] == pytest.approx(skm.average_precision_score(true, p))
    assert metrics["test_confusion_matrix"] == skm.confusion_matrix(true, p > 0.5).tolist()
    # the ROC drawn is scikit-learn's curve (every threshold), titled with the test AUROC
    roc = drawn.figure("roc.png").axes[0]
    fpr, tpr, _ = skm.roc_curve(true, p, drop_intermediate=False)
    curve = roc.lines[0]
    assert np.allclose(curve.get_xdata(), fpr) and np.allclose(curve.get_ydata(), tpr)
    assert roc.get_title() == f"test set: AUROC {metrics['test_ring_auroc']:.4f}"
    confusion = drawn.figure("confusion_matrix.png").axes[0]
    assert np.array_equal(confusion.images[0].get_array(), metrics["test_confusion_matrix"])


def train_tasks(rank, world_size, configs):
    results = []
    for config in configs:
        trainer = qg.TrainerDDP(rank, config)
        train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
        history = trainer.run_training(train_loader, val_loader)
        test = trainer.run_test(test_loader)
        # the final weights, evaluated in one process, must give the last row's columns
        results.append((history, test, trainer.stopped_early, trainer.model.state_dict()))
        trainer.close()
    return results


@pytest.mark.timeout(180)
def test_two_processes_train_three_tasks_and_stop_on_a_binary_f1(make_config, tmp_path):
    three = make_config(*THREE, "training.num_epochs=3", "validation.mode=sharded")
    rings = make_config(*RINGS, *F1_STOP, f"training.path={tmp_path / 'rings'}")
    both = make_config(
        *RINGS,
        *F1_STOP[2:],
        "early_stopping.metric=[val_ring_auroc, val_loss]",
        "early_stopping.mode=max",
        "early_stopping.combine=all",
        f"training.path={tmp_path / 'both'}",
    )
    ranks = run_ranks(2, train_tasks, [three, rings, both])
    assert [r[:3] for r in ranks[0]] == [r[:3] for r in ranks[1]]  # the ranks agree
    (history, test, _, weights), (f1_history, _, f1_stopped, _), (two, _, two_stopped, _) = ranks[0]
    assert sorted(columns_of(history)) == sorted(history_columns(three))
    assert (
        math.isfinite(test["test_time_r2"]) and history[-1]["train_loss"] < history[0]["train_loss"]
    )
    # each rank tested its shard; the run's test predictions name every test graph once
    _, _, test_split = qg.split_dataset(
        list(range(three.data.num_graphs)), three.data.split, three.data.seed
    )
    kept = qg.runs.layout.read_predictions(three.run_dir)
    for task in kept.values():
        assert sorted(set(task["index"].tolist())) == sorted(test_split)
        assert set(task["source"]) == {"generated"}

    # the last epoch's validation columns are those of its weights, evaluated in one process
    alone = qg.Trainer(three)
    alone.model.load_state_dict(weights)
    expected = alone.validator.evaluate(alone.model, alone.prepare_dataloaders()[1])
    assert expected == pytest.approx({k: history[-1][k] for k in expected}, rel=1e-5)

    expected_stop = replayed_stop(f1_history, ["val_ring_f1"], "any", patience=2)
    assert f1_stopped == (expected_stop is not None)
    assert f1_history[-1]["epoch"] == (expected_stop or 12)
    expected_stop = replayed_stop(two, ["val_ring_auroc", "val_loss"], "all", patience=2)
    assert two_stopped == (expected_stop is not None)
    assert two[-1]["epoch"] == (expected_stop or 12)


def test_one_process_stops_on_a_binary_f1(make_config):
    trainer, history, _ = train(make_config(*RINGS, *F1_STOP))
    expected = replayed_stop(history, ["val_ring_f1"], "any", patience=2)
    assert trainer.stopped_early == (expected is not None)
    assert history[-1]["epoch"] == (expected or 12)
    # best.pt: the best F1's epoch, of those that tie it the one with the lowest loss before
    assert trainer.early_stopping.best_epoch == replayed(history, ["val_ring_f1"], "any", 2)[1]


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["tasks=[{name: a, type: ranking}]"],
            f"tasks[0].type: unknown 'ranking' (known: {', '.join(k.name for k in KINDS)})",
        ),
        (["tasks=[{name: a, metrics: [accurcy]}]"], "tasks[0].metrics: 'accurcy' is not a metric"),
        (
            ["tasks=[{name: a, type: regression, metrics: [f1_macro]}]"],
            "tasks[0].metrics: 'f1_macro' is a metric of classification tasks, not of a "
            "regression task like 'a' (choose from mse, rmse, mae, r2, max_error)",
        ),
        (["tasks=[{name: a}, {name: a}]"], "tasks[1].name: 'a' names two tasks"),
        (["tasks=[{name: a-b}]"], "tasks[0].name: expected letters, digits and underscores"),
        (
            ["tasks=[{name: a, type: binary, num_outputs: 2}]"],
            "tasks[0].num_outputs: a binary task has one output",
        ),
        (["tasks=[{name: a}]", "criterion=torch.nn.NLLLoss"], "criterion: only for configs"),
        (
            ["tasks=[{name: a, type: regression}]", "early_stopping.metric=val_accuracy"],
            "early_stopping.metric: 'val_accuracy' is not a column of this config's history.csv"
            " (choose from val_loss, val_a_mse, val_a_mae, val_a_r2, val_mse, val_mae, val_r2,",
        ),
        (
            ["tasks=[{name: a, type: regression}]", "training.sampler=class_balanced"],
            "training.sampler: class_balanced balances the classes of a graph-level",
        ),
    ],
)
def test_a_wrong_task_is_refused_when_the_config_loads(make_config, overrides, message):
    with pytest.raises(qg.ConfigError) as info:
        make_config(*overrides)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "task, message",
    [
        ("{name: a, target: charge}", "tasks[0].target: the data has no tensor attribute 'charge'"),
        (
            "{name: a, target: time}",
            "tasks[0].target: task 'a' is a graph-level classification task, so 'time' needs one",
        ),
        ("{name: a, target: dimension}", "task 'a' classifies, so 'dimension' must hold integer"),
        ("{name: a, target: y, level: node}", "task 'a' is node-level, so 'y' needs one row per"),
    ],
)
def test_a_target_the_data_lacks_is_named(make_config, task, message):
    with pytest.raises(qg.ConfigError) as info:
        qg.Trainer(make_config(f"tasks=[{task}]"))
    assert message in str(info.value)


def test_the_command_line_names_a_missing_target_without_a_traceback(make_config, capsys):
    cfg = make_config("tasks=[{name: a, type: regression, target: curvature}]")
    path = write_config(cfg, cfg.run_dir.parent / "bad.yaml")
    result = run_main(capsys, "train", path)
    assert_refused(result, "tasks[0].target: the data has no tensor attribute 'curvature'")
    assert not cfg.run_dir.exists()  # nothing written


@pytest.mark.parametrize(
    "model, message",
    [
        ("user_models.OneTensor", "returned one tensor, but the config has 3 tasks"),
        ("user_models.MissingTime", "returned no output for task 'time'"),
        ("user_models.TimePerGraph", "shape [16, 1] for task 'time', expected ["),
    ],
)
def test_a_custom_model_missing_a_task_or_its_shape_is_named(make_config, model, message):
    trainer = qg.Trainer(make_config(*THREE, f"model={{type: {model}}}"))
    batch = next(iter(trainer.prepare_dataloaders()[0]))
    with pytest.raises(qg.ConfigError) as info:
        trainer.select(trainer.model(batch), batch)
    assert message in str(info.value) and f"model.type: {model}" in str(info.value)


def test_class_balancing_samplers_balance_the_first_classification_task(make_config):
    """Paths are 1 in 10 graphs; a balanced epoch draws about as many of each ``kind``."""
    for sampler in ("class_balanced", "progressive"):
        trainer = qg.Trainer(
            make_config(
                "data.dataset=user_data.imbalanced_kinds",
                "tasks=[{name: size, type: regression, target: weight}, "
                "{name: kind, type: binary}]",
                f"training.sampler={sampler}",
                "training.sampler_kwargs={num_samples: 2000"
                + (", epochs_to_balance: 1}" if sampler == "progressive" else "}"),
            )
        )
        loader = trainer.prepare_dataloaders()[0]
        loader.sampler.set_epoch(3)
        kinds = torch.cat([g.kind for g in loader.dataset])
        drawn = kinds[list(loader.sampler)].float().mean().item()
        assert kinds.float().mean() < 0.15 and 0.45 < drawn < 0.55, sampler


def test_a_resumed_three_task_run_equals_an_uninterrupted_one(make_config, tmp_path):
    """The standardisation comes back from the checkpoint, with everything else."""

    def run(path, epochs, **kwargs):
        cfg = make_config(
            *THREE, "data.num_graphs=60", f"training.num_epochs={epochs}", f"training.path={path}"
        )
        _, history, metrics = train(cfg, **kwargs)
        return [{k: v for k, v in row.items() if k != "epoch_seconds"} for row in history], metrics

    whole, whole_test = run(tmp_path / "whole", 4)
    run(tmp_path / "part", 2)
    resumed, resumed_test = run(tmp_path / "part", 4, resume=True)
    assert resumed == whole and resumed_test == whole_test


def test_classes_of_data_not_held_in_memory_are_asked_for_not_counted(make_config):
    on_demand = ("data.dataset=user_data.rings_on_demand",)
    with pytest.raises(qg.ConfigError, match="model.num_classes: the data is not held in memory"):
        qg.Trainer(make_config(*on_demand))
    with pytest.raises(qg.ConfigError, match="tasks\\[0\\].num_outputs: the data is not held"):
        qg.Trainer(make_config(*on_demand, "tasks=[{name: ring, target: y}]"))
    trainer = qg.Trainer(make_config(*on_demand, "model.num_classes=2"))
    assert trainer.tasks[0].num_outputs == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_classes_map_labels_on_a_gpu_without_waiting_for_it():
    from QuantumGravPy.tasks.classification import class_indices

    labels = torch.tensor([2, 1, 2], device="cuda")
    assert class_indices(labels, (1, 2), task="kind").tolist() == [1, 0, 1]
    # A label outside tasks[].classes stops the device with an assert, which leaves the CUDA
    # context of its process unusable: it runs in a process of its own, not in the tests'.
    stopped = subprocess.run(
        [sys.executable, "-c", OUTSIDE_THE_CLASSES], capture_output=True, text=True, timeout=120
    )
    assert stopped.returncode != 0 and "device-side assert" in stopped.stderr, stopped.stderr


OUTSIDE_THE_CLASSES = """
import torch
from QuantumGravPy.tasks.classification import class_indices
class_indices(torch.tensor([3], device="cuda"), (1, 2), task="kind")
torch.cuda.synchronize()
"""


def test_a_losss_own_arguments_weigh_the_training_and_bad_ones_are_named(make_config, capsys):
    """tasks[i].loss_kwargs: a binary task's pos_weight (a list, handed over as a tensor)
    makes the training loss torch's BCEWithLogitsLoss(pos_weight) of the outputs; a
    classification task's class weights too; an argument the loss does not take, or a weight
    of the wrong length, is one line naming the key."""
    weighted = make_config(
        *RINGS[:-1],
        "tasks=[{name: ring, type: binary, target: y, loss_kwargs: {pos_weight: [4.0]}}]",
        "training.num_epochs=1",
    )
    trainer = qg.Trainer(weighted)
    (task,) = trainer.tasks
    train_loader, _, _ = trainer.prepare_dataloaders()
    batch = next(iter(train_loader))
    outputs = trainer.model(batch)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(
        outputs[:, 0], batch.y.float(), pos_weight=torch.tensor([4.0])
    )
    torch.testing.assert_close(task.loss(outputs, batch), expected)
    plain = torch.nn.functional.binary_cross_entropy_with_logits(outputs[:, 0], batch.y.float())
    assert not torch.allclose(expected, plain)  # the weight changes the loss
    trainer.close()
    classes = make_config(
        *RINGS[:-1],
        "tasks=[{name: ring, target: y, loss_kwargs: {weight: [1.0, 3.0], label_smoothing: 0.1}}]",
        "training.num_epochs=1",
    )
    _, history, _ = train(classes)
    assert math.isfinite(history[0]["train_loss"])
    path = write_config(classes, classes.run_dir.parent / "weighted.yaml")
    for kwargs, fragment in [
        ("{pos_weight: [4.0]}", "got an unexpected keyword argument 'pos_weight'"),
        ("{weight: [1.0, 2.0, 3.0]}", "weight tensor should be defined"),
    ]:
        task = f"tasks=[{{name: ring, target: y, loss_kwargs: {kwargs}}}]"
        elsewhere = f"training.path={classes.run_dir.parent / 'refused'}"
        refused = run_main(capsys, "train", path, task, elsewhere)
        assert_refused(refused, "tasks[0].loss", fragment)
        assert not (classes.run_dir.parent / "refused").exists()


CUDA = pytest.param(
    "cuda",
    marks=[
        pytest.mark.gpu,
        pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    ],
)


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("loss", ["torch.nn.functional.cross_entropy", "torch.nn.CrossEntropyLoss"])
def test_a_losss_weights_go_where_the_outputs_are(device, loss):
    """loss_kwargs of a loss function or class: a list of numbers becomes a tensor on the
    outputs' device and in their float type (float64 in a float64 run), as torch's own loss
    needs."""
    from QuantumGravPy.config import TaskConfig
    from QuantumGravPy.training.tasks.task import make_loss

    config = TaskConfig(name="c", loss=loss, loss_kwargs={"weight": [1.0, 3.0]})
    made = make_loss(config, "tasks[0]")
    for dtype in (torch.float64, torch.float32):
        outputs = torch.randn(5, 2, dtype=dtype, device=device)
        target = torch.tensor([0, 1, 1, 0, 1], device=device)
        weight = torch.tensor([1.0, 3.0], dtype=dtype, device=device)
        expected = torch.nn.functional.cross_entropy(outputs, target, weight=weight)
        torch.testing.assert_close(made(outputs, target), expected)
