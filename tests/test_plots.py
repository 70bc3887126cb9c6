"""Pictures of runs: what every run leaves, and ``qg plot`` on one and several runs. The
figures' own data are checked against the history and summary.json, not only their files."""

import json

import numpy as np
import pytest
from conftest import assert_refused, run_main, train

from QuantumGravPy.runs import layout as rd

PNG = b"\x89PNG\r\n\x1a\n"
# The panels of curves.png for a classification run, and the history columns each one draws.
PANELS = {
    "loss": ["train_loss", "val_loss"],
    "accuracy": ["train_accuracy", "val_accuracy"],
    "learning rate": ["lr"],
}


@pytest.fixture
def make_config(make_config):
    """conftest's small configs, with their pictures: every run here draws them."""
    return lambda *overrides: make_config("training.plots=true", *overrides)


def is_png(path):
    return path.is_file() and path.read_bytes()[:8] == PNG


def curves_of(figure):
    """{panel title: [(x, y) of each curve, in drawing order]} (not the best-epoch marks)."""
    return {
        ax.get_title(): [
            (list(line.get_xdata()), list(line.get_ydata()))
            for line in ax.lines
            if line.get_gid() != "best epoch"
        ]
        for ax in figure.axes
    }


def best_marks(figure):
    """{panel title: [epoch of each best-epoch mark]}."""
    return {
        ax.get_title(): [line.get_xdata()[0] for line in ax.lines if line.get_gid() == "best epoch"]
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
    best = json.loads((cfg.run_dir / "summary.json").read_text())["best_epoch"]
    assert best_marks(drawn.figure("curves.png")) == {
        "loss": [best],
        "accuracy": [best],
        "learning rate": [],
    }
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


def test_a_run_without_pictures_gets_them_from_qg_plot(make_config, capsys):
    cfg = make_config("training.num_epochs=2", "training.plots=false")
    train(cfg)
    assert not list(cfg.run_dir.glob("*.png"))
    result = run_main(capsys, "plot", cfg.run_dir)
    assert result.returncode == 0, result.stderr
    assert is_png(cfg.run_dir / "curves.png") and is_png(cfg.run_dir / "confusion_matrix.png")


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
    colors = [line.get_color() for line in loss.lines if line.get_gid() != "best epoch"]
    assert colors == ["C0", "C0", "C1", "C1"]
    labels = [t.get_text() for t in loss.get_legend().get_texts()]
    assert labels == ["lr0.001 train", "lr0.001 val", "lr0.01 train", "lr0.01 val", "best epoch"]

    missing = run_main(capsys, "plot", runs[0], tmp_path / "nowhere")
    assert_refused(missing, "nowhere: not a run directory (no history.csv")
    assert not (tmp_path / "comparison.png").exists()


def test_the_deciding_metric_is_logged_and_drawn_and_qg_plot_keeps_every_runs_own(
    make_config, tmp_path, capsys, drawn
):
    deciding = make_config(
        "training.num_epochs=2",
        "early_stopping.metric=val_f1_macro",
        "early_stopping.mode=max",
        "log_level=INFO",
        f"training.path={tmp_path / 'f1'}",
    )
    train(deciding)
    epochs = [line for line in capsys.readouterr().err.splitlines() if " INFO epoch " in line]
    assert len(epochs) == 2 and all("val_f1_macro" in line for line in epochs)  # it picks *best
    assert "f1 macro" in curves_of(drawn.figure("curves.png"))
    plain = make_config("training.num_epochs=2", f"training.path={tmp_path / 'plain'}")
    train(plain)
    balanced = make_config(
        "training.num_epochs=2",
        "tasks=[{name: dim, target: y, metrics: [balanced_accuracy]}]",
        f"training.path={tmp_path / 'balanced'}",
    )
    train(balanced)
    output = tmp_path / "both.png"
    runs = (plain.run_dir, balanced.run_dir)  # the first run's config has no balanced accuracy
    assert run_main(capsys, "plot", *runs, "--output", output).returncode == 0
    curves = curves_of(drawn.figure("both.png"))
    plain_history, balanced_history = (rd.read_history(r) for r in runs)
    assert ([1.0, 2.0], [r["val_accuracy"] for r in plain_history]) in curves["accuracy"]
    assert curves["balanced accuracy"] == [  # drawn for the run that has it, not left out
        ([1.0, 2.0], [r["val_balanced_accuracy"] for r in balanced_history])
    ]


def test_a_loss_spanning_decades_is_drawn_on_a_log_scale(tmp_path, drawn):
    from QuantumGravPy.runs.plots import plot_curves

    def history(losses):
        return [
            {"epoch": i + 1, "train_loss": x, "val_loss": x, "lr": 1e-3, "val_accuracy": 0.5}
            for i, x in enumerate(losses)
        ]

    plot_curves([("steep", history([1.65, 0.09, 0.06, 0.05]))], tmp_path / "steep.png")
    plot_curves([("flat", history([0.9, 0.7, 0.6, 0.5]))], tmp_path / "flat.png")
    assert drawn.figure("steep.png").axes[0].get_yscale() == "log"
    assert drawn.figure("flat.png").axes[0].get_yscale() == "linear"


def test_a_perfect_roc_curve_is_seen_along_the_frame(tmp_path):
    """At AUROC 1.0 the curve runs up the left edge and along the top: drawn over the frame
    and inside a margin, it shows (before, the frame hid it and only the chance line showed)."""
    import matplotlib.colors
    import matplotlib.image

    from QuantumGravPy.tasks import task_kind

    true = np.array([0] * 20 + [1] * 20)
    picture = task_kind("binary").plot(np.linspace(0, 1, 40), true, tmp_path / "roc.png", "test")
    pixels = matplotlib.image.imread(picture)[..., :3]
    blue = np.array(matplotlib.colors.to_rgb("C0"))
    curve = np.abs(pixels - blue).max(axis=-1) < 0.1
    rows, cols = np.nonzero(curve)
    assert curve.sum() > 500  # two edges' length of a 2-point line
    assert np.ptp(rows) > 0.5 * pixels.shape[0] and np.ptp(cols) > 0.5 * pixels.shape[1]


def test_a_multi_task_runs_curves_are_a_grid_and_named_classes_fit_the_matrix(
    tmp_path, drawn, make_config, caplog
):
    """A four-task run's curves were one row of 7 panels (3010 x 380 pixels): a grid of at
    most 3 a row; and the confusion matrix of graphs handed to the trainer (2 classes) under a
    config of the generated data (3 dimensions) is drawn with numbers, where the run warned
    that it could not write its plots."""
    import user_data

    import QuantumGravPy as qg
    from QuantumGravPy.runs.plots import plot_curves

    metrics = [f"val_{t}_{m}" for t in ("a", "b", "c") for m in ("accuracy", "f1_macro")]
    history = [
        {"epoch": e, "train_loss": 1.0 / e, "val_loss": 1.0 / e, "lr": 1e-3}
        | {m: 0.5 for m in metrics}
        for e in (1, 2, 3)
    ]
    plot_curves([("four tasks", history)], tmp_path / "curves.png", metrics)
    figure = drawn.figure("curves.png")
    rows = {}
    for ax in figure.axes:
        rows.setdefault(round(ax.get_position().y0, 3), []).append(ax)
    assert len(figure.axes) >= 7 and len(rows) >= 3
    assert max(len(r) for r in rows.values()) <= 3
    width, height = figure.get_size_inches()
    assert width / height < 2.5  # not a strip
    config = make_config("training.num_epochs=1")
    trainer = qg.Trainer(config, user_data.ring_graphs(60))
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    trainer.run_test(test_loader)
    trainer.close()
    assert "could not write the plots" not in caplog.text
    assert is_png(config.run_dir / "confusion_matrix.png")
    labels = [t.get_text() for t in drawn.figure("confusion_matrix.png").axes[0].get_xticklabels()]
    assert labels == ["0", "1"]
