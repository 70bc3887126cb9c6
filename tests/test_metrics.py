"""Task metrics: scikit-learn's numbers on the same predictions, and the same for any number of
processes, whether every rank evaluates its share or rank 0 evaluates everything."""

import math

import numpy as np
import pytest
import torch
from conftest import run_ranks

import QuantumGravPy as qg
from QuantumGravPy.tasks import KINDS, task_kind
from QuantumGravPy.training.evaluation.metrics import TaskMetrics

N = 101  # odd, so no even split over 2 or 3 ranks
CASES = {  # (task type, outputs): classification with 4 classes, binary, one and three values
    "classification": ("classification", 4),
    "binary": ("binary", 1),
    "regression": ("regression", 1),
    "regression3": ("regression", 3),
    "count": ("count", 1),
    "count3": ("count", 3),
}
VALUES = ("regression", "count")  # float64 sums of errors: the same up to their order


def data(case):
    """Informative but imperfect predictions, the same in every process."""
    task_type, k = CASES[case]
    g = torch.Generator().manual_seed(sum(map(ord, case)))
    if task_type == "classification":
        target = torch.arange(N)[torch.randperm(N, generator=g)] % k  # every class present
        outputs = torch.randn(N, k, generator=g) + 1.5 * torch.nn.functional.one_hot(target, k)
    elif task_type == "binary":
        target = (torch.rand(N, generator=g) < 0.4).long()
        outputs = torch.randn(N, 1, generator=g) + (2.0 * target[:, None] - 1)
    elif task_type == "count":  # outputs: log-rates near the counts' own logs
        target = torch.poisson(torch.full((N, k), 4.0, dtype=torch.float64), generator=g)
        outputs = (target + 0.5).log() + 0.3 * torch.randn(N, k, generator=g, dtype=torch.float64)
    else:
        target = torch.randn(N, k, generator=g, dtype=torch.float64) * 3 + 1
        outputs = target + torch.randn(N, k, generator=g, dtype=torch.float64)
    return outputs, target


def sklearn_values(case, outputs, target):
    from sklearn import metrics as skm  # here: the ranks of the tests below need no sklearn

    task_type, k = CASES[case]
    if task_type == "classification":
        probs = outputs.float().softmax(-1).double().numpy()
        y, pred = target.numpy(), probs.argmax(1)
        return {
            "accuracy": skm.accuracy_score(y, pred),
            "balanced_accuracy": skm.balanced_accuracy_score(y, pred),
            "f1_macro": skm.f1_score(y, pred, average="macro"),
            "f1_weighted": skm.f1_score(y, pred, average="weighted"),
            "precision_macro": skm.precision_score(y, pred, average="macro", zero_division=0),
            "recall_macro": skm.recall_score(y, pred, average="macro"),
            "auroc": skm.roc_auc_score(y, probs, multi_class="ovr", average="macro"),
            "confusion_matrix": skm.confusion_matrix(y, pred, labels=range(k)).tolist(),
        }
    if task_type == "binary":
        prob = outputs.float().reshape(-1).sigmoid().double().numpy()
        y, pred = target.numpy(), (prob > 0.5).astype(int)
        return {
            "accuracy": skm.accuracy_score(y, pred),
            "f1": skm.f1_score(y, pred),
            "precision": skm.precision_score(y, pred),
            "recall": skm.recall_score(y, pred),
            "auroc": skm.roc_auc_score(y, prob),
            "average_precision": skm.average_precision_score(y, prob),
            "confusion_matrix": skm.confusion_matrix(y, pred, labels=[0, 1]).tolist(),
        }
    y, pred = target.numpy(), outputs.numpy()
    if task_type == "count":  # the expected counts: the log-rates' exponentials
        pred = np.exp(pred)
    values = {
        "mse": skm.mean_squared_error(y, pred),
        "rmse": skm.root_mean_squared_error(y, pred),
        "mae": skm.mean_absolute_error(y, pred),
        "r2": skm.r2_score(y, pred),
    }
    if k == 1:  # scikit-learn's max_error takes one output only
        values["max_error"] = skm.max_error(y.ravel(), pred.ravel())
    if task_type == "count":  # the mean over every row and output
        values["poisson_deviance"] = skm.mean_poisson_deviance(y.ravel(), pred.ravel())
    return values


