"""The count task kind (``type: count``): the model's output is the log of the expected count,
and every prediction made of it, in the metrics, the test predictions and ``qg predict``'s
table, is its exponential, never below 0. Trained from Python and from the command line on the
generated causal sets' interval sizes; targets that are no counts are refused naming the key."""

import json

import numpy as np
import pytest
import torch
from conftest import assert_refused, run_cli, run_main, write_config
from sklearn import metrics as skm
from user_data import ring_graphs

import QuantumGravPy as qg
from QuantumGravPy.config import TaskConfig
from QuantumGravPy.predict import read
from QuantumGravPy.tasks.count import LOG_RATE_LIMIT
from QuantumGravPy.training.evaluation.metrics import TaskMetrics
from QuantumGravPy.training.tasks.task import Task

METRICS = ["mae", "rmse", "mse", "poisson_deviance", "r2", "max_error"]
# 2D sprinklings with their relations as pairs, and the elements between each related pair
INTERVALS = (
    "data.kind=dimension",
    "data.dimensions=[2]",
    "data.num_graphs=60",
    "data.num_points=[16, 32]",
    "data.pairs=relations",
    "early_stopping.metric=val_mae",
    "early_stopping.mode=min",
)
COUNT = (
    "tasks=[{name: interval_size, type: count, level: edge, pairs: relations_index, "
    f"metrics: [{', '.join(METRICS)}]}}]"
)


def test_a_trained_count_task_never_predicts_below_0(make_config, capsys, tmp_path):
    cfg = make_config(*INTERVALS, COUNT, "training.num_epochs=2")
    trainer = qg.Trainer(cfg)
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    history = trainer.run_training(train_loader, val_loader)
    assert trainer.tasks[0].num_outputs == 1
    for row in history:  # every metric, for the task and unprefixed (one task)
        for name in METRICS:
            assert np.isfinite(row[f"val_interval_size_{name}"]), name
            assert row[f"val_{name}"] == row[f"val_interval_size_{name}"]
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    # the validator's predictions of every validation pair
    trainer.validator.keep_predictions = True
    seen = trainer.validator.accumulate(trainer.model, val_loader).predictions["interval_size"]
    assert seen["predicted"] and all(bool((part > 0).all()) for part in seen["predicted"])
    metrics = trainer.run_test(test_loader)
    trainer.close()

    # the tester's: expected counts, each above 0, whose errors are the metrics
    kept = np.load(cfg.run_dir / "test_predictions.npz")
    predicted = kept["interval_size.predicted"].reshape(-1)
    true = kept["interval_size.true"].reshape(-1).astype(np.float64)
    assert len(predicted) == len(true) > 100 and (predicted > 0).all()
    assert np.isfinite(predicted).all()
    assert metrics["test_mae"] == pytest.approx(skm.mean_absolute_error(true, predicted))
    assert metrics["test_poisson_deviance"] == pytest.approx(
        skm.mean_poisson_deviance(true, predicted)
    )

    # qg predict, from Python and at the command line: one row per related pair, none below 0
    out = qg.predict(cfg.run_dir)
    rows = out.edges["relations_index"]
    assert len(rows["interval_size"]) > len(predicted) and (rows["interval_size"] >= 0).all()
    assert np.array_equal(rows["interval_size_true"] % 1, np.zeros(len(rows["interval_size"])))
    written = tmp_path / "counts.npz"
    result = run_main(capsys, "predict", cfg.run_dir, "--output", written)
    assert result.returncode == 0, result.stderr
    table = read(written).edges["relations_index"]
    np.testing.assert_allclose(table["interval_size"], rows["interval_size"], rtol=1e-5)
    assert (table["interval_size"] >= 0).all()


