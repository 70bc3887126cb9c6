"""``classification``: one class out of two or more, learnt as logits."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, DataError
from .base import TaskKind, Values

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor

_OWN = {"sync_on_compute": False}


class Classification(TaskKind):
    """A class index per graph or node (or a label named in `classes`), learnt as one logit per
    class with cross entropy. `auroc` is one-vs-rest, averaged over the classes."""

    name = "classification"
    metrics = (
        "accuracy",
        "balanced_accuracy",
        "f1_macro",
        "f1_weighted",
        "precision_macro",
        "recall_macro",
        "auroc",
        "confusion_matrix",
    )
    default_metrics = ("accuracy", "f1_macro", "confusion_matrix")
    tables = ("confusion_matrix",)
    default_loss = "torch.nn.CrossEntropyLoss"
    counts_right = True
    has_classes = True

    def check(self, task: Any, key: str) -> None:
        if task.classes is not None:
            if len(task.classes) < 2 or len(set(task.classes)) != len(task.classes):
                raise ConfigError(
                    f"{key}.classes: expected two or more different label values, found "
                    f"{list(task.classes)}"
                )
            if task.num_outputs not in (None, len(task.classes)):
                raise ConfigError(
                    f"{key}.num_outputs: {task.num_outputs}, but {key}.classes names "
                    f"{len(task.classes)} classes; leave num_outputs out"
                )
        if task.num_outputs == 1:
            raise ConfigError(
                f"{key}.num_outputs: a classification task needs 2 or more classes (use type "
                f"binary for one logit); task {task.name!r} has 1"
            )

    def check_target(self, value: Tensor, task: Any, key: str) -> None:
        super().check_target(value, task, key)
        if value.is_floating_point():
            raise ConfigError(
                f"{key}: task {task.name!r} classifies, so {task.target_name!r} must hold "
                f"integer class indices, found {value.dtype} (use type regression for "
                "continuous values)"
            )

    def count_outputs(
        self, task: Any, first: Tensor, values: Values, known: int | None, key: str, outputs: str
    ) -> int:
        if task.classes is not None:
            found = values()
            if found is not None:
                class_indices(found.reshape(-1), task.classes, task=task.name, key=key)
            return len(task.classes)
        if task.num_outputs is not None:
            return task.num_outputs
        if known is not None:
            return known
        found = values()
        if found is None:
            raise ConfigError(
                f"{outputs}: the data is not held in memory, so the number of classes of task "
                f"{task.name!r} cannot be read cheaply; give it"
            )
        return max(int(found.max()) + 1, 2)

    def notice(self, task: Any, values: Values, key: str | None) -> str | None:
        # Labels that never take the value 0 (Julia's 1-based ones): the model gets an output
        # for a class that never occurs.
        if task.classes is not None or task.num_outputs:
            return None
        found = values()
        if found is None or not found.numel() or int(found.min()) < 1:
            return None
        seen = sorted(int(v) for v in found.unique())
        fix = (
            f"set {key}.classes: {seen}"
            if key
            else f"give the task with its classes, tasks: [{{name: {task.name}, classes: {seen}}}]"
        )
        return (
            f"the labels {task.target_name!r} of task {task.name!r} run from {seen[0]} to "
            f"{seen[-1]}, so class 0 never occurs and the model has {seen[-1] + 1} outputs; if "
            f"they count from 1 (as QuantumGrav.jl's do), {fix} to learn them as classes 0, 1, ..."
        )

    def target(self, value: Tensor, rows: int, num_outputs: int, task: Any) -> Tensor:
        if task.classes is not None:
            return class_indices(value.reshape(-1), task.classes, task=task.name)
        return value.reshape(-1)

    def correct(self, outputs: Tensor, target: Tensor) -> Tensor:
        return (outputs.argmax(dim=-1) == target).sum()

    def metric_outputs(self, num_outputs: int) -> int:
        if num_outputs < 2:
            raise ValueError(f"a classification task needs 2 or more classes, got {num_outputs}")
        return num_outputs

    def make_metric(self, name: str, num_outputs: int) -> Any:
        from torchmetrics import classification as tmc

        c = num_outputs
        return {
            "accuracy": lambda: tmc.MulticlassAccuracy(c, average="micro", **_OWN),
            "balanced_accuracy": lambda: tmc.MulticlassAccuracy(c, average="macro", **_OWN),
            "f1_macro": lambda: tmc.MulticlassF1Score(c, average="macro", **_OWN),
            "f1_weighted": lambda: tmc.MulticlassF1Score(c, average="weighted", **_OWN),
            "precision_macro": lambda: tmc.MulticlassPrecision(c, average="macro", **_OWN),
            "recall_macro": lambda: tmc.MulticlassRecall(c, average="macro", **_OWN),
            "auroc": lambda: tmc.MulticlassAUROC(c, average="macro", thresholds=None, **_OWN),
            "confusion_matrix": lambda: tmc.MulticlassConfusionMatrix(c, **_OWN),
        }[name]()

    def metric_inputs(self, outputs: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        return outputs.double().softmax(dim=-1), target.reshape(-1).long()

    def prediction_values(self, predicted: Tensor) -> Tensor:
        return predicted.float().softmax(dim=-1)  # each class's probability

    def columns(self, task: Any, values: np.ndarray, true: np.ndarray | None) -> dict:
        import numpy as np

        labels = np.asarray(task.classes or range(values.shape[1]))
        columns = {f"{task.name}_class": labels[values.argmax(axis=1)]}
        for k, label in enumerate(labels.tolist()):
            columns[f"{task.name}_prob_{label}"] = values[:, k]
        if true is not None:
            columns[f"{task.name}_true"] = labels[true]
        return columns


@functools.lru_cache(maxsize=64)
def _classes_on(classes: tuple[int, ...], device: Any, dtype: Any) -> Tensor:
    """``classes`` as a tensor on ``device``, made once: a copy from the host each batch would
    wait for the device's queued work on a GPU."""
    import torch

    return torch.tensor(classes, device=device, dtype=dtype)


def class_indices(
    labels: Tensor, classes: tuple[int, ...], *, task: str, key: str | None = None
) -> Tensor:
    """The class index of each label under ``tasks[].classes``: k where the label is
    ``classes[k]``. A label that is none of them is a DataError naming it."""

    known = _classes_on(classes, labels.device, labels.dtype)
    match = labels.reshape(-1, 1) == known
    found = match.any(dim=1)
    if labels.device.type != "cpu":
        # On an accelerator, checked without waiting for it (no sync in the training step);
        # the labels of data held in memory were checked, with the message below, when the
        # task was built.
        from ..compat.torch import assert_on_device  # (loading a config does not load torch)

        assert_on_device(found.all(), f"a label of task {task!r} is not one of {classes}")
        return match.int().argmax(dim=1)
    if not bool(found.all()):
        bad = labels[~found][0].item()
        where = key.rsplit(".", 1)[0] + ".classes" if key else "tasks[].classes"
        raise DataError(
            f"{where}: task {task!r} has the label {bad}, which is not one of {list(classes)}"
        )
    return match.int().argmax(dim=1)
