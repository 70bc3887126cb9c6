"""Pictures of runs: what every run leaves, and ``qg plot`` on one and several runs. The
figures' own data are checked against the history and summary.json, not only their files."""

import json

import numpy as np
from conftest import assert_refused, run_main, train

from QuantumGravPy.runs import directory as rd

PNG = b"\x89PNG\r\n\x1a\n"
# The panels of curves.png for a classification run, and the history columns each one draws.
PANELS = {
    "loss": ["train_loss", "val_loss"],
    "accuracy": ["train_accuracy", "val_accuracy"],
    "learning rate": ["lr"],
}


def is_png(path):
    return path.is_file() and path.read_bytes()[:8] == PNG


def curves_of(figure):
    """{panel title: [(x, y) of each line, in drawing order]}."""
    return {
        ax.get_title(): [(list(line.get_xdata()), list(line.get_ydata())) for line in ax.lines]
        for ax in figure.axes
    }


def expected_curves(*histories):
    return {
        title: [
            ([row["epoch"] for row in history], [row[column] for row in history])
            for history in histories
            for column in columns
        ]
        for title, columns in PANELS.items()
    }


def test_every_run_leaves_curves_and_a_confusion_matrix(make_config, drawn):
    cfg = make_config("training.num_epochs=3")
    _, history, metrics = train(cfg)
    assert is_png(cfg.run_dir / "curves.png") and is_png(cfg.run_dir / "confusion_matrix.png")
    assert curves_of(drawn.figure("curves.png")) == expected_curves(rd.read_history(cfg.run_dir))
    assert [row["val_loss"] for row in rd.read_history(cfg.run_dir)] == [
        row["val_loss"] for row in history
    ]

    matrix = json.loads((cfg.run_dir / "summary.json").read_text())["test_confusion_matrix"]
    assert matrix == metrics["test_y_confusion_matrix"] and len(matrix) == 3  # rows: true dimension
    correct, total = sum(matrix[i][i] for i in range(3)), sum(map(sum, matrix))
    assert correct / total == metrics["test_accuracy"]
    ax = drawn.figure("confusion_matrix.png").axes[0]  # the second is its colour bar
    assert np.array_equal(ax.images[0].get_array(), matrix)
    # each count written in its cell: column = predicted, row = true
    assert [(t.get_text(), t.get_position()) for t in ax.texts] == [
        (str(count), (j, i)) for i, row in enumerate(matrix) for j, count in enumerate(row)
    ]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["d = 2", "d = 3", "d = 4"]
    assert ax.get_title() == f"test set: {correct}/{total} correct"


def test_qg_plot_draws_one_run_and_overlays_several(make_config, tmp_path, capsys, drawn):
    runs = []
    for lr in (0.001, 0.01):
        cfg = make_config(
            "training.num_epochs=2",
            f"training.optimizer.kwargs={{lr: {lr}}}",
            f"training.path={tmp_path / f'lr{lr}'}",
        )
        train(cfg)
        (cfg.run_dir / "curves.png").unlink()
        runs.append(cfg.run_dir)
    histories = [rd.read_history(run) for run in runs]

    one = run_main(capsys, "plot", runs[0])
    assert one.returncode == 0, one.stderr
    assert is_png(runs[0] / "curves.png")
    assert curves_of(drawn.figure("curves.png")) == expected_curves(histories[0])

    output = tmp_path / "both.png"
    both = run_main(capsys, "plot", *runs, "--output", output)
    assert both.returncode == 0, both.stderr
    assert is_png(output) and str(output) in both.stdout
    figure = drawn.figure("both.png")
    assert figure.get_suptitle() == "2 runs"
    # each panel: every column of the first run, then of the second, in the run's own colour
    assert curves_of(figure) == expected_curves(*histories)
    loss = figure.axes[0]
    assert [line.get_color() for line in loss.lines] == ["C0", "C0", "C1", "C1"]
    labels = [t.get_text() for t in loss.get_legend().get_texts()]
    assert labels == ["lr0.001 train", "lr0.001 val", "lr0.01 train", "lr0.01 val"]

    missing = run_main(capsys, "plot", runs[0], tmp_path / "nowhere")
    assert_refused(missing, "nowhere: not a run directory (no history.csv")
    assert not (tmp_path / "comparison.png").exists()
