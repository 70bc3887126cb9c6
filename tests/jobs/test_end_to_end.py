"""The example scripts run as a user runs them, each in a fresh interpreter, to a run that says
what it learnt (the shipped config through the command line: tests/test_end_to_end.py)."""

import json
import os
import subprocess
import sys

from conftest import ROOT, assert_refused


def run_example(
    name: str, tmp_path, *args: str, model: str = "model.hidden_channels=8"
) -> subprocess.CompletedProcess:
    """An example script on a small, fast config, as a user would run it (``model``: how the
    model is made small; a model of one's own takes no built-in model's key)."""
    small = [
        f"data.root={tmp_path / 'data'}",
        "data.num_graphs=90",
        "training.num_epochs=2",
        model,
        f"training.path={tmp_path / 'run'}",
        "training.device=cpu",
    ]
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args, *small],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_single_process_example_runs(tmp_path):
    result = run_example("train_single_process.py", tmp_path)
    assert result.returncode == 0, result.stderr
    # what it prints is what the run wrote
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["epochs_run"] == 2
    assert "2 epochs; best validation accuracy" in result.stdout
    assert f"test accuracy {summary['test_accuracy']:.3f}" in result.stdout
    again = run_example("train_single_process.py", tmp_path)  # the run exists now
    assert_refused(again, "already holds a run")


def test_ddp_standalone_example_trains_with_two_processes(tmp_path):
    result = run_example("train_ddp_standalone_example.py", tmp_path, "--world-size=2")
    assert result.returncode == 0, result.stderr
    assert "2 processes, global batch 32" in result.stdout and "test accuracy" in result.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["epochs_run"] == 2
    for picture in ("curves.png", "confusion_matrix.png"):  # drawn by rank 0 of a DDP run too
        assert (tmp_path / "run" / picture).read_bytes()[:4] == b"\x89PNG"


def test_custom_multitask_model_example_trains_its_own_class(tmp_path):
    result = run_example(
        "custom_multitask_model.py", tmp_path, model="model.kwargs={hidden: 8, layers: 1}"
    )
    assert result.returncode == 0, result.stderr
    assert "dimension class: accuracy" in result.stdout and "time of each element" in result.stdout
    config = (tmp_path / "run" / "config.yaml").read_text()
    assert "type: custom_multitask_model.MultiTaskGIN" in config
    assert (tmp_path / "run" / "regression_time.png").read_bytes()[:4] == b"\x89PNG"
