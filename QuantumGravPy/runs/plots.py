"""Pictures of runs: training curves, and per task what the test set says of the model.

Written by rank 0 at the end of every run, and by ``qg plot RUN_DIR [RUN_DIR ...]``, which
overlays the curves of several runs:

- ``curves.png``: the losses, each task's first metric, and the learning rate per epoch;
- a task with a confusion matrix among its test metrics: the matrix (``confusion_matrix.png``);
- a task whose kind draws its predictions (:meth:`~QuantumGravPy.tasks.TaskKind.plot`): that
  picture, ``roc.png`` for a binary task's ROC curve, ``regression.png`` for a regression
  task's predicted against true values and residuals;
- with ``monitor.timing``: where each rank's time went (``ranks.png``, from ``ranks.csv``).

With several tasks the per-task files are named ``confusion_matrix_<task>.png`` and so on. The
pictures of the test set are drawn from ``summary.json`` and ``test_predictions.npz``.
matplotlib is used without pyplot, so nothing here needs a display or touches global plotting
state.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..config import Config, DataConfig, load_config, shown_columns, task_list
from ..errors import ConfigError, QGError
from ..figures import new_figure, save
from . import layout as rd

CURVES = "curves.png"
CONFUSION = "confusion_matrix.png"
RANKS = "ranks.png"
# The parts of a rank's epoch in ranks.csv, as the picture names them.
_RANK_PARTS = (
    ("data_s", "data"),
    ("forward_s", "forward"),
    ("backward_s", "backward"),
    ("exchange_exposed_s", "exchange (exposed)"),
    ("optimizer_s", "optimizer"),
    ("eval_s", "evaluation"),
    ("wait_s", "waiting"),
)


def _panels(metrics: Sequence[str]) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """(panel title, ((history column, line style), ...)): training solid, validation dashed."""
    panels = [("loss", (("train_loss", "-"), ("val_loss", "--")))]
    for column in metrics:
        name = column.removeprefix("val_")
        panels.append((name.replace("_", " "), ((f"train_{name}", "-"), (column, "--"))))
    panels.append(("learning rate", (("lr", "-"),)))
    return panels


def best_epoch(path: str | Path) -> int | None:
    """The epoch of a run's best checkpoint, as its summary.json records it."""
    try:
        summary = json.loads((Path(path) / rd.SUMMARY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    best = summary.get("best_epoch") if isinstance(summary, dict) else None
    return best if isinstance(best, int) and best > 0 else None


def read_run(path: str | Path) -> tuple[str, list[dict[str, float]]]:
    """A run directory's name and history; a clear error for anything else."""
    path = Path(path)
    if not (path / rd.HISTORY).is_file():
        raise QGError(
            f"{path}: not a run directory (no {rd.HISTORY}; has a run finished an epoch?)"
        )
    try:
        history = rd.read_history(path)
    except (ValueError, KeyError) as e:
        raise QGError(f"{path / rd.HISTORY}: cannot be read ({e})") from e
    if not history:
        raise QGError(f"{path / rd.HISTORY}: holds no epochs")
    return path.resolve().name or str(path), history


PANELS_PER_ROW = 3  # curves.png's panels a row


def plot_curves(
    runs: Sequence[tuple[str, list[dict[str, float]]]],
    output: str | Path,
    metrics: Sequence[str] = ("val_accuracy",),
    best: Sequence[int | None] = (),
) -> Path:
    """Loss, the validation columns ``metrics`` (each beside its training counterpart, if the
    history has one) and the learning rate per epoch of one or more runs, in one PNG.

    ``best``: each run's best epoch, marked by a dotted line in every panel. The loss panel
    is logarithmic when the losses span more than a factor of 10, so that a high first epoch
    does not flatten the rest. A run without one of the ``metrics`` is left out of its panel.
    """
    from matplotlib.ticker import MaxNLocator

    output = Path(output)
    panels = _panels(metrics)
    # a grid of at most PANELS_PER_ROW a row (a four-task run was one row of 7 panels)
    cols = min(len(panels), PANELS_PER_ROW)
    rows = -(-len(panels) // cols)
    fig = new_figure(4.3 * cols, 3.8 * rows)
    grid = fig.subplots(rows, cols, squeeze=False).ravel()
    for spare in grid[len(panels) :]:
        spare.remove()
    axes = grid[: len(panels)]
    colors = [f"C{i % 10}" for i in range(len(runs))]
    for ax, (title, columns) in zip(axes, panels, strict=True):
        for (name, history), color in zip(runs, colors, strict=True):
            epochs = [row["epoch"] for row in history]
            for column, style in columns:
                values = [row.get(column, math.nan) for row in history]
                if all(math.isnan(v) for v in values):
                    continue  # an older run without this column
                split = column.split("_")[0] if "_" in column else ""
                label = " ".join(part for part in (name if len(runs) > 1 else "", split) if part)
                ax.plot(epochs, values, style, color=color, marker=".", label=label or column)
        for i, (epoch, color) in enumerate(zip(best, colors, strict=False)):
            if epoch is not None and title != "learning rate":
                label = "best epoch" if i == 0 else None
                ax.axvline(epoch, color=color, ls=":", lw=1, label=label, gid="best epoch")
        ax.set_title(title)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        positive = all(row["lr"] > 0 for _, history in runs for row in history if "lr" in row)
        if title == "learning rate" and positive:
            ax.set_yscale("log")
        if title == "loss" and _spans_decades(ax):
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize="small")
    fig.suptitle(runs[0][0] if len(runs) == 1 else f"{len(runs)} runs")
    return save(fig, output)


def compare_runs(paths: Sequence[str | Path], output: str | Path) -> Path:
    """The curves of several runs in one picture: a panel for every metric any of them shows
    (their configs' :func:`~QuantumGravPy.config.shown_columns`, in order), each run drawn in
    the panels of the metrics its history has, and each run's best epoch marked."""
    metrics: list[str] = []
    for path in paths:
        config = run_config(path)
        for column in shown_columns(config) if config is not None else ("val_accuracy",):
            if column not in metrics:
                metrics.append(column)
    runs = [read_run(path) for path in paths]
    return plot_curves(runs, output, metrics, [best_epoch(path) for path in paths])


def _spans_decades(ax: Any) -> bool:
    """Whether the curves of ``ax`` are positive and span more than a factor of 10."""
    curves = [line for line in ax.lines if line.get_gid() != "best epoch"]
    values = [v for line in curves for v in line.get_ydata() if math.isfinite(v)]
    return bool(values) and min(values) > 0 and max(values) > 10 * min(values)


def plot_confusion(
    matrix: Sequence[Sequence[int]],
    output: str | Path,
    class_names: Sequence[str] | None = None,
    title: str = "test set",
) -> Path:
    """The test set's confusion matrix (rows: true class, columns: predicted), counts shown."""
    output = Path(output)
    n = len(matrix)
    names = list(class_names) if class_names is not None else [str(i) for i in range(n)]
    fig = new_figure(1.2 + 0.9 * n, 1.0 + 0.8 * n)
    ax = fig.subplots()
    image = ax.imshow(matrix, cmap="Blues")
    largest = max((max(row) for row in matrix), default=0)
    for i, row in enumerate(matrix):
        for j, count in enumerate(row):
            color = "white" if count > largest / 2 else "black"
            ax.text(j, i, str(count), ha="center", va="center", color=color)
    long = max((len(name) for name in names), default=0) > 6
    # long names (de Sitter, kleitman rothschild) slant so that neighbours do not overlap
    ax.set_xticks(range(n), names, rotation=30 if long else 0, ha="right" if long else "center")
    ax.set_yticks(range(n), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    total = sum(map(sum, matrix))
    correct = sum(matrix[i][i] for i in range(n))
    ax.set_title(f"{title}: {correct}/{total} correct")
    fig.colorbar(image, ax=ax, shrink=0.8)
    return save(fig, output, bbox_inches="tight")


def plot_ranks(rows: Sequence[dict[str, float]], output: str | Path) -> Path:
    """Where each rank's time went: the parts of the last epoch as stacked bars, one per rank
    (the hidden part of the gradient exchange hatched beside them), and each rank's epoch time
    over the epochs."""
    from matplotlib.ticker import MaxNLocator

    output = Path(output)
    last = max(row["epoch"] for row in rows)
    ranks = sorted({int(row["rank"]) for row in rows})
    final = {int(r["rank"]): r for r in rows if r["epoch"] == last}
    fig = new_figure(11, 0.9 + 0.45 * len(ranks) + 2.6)
    bars, lines = fig.subplots(1, 2, width_ratios=(3, 2))
    shown = [r for r in ranks if r in final]
    left = np.zeros(len(shown))
    for i, (column, label) in enumerate(_RANK_PARTS):
        widths = np.array([final[r].get(column, 0.0) for r in shown])
        bars.barh(shown, widths, left=left, color=f"C{i}", label=label)
        left += widths
    hidden = np.array([final[r]["exchange_s"] - final[r]["exchange_exposed_s"] for r in shown])
    if hidden.max(initial=0) > 0:
        bars.barh(
            shown,
            hidden,
            left=left,
            color="none",
            edgecolor="0.4",
            hatch="///",
            height=0.5,
            label="exchange behind the backward pass",
        )
    bars.set_yticks(shown, [f"rank {r}" for r in shown])
    bars.invert_yaxis()
    bars.set_xlabel("seconds")
    bars.set_title(f"epoch {int(last)}: where each rank's time went")
    bars.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=4)
    bars.grid(axis="x", alpha=0.3)
    for r in ranks:
        mine = sorted((row for row in rows if int(row["rank"]) == r), key=lambda x: x["epoch"])
        lines.plot(
            [x["epoch"] for x in mine], [x["epoch_s"] for x in mine], ".-", label=f"rank {r}"
        )
    lines.set_xlabel("epoch")
    lines.set_ylabel("seconds")
    lines.set_title("epoch time per rank")
    lines.xaxis.set_major_locator(MaxNLocator(integer=True))
    lines.grid(alpha=0.3)
    if len(ranks) <= 16:
        lines.legend(fontsize="small")
    return save(fig, output)


def run_config(path: str | Path) -> Config | None:
    """A run directory's config.yaml, if it has a readable one."""
    try:
        return load_config(Path(path) / rd.CONFIG)
    except (ConfigError, OSError):
        return None


def write_run_plots(
    path: str | Path, config: Config | None = None, *, training: bool = True
) -> list[Path]:
    """``curves.png``, ``ranks.png`` and, once the run was tested, each task's pictures of the
    test set.

    ``config``: the run's (default: read from its config.yaml), which names the tasks;
    ``training=False`` draws the test set's pictures only, leaving the pictures of the training
    (curves and ranks, which a test does not change) as they are: each costs a fraction of a
    second, as much as a small run's epochs.
    """
    path = Path(path)
    config = config if config is not None else run_config(path)
    metrics = shown_columns(config) if config is not None else ("val_accuracy",)
    summary: dict[str, Any] = {}
    if (path / rd.SUMMARY).is_file():
        summary = json.loads((path / rd.SUMMARY).read_text(encoding="utf-8"))
    written = []
    if training:
        written.append(plot_curves([read_run(path)], path / CURVES, metrics, [best_epoch(path)]))
    timing = rd.read_ranks(path) if training else []
    if timing:
        written.append(plot_ranks(timing, path / RANKS))
    tasks = task_list(config) if config is not None else ()
    if not tasks and summary.get("test_confusion"):  # a run of an older version
        written.append(plot_confusion(summary["test_confusion"], path / CONFUSION))
    predictions = rd.read_predictions(path)
    for task in tasks:
        name = task.name

        def file(base: str, name: str = name) -> Path:
            return path / (base if len(tasks) == 1 else base.replace(".png", f"_{name}.png"))

        title = "test set" if len(tasks) == 1 else f"{name}, test set"
        matrix = summary.get(f"test_{name}_confusion_matrix") or (
            summary.get("test_confusion") if len(tasks) == 1 else None
        )
        if matrix:
            names = (
                [str(c) for c in task.classes]
                if task.classes is not None
                else class_names_of(config.data)
                if task.target_name == "y"
                else None
            )
            if names is not None and len(names) != len(matrix):
                names = None  # graphs handed to the trainer, not the config's data: numbers
            written.append(plot_confusion(matrix, file(CONFUSION), names, title))
        kept = predictions.get(name)
        if kept is None or not len(kept.get("true", ())):  # (model_loss: no targets)
            continue
        picture = task.kind.picture  # the ROC curve of a binary task, ...
        if picture is not None:
            written.append(task.kind.plot(kept["predicted"], kept["true"], file(picture), title))
    return written


def class_names_of(data: DataConfig) -> list[str] | None:
    """Class names of ``y`` for the embedded causal-set data ("d = 2", ...); None otherwise."""
    from ..physics import CSET_TYPES

    if data.dataset is not None or data.files:
        return None
    return {
        "dimension": [f"d = {d}" for d in data.dimensions],
        "curvature": ["flat", "de Sitter", "anti-de Sitter"],
        "manifold_like": ["not manifold-like", "manifold-like"],
        "cset_type": [name.replace("_", " ") for name in CSET_TYPES],
    }.get(data.kind)
