"""Pictures of runs: training curves and the test confusion matrix, as PNG files.

Written by rank 0 at the end of every run (``curves.png``, ``confusion_matrix.png``), and by
``qg plot RUN_DIR [RUN_DIR ...]``, which overlays the curves of several runs. matplotlib is used
without pyplot, so nothing here needs a display or touches global plotting state.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import QGError
from . import directory as rd

CURVES = "curves.png"
CONFUSION = "confusion_matrix.png"

# (panel title, history column, line style) for training and validation
_PANELS = (
    ("loss", (("train_loss", "-"), ("val_loss", "--"))),
    ("accuracy", (("train_accuracy", "-"), ("val_accuracy", "--"))),
    ("learning rate", (("lr", "-"),)),
)


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


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
        raise QGError(f"{path / rd.HISTORY}: cannot be read ({e})") from None
    if not history:
        raise QGError(f"{path / rd.HISTORY}: holds no epochs")
    return path.resolve().name or str(path), history


def plot_curves(runs: Sequence[tuple[str, list[dict[str, float]]]], output: str | Path) -> Path:
    """Loss, accuracy and learning rate per epoch of one or more runs, in one PNG."""
    from matplotlib.ticker import MaxNLocator

    output = Path(output)
    fig = _figure(13, 3.8)
    axes = fig.subplots(1, len(_PANELS))
    colors = [f"C{i % 10}" for i in range(len(runs))]
    for ax, (title, columns) in zip(axes, _PANELS, strict=True):
        for (name, history), color in zip(runs, colors, strict=True):
            epochs = [row["epoch"] for row in history]
            for column, style in columns:
                values = [row.get(column, math.nan) for row in history]
                if all(math.isnan(v) for v in values):
                    continue  # an older run without this column
                split = column.split("_")[0] if "_" in column else ""
                label = " ".join(part for part in (name if len(runs) > 1 else "", split) if part)
                ax.plot(epochs, values, style, color=color, marker=".", label=label or column)
        ax.set_title(title)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        positive = all(row["lr"] > 0 for _, history in runs for row in history if "lr" in row)
        if title == "learning rate" and positive:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize="small")
    fig.suptitle(runs[0][0] if len(runs) == 1 else f"{len(runs)} runs")
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=100)
    return output


def plot_confusion(
    matrix: Sequence[Sequence[int]], output: str | Path, class_names: Sequence[str] | None = None
) -> Path:
    """The test set's confusion matrix (rows: true class, columns: predicted), counts shown."""
    output = Path(output)
    n = len(matrix)
    names = list(class_names) if class_names is not None else [str(i) for i in range(n)]
    fig = _figure(1.2 + 0.9 * n, 1.0 + 0.8 * n)
    ax = fig.subplots()
    image = ax.imshow(matrix, cmap="Blues")
    largest = max((max(row) for row in matrix), default=0)
    for i, row in enumerate(matrix):
        for j, count in enumerate(row):
            color = "white" if count > largest / 2 else "black"
            ax.text(j, i, str(count), ha="center", va="center", color=color)
    ax.set_xticks(range(n), names)
    ax.set_yticks(range(n), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    total = sum(map(sum, matrix))
    correct = sum(matrix[i][i] for i in range(n))
    ax.set_title(f"test set: {correct}/{total} correct")
    fig.colorbar(image, ax=ax, shrink=0.8)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=100)
    return output


def write_run_plots(path: str | Path, class_names: Sequence[str] | None = None) -> list[Path]:
    """``curves.png`` and, once the run was tested, ``confusion_matrix.png`` in a run directory."""
    path = Path(path)
    written = [plot_curves([read_run(path)], path / CURVES)]
    summary: dict[str, Any] = {}
    if (path / rd.SUMMARY).is_file():
        summary = json.loads((path / rd.SUMMARY).read_text(encoding="utf-8"))
    matrix = summary.get("test_confusion")
    if matrix:
        written.append(plot_confusion(matrix, path / CONFUSION, class_names))
    return written


def class_names_of(config: Any) -> list[str] | None:
    """Class names for the embedded causal-set data ("d = 2", ...); None for other data."""
    if config.data.dataset is None:
        return [f"d = {d}" for d in config.data.dimensions]
    return None
