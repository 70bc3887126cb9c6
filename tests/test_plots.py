"""Pictures of runs: what every run leaves, and ``qg plot`` on one and several runs."""

import json

from conftest import run_main, train

from QuantumGravPy.runs import plots

PNG = b"\x89PNG\r\n\x1a\n"


def is_png(path):
    return path.is_file() and path.read_bytes()[:8] == PNG and path.stat().st_size > 5000


def test_every_run_leaves_curves_and_a_confusion_matrix(make_config):
    cfg = make_config("training.num_epochs=2")
    _, history, metrics = train(cfg)
    assert is_png(cfg.run_dir / "curves.png") and is_png(cfg.run_dir / "confusion_matrix.png")
    assert {"train_loss", "train_accuracy", "val_loss", "val_accuracy", "lr"} <= set(history[0])
    matrix = json.loads((cfg.run_dir / "summary.json").read_text())["test_confusion_matrix"]
    assert matrix == metrics["test_y_confusion_matrix"] and len(matrix) == 3  # rows: true dimension
    correct = sum(matrix[i][i] for i in range(3))
    assert correct / sum(map(sum, matrix)) == metrics["test_accuracy"]


def test_qg_plot_draws_one_run_and_overlays_several(make_config, tmp_path, capsys):
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

    one = run_main(capsys, "plot", runs[0])
    assert one.returncode == 0, one.stderr
    assert is_png(runs[0] / "curves.png")

    output = tmp_path / "both.png"
    both = run_main(capsys, "plot", *runs, "--output", output)
    assert both.returncode == 0, both.stderr
    assert is_png(output) and str(output) in both.stdout
    single = plots.plot_curves([plots.read_run(runs[0])], tmp_path / "single.png")
    assert output.read_bytes() != single.read_bytes()  # the second run is drawn too

    missing = run_main(capsys, "plot", runs[0], tmp_path / "nowhere")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "nowhere: not a run directory (no history.csv" in missing.stderr
    assert not (tmp_path / "comparison.png").exists()
