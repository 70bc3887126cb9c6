"""Listeners: the library's own epoch work and the user's, told of the same points in the order
docs/training.md gives, and a listener of one's own as examples/best_copies.py shows it."""

import json
import os
import subprocess
import sys

from conftest import ROOT

import QuantumGravPy as qg


class Seen(qg.Listener):
    """What a user's listener sees at the end of each epoch."""

    def __init__(self):
        self.rows = []

    def on_epoch_end(self, trainer, row):
        last = trainer.run_dir / "checkpoints" / "last.pt"
        saved = qg.load_checkpoint(last)
        self.rows.append(
            {
                "epoch": row["epoch"],
                "counted": trainer.epoch,  # the run's progress, already advanced
                "in_history": trainer.history[-1] is row,
                "improved": trainer.state.improved,
                "grad_norm": "grad_norm_mean" in row,  # the monitor's column, added before
                "last_pt_epoch": saved["epoch"],  # the epoch's checkpoint, written before
                "lr_now": float(trainer.optimizer.param_groups[0]["lr"]),  # stepped before
            }
        )


def trained_with_seen(config):
    """Train ``config`` with a :class:`Seen` told last: (what it saw, the history)."""
    trainer = qg.Trainer(config)
    seen = Seen()
    trainer.listeners.items.append(seen)
    train_loader, val_loader, _ = trainer.prepare_dataloaders()
    history = trainer.run_training(train_loader, val_loader)
    trainer.close()
    return seen, history


def test_a_users_listener_is_told_last_and_sees_the_finished_epoch(make_config):
    config = make_config(
        "training.num_epochs=3",
        "early_stopping.enabled=false",
        "training.lr_scheduler={type: torch.optim.lr_scheduler.StepLR, kwargs: {step_size: 1, gamma: 0.5}}",
    )
    seen, history = trained_with_seen(config)
    assert [r["epoch"] for r in seen.rows] == [1, 2, 3]
    assert all(r["counted"] == r["epoch"] == r["last_pt_epoch"] for r in seen.rows)
    assert all(r["in_history"] and r["grad_norm"] for r in seen.rows)
    # the schedule stepped after each epoch, before the user's listener: the rate it sees is
    # already the next epoch's (the row keeps the rate the epoch trained with)
    assert [r["lr_now"] for r in seen.rows] == [h["lr"] / 2 for h in history]


def test_the_library_decides_the_best_epoch_before_the_users_listener(make_config):
    """state.improved, as early stopping decided it, marks exactly the epochs whose val_loss
    was the lowest so far."""
    config = make_config("training.num_epochs=4", "early_stopping.enabled=false")
    seen, history = trained_with_seen(config)
    lowest, expected = float("inf"), []
    for row in history:
        expected.append(row["val_loss"] < lowest)
        lowest = min(lowest, row["val_loss"])
    assert [r["improved"] for r in seen.rows] == expected


def test_the_best_copies_example_keeps_the_best_checkpoint_outside_the_run(tmp_path):
    folder = tmp_path / "safe"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "best_copies.py"),
            f"--folder={folder}",
            f"data.root={tmp_path / 'data'}",
            "data.num_graphs=90",
            "training.num_epochs=3",
            "early_stopping.enabled=false",
            "model.hidden_channels=8",
            f"training.path={tmp_path / 'run'}",
            "training.device=cpu",
        ],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    best = json.loads((folder / "run-best.json").read_text())
    assert best["epoch"] == summary["best_epoch"]
    assert (folder / "run-best.pt").read_bytes() == (run / "checkpoints" / "best.pt").read_bytes()
    assert f"best epoch {best['epoch']}" in result.stdout