def test_log_rates_far_below_0_are_counts_near_0_where_a_regression_goes_negative():
    outputs = torch.tensor([[-50.0], [-3.0], [0.0], [2.0], [1e4], [float("inf")]])
    target = torch.tensor([[0.0], [1.0], [1.0], [7.0], [3.0], [2.0]])
    count = Task(TaskConfig(name="n", type="count"), 1, torch.nn.PoissonNLLLoss())
    regression = Task(TaskConfig(name="n", type="regression"), 1, torch.nn.MSELoss())

    # the same outputs through each kind's path to predictions and to the metrics
    counted = count.kind.prediction_values(count.predictions(outputs))
    regressed = regression.kind.prediction_values(regression.predictions(outputs))
    assert (counted >= 0).all() and torch.isfinite(counted).all()
    assert (regressed < 0).sum() == 2  # a regression reads -50 and -3 as counts below 0
    expected = torch.tensor([-50.0, -3.0, 0.0, 2.0, LOG_RATE_LIMIT, LOG_RATE_LIMIT]).double().exp()
    torch.testing.assert_close(counted.reshape(-1), expected)
    preds, _ = count.kind.metric_inputs(outputs, target)
    assert (preds >= 0).all() and torch.isfinite(preds).all()
    assert (regression.kind.metric_inputs(outputs, target)[0] < 0).any()

    # every metric finite, on the counts the outputs stand for
    metrics = TaskMetrics("count", METRICS, 1)
    metrics.update(outputs[:4], target[:4])
    values = metrics.compute()
    assert all(np.isfinite(v) for v in values.values())
    rates = expected[:4].numpy()
    assert values["mae"] == pytest.approx(skm.mean_absolute_error(target[:4].reshape(-1), rates))


def graphs_with_count(value: float, at: int) -> list:
    """Rings and paths whose ``n``, their number of nodes, is ``value`` in graph ``at``."""
    graphs = ring_graphs(20)
    for i, graph in enumerate(graphs):
        graph.n = torch.tensor([value if i == at else float(graph.num_nodes)])
    return graphs


@pytest.mark.parametrize(
    "value, at",
    [(-1.0, 0), (2.5, 0), (-3.0, 11), (0.25, 11), (float("nan"), 11)],
    ids=["negative-first", "fraction-first", "negative-later", "fraction-later", "nan"],
)
def test_targets_that_are_no_counts_are_refused_naming_the_key(make_config, value, at):
    cfg = make_config("data.dataset=user_data.ring_graphs", "tasks=[{name: n, type: count}]")
    with pytest.raises(qg.DataError) as info:
        qg.Trainer(cfg, graphs_with_count(value, at))
    assert str(info.value) == (
        f"tasks[0].target: the count task 'n' needs whole numbers of 0 or more in 'n', "
        f"found {value}"
    )
    qg.Trainer(cfg, graphs_with_count(4.0, at)).close()  # a count there is taken


def test_a_count_of_times_is_one_line_at_the_command_line(make_config, capsys):
    cfg = make_config("tasks=[{name: t, type: count, target: time, level: node}]")
    path = write_config(cfg, cfg.run_dir.parent / "times.yaml")
    result = run_main(capsys, "train", path)
    assert_refused(result, "tasks[0].target: the count task 't' needs whole numbers of 0 or")
    with pytest.raises(qg.ConfigError, match=r"tasks\[0\].loss_kwargs.log_input: a count task"):
        make_config("tasks=[{name: n, type: count, loss_kwargs: {log_input: false}}]")


def test_qg_train_learns_a_count_task_from_the_command_line(make_config):
    cfg = make_config(*INTERVALS, COUNT, "training.num_epochs=1")
    path = write_config(cfg, cfg.run_dir.parent / "intervals.yaml")
    result = run_cli("train", str(path))
    assert result.returncode == 0, result.stderr
    summary = json.loads((cfg.run_dir / "summary.json").read_text())
    assert summary["test_interval_size_mae"] >= 0
    assert np.isfinite(summary["test_poisson_deviance"])
    kept = np.load(cfg.run_dir / "test_predictions.npz")
    assert (kept["interval_size.predicted"] >= 0).all()
