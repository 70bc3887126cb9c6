"""``binary``: a yes or no, learnt as one logit; its picture is the ROC curve."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, DataError
from ..figures import new_figure, save
from .base import TaskKind, Values

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor

_OWN = {"sync_on_compute": False}


class Binary(TaskKind):
    """A target of 0 or 1 per graph or node, learnt as one logit with binary cross entropy."""

    name = "binary"
    metrics = (
        "accuracy",
        "f1",
        "precision",
        "recall",
        "auroc",
        "average_precision",
        "confusion_matrix",
    )
    default_metrics = ("accuracy", "f1", "auroc", "confusion_matrix")
    tables = ("confusion_matrix",)
    default_loss = "torch.nn.BCEWithLogitsLoss"
    counts_right = True
    has_classes = True
    picture = "roc.png"

    def check(self, task: Any, key: str) -> None:
        super().check(task, key)
        if task.num_outputs not in (None, 1):
            raise ConfigError(
                f"{key}.num_outputs: a binary task has one output, a logit; task {task.name!r} "
                f"has {task.num_outputs}"
            )

    def count_outputs(
        self, task: Any, first: Tensor, values: Values, known: int | None, key: str, outputs: str
    ) -> int:
        found = values()
        if found is not None and found.numel() and not bool(((found == 0) | (found == 1)).all()):
            bad = found[(found != 0) & (found != 1)][0].item()
            raise DataError(
                f"{key}: the binary task {task.name!r} needs targets 0 or 1 in "
                f"{task.target_name!r}, found {bad}"
            )
        return 1

    def loss_target(self, target: Tensor, outputs: Tensor) -> Tensor:
        return target.reshape(outputs.shape).to(outputs.dtype)

    def correct(self, outputs: Tensor, target: Tensor) -> Tensor:
        return ((outputs.reshape(-1) > 0).long() == target.long()).sum()

    def metric_outputs(self, num_outputs: int) -> int:
        return 1

    def make_metric(self, name: str, num_outputs: int) -> Any:
        from torchmetrics import classification as tmc

        return {
            "accuracy": lambda: tmc.BinaryAccuracy(**_OWN),
            "f1": lambda: tmc.BinaryF1Score(**_OWN),
            "precision": lambda: tmc.BinaryPrecision(**_OWN),
            "recall": lambda: tmc.BinaryRecall(**_OWN),
            "auroc": lambda: tmc.BinaryAUROC(thresholds=None, **_OWN),
            "average_precision": lambda: tmc.BinaryAveragePrecision(thresholds=None, **_OWN),
            "confusion_matrix": lambda: tmc.BinaryConfusionMatrix(**_OWN),
        }[name]()

    def metric_inputs(self, outputs: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        return outputs.double().reshape(-1).sigmoid(), target.reshape(-1).long()

    def prediction_values(self, predicted: Tensor) -> Tensor:
        return predicted.float().reshape(-1).sigmoid()  # the probability of 1

    def columns(self, task: Any, values: np.ndarray, true: np.ndarray | None) -> dict:
        import numpy as np

        columns = {
            f"{task.name}_prob": values,
            f"{task.name}_class": (values > 0.5).astype(np.int64),
        }
        if true is not None:
            columns[f"{task.name}_true"] = true.astype(np.int64)
        return columns

    def plot(self, predicted: np.ndarray, true: np.ndarray, output: Path, title: str) -> Path:
        """The ROC curve: true against false positive rate over all thresholds."""
        import numpy as np

        fpr, tpr = roc_curve(predicted, true)
        fig = new_figure(4.6, 4.2)
        ax = fig.subplots()
        # above the frame and inside a margin: a perfect classifier's curve runs along two edges
        ax.plot(fpr, tpr, color="C0", lw=2, drawstyle="steps-post", zorder=3, clip_on=False)
        ax.plot([0, 1], [0, 1], ":", color="grey", label="chance")
        area = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))  # trapezoids: exact here
        edge = (-0.02, 1.02)
        ax.set(xlabel="false positive rate", ylabel="true positive rate", xlim=edge, ylim=edge)
        ax.set_title(f"{title}: AUROC {area:.4f}")
        ax.set_aspect("equal")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
        return save(fig, output)


def roc_curve(probability: np.ndarray, true: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(false positive rates, true positive rates), one point per distinct score, from (0, 0)."""
    import numpy as np

    order = np.argsort(-np.asarray(probability, dtype=np.float64), kind="stable")
    score = np.asarray(probability, dtype=np.float64)[order]
    positive = np.asarray(true).reshape(-1)[order] > 0
    last_of_tie = np.r_[np.diff(score) != 0, True]  # a threshold between distinct scores only
    tp = np.cumsum(positive)[last_of_tie]
    fp = np.cumsum(~positive)[last_of_tie]
    tpr = np.r_[0.0, tp / max(tp[-1], 1)] if len(tp) else np.array([0.0, 1.0])
    fpr = np.r_[0.0, fp / max(fp[-1], 1)] if len(fp) else np.array([0.0, 1.0])
    return fpr, tpr