def names_of(case):
    task_type, k = CASES[case]
    names = task_kind(task_type).metrics
    return [n for n in names if not (n == "max_error" and k > 1)]


def evaluate(case, start=0, end=N, *, across_ranks=True, batch=10):
    """Update in batches with samples start..end-1, then compute."""
    task_type, k = CASES[case]
    outputs, target = data(case)
    metrics = TaskMetrics(task_type, names_of(case), k)
    for i in range(start, end, batch):
        j = min(i + batch, end)
        metrics.update(outputs[i:j], target[i:j])
    return metrics.compute(across_ranks=across_ranks)


def assert_close(values, expected, rel):
    assert values.keys() == expected.keys()
    for name, value in values.items():
        if name == "confusion_matrix":
            assert value == expected[name]
        else:
            assert value == pytest.approx(expected[name], rel=rel, abs=rel), name


@pytest.mark.parametrize("case", CASES)
def test_every_metric_is_scikit_learns_number(case):
    outputs, target = data(case)
    # float32 probabilities for classification (as the model gives them), float64 sums otherwise
    assert_close(evaluate(case), sklearn_values(case, outputs, target), rel=1e-6)


def both_modes(rank, world_size):
    """Every case evaluated the two ways a validation runs on ``world_size`` ranks.

    shared: each rank updates with its contiguous, uneven share, and the states are combined;
    alone: rank 0 evaluates everything and exchanges nothing, the others do no metric work.
    """
    start, end = qg.DistributedRangeSplitter(N, world_size).get_rank_range(rank)
    shared = {case: evaluate(case, start, end, batch=7) for case in CASES}
    alone = {case: evaluate(case, across_ranks=False) for case in CASES} if rank == 0 else None
    return shared, alone


@pytest.mark.timeout(120)
@pytest.mark.parametrize("world_size", [2, 3])
def test_metrics_are_the_same_for_any_number_of_processes(world_size):
    single = {case: evaluate(case) for case in CASES}
    results = run_ranks(world_size, both_modes)
    for shared, _ in results:  # every rank gets the values of all the data
        for case in CASES:
            if CASES[case][0] in VALUES:  # float64 sums, added in another order
                assert_close(shared[case], single[case], rel=1e-12)
            else:  # counts and the gathered predictions themselves: identical
                assert shared[case] == single[case]
    assert results[0][1] == single
    assert [alone for _, alone in results[1:]] == [None] * (world_size - 1)


def test_defaults_are_metrics_of_their_task_type():
    for kind in KINDS:
        assert set(kind.default_metrics) <= set(kind.metrics)
        assert set(kind.minimized) <= set(kind.metrics)


def test_every_metric_the_config_accepts_is_computed():
    """The names the config checks at load time (each kind's) are what training computes."""
    for kind in KINDS:
        metrics = TaskMetrics(kind.name, kind.metrics, 3)  # 3 classes, labels or values
        assert list(metrics.metrics) == list(kind.metrics)


@pytest.mark.parametrize(
    "args, message",
    [
        (("ranking", ["accuracy"], 2), "unknown 'ranking' .known: binary, classification"),
        (("regression", ["accuracy"], 1), "'accuracy' is not a metric of a regression task"),
        (("binary", ["f1_macro", "r2"], 1), "'f1_macro', 'r2' is not a metric of a binary task"),
        (("classification", ["accuracy"], 1), "needs 2 or more classes, got 1"),
    ],
)
def test_impossible_metrics_are_refused_naming_them(args, message):
    with pytest.raises((ValueError, qg.ConfigError), match=message):
        TaskMetrics(*args)


def test_a_perfect_regression_has_no_error():
    outputs = torch.linspace(-2, 5, 13, dtype=torch.float64)
    metrics = TaskMetrics("regression", ["mse", "rmse", "mae", "r2", "max_error"], 1)
    metrics.update(outputs, outputs.clone())
    values = metrics.compute()
    assert values == {"mse": 0.0, "rmse": 0.0, "mae": 0.0, "r2": 1.0, "max_error": 0.0}
    assert not any(math.isnan(v) for v in values.values())
